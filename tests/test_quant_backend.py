"""The int4 rollout engine (``workbench.rollout.backends.quant``): the int4 packing against hand-built matrices,
the engine's tokens and logprobs against the exact fp32 backend on the default model (with and without the shipped
adapter), the engine choice and the flag that forces fp32, and a training step whose rollouts it generates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.rollout.backends import SamplingParams, make_backend
from workbench.rollout.backends.base import encode_chat
from workbench.rollout.backends.hf import HFBackend
from workbench.rollout.backends.quant import (
    ENGINES,
    Int4Weight,
    QuantBackend,
    QuantLinear,
    choose_engine,
    int4_groups,
    int4_step_error,
)

pytestmark = pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"),
                                reason="this torch has no CPU int4 kernel")

ADAPTER = "data/adapters/search_r1-sft-grpo"
GREEDY = SamplingParams(max_new_tokens=32, temperature=0.0)
# Bounds on the greedy agreement with fp32 on 6 agent prompts (search_r1, chat observations, dev questions), with
# margin under what was measured: the share of tokens before the first difference (torch steps: adapter 1.00, base
# model 0.77; C steps: 0.885 and 0.81: the continuations part only at near-ties, where any change of numerics may pick
# the other token: one flip at token 10 of 32 costs 0.11), fp32's own logprob gap between the two tokens where they
# part (measured 0.006-0.051 nats), and the mean |logprob gap| over the common tokens (bf16 activations, int4
# weights: torch steps 0.0013-0.017, C steps 0.0005-0.011).
AGREEMENT = {True: 0.8, False: 0.6}
NEAR_TIE = 0.25
MEAN_LOGPROB_GAP = 0.05


def on_grid(N: int, K: int, seed: int = 0) -> torch.Tensor:
    """A matrix that is int4 in groups of 32 (Q4_1's layout: q * step + minimum, q in 0..15)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (N, K // 32, 32), generator=g).float()
    q[..., 0], q[..., 1] = 0, 15  # each group spans its whole grid, as Q4_1's quantizer makes it
    step = torch.rand(N, K // 32, 1, generator=g) * 0.01 + 1e-3
    low = -torch.rand(N, K // 32, 1, generator=g) * 0.05
    return (q * step + low).reshape(N, K)


def test_int4_packing_reproduces_a_matrix_on_its_grid():
    w = on_grid(64, 128)
    q, step, low = int4_groups(w)
    assert int(q.min()) == 0 and int(q.max()) == 15
    assert int4_step_error(w) < 1e-3  # on the grid
    assert 0.2 < int4_step_error(torch.randn(64, 128)) < 0.3  # a random matrix: uniform rounding, 1/4 step
    x = torch.randn(3, 128)
    y = Int4Weight.quantize(w).matmul(x)
    ref = x @ w.T
    # only the activations (bf16) and the kernel's bf16 scale/offset round: ~3 significant digits
    assert torch.allclose(y, ref, rtol=0, atol=2e-2 * float(ref.abs().max()))


def test_a_second_level_quantizes_the_residual():
    w = torch.randn(64, 128) * 0.02
    x = torch.randn(2, 128).bfloat16().float()  # exact in bf16: the weights' error only
    ref = x @ w.T
    errs = [float((Int4Weight.quantize(w, levels).matmul(x) - ref).abs().max()) for levels in (1, 2)]
    assert errs[1] < errs[0] / 5


def test_quant_linear_uses_int4_for_few_rows_and_bf16_for_many():
    lin = torch.nn.Linear(64, 48, bias=True)
    lin.weight.data = on_grid(48, 64, seed=1)
    ql = QuantLinear(lin, decode_rows=4, prefill_bf16=True)  # the bf16 path, built so on any CPU
    assert ql.levels == 1 and ql.weight16 is not None
    for rows in (1, 4, 5, 40):  # int4 up to 4 rows, bf16 GEMM above: the same product either way
        x = torch.randn(rows, 64)
        assert torch.allclose(ql(x), lin(x), atol=2e-2)
    assert not ql.stale
    with torch.no_grad():
        lin.weight.add_(1.0)  # the base weight changed in place after quantization
    assert ql.stale


def test_without_native_bf16_larger_products_use_the_fp32_weight():
    lin = torch.nn.Linear(64, 48, bias=False)
    lin.weight.data = on_grid(48, 64, seed=2)
    x = torch.randn(40, 64)
    fp32, bf16 = QuantLinear(lin, decode_rows=4, prefill_bf16=False), QuantLinear(lin, decode_rows=4, prefill_bf16=True)
    assert fp32.weight16 is None and bf16.weight16 is not None
    assert torch.equal(fp32(x), lin(x))  # the source's own weight, no copy, no rounding
    assert not torch.equal(bf16(x), lin(x)) and torch.allclose(bf16(x), lin(x), atol=2e-2)


def test_the_int4_matrix_is_made_where_its_products_run_and_the_grid_kept_until_packed():
    """Without torch int4 products (``decode_rows=0``: no native bf16, the C step decodes) the int4 matrix is made on
    first use, the same bytes as made at once; the kept grid is the weight's own and, dropped, is computed again."""
    lin = torch.nn.Linear(64, 48, bias=False)
    lin.weight.data = torch.randn(48, 64)  # off the grid: two levels
    eager, lazy = QuantLinear(lin, decode_rows=4), QuantLinear(lin, decode_rows=0, prefill_bf16=False)
    assert eager._int4 is not None and lazy._int4 is None and lazy.levels == eager.levels == 2
    kept = lazy.grid()
    assert all(torch.equal(a, b) for a, b in zip(kept, int4_groups(lin.weight.detach())))
    assert kept[0].dtype == torch.int32 and lazy._grid[0].dtype == torch.uint8  # levels kept as bytes
    lazy.drop_grid()
    assert lazy._grid is None and all(torch.equal(a, b) for a, b in zip(lazy.grid(), kept))
    assert torch.equal(lazy.int4.packed, eager.int4.packed) and torch.equal(lazy.int4.scales_zeros,
                                                                            eager.int4.scales_zeros)
    x = torch.randn(3, 64)
    assert torch.equal(lazy.int4.matmul(x), eager.int4.matmul(x))


def test_the_fp32_prefill_of_a_batch_goes_row_by_row_and_lays_out_as_the_batched_one(tiny_model):
    """On the fp32 prefill path (``prefill_bf16=False``: what a CPU without native bf16 takes, built so on any CPU) a
    batch's prompts are prefilled apart (rows that extend one kept cache together) and laid side by side: the same
    last logits, positions and attended keys and values as the padded batched prefill, and no padding computed."""
    from workbench.core.models import load_policy

    model, tok = load_policy(tiny_model, device="cpu")
    backend = QuantBackend(model, tok, native=False, prefill_bf16=False)
    assert all(m.weight16 is None for m in backend.layers) and not backend.model.config.workbench_bf16
    base = tok.encode("a question about a river and the town beside it")
    backend.generate([base], SamplingParams(max_new_tokens=3, temperature=0.0))  # a kept cache two prompts extend
    kept = list(backend._store)[0]  # the prompt and its continuation, bar the last token
    prompts = [list(kept) + tok.encode(" more"), list(kept) + tok.encode(" and more words"),
               tok.encode("another prompt"), tok.encode("a much longer prompt than the others, by some words")]

    def prefill(split: bool):
        backend.prefill_bf16 = not split  # the switch _prefill reads; the layers and attention stay fp32 either way
        entries = [backend._lookup(p) for p in prompts]
        assert entries[0] is entries[1] is not None and entries[2] is entries[3] is None
        padded = backend.stats["prefill_padded_tokens"]
        with torch.inference_mode():
            out = backend._prefill(prompts, entries)
        padded = backend.stats["prefill_padded_tokens"] - padded
        backend.clear_cache()  # the kept cache was taken by the batch: make it again
        backend.generate([base], SamplingParams(max_new_tokens=3, temperature=0.0))
        return out, padded

    (past_b, attn_b, pos_b, logits_b), padded_b = prefill(False)
    (past_s, attn_s, pos_s, logits_s), padded_s = prefill(True)
    backend.prefill_bf16 = False
    news = [len(p) - (len(kept) if i < 2 else 0) for i, p in enumerate(prompts)]
    assert padded_s == sum(news) + max(news[:2]) * 2 - sum(news[:2]) < padded_b  # only the shared call pads
    assert torch.equal(pos_b, pos_s) and torch.allclose(logits_b, logits_s, atol=1e-4)
    for r in range(len(prompts)):
        kb, ks = attn_b[r].nonzero().squeeze(-1), attn_s[r].nonzero().squeeze(-1)
        assert len(kb) == len(ks) == len(prompts[r])
        for lb, ls in zip(past_b.layers, past_s.layers):
            assert torch.allclose(lb.keys[r][:, kb], ls.keys[r][:, ks], atol=1e-4)
            assert torch.allclose(lb.values[r][:, kb], ls.values[r][:, ks], atol=1e-4)


@pytest.fixture(scope="module")
def engines(policy, one_thread):
    """fp32 and int4 backends over the default model with the shipped adapter attached (peft)."""
    from workbench.eval.adapters import attach_adapter

    model, tok = policy
    peft_model = attach_adapter(model, ADAPTER)
    yield peft_model, HFBackend(peft_model, tok), QuantBackend(peft_model, tok)
    model = peft_model.unload()  # the session's model without the LoRA layers again


@pytest.fixture(scope="module")
def greedy(engines):
    """The greedy continuations of the 6 agent prompts by both engines, with the adapter and without: generated once
    (each engine on its own caches, int4's cleared first), read by every test that compares them."""
    from workbench.eval.adapters import adapter_state

    peft_model, fp32, int4 = engines
    prompts = _prompts(fp32.tokenizer)
    out = {}
    for trained in (False, True):
        with adapter_state(peft_model, trained):
            int4.clear_cache()
            out["fp32", trained] = fp32.generate(prompts, GREEDY)
            out["int4", trained] = int4.generate(prompts, GREEDY)
    return prompts, out


def _prompts(tok) -> list[list[int]]:
    """Turn 0 of the search agent on 6 dev questions of the world, as the eval and the demo build it."""
    from workbench.data.world import load_world
    from workbench.methods import get_protocol

    protocol = get_protocol("search_r1", observation_mode="chat")
    return [encode_chat(tok, protocol.messages(ex)) for ex in load_world().split("dev")[:6]]


def _agreement(a, b) -> tuple[float, float]:
    """Share of tokens the two runs' greedy continuations agree on (up to the first difference, over the longer
    length), and the mean |logprob gap| over those common tokens."""
    agree, total, gaps = 0, 0, []
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x.token_ids), len(y.token_ids)) and x.token_ids[n] == y.token_ids[n]:
            n += 1
        agree, total = agree + n, total + max(len(x.token_ids), len(y.token_ids))
        gaps += [abs(p - q) for p, q in zip(x.logprobs[:n], y.logprobs[:n])]
    return agree / max(1, total), float(np.mean(gaps))


@pytest.mark.parametrize("trained", [False, True], ids=["base", "adapter"])
def test_int4_tokens_and_logprobs_agree_with_fp32(engines, greedy, trained):
    from workbench.eval.adapters import adapter_state

    peft_model, fp32, _ = engines
    prompts, out = greedy
    a, b = out["fp32", trained], out["int4", trained]
    with adapter_state(peft_model, trained):
        ties = _tie_gaps(peft_model, prompts, a, b)
    share, gap = _agreement(a, b)
    assert share >= AGREEMENT[trained], (share, [fp32.tokenizer.decode(g.token_ids) for g in a + b])
    assert all(t < NEAR_TIE for t in ties), ties  # where the two continuations part, fp32 itself nearly tied
    assert gap < MEAN_LOGPROB_GAP
    assert all(np.isfinite(g.logprobs).all() and max(g.logprobs) <= 0 for g in b)


def _tie_gaps(model, prompts, a, b) -> list[float]:
    """For each pair of continuations that part, fp32's logprob of its own token less that of the other's token at
    the first difference (0 at an exact tie)."""
    gaps = []
    for p, x, y in zip(prompts, a, b):
        n = next((i for i, (u, v) in enumerate(zip(x.token_ids, y.token_ids)) if u != v), None)
        if n is None:
            continue
        with torch.inference_mode():
            lp = torch.log_softmax(model(input_ids=torch.tensor([p + x.token_ids[:n]])).logits[0, -1].float(), -1)
        gaps.append(float(lp[x.token_ids[n]] - lp[y.token_ids[n]]))
    return gaps


def test_the_adapter_is_applied_as_fp32_applies_it(greedy):
    """The adapter changes the int4 engine's continuations as it changes fp32's: with it, int4 follows fp32 with it;
    without it, int4 follows fp32 without it; and the two differ."""
    prompts, gens = greedy
    out = {key: [g.token_ids for g in value] for key, value in gens.items()}
    assert out["fp32", True] != out["fp32", False]  # the adapter matters on these prompts
    for trained in (False, True):
        same = sum(x[:6] == y[:6] for x, y in zip(out["fp32", trained], out["int4", trained]))
        other = sum(x[:6] == y[:6] for x, y in zip(out["fp32", not trained], out["int4", trained]))
        assert same == len(prompts) and other == 0


def test_the_lean_decode_step_gives_the_models_own_tokens_and_logprobs(engines):
    """The engine's decode step without transformers' module machinery (``LeanDecode``) against the same copy stepped
    through the model's forward: bit-equal tokens and logprobs, with the adapter, over a padded batch of 4 prompts of
    different lengths (the mask), greedy, and sampled with a group of 2 identical prompts beside another."""
    from workbench.rollout.backends.quant import LeanDecode

    peft_model, fp32, _ = engines
    lean = QuantBackend(peft_model, fp32.tokenizer, native=False)  # one-row steps too: the C step is not bit-equal
    assert lean.lean is not None  # the default model is a Llama: its rollouts take the lean step
    plain = QuantBackend(peft_model, fp32.tokenizer, lean=False)
    prompts = _prompts(fp32.tokenizer)
    assert len(set(map(len, prompts[:4]))) > 1
    for prompts_, params in ((prompts[:4], SamplingParams(max_new_tokens=16, temperature=0.0)),
                             (prompts[:1] + [prompts[2]] * 2, SamplingParams(max_new_tokens=16, temperature=1.0, seed=5))):
        lean.clear_cache()
        a, b = plain.generate(prompts_, params), lean.generate(prompts_, params)
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
        assert [g.logprobs for g in a] == [g.logprobs for g in b]
        assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    assert LeanDecode.build(torch.nn.Linear(4, 4)) is None  # anything else steps through its own forward


def test_shared_prompt_prefix_is_prefilled_once(engines, greedy):
    """The agent prompts share the system prompt and the demonstration: prefilled once for the batch, the rest of
    each prompt after it, with the same continuations as fp32's full prefills (with the adapter, as attached)."""
    _, _, int4 = engines
    prompts, out = greedy
    common = _common(prompts)
    int4.clear_cache()
    before = int4.stats["shared_prefix_tokens"]
    b = int4.generate(prompts, GREEDY)
    assert int4.stats["shared_prefix_tokens"] - before == common * (len(prompts) - 1) and common > 200
    assert _agreement(out["fp32", True], b)[0] >= AGREEMENT[True]


def _common(prompts: list[list[int]]) -> int:
    return next(i for i in range(min(map(len, prompts))) if len({p[i] for p in prompts}) > 1)


def test_the_shared_prefix_is_kept_for_the_next_wave_and_dropped_when_the_adapter_changes(engines):
    """The rollout engine's waves are separate calls: the prefix the first wave's prompts share stays kept (pinned)
    while its rows extend it, so the next wave's prompts start from it instead of prefilling it again, with the
    continuations they get alone. Kept caches hold keys/values computed with the adapter on: once it is disabled,
    none is reused."""
    from workbench.eval.adapters import adapter_state

    peft_model, fp32, int4 = engines
    prompts = _prompts(fp32.tokenizer)
    first, second = prompts[:3], prompts[3:]
    common = _common(first)
    assert common == _common(prompts) and common > 200  # the system prompt and demonstration; then the questions
    int4.clear_cache()
    int4.generate(first, GREEDY)
    stats = dict(int4.stats)
    waved = int4.generate(second, GREEDY)
    assert int4.stats["shared_prefix_tokens"] == stats["shared_prefix_tokens"]  # nothing prefilled to share again
    assert int4.stats["reused_tokens"] - stats["reused_tokens"] == common * len(second)
    assert int4.stats["prefill_tokens"] - stats["prefill_tokens"] == sum(len(p) - common for p in second)
    int4.clear_cache()
    alone = int4.generate(second, GREEDY)
    assert [g.token_ids for g in waved] == [g.token_ids for g in alone]
    assert _agreement(waved, alone)[1] < 1e-4
    int4.generate(first, GREEDY)  # the prefix kept again, with the adapter on
    with adapter_state(peft_model, False):
        reused, prefilled = int4.stats["reused_tokens"], int4.stats["prefill_tokens"]
        int4.generate(second[:1], GREEDY)  # one prompt: nothing of its own to share
        assert int4.stats["reused_tokens"] == reused
        assert int4.stats["prefill_tokens"] - prefilled == len(second[0])


def test_engine_choice_and_the_flag_that_forces_fp32(policy):
    model, tok = policy
    assert ENGINES == ("auto", "fp32", "int4", "graph")
    assert choose_engine("fp32", model)[0] == "fp32"
    assert choose_engine("int4", model)[0] == "int4"
    auto, why = choose_engine("auto", model)
    assert auto in ("fp32", "int4") and why.startswith("auto")
    # the one factory: the engine asked for, and auto as choose_engine decides it
    assert type(make_backend("hf", model, tokenizer=tok, engine="fp32")) is HFBackend
    assert type(make_backend("hf", model, tokenizer=tok, engine="int4")) is QuantBackend
    assert make_backend("hf", model, tokenizer=tok, engine="auto").name == ("int4" if auto == "int4" else "hf")
    with pytest.raises(ValueError, match="not one of"):
        choose_engine("int8", model)
    with pytest.raises(ValueError, match="not one of"):
        make_backend("hf", model, tokenizer=tok, engine="int8")
    with pytest.raises(ValueError, match="needs tokenizer="):
        make_backend("hf", model, engine="fp32")
    assert choose_engine("auto", torch.nn.Linear(32, 32)) == (
        "fp32", "auto: not a transformers model (no config), the int4 engine copies one")


def test_auto_without_native_bf16_takes_int4_where_the_c_step_has_vector_kernels(policy, monkeypatch):
    from types import SimpleNamespace

    from workbench.rollout.backends import native, quant

    model, _ = policy
    monkeypatch.delenv("WORKBENCH_CPU", raising=False)  # the host's level: the CPU is stood in for by the patches
    monkeypatch.setattr(quant, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(native, "library", lambda: (SimpleNamespace(wb_simd=lambda: 256), ""))
    assert choose_engine("auto", model) == ("int4", "auto: no native bf16, so fp32 prefill and every decode step in "
                                                    "C (AVX2 + FMA)")
    monkeypatch.setattr(model.config, "model_type", "qwen2")
    assert choose_engine("auto", model)[0] == "fp32" and "'qwen2'" in choose_engine("auto", model)[1]
    monkeypatch.setattr(model.config, "model_type", "llama")
    monkeypatch.setattr(native, "library", lambda: (None, "no C compiler (cc) to build the C decode step"))
    assert choose_engine("auto", model) == (
        "fp32", "auto: no native bf16 and no vector C decode step (no C compiler (cc) to build the C decode step)")
    monkeypatch.setattr(quant, "cpu_has_bf16", lambda: True)
    assert choose_engine("auto", model) == ("int4", "auto: a CPU with native bf16")


def test_eval_records_and_obeys_the_engine_flag(tmp_path, one_thread):
    from workbench.eval.config import EvalConfig
    from workbench.eval.runner import run_eval

    with pytest.raises(ValueError, match="--rollout-engine"):
        EvalConfig(methods="direct", rollout_engine="int8")
    runs = {}
    for engine in ("fp32", "int4"):
        run = run_eval("direct", "world", out=tmp_path, split="dev", limit=2, max_new_tokens=8, progress=False,
                       log=None, rollout_engine=engine)
        runs[engine] = run
        assert run.config["rollout_engine"] == engine and run.config["eval"]["rollout_engine"] == engine
    assert [len(r.trajectories()) for r in runs.values()] == [2, 2]


class _Stop(Exception):
    pass


def test_cli_flags_reach_the_eval_and_the_demo(monkeypatch):
    from workbench.apps import cli

    seen = {}

    def record(*args, **kw):
        seen.update(kw)
        raise _Stop

    import inspect

    from workbench.apps.demo import run_demo

    record.__signature__ = inspect.signature(run_demo)  # the demo's flags take their defaults from it
    monkeypatch.setattr("workbench.eval.runner.run_eval", record)
    monkeypatch.setattr("workbench.apps.demo.run_demo", record)
    with pytest.raises(_Stop):
        cli.main(["eval", "--method", "direct", "--rollout-engine", "fp32", "--limit", "1"])
    assert seen.pop("rollout_engine") == "fp32"
    with pytest.raises(_Stop):
        cli.main(["demo", "--rollout-engine", "fp32", "--threads", "1"])
    assert seen["rollout_engine"] == "fp32"


def test_a_training_step_with_int4_rollouts_logs_the_gap(tmp_path, one_thread):
    from workbench.methods import run_parts
    from workbench.rl.trainer import TrainConfig, Trainer

    cfg = TrainConfig(steps=1, questions_per_step=2, group_size=2, max_turns=1, max_new_tokens=12,
                      max_total_tokens=1024, temperature=1.0, save_every=0, micro_batch_size=2, reward="dynasearcher",
                      protocol_kwargs={"observation_mode": "chat", "few_shot": False}, rollout_engine="int4",
                      tis_cap=2.0, eval_limit=0)
    tr = Trainer(cfg, run_parts(cfg), run=tmp_path / "t", progress=False)
    assert isinstance(tr.backend, QuantBackend) and tr.adapter_sync(0) is None  # in process: nothing handed over
    tr.train()
    rows = [r for r in tr.run.step_metrics() if "rollout_logprob_diff" in r]
    assert len(rows) == 1
    r = rows[0]
    assert 0 < r["rollout_logprob_diff"] < 0.1 and 0.8 < r["rollout_ratio_mean"] < 1.2 and "tis_clip_frac" in r
    with pytest.raises(ValueError, match="rollout_engine"):
        TrainConfig(rollout_engine="int4", rollout_backend="openai", server="http://127.0.0.1:1/v1")
