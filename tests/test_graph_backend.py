"""The graph engine (``--rollout-engine graph``, what ``auto`` picks on CUDA) against the HF backend it extends.

On a CPU there are no CUDA graphs: these tests check the fixed-shape decode step eagerly, the LoRA merge around each
call, and that the step traces as one graph with no breaks (what a CUDA-graph capture needs: no Python decision on a
tensor's value, no host sync). The capture itself ran on a GPU in ``bench/gpu/rollout_profile.py``
(bench/RESULTS.md)."""

from __future__ import annotations

import pytest
import torch

from workbench.rollout.backends.base import SamplingParams
from workbench.rollout.backends.graph import GraphBackend, merged_lora
from workbench.rollout.backends.hf import HFBackend


@pytest.fixture(scope="module")
def lora_model(tiny_model):
    """The tiny random model with a LoRA whose B is not zero (merging changes the weights), and its tokenizer."""
    from peft import LoraConfig, get_peft_model

    from workbench.core.models import load_policy

    model, tok = load_policy(tiny_model, device="cpu")
    torch.manual_seed(1)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    yield peft_model.eval(), tok
    peft_model.unload()


def _prompts(tok):
    texts = ["Who founded the mill?", "A much longer question about the river, the town and the people there?", "Hi"]
    ids = [tok.encode(t) for t in texts]
    return ids + [ids[1], ids[1]]  # a group: identical prompts prefilled once


def _weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_graph_engine_decodes_what_the_hf_backend_decodes(lora_model):
    """Greedy, per-row limits, a group, stop strings and a second turn that extends the first from the kept cache:
    the same tokens, finish reasons and stop strings, logprobs within float error; the weights as they were."""
    model, tok = lora_model
    before = _weights(model)
    prompts = _prompts(tok)
    limits = [12, 5, 20, 20, 9]
    out = {}
    for cls in (HFBackend, GraphBackend):
        backend = cls(model, tok)
        first = backend.generate(prompts, SamplingParams(max_new_tokens=20, temperature=0.0), max_new_tokens=limits)
        stop = tok.decode(first[2].token_ids[3:5])  # a string the third row does produce: it stops there
        turn2 = [p + g.token_ids + tok.encode(" and then?") for p, g in zip(prompts, first)]
        second = backend.generate(turn2, SamplingParams(max_new_tokens=10, temperature=0.0, stop=(stop,)))
        out[cls] = (first + second, backend.stats)
    (ref, ref_stats), (got, got_stats) = out[HFBackend], out[GraphBackend]
    for a, b in zip(ref, got):
        assert a.token_ids == b.token_ids and (a.finish_reason, a.stop_string) == (b.finish_reason, b.stop_string)
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-4
    assert [len(g.token_ids) for g in got[:5]] == limits  # each row's limit held although finished rows stay
    assert got_stats["reused_tokens"] == ref_stats["reused_tokens"] > 0  # the second turn started from kept caches
    assert got_stats["merged_layers"] == 4 and got_stats["eager_steps"] > 0 and got_stats["graph_captures"] == 0
    after = _weights(model)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_sampled_logprobs_are_the_unmerged_models(lora_model):
    """Sampling at temperature 1 with the LoRA merged: each recorded logprob is the unmerged PEFT model's logprob of
    that token (teacher-forced), the figure the trainer's ``rollout_logprob_diff`` compares."""
    model, tok = lora_model
    prompt = _prompts(tok)[1]
    g = GraphBackend(model, tok).generate([prompt, prompt], SamplingParams(max_new_tokens=8, temperature=1.0, seed=3))
    for gen in g:
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4)


def test_merged_lora_restores_the_weights_exactly_even_after_an_error(lora_model):
    model, _ = lora_model
    before = _weights(model)
    with pytest.raises(RuntimeError, match="inside"):
        with merged_lora(model) as n:
            assert n == 4 and all(m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
            changed = _weights(model)
            assert any(not torch.equal(before[k], changed[k]) for k in before if "base_layer" in k)
            raise RuntimeError("inside")
    after = _weights(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not any(m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
    with model.disable_adapter(), merged_lora(model) as n:  # a disabled adapter is not merged
        assert n == 0


def test_the_decode_step_traces_as_one_graph_without_breaks(lora_model, monkeypatch):
    """torch.compile's tracer (dynamo) takes the fixed-shape step whole, with no graph break: no Python decision on a
    tensor's value and no host sync in it, which a CUDA-graph capture could not record."""
    import torch._dynamo as dynamo

    model, tok = lora_model
    seen = {}
    step = GraphBackend._decode_step

    def explain_first(self, tokens, attn, pos, past):
        past, logits = step(self, tokens, attn, pos, past)  # the state is set up for this step: explain it again
        if "explain" not in seen:
            seen["explain"] = dynamo.explain(self._forward)(past.wb_static, past)
        return past, logits

    monkeypatch.setattr(GraphBackend, "_decode_step", explain_first)
    GraphBackend(model, tok).generate(_prompts(tok)[:2], SamplingParams(max_new_tokens=3, temperature=0.0))
    e = seen["explain"]
    assert (e.graph_count, e.graph_break_count) == (1, 0), [b.reason for b in e.break_reasons]


def test_auto_picks_the_graph_engine_on_cuda_only(lora_model):
    from types import SimpleNamespace

    from workbench.rollout.backends import make_backend
    from workbench.rollout.backends.quant import choose_engine

    model, tok = lora_model
    assert choose_engine("auto", model)[0] != "graph"  # on this CPU
    assert isinstance(make_backend("hf", model, tokenizer=tok, engine="graph"), GraphBackend)
    on_cuda = SimpleNamespace(config=model.config,  # choose_engine reads the first parameter's device
                              parameters=lambda: iter([SimpleNamespace(device=torch.device("cuda"), dtype=torch.bfloat16)]))
    engine, why = choose_engine("auto", on_cuda)
    assert engine == "graph" and "CUDA graph" in why


def test_a_failed_capture_warns_and_decodes_the_same_eagerly(lora_model, monkeypatch):
    """Where the capture raises (a model whose step cannot be captured), the engine says so once and decodes the
    same tokens eagerly."""
    model, tok = lora_model
    prompts = _prompts(tok)[:2]
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    ref = GraphBackend(model, tok).generate(prompts, params)
    backend = GraphBackend(model, tok)
    backend.graphs = True  # as on CUDA

    def fail(st, past):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(backend, "_capture", fail)
    with pytest.warns(UserWarning, match="capture failed .*decoding eagerly"):
        got = backend.generate(prompts, params)
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    assert "stream is capturing" in backend.stats["graph_fallback"] and not backend.graphs
