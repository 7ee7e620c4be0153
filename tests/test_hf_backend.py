"""The HF transformers backend on the real default model (CPU)."""

from __future__ import annotations

import math

import pytest

from workbench.rollout.backends.base import SamplingParams, encode_chat

pytestmark = pytest.mark.slow


def _prompt(tok, q):
    return encode_chat(tok, [{"role": "user", "content": q}])


def test_generate_batch_with_limits_logprobs_and_seed(hf_backend):
    tok = hf_backend.tokenizer
    prompts = [_prompt(tok, "Name a colour."), _prompt(tok, "Write a long story about a dragon and a castle.")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    a = hf_backend.generate(prompts, params, max_new_tokens=[5, 12])
    assert len(a[0].token_ids) <= 5 and len(a[1].token_ids) <= 12
    for g in a:
        assert len(g.logprobs) == len(g.token_ids) > 0
        assert all(lp <= 0 and math.isfinite(lp) for lp in g.logprobs)
        assert g.finish_reason in ("eos", "length")
    b = hf_backend.generate(prompts, params, max_new_tokens=[5, 12])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]  # same seed, same samples


def test_logprobs_match_a_full_forward(hf_backend):
    """The recorded logprobs equal a teacher-forced forward pass over prompt + sampled ids."""
    import torch

    tok = hf_backend.tokenizer
    prompt = _prompt(tok, "What is the capital of France?")
    g = hf_backend.generate([prompt], SamplingParams(max_new_tokens=10, temperature=1.0, seed=3))[0]
    ids = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logits = hf_backend.model(ids).logits[0, len(prompt) - 1 : -1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(g.logprobs), atol=2e-3)


def test_left_padding_does_not_change_greedy_output(hf_backend):
    tok = hf_backend.tokenizer
    short, long = _prompt(tok, "Say hi."), _prompt(tok, "Please list three fruits that are red, one per line.")
    p = SamplingParams(max_new_tokens=8, temperature=0.0)
    alone = hf_backend.generate([short], p)[0].token_ids
    batched = hf_backend.generate([long, short], p)[1].token_ids
    assert alone == batched


def test_stop_strings_end_generation(hf_backend):
    tok = hf_backend.tokenizer
    prompt = _prompt(tok, "Repeat exactly: <search> cats </search> and nothing else.")
    g = hf_backend.generate([prompt], SamplingParams(max_new_tokens=40, temperature=0.0, stop=(" cats",)))[0]
    text = tok.decode(g.token_ids)
    if g.finish_reason == "stop":
        assert g.stop_string == " cats" and text.rstrip().endswith("cats")
    else:  # the model did not echo it: nothing to stop on, the text must not contain it
        assert " cats" not in text


def test_prefix_cache_gives_the_same_rollout(policy, world):
    """Reusing KV caches across turns (and across a group's identical prompts) changes nothing."""
    from workbench.protocols import get_protocol
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.base import Toolbox
    from workbench.tools.bm25 import BM25Search

    model, tok = policy
    tb = Toolbox({"search": BM25Search(world.passages)})
    ex = world.split("dev")[:2]
    cfg = RolloutConfig(group_size=2, max_new_tokens=40, temperature=0.0, max_turns=3)
    runs = {}
    for pc in (True, False):
        be = HFBackend(model, tok, prefix_cache=pc)
        runs[pc] = (rollout(ex, get_protocol("search_r1"), tb, be, cfg, progress=False), be.stats)
    (with_cache, _), (without, _) = runs[True], runs[False]
    for a, b in zip(with_cache, without):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.response_logprobs, b.response_logprobs)) < 1e-3


def test_prefix_cache_reuses_the_previous_turn(policy):
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    prompt = _prompt(tok, "Where was Ada Quist born? Search first.")
    obs = tok.encode("\n<information>Ada Quist was born in Ulmbridge.</information>\n", add_special_tokens=False)
    p = SamplingParams(max_new_tokens=12, temperature=0.0)
    out = {}
    for pc in (True, False):
        be = HFBackend(model, tok, prefix_cache=pc)
        g1 = be.generate([prompt, prompt], p)  # identical prompts: prefilled once
        assert be.stats["prefill_tokens"] == len(prompt)
        g2 = be.generate([prompt + g1[0].token_ids + obs], p)
        out[pc] = (g1[0], g2[0], dict(be.stats))
    (a1, a2, s_on), (b1, b2, s_off) = out[True], out[False]
    assert a1.token_ids == b1.token_ids and a2.token_ids == b2.token_ids
    assert max(abs(x - y) for x, y in zip(a2.logprobs, b2.logprobs)) < 1e-3
    # with the cache only the last sampled token and the observation are prefilled on turn 2
    assert s_on["reused_tokens"] == len(prompt) + len(a1.token_ids) - 1
    assert s_on["prefill_tokens"] == len(prompt) + 1 + len(obs)
    assert s_off["reused_tokens"] == 0
