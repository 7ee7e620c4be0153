"""Gradient checkpointing and bf16 autocast of the training forward (``TrainConfig.gradient_checkpointing``,
``TrainConfig.amp``) on random-initialised 2-layer Llama models: same loss and LoRA gradients, fp32 master
weights. Memory saved is measured in ``bench/gpu/suite.py``, not asserted here."""

from __future__ import annotations

import pytest
import torch
from test_shared_prefix import group_batch, loss_and_grads, nudged_policy

from workbench.rl.train_config import TrainConfig


def count_checkpointed(pol):
    """Wrap each decoder layer's checkpoint function; returns the list its calls are appended to."""
    calls: list[int] = []
    for layer in pol._ckpt_layers:
        fn = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *a, _fn=fn, **k: (calls.append(1), _fn(*a, **k))[1]
    return calls


def test_gradient_checkpointing_keeps_loss_and_lora_gradients(one_thread):
    pol = nudged_policy("llama")
    ids, am, lm = group_batch()
    loss0, lp0, g0 = loss_and_grads(pol, ids, am, lm, prefix_len=0)
    pol.enable_gradient_checkpointing()
    calls = count_checkpointed(pol)
    loss1, lp1, g1 = loss_and_grads(pol, ids, am, lm, prefix_len=0)
    assert len(calls) == 2  # both decoder layers ran checkpointed in the forward with gradient
    assert abs(loss0 - loss1) < 1e-5 and torch.allclose(lp0, lp1, atol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        assert torch.allclose(g0[n], g1[n], atol=1e-5, rtol=1e-4), n
    with torch.no_grad():  # reference / old logprobs keep no activations anyway: no recompute wrapper
        pol.logprobs(ids, am, target_mask=lm > 0)
    assert len(calls) == 2
    assert not pol.model.training and not any(m.training for m in pol._ckpt_layers)  # eval mode restored
    pol.disable_gradient_checkpointing()
    loss_and_grads(pol, ids, am, lm, prefix_len=0)
    assert len(calls) == 2


def test_gradient_checkpointing_refuses_the_shared_prefix():
    pol = nudged_policy("llama")
    pol.enable_gradient_checkpointing()
    ids, am, lm = group_batch()
    with pytest.raises(ValueError, match="cannot be combined with gradient checkpointing"):
        pol.logprobs(ids, am, target_mask=lm > 0, prefix_len=20)
    with torch.no_grad():  # without gradient nothing is checkpointed: the shared prefix still works
        pol.logprobs(ids, am, target_mask=lm > 0, prefix_len=20)
    with pytest.raises(ValueError, match="TrainConfig.gradient_checkpointing: cannot be combined"):
        TrainConfig(gradient_checkpointing=True, micro_batching="shared_prefix")
    assert TrainConfig(gradient_checkpointing=True).micro_batching == "bucket"


def test_bf16_autocast_on_cpu_keeps_fp32_lora_weights(one_thread):
    ids, am, lm = group_batch()
    ref = nudged_policy("llama")
    assert ref.amp_dtype is None  # "auto" on a CPU: fp32
    loss0, lp0, g0 = loss_and_grads(ref, ids, am, lm, prefix_len=0)
    pol = nudged_policy("llama")
    pol.set_amp("bf16")
    loss1, lp1, g1 = loss_and_grads(pol, ids, am, lm, prefix_len=0)
    assert lp1.dtype == torch.float32
    diff = float((lp0 - lp1).abs().max())
    assert 0 < diff < 1e-2, diff  # autocast ran (bf16 matmuls differ) and stays close to fp32
    assert abs(loss0 - loss1) < 1e-3
    flat0 = torch.cat([g0[n].flatten() for n in g0])
    flat1 = torch.cat([g1[n].flatten() for n in g0])
    assert float(torch.nn.functional.cosine_similarity(flat0, flat1, dim=0)) > 0.999
    opt = torch.optim.AdamW(pol.trainable_parameters(), lr=1e-3)
    opt.step()
    assert {p.dtype for p in pol.trainable_parameters()} == {torch.float32}  # fp32 master LoRA weights
    assert {g.dtype for g in g1.values()} == {torch.float32}
    assert {s["exp_avg"].dtype for s in opt.state.values()} == {torch.float32}


def test_amp_setting_is_checked():
    with pytest.raises(ValueError, match="TrainConfig.amp: 'fp8' is not one of"):
        TrainConfig(amp="fp8")
    pol = nudged_policy("llama")
    with pytest.raises(ValueError, match="amp 'fp16' is not one of"):
        pol.set_amp("fp16")
    pol.set_amp("off")
    assert pol.amp_dtype is None


def test_cli_refuses_checkpointing_with_shared_prefix(capsys):
    from workbench.apps.cli import main

    rc = main(["train", "--gradient-checkpointing", "true", "--micro-batching", "shared_prefix", "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "gradient_checkpointing" in err[0] and "bucket" in err[0]
