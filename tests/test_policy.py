"""LoRA policy, chunked logprobs, reference policy, adapter files, and batch building.

Fast tests use tiny randomly initialised models built from a config; ``slow`` ones use the real
default model (SmolLM2-135M) on CPU with sequences of at most 64 tokens and batches of 2.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.rl import losses as L
from workbench.rl.batch import build_batch
from workbench.rl.config import get_loss_config
from workbench.rl.policy import LoRAPolicy, default_target_modules, naive_logprobs, selective_logprobs


# ---------------------------------------------------------------------------- tiny models
def tiny_llama(seed=0, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def tiny_gpt2(seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=64)).double().eval()


def tiny_opt(seed=0):
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(seed)
    cfg = OPTConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2,
                    max_position_embeddings=64, word_embed_proj_dim=16)
    return OPTForCausalLM(cfg).eval()


def nudge_adapter(policy: LoRAPolicy, seed=1):
    """Make LoRA B non-zero (it starts at 0, which makes the adapter a no-op)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def padded_ids(V=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (2, 12), generator=g)
    am = torch.ones_like(ids)
    am[1, 8:] = 0  # right padding
    ids[1, 8:] = 0
    return ids, am


# ---------------------------------------------------------------------------- LoRA targets
def test_default_targets_per_architecture(caplog):
    llama = tiny_llama()
    assert default_target_modules(llama) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert default_target_modules(llama, include_mlp=True)[-3:] == ["gate_proj", "up_proj", "down_proj"]
    assert default_target_modules(tiny_gpt2()) == ["c_attn", "c_proj"]
    with caplog.at_level(logging.WARNING, logger="workbench.rl.policy"):
        fallback = default_target_modules(tiny_opt())
    assert fallback == ["fc1", "fc2", "k_proj", "out_proj", "q_proj", "v_proj"]  # every Linear but lm_head
    assert "model_type='opt'" in caplog.text and "target_modules" in caplog.text


def test_lora_on_tiny_llama_only_lora_trainable():
    pol = LoRAPolicy(model=tiny_llama(), r=4, alpha=8)
    names = [n for n, p in pol.model.named_parameters() if p.requires_grad]
    assert names and all("lora_A" in n or "lora_B" in n for n in names)
    # per layer, H = 16, kv dim = 1 head × 8 = 8, r = 4:
    # q: A 4×16 + B 16×4 = 128; k: 4×16 + 8×4 = 96; v: 96; o: 128 -> 448; 2 layers -> 896
    assert sum(p.numel() for p in pol.trainable_parameters()) == 896
    assert pol.num_parameters()[0] == 896


def test_fallback_targets_wrap_opt():
    pol = LoRAPolicy(model=tiny_opt(), r=2, alpha=4)
    wrapped = {n.split(".")[-4] for n, _ in pol.model.named_parameters() if "lora_A" in n}  # ...q_proj.lora_A.default.weight
    assert wrapped == {"fc1", "fc2", "k_proj", "out_proj", "q_proj", "v_proj"}


# ---------------------------------------------------------------------------- logprobs (tiny, float64)
@pytest.mark.parametrize("with_entropy", [False, True], ids=["fused", "checkpointed+entropy"])
@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_chunked_logprobs_equal_naive_and_gradients_match(make, with_entropy):
    pol = LoRAPolicy(model=make(), r=4, alpha=8)
    nudge_adapter(pol)
    ids, am = padded_ids()
    tm = am.bool().clone()
    tm[:, 0] = False
    w = torch.randn(ids.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * tm

    out = pol.logprobs(ids, am, chunk_size=5, with_entropy=with_entropy)  # 5 does not divide the 18 targets
    lp, ent = out if with_entropy else (out, None)
    loss = (lp * w).sum() + (0.3 * (ent * w).sum() if with_entropy else 0)
    loss.backward()
    g_chunk = [p.grad.clone() for p in pol.trainable_parameters()]
    pol.model.zero_grad()

    logits = pol.model(input_ids=ids, attention_mask=am).logits
    nv = naive_logprobs(logits, ids) * tm
    ent_ref = torch.cat([torch.zeros(2, 1, dtype=nv.dtype), L.entropy_from_logits(logits[:, :-1])], 1) * tm
    loss = (nv * w).sum() + (0.3 * (ent_ref * w).sum() if with_entropy else 0)
    loss.backward()
    g_naive = [p.grad.clone() for p in pol.trainable_parameters()]

    assert torch.allclose(lp, nv, atol=1e-10)
    assert (lp[~tm] == 0).all()
    if with_entropy:
        assert torch.allclose(ent, ent_ref, atol=1e-10)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(g_chunk, g_naive))
    assert sum(g.abs().sum() for g in g_chunk) > 0


def test_logprob_of_token_t_comes_from_prefix_before_t():
    """Independent of any index convention: run the model on ids[:t] only and read its last logits."""
    pol = LoRAPolicy(model=tiny_llama(), r=4, alpha=8)
    nudge_adapter(pol)
    ids, am = padded_ids()
    with torch.no_grad():
        lp = pol.logprobs(ids, am)
        for b, t in [(0, 1), (0, 5), (0, 11), (1, 3), (1, 7)]:
            last = pol.model(input_ids=ids[b : b + 1, :t]).logits[0, -1]
            assert lp[b, t].item() == pytest.approx(torch.log_softmax(last, -1)[ids[b, t]].item(), abs=1e-10)
        assert lp[1, 8:].abs().sum() == 0  # padding is not a target


def test_right_padding_does_not_change_logprobs():
    pol = LoRAPolicy(model=tiny_llama(), r=4, alpha=8)
    nudge_adapter(pol)
    ids, am = padded_ids()
    with torch.no_grad():
        both = pol.logprobs(ids, am)
        alone = pol.logprobs(ids[1:, :8])
    assert torch.allclose(both[1, :8], alone[0], atol=1e-10)


def test_target_mask_selects_positions_and_rejects_column_zero():
    pol = LoRAPolicy(model=tiny_llama(), r=4, alpha=8)
    ids, am = padded_ids()
    tm = torch.zeros_like(ids)
    tm[0, [3, 4, 9]] = 1
    with torch.no_grad():
        full, part = pol.logprobs(ids, am), pol.logprobs(ids, am, target_mask=tm)
    assert torch.allclose(part, full * tm)
    tm[1, 0] = 1
    with pytest.raises(ValueError, match="first token"):
        pol.logprobs(ids, am, target_mask=tm)


def test_selective_logprobs_synthetic_heads_match_naive_with_gradients():
    g = torch.Generator().manual_seed(0)
    h0 = torch.randn(10, 6, generator=g, dtype=torch.float64)
    lin = torch.nn.Linear(6, 13, dtype=torch.float64)  # trainable weight and bias: the fused backward covers them
    tgt = torch.randint(0, 13, (10,), generator=g)
    ref_h = h0.clone().requires_grad_(True)
    ref = torch.log_softmax(lin(ref_h), -1).gather(-1, tgt[:, None]).squeeze(-1)
    w = torch.randn(10, generator=g, dtype=torch.float64)
    ref_grads = torch.autograd.grad((ref * w).sum(), [ref_h, lin.weight, lin.bias])
    for head in (lin, lambda x: lin(x)):  # fused path, checkpointed path
        h = h0.clone().requires_grad_(True)
        lp = selective_logprobs(h, head, tgt, chunk_size=3)
        assert torch.allclose(lp, ref)
        grads = torch.autograd.grad((lp * w).sum(), [h, lin.weight, lin.bias])
        assert all(torch.allclose(a, b) for a, b in zip(grads, ref_grads))
    # and the hand-written backward passes torch's numerical gradient check
    from workbench.rl.policy import _LinearLogprobs

    hh = h0[:4].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, W, b: _LinearLogprobs.apply(x, W, b, tgt[:4], 3), (hh, lin.weight, lin.bias))


def test_reference_is_adapter_disabled_tiny():
    base = tiny_llama()
    ids, am = padded_ids()
    with torch.no_grad():
        base_lp = naive_logprobs(base(input_ids=ids, attention_mask=am).logits, ids)
    pol = LoRAPolicy(model=base, r=4, alpha=8)
    nudge_adapter(pol)
    tm = am.bool().clone()
    tm[:, 0] = False
    ref = pol.ref_logprobs(ids, am)
    assert torch.allclose(ref, base_lp * tm, atol=1e-12)
    assert not torch.allclose(pol.logprobs(ids, am), ref, atol=1e-3)  # the adapter does change the policy
    assert not ref.requires_grad


def test_save_and_load_adapter_tiny(tmp_path):
    from peft import PeftModel

    base = tiny_llama()
    fresh = copy.deepcopy(base)
    pol = LoRAPolicy(model=base, r=4, alpha=8)
    nudge_adapter(pol)
    d = pol.save_adapter(tmp_path / "adapter")
    assert (d / "adapter_model.safetensors").exists() and (d / "adapter_config.json").exists()
    ids, am = padded_ids()
    reloaded = PeftModel.from_pretrained(copy.deepcopy(fresh), d).eval()
    with torch.no_grad():
        a = pol.model(input_ids=ids, attention_mask=am).logits
        b = reloaded(input_ids=ids, attention_mask=am).logits
    assert torch.equal(a, b)
    pol2 = LoRAPolicy(model=copy.deepcopy(fresh), r=4, alpha=8)
    pol2.load_adapter(d)
    with torch.no_grad():
        assert torch.equal(pol2.model(input_ids=ids, attention_mask=am).logits, a)
    with pytest.raises(ValueError, match="r saved=4 vs policy=8"):
        LoRAPolicy(model=copy.deepcopy(fresh), r=8, alpha=8).load_adapter(d)


def test_a_merged_init_adapter_is_saved_stacked_for_the_plain_base_and_resumes(tmp_path):
    from peft import PeftModel

    from workbench.rl.policy import TRAINED_PART

    base = tiny_llama()
    ids, am = padded_ids()
    init = LoRAPolicy(model=copy.deepcopy(base), r=4, alpha=8, include_mlp=True)  # scale 2, attention and MLP
    nudge_adapter(init, seed=1)
    init_dir = init.save_adapter(tmp_path / "init")
    pol = LoRAPolicy(model=copy.deepcopy(base), r=2, alpha=8, init_adapter=init_dir, merge_init=True)  # scale 4
    with torch.no_grad():
        start = init.logprobs(ids, am)
        assert torch.allclose(pol.ref_logprobs(ids, am), start, atol=1e-10)  # the anchor is the initial policy
    nudge_adapter(pol, seed=2)
    d = pol.save_adapter(tmp_path / "run")
    cfg = json.loads((d / "adapter_config.json").read_text())
    assert cfg["r"] == 6 and cfg["lora_alpha"] == 6 and "gate_proj" in cfg["target_modules"]
    with torch.no_grad():
        want = pol.model(input_ids=ids, attention_mask=am).logits
        stacked = PeftModel.from_pretrained(copy.deepcopy(base), d).eval()  # the plain base: eval, ask, a server
        assert torch.allclose(stacked(input_ids=ids, attention_mask=am).logits, want, atol=1e-10)
        assert not torch.allclose(pol.logprobs(ids, am), start, atol=1e-3)  # the trained part does move it
    resumed = LoRAPolicy(model=copy.deepcopy(base), r=2, alpha=8, init_adapter=init_dir, merge_init=True)
    resumed.load_adapter(d)  # reads TRAINED_PART, not the stacked files
    with torch.no_grad():
        assert torch.equal(resumed.model(input_ids=ids, attention_mask=am).logits, want)
    with pytest.raises(FileNotFoundError, match=TRAINED_PART):
        resumed.load_adapter(init_dir)  # a plain adapter has no trained part to resume
    with pytest.raises(ValueError, match="r saved=6 vs policy=2"):
        LoRAPolicy(model=copy.deepcopy(base), r=2, alpha=8).load_adapter(d)


# ---------------------------------------------------------------------------- batches
def hand_trajectories():
    # prompt [5, 6, 7] | policy [8, 9] lp [-0.1, -0.2] | observation [10, 11] | policy [12] lp [-0.3]
    t1 = Trajectory(id="t1", example_id="e", question="q", protocol="p", prompt_ids=[5, 6, 7], group_id="g", turns=[
        Turn(POLICY, "", [8, 9], [-0.1, -0.2]), Turn(OBSERVATION, "", [10, 11]), Turn(POLICY, "", [12], [-0.3])])
    # prompt [5, 6] | policy [20] lp [-0.5]
    t2 = Trajectory(id="t2", example_id="e", question="q", protocol="p", prompt_ids=[5, 6], group_id="g", sample_idx=1,
                    turns=[Turn(POLICY, "", [20], [-0.5])])
    return [t1, t2]


def test_build_batch_hand_values():
    b = build_batch(hand_trajectories(), advantages=[1.0, -1.0], rewards=[1.0, 0.0], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11, 12], [5, 6, 20, 0, 0, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]
    # column t is token t: policy tokens 8, 9, 12 sit at columns 3, 4, 7; token 20 at column 2
    assert b.loss_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0, 1], [0, 0, 1, 0, 0, 0, 0, 0]]
    assert torch.allclose(b.old_logprobs, torch.tensor([[0, 0, 0, -0.1, -0.2, 0, 0, -0.3], [0, 0, -0.5, 0, 0, 0, 0, 0]]))
    assert (b.global_tokens, b.global_seqs) == (4, 2)
    assert b.advantages.tolist() == [1.0, -1.0] and b.group_ids == ["g", "g"]


def test_batch_shift_with_a_model_that_predicts_next_equals_current_plus_one():
    """A hand-built 'model': hidden = one-hot(current token), head maps token k to a logit of 20 on k + 1.

    With the right shift every token of 5, 6, 7, ... (each = previous + 1) gets logprob ≈ 0; reading the
    logit at t instead of t − 1 would predict token t + 1 and give ≈ −20.
    """
    V = 32
    b = build_batch(hand_trajectories()[:1])
    head = torch.zeros(V, V)
    head[torch.arange(V - 1) + 1, torch.arange(V - 1)] = 20.0  # logit[k + 1] = 20 when the hidden is one-hot(k)
    hidden = torch.nn.functional.one_hot(b.input_ids, V).float()  # (B, T, V)
    bi, ti = b.loss_mask.bool().nonzero(as_tuple=True)
    lp = selective_logprobs(hidden[bi, ti - 1], lambda h: h @ head.T, b.input_ids[bi, ti])  # the shift LoRAPolicy uses
    assert (lp > -1e-6).all()
    wrong = selective_logprobs(hidden[bi, ti], lambda h: h @ head.T, b.input_ids[bi, ti])
    assert (wrong < -19).all()


def test_micro_and_mini_batches_keep_or_recount_global_counts():
    trajs = hand_trajectories() * 3  # 6 rows; each pair has 3 + 1 policy tokens -> 12
    b = build_batch(trajs, advantages=[1.0, -1.0] * 3)
    assert (b.global_tokens, b.global_seqs) == (12, 6)
    micro = b.micro_batches(4)
    assert [len(m) for m in micro] == [4, 2]
    assert all((m.global_tokens, m.global_seqs) == (12, 6) for m in micro)
    assert micro[1].input_ids.shape == (2, 8)
    mini = b.mini_batches(3)
    assert [(m.global_tokens, m.global_seqs) for m in mini] == [(4, 2)] * 3  # rows (0,1), (2,3), (4,5)
    tail = b.select([1], recount=True)
    assert tail.input_ids.shape == (1, 3)  # trailing padding trimmed
    # summing micro-batch losses reproduces the batch loss
    lp = b.old_logprobs + 0.1 * b.loss_mask
    full, _ = L.policy_loss(lp, b.old_logprobs, None, b.advantages, b.loss_mask, get_loss_config("dapo"))
    parts = sum(L.policy_loss(m.old_logprobs + 0.1 * m.loss_mask, m.old_logprobs, None, m.advantages, m.loss_mask,
                              get_loss_config("dapo"), m.global_tokens, m.global_seqs)[0] for m in micro)
    assert parts.item() == pytest.approx(full.item())


def test_build_batch_errors():
    with pytest.raises(ValueError, match="max_tokens=4"):
        build_batch(hand_trajectories(), max_tokens=4)
    with pytest.raises(ValueError, match="3 advantages for 2"):
        build_batch(hand_trajectories(), advantages=[1.0, 2.0, 3.0])


# ---------------------------------------------------------------------------- the real default model
@pytest.fixture(scope="module")
def real():
    """A LoRAPolicy on the real default model, and the base model's logits taken before wrapping."""
    from workbench.core.models import load_policy

    model, tok = load_policy(device="cpu")
    text = ["The film Avatar was directed by James Cameron.", "Paris is the capital of"]
    enc = tok(text, return_tensors="pt", padding=True, padding_side="right")
    ids, am = enc["input_ids"], enc["attention_mask"]
    assert ids.shape[1] <= 64
    with torch.no_grad():
        base_logits = model(input_ids=ids, attention_mask=am).logits
    return LoRAPolicy(model=model, tokenizer=tok), ids, am, base_logits


def _step(pol, ids, am, lr=1e-3):
    opt = torch.optim.Adam(pol.trainable_parameters(), lr=lr)
    loss = -pol.logprobs(ids, am).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.slow
def test_real_model_wrapped_with_lora(real):
    pol, *_ = real
    assert pol.base.config.model_type == "llama"
    assert sorted(pol.model.peft_config["default"].target_modules) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert all("lora_" in n for n, p in pol.model.named_parameters() if p.requires_grad)
    # SmolLM2-135M: 30 layers, H = 576, 3 kv heads × 64 = 192, r = 16:
    # q: 16·576 + 576·16 = 18432; k: 16·576 + 192·16 = 12288; v: 12288; o: 18432 -> 61440 × 30 = 1,843,200
    trainable, total = pol.num_parameters()
    assert trainable == 1_843_200
    assert 130e6 < total - trainable < 140e6
    assert next(pol.base.parameters()).dtype is torch.float32  # fp32 on CPU


@pytest.mark.slow
def test_real_reference_is_base_model_and_survives_a_training_step(real):
    pol, ids, am, base_logits = real
    tm = am.bool().clone()
    tm[:, 0] = False
    base_lp = naive_logprobs(base_logits, ids) * tm
    with torch.no_grad(), pol.model.disable_adapter():
        assert torch.equal(pol.model(input_ids=ids, attention_mask=am).logits, base_logits)
    _step(pol, ids, am)
    with torch.no_grad():
        with pol.model.disable_adapter():
            ref_logits = pol.model(input_ids=ids, attention_mask=am).logits
        pol_logits = pol.model(input_ids=ids, attention_mask=am).logits
    assert torch.equal(ref_logits, base_logits)  # the reference did not move
    assert (pol_logits - base_logits).abs().max() > 1e-2  # the policy did
    ref_lp = pol.ref_logprobs(ids, am)
    assert torch.allclose(ref_lp, base_lp, atol=1e-4)
    assert (pol.logprobs(ids, am).detach() - ref_lp)[tm].mean() > 0  # the step raised the text's likelihood


@pytest.mark.slow
def test_real_chunked_logprobs_equal_naive(real):
    pol, ids, am, _ = real
    tm = am.bool().clone()
    tm[:, 0] = False
    # float32 as used: the 576 × 49,152 head matmul on gathered rows rounds differently from the
    # full-batch one; both are ~2e-5 from the float64 value at logprobs near -20, hence 1e-4 here
    with torch.no_grad():
        lp32 = pol.logprobs(ids, am, chunk_size=7)
        nv32 = naive_logprobs(pol.model(input_ids=ids, attention_mask=am).logits, ids) * tm
    assert torch.allclose(lp32, nv32, atol=1e-4)
    # float64 (same weights, lossless round trip): the two algorithms agree to 1e-5 and beyond, gradients too
    pol.model.double()
    try:
        w = torch.randn(ids.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * tm
        lp = pol.logprobs(ids, am, chunk_size=7)
        (lp * w).sum().backward()
        g1 = [p.grad.clone() for p in pol.trainable_parameters()]
        pol.model.zero_grad()
        nv = naive_logprobs(pol.model(input_ids=ids, attention_mask=am).logits, ids) * tm
        (nv * w).sum().backward()
        g2 = [p.grad.clone() for p in pol.trainable_parameters()]
        pol.model.zero_grad()
        assert torch.allclose(lp, nv, atol=1e-5)
        assert (lp - nv).abs().max() < 1e-9
        scale = max(g.abs().max() for g in g2)
        assert scale > 0
        assert all(torch.allclose(a, b, atol=1e-9 * scale, rtol=1e-7) for a, b in zip(g1, g2))
    finally:
        pol.model.float()
        pol.model.zero_grad()


@pytest.mark.slow
def test_real_save_adapter_reloads_in_fresh_peft_model(real, tmp_path):
    from peft import PeftModel

    from workbench.core.models import load_policy

    pol, ids, am, base_logits = real
    _step(pol, ids, am)  # a non-zero adapter, so that the comparison means something
    d = pol.save_adapter(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in d.iterdir()}
    fresh, _ = load_policy(device="cpu")
    reloaded = PeftModel.from_pretrained(fresh, d).eval()
    with torch.no_grad():
        a = pol.model(input_ids=ids, attention_mask=am).logits
        b = reloaded(input_ids=ids, attention_mask=am).logits
    assert not torch.equal(a, base_logits)
    assert torch.equal(a, b)


@pytest.mark.slow
def test_real_sampled_logprobs_line_up_with_trainer_logprobs(real):
    """A two-turn trajectory sampled by the HF backend (policy, observation, policy): the logprobs
    it recorded while sampling equal the trainer's logprobs at exactly the loss-mask positions."""
    from workbench.rollout.backends.base import SamplingParams
    from workbench.rollout.backends.hf import HFBackend

    pol, *_ = real
    tok = pol.tokenizer
    backend = HFBackend(pol.model, tok, prefix_cache=False)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=0)
    prompt = tok("Question: who directed Avatar? Answer:")["input_ids"]
    g1 = backend.generate([prompt], params)[0]
    obs = tok(" <information>James Cameron</information>")["input_ids"]
    g2 = backend.generate([prompt + g1.token_ids + obs], params)[0]
    traj = Trajectory(id="x", example_id="e", question="q", protocol="p", prompt_ids=prompt, turns=[
        Turn(POLICY, "", g1.token_ids, g1.logprobs), Turn(OBSERVATION, "", obs), Turn(POLICY, "", g2.token_ids, g2.logprobs)])
    assert len(traj.token_ids) <= 64
    b = build_batch([traj], pad_id=tok.pad_token_id)
    with torch.no_grad():
        lp = pol.logprobs(b.input_ids, b.attention_mask, target_mask=b.loss_mask)
    m = b.loss_mask.bool()
    assert int(m.sum()) == len(g1.token_ids) + len(g2.token_ids)
    assert torch.allclose(lp[m], b.old_logprobs[m], atol=2e-3)
    assert (lp[~m] == 0).all()
    # on-policy: the first-epoch ratio is 1 up to sampling numerics
    assert torch.exp(lp[m] - b.old_logprobs[m]).sub(1).abs().max() < 5e-3
