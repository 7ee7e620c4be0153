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


def test_row_seeds_draw_the_same_tokens_alone_in_a_batch_and_in_any_order(hf_backend):
    """With a seed per prompt, a prompt's samples come from its own generator: batched with others, in another
    order or alone, it draws the same tokens (the batched and single logits agree to fp32 rounding)."""
    tok = hf_backend.tokenizer
    prompts = [_prompt(tok, q) for q in ("Name a colour.", "Tell me about rivers.", "Count to five.")]
    seeds = (11, 22, 33)

    def gen(rows):
        out = hf_backend.generate([prompts[i] for i in rows],
                                  SamplingParams(max_new_tokens=12, temperature=1.0, row_seeds=[seeds[i] for i in rows]))
        return {i: g.token_ids for i, g in zip(rows, out)}

    together, backwards = gen([0, 1, 2]), gen([2, 1, 0])
    alone = {i: gen([i])[i] for i in range(3)}
    assert together == backwards == alone
    assert len({tuple(t) for t in together.values()}) == 3
    # the call's one seed, as before: the same draws for the same call, other draws when the batch changes order
    one = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    assert [g.token_ids for g in hf_backend.generate(prompts, one)] == [g.token_ids for g in hf_backend.generate(prompts, one)]
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        hf_backend.generate(prompts, SamplingParams(row_seeds=[1, 2]))


def test_a_trajectorys_samples_do_not_depend_on_what_is_rolled_out_beside_it(policy, world):
    """The engine seeds each trajectory's turn by the run's seed, the question, the sample index and the turn: a
    question rolled out alone or beside another, in any slot order, samples the same multi-turn trajectory."""
    from workbench.methods import get_protocol
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.base import Toolbox
    from workbench.tools.bm25 import BM25Search

    model, tok = policy
    tb = Toolbox({"search": BM25Search(world.passages)})
    a, b = world.split("dev")[:2]
    cfg = RolloutConfig(group_size=2, max_new_tokens=24, temperature=1.0, max_turns=2, seed=5)
    be = HFBackend(model, tok)
    ids = {}
    for name, exs in (("both", [a, b]), ("swapped", [b, a]), ("alone", [a])):
        ids[name] = {t.id: t.token_ids for t in rollout(exs, get_protocol("search_r1"), tb, be, cfg, progress=False)}
    assert all(ids["both"][k] == v for k, v in ids["alone"].items())
    assert ids["both"] == ids["swapped"]
    assert ids["both"][f"{a.id}#0"] != ids["both"][f"{a.id}#1"]  # a group's members draw apart
    other = rollout([a], get_protocol("search_r1"), tb, be, RolloutConfig(**{**cfg.to_dict(), "seed": 6}), progress=False)
    assert [t.token_ids for t in other] != [ids["alone"][t.id] for t in other]  # another seed, other draws


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
    from workbench.methods import get_protocol
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


def test_batches_follow_the_tokens_to_prefill_and_results_keep_call_order(policy):
    """A turn's prompts are batched by the tokens each has to prefill (the observation beyond its kept cache), so a
    short observation is not padded to a long one's length; the generations come back in call order, the same as
    batching in call order gives."""
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    questions = ["Where was Ada Quist born?", "Who wrote Notes from Perso?", "Name a river.", "Where is Ulmbridge?"]
    sizes = [1, 20, 2, 18]  # observations of very different length, interleaved in call order
    p = SamplingParams(max_new_tokens=6, temperature=0.0)
    out = {}
    for by_new in (True, False):
        be = HFBackend(model, tok, batch_size=2, by_new_tokens=by_new)
        first = be.generate([_prompt(tok, q) for q in questions], p)
        turn2 = [_prompt(tok, q) + g.token_ids
                 + tok.encode("\n<information>" + " Ada Quist was born in Ulmbridge." * n + "</information>\n",
                              add_special_tokens=False) for q, g, n in zip(questions, first, sizes)]
        padded = be.stats["prefill_padded_tokens"]
        second = be.generate(turn2, p)
        out[by_new] = ([g.token_ids for g in first + second], be.stats["prefill_padded_tokens"] - padded)
    (ids_on, padded_on), (ids_off, padded_off) = out[True], out[False]
    assert ids_on == ids_off
    assert padded_on < 0.7 * padded_off  # two long + two short in a batch each, against long + short twice


def test_chunked_prefill_gives_the_same_output(policy):
    """Prefilling the new tokens in chunks (the CPU's ``prefill_bytes`` budget) changes nothing: left padding,
    a reused prefix cache and the last-position logits all line up with one whole prefill."""
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    short, long = _prompt(tok, "Say hi."), _prompt(tok, "Please list three fruits that are red, one per line.")
    obs = tok.encode("\n<information>Apples, cherries and strawberries are red.</information>\n", add_special_tokens=False)
    p = SamplingParams(max_new_tokens=8, temperature=0.0)
    out, chunks = {}, {}
    for budget in (None, 1):  # None: one forward; 1 byte: one token per forward
        be = HFBackend(model, tok, prefill_bytes=budget)
        be.prefill_bytes = budget  # None on a CPU would mean the CPU default: force one forward
        calls = []
        orig = be.model.forward

        def forward(*a, _orig=orig, _calls=calls, **kw):
            _calls.append(kw["input_ids"].shape[1])
            return _orig(*a, **kw)

        be.model.forward = forward
        try:
            g1 = be.generate([long, short], p)
            g2 = be.generate([long + g1[0].token_ids + obs], p)  # reuses the first turn's cache
        finally:
            del be.model.forward
        out[budget], chunks[budget] = (g1, g2), calls
    (a1, a2), (b1, b2) = out[None], out[1]
    for x, y in zip([*a1, *a2], [*b1, *b2]):
        assert x.token_ids == y.token_ids
        assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < 1e-3
    assert chunks[None].count(len(long)) == 1  # the whole first prefill in one forward
    assert chunks[1].count(1) > len(long)  # one token per forward: the prefill was chunked


def test_cpu_budgets_bound_the_cache_the_batches_and_the_prefill_chunks(policy):
    """The CPU defaults are the measured budgets (bench/RESULTS.md), and each is what the backend's
    sizes are computed from: a revert to unbounded prefills or larger caches fails here."""
    from workbench.rollout.backends import hf

    model, tok = policy
    be = hf.HFBackend(model, tok)
    assert be.device.type == "cpu"
    assert (be.cache_bytes, be.batch_bytes, be.prefill_bytes) == (hf.CPU_CACHE_BYTES, hf.CPU_BATCH_BYTES,
                                                                  hf.CPU_PREFILL_BYTES)
    assert hf.CPU_CACHE_BYTES + hf.CPU_BATCH_BYTES <= 768 << 20 and hf.CPU_PREFILL_BYTES <= 64 << 20
    cfg = model.config
    assert be.score_bytes_per_key == 2 * cfg.num_attention_heads * 4  # fp32 scores and probabilities
    for rows, keys in ((1, 50), (6, 1000), (20, 2000)):
        chunk = be.prefill_chunk(rows, keys)
        assert chunk >= 1
        assert chunk == 1 or rows * chunk * keys * be.score_bytes_per_key <= be.prefill_bytes
        assert rows * (chunk + 1) * keys * be.score_bytes_per_key > be.prefill_bytes or chunk >= keys
    prompts, limits = [[1] * 1000] * 20, [256] * 20
    for i, j in be._batches(prompts, limits):
        assert j - i == 1 or (j - i) * 1256 * be.kv_bytes_per_token <= be.batch_bytes
    gpu_like = hf.HFBackend(model, tok, prefill_bytes=None)
    gpu_like.prefill_bytes = None
    assert gpu_like.prefill_chunk(6, 1000) == 1000  # no budget: one forward


@pytest.mark.parametrize("room", [256, 3])
def test_preallocated_decoding_gives_the_same_outputs(policy, monkeypatch, room):
    """Decoding into preallocated key/value buffers (the default) gives exactly what transformers' concatenating
    DynamicCache gives: greedy ids, sampled ids for a seed, logprobs; for a group of identical prompts (prefilled
    once, rows taken from it), distinct left-padded ones, and a second turn that reuses the first's cache; with
    room for every token, and with room for 3 (the buffers double while decoding)."""
    from workbench.rollout.backends import hf
    from workbench.rollout.backends.hf import HFBackend

    monkeypatch.setattr(hf, "DECODE_ROOM", room)

    model, tok = policy
    q = _prompt(tok, "Who wrote Hamlet? Answer in one sentence.")
    prompts = [q] * 3 + [_prompt(tok, "Name two rivers in Europe."), _prompt(tok, "Count from one to five.")]
    outs = {}
    for pre in (False, True):
        be = HFBackend(model, tok, preallocate=pre)
        greedy = be.generate(prompts, SamplingParams(max_new_tokens=16, temperature=0.0))
        sampled = be.generate(prompts, SamplingParams(max_new_tokens=16, temperature=1.0, seed=5))
        turn2 = be.generate([q + greedy[0].token_ids + _prompt(tok, "And when?")],
                            SamplingParams(max_new_tokens=8, temperature=0.0))
        assert be.stats["reused_tokens"] > 0  # the second turn did reuse a cache saved from a decode
        outs[pre] = [(g.token_ids, g.logprobs, g.finish_reason) for g in greedy + sampled + turn2]
    assert [o[0] for o in outs[True]] == [o[0] for o in outs[False]]
    assert [o[2] for o in outs[True]] == [o[2] for o in outs[False]]
    for (_, a, _), (_, b, _) in zip(outs[True], outs[False]):
        assert max((abs(x - y) for x, y in zip(a, b)), default=0.0) < 1e-5
    assert len({tuple(o[0]) for o in outs[True][:3]}) == 1  # the greedy group agrees with itself


def test_buffered_cache_layer_grows_and_selects_rows():
    import torch

    from workbench.rollout.backends.hf import _BufferedLayer

    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    layer = _BufferedLayer(k, v, room=1)
    k2, v2 = torch.randn(3, 2, 3, 5), torch.randn(3, 2, 3, 5)  # more than the room: the buffer grows
    keys, values = layer.update(k2, v2)
    assert torch.equal(keys, torch.cat([k, k2], 2)) and torch.equal(values, torch.cat([v, v2], 2))
    assert layer.get_seq_length() == 7
    layer.batch_select_indices(torch.tensor([2, 0]))
    k3 = torch.randn(2, 2, 1, 5)
    keys, _ = layer.update(k3, k3)
    assert torch.equal(keys, torch.cat([torch.cat([k, k2], 2)[[2, 0]], k3], 2))
    group = _BufferedLayer(k[:1], v[:1], room=2, rows=[0, 0, 0])  # one prefilled prompt -> three rows
    assert torch.equal(group.keys, k[:1].expand(3, -1, -1, -1)) and group._k.shape[2] == 6


def test_slots_keep_each_rows_cache_for_its_next_turn(tiny_model):
    """Six three-turn trajectories on a random-init model, with a kept-cache budget for about two of them: two at a
    time (the engine's slots) later turns prefill only what they add; as one batch the earliest rows' caches are
    pushed out before their next turn and their whole context is prefilled again."""
    from workbench.core.models import load_policy
    from workbench.core.types import Hit
    from workbench.data.example import Example
    from workbench.methods import get_protocol
    from workbench.rollout import engine
    from workbench.rollout.backends.hf import HFBackend
    from workbench.tools.base import Toolbox

    model, tok = load_policy(tiny_model, device="cpu")
    examples = [Example(f"q{i}", f"Who founded Mill number {i}?", ["Ada"]) for i in range(6)]
    tools = Toolbox({"search": lambda q, k=3: [Hit("p", "Mill", "Mill was founded by Ada. " * 20, 1.0)]})
    cfg = engine.RolloutConfig(max_turns=3, max_new_tokens=8, max_total_tokens=2048, temperature=0.0)
    prefilled = {}
    for waves in (True, False):
        backend = HFBackend(model, tok)
        per_row = backend.kv_bytes_per_token * (len(tok.encode(examples[0].question)) + 600)
        backend.cache_bytes = 2 * per_row
        if not waves:
            backend.rows_kept = lambda tokens: None  # one batch of all six
        trajs = engine.rollout(examples, get_protocol("search_r1"), tools, backend, cfg, progress=False)
        assert len(trajs) == 6 and all(len(t.turns) >= 3 for t in trajs)
        prefilled[waves] = backend.stats["prefill_tokens"]
    assert prefilled[True] < 0.8 * prefilled[False], prefilled
