"""The evaluation protocol the papers use: recall by passage id, counted searches are executed
searches, seconds per trajectory, comparison answers that name both options, few-shot leakage, and
unclosed or stray answer tags (with the exact strings seen on real data)."""

from __future__ import annotations

import math

import pytest

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import Hit, ToolCall
from workbench.data.example import Example
from workbench.eval.runner import evaluate, score, summarize
from workbench.methods import PROTOCOLS, get_protocol
from workbench.protocols.base import ANSWER, INVALID, SEARCH, Action, free_text_answer
from workbench.rewards.features import compute_features
from workbench.rewards.metrics import comparison_options, demo_leak, in_context_answers, multi_option
from workbench.rollout.backends.base import Generation
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, build_prompt_ids, rollout
from workbench.tools.base import Toolbox

# ============================================================================= recall by passage id

# MuSiQue-like: two gold paragraphs share the title "Mountrail County" (different passages)
EX_DUP = Example("m1", "Q?", ["X"], supporting_ids=["ctx-a", "ctx-b"],
                 supporting_titles=["Mountrail County", "Mountrail County"])


def _traj(hits, example_id="m1", answer="X", question="Q?", protocol="search_r1", prompt_text=""):
    turns = [Turn(POLICY, "<search>q</search>", [], action={"kind": "search", "payload": "q", "reason": ""}),
             Turn(OBSERVATION, "<information>...</information>", [],
                  tool_calls=[ToolCall("search", {"query": "q"}, results=[h.to_dict() for h in hits])]),
             Turn(POLICY, f"<answer>{answer}</answer>", [], action={"kind": "answer", "payload": answer, "reason": ""})]
    return Trajectory("t#0", example_id, question, protocol, [], prompt_text=prompt_text, turns=turns, answer=answer)


def test_recall_is_by_id_when_gold_paragraphs_share_a_title():
    one = _traj([Hit("ctx-a", "Mountrail County", "the county", 1.0)])
    row = compute_features([one], [EX_DUP], encoder=False, cache=False).iloc[0]
    assert row["recall_title"] == 1.0  # both gold titles "found" by one hit
    assert row["recall_id"] == 0.5 and row["recall"] == 0.5 and row["recall_by"] == "id"


def test_recall_falls_back_to_titles_without_ids():
    ex = Example("m1", "Q?", ["X"], supporting_titles=["Mountrail County", "Stanley"])
    row = compute_features([_traj([Hit("", "Stanley", "a city", 1.0)])], [ex], encoder=False, cache=False).iloc[0]
    assert (row["recall"], row["recall_by"]) == (0.5, "title") and math.isnan(row["recall_id"])
    # hits without ids (parsed from text) against gold ids: by title too
    row = compute_features([_traj([Hit("", "Mountrail County", "x", 1.0)])], [EX_DUP], encoder=False, cache=False).iloc[0]
    assert (row["recall"], row["recall_by"]) == (1.0, "title")


def test_recall_by_id_ignores_embedding_matches():
    class Same:  # every text embeds to the same direction: everything "matches" by embedding
        name = "same"

        def encode(self, texts, **kw):
            import numpy as np

            return np.ones((len(texts), 3), dtype=np.float32)

    one = _traj([Hit("ctx-a", "Mountrail County", "the county", 1.0)])
    row = compute_features([one], [EX_DUP], encoder=Same(), cache=False).iloc[0]
    assert row["recall_embed"] == 1.0 and row["recall"] == 0.5 and row["recall_by"] == "id"
    ex = Example("m1", "Q?", ["X"], supporting_titles=["Mountrail County", "Stanley"])
    row = compute_features([one], [ex], encoder=Same(), cache=False).iloc[0]
    assert (row["recall"], row["recall_by"]) == (1.0, "embedding")


# ============================================================================= counted searches are executed searches

EX = [Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"])]


def _hits(query, k=3):
    return [Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)]


def test_a_search_cut_off_by_the_turn_limit_is_not_counted(tokenizer):
    be = ScriptedBackend(tokenizer, ["<search> a </search>", "<search> b </search>"])
    (t,) = rollout(EX, get_protocol("search_r1"), Toolbox({"search": _hits}), be, RolloutConfig(max_turns=2),
                   progress=False)
    assert t.finish_reason == "max_turns" and [a["kind"] for a in t.actions] == [SEARCH, SEARCH]
    assert len(t.tool_calls) == 1 and t.n_searches == 1 and t.queries == ["a"]
    row = compute_features([t], EX, encoder=False, cache=False).iloc[0]
    assert (row["n_searches"], row["n_queries"]) == (1.0, 1.0)
    assert score([t], EX)[0]["n_searches"] == 1


def test_a_search_cut_off_by_the_token_budget_counts_only_if_its_tool_ran(tokenizer):
    # the observation does not fit: the engine records the call on the policy turn (the search ran)
    be = ScriptedBackend(tokenizer, ["<search> a </search>"])
    proto = get_protocol("search_r1", few_shot=False)
    n_prompt = len(build_prompt_ids(proto, tokenizer, EX[0]))
    cfg = RolloutConfig(max_turns=3, max_total_tokens=n_prompt + 12)
    (t,) = rollout(EX, proto, Toolbox({"search": _hits}), be, cfg, progress=False)
    assert t.finish_reason == "budget" and t.turns[-1].tool_calls and t.n_searches == 1


# ============================================================================= seconds per trajectory


class TimedBackend(ScriptedBackend):
    """Scripted turns with per-sequence times, as the HF backend reports them (meta["seconds"])."""

    def generate(self, prompts, params, max_new_tokens=None):
        gens = super().generate(prompts, params, max_new_tokens)
        return [Generation(g.token_ids, g.logprobs, g.finish_reason, g.stop_string, meta={"seconds": 1.0 + i})
                for i, g in enumerate(gens)]


def test_seconds_per_answer_are_each_trajectorys_own(tokenizer):
    exs = [Example(f"q{i}", f"Who founded Mill {i}?", ["Ada Quist"]) for i in range(3)]
    be = TimedBackend(tokenizer, ["<answer> Ada Quist </answer>"])
    res = evaluate("direct", exs, be, None, RolloutConfig(max_turns=1), progress=False)
    secs = [r["seconds"] for r in res.rows]
    assert secs == pytest.approx([1.0, 2.0, 3.0], abs=0.05)  # not the batch time split three ways
    assert res.summary["seconds"] == pytest.approx(2.0, abs=0.05)
    assert res.summary["wall_seconds_per_answer"] == pytest.approx(res.summary["wall_seconds"] / 3)


def test_printed_seconds_per_answer_is_the_wall_time_per_answer():
    """``s/answer`` in the printed tables is the method's wall time over its answers; a trajectory's own latency,
    which overlaps its batch's, is labelled ``latency s`` (a batch of 89 answers once showed 806 s "per answer")."""
    from workbench.apps.demo import summary_table
    from workbench.eval.runner import format_table

    summary = {"n": 4, "seconds": 800.0, "wall_seconds": 68.0, "wall_seconds_per_answer": 17.0,
               "by_hops": {"2": {"n": 4, "seconds": 800.0}}}

    def cell(table: str, label: str, line: int = 2) -> str:  # columns are right-aligned under their labels
        lines = table.splitlines()
        end = f" {lines[0]} ".index(f" {label} ") + len(label)  # the whole label ("s/answer", not "tokens/answer")
        return lines[line][:end].split()[-1]

    for table in (format_table({"methods": {"m": summary}}), summary_table({"methods": {"m": summary}})):
        assert float(cell(table, "s/answer")) == pytest.approx(17.0)
    assert float(cell(format_table({"methods": {"m": summary}}), "latency s")) == pytest.approx(800.0)
    assert cell(format_table({"methods": {"m": summary}}, by_hops=True), "s/answer") == "-"  # no wall time per hop


def test_hf_backend_times_each_sequence(policy):
    from workbench.rollout.backends.base import SamplingParams
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    be = HFBackend(model, tok)
    ids = tok.encode("Hello", add_special_tokens=False)
    g = be.generate([ids, ids], SamplingParams(max_new_tokens=4, temperature=0.0), [1, 4])
    assert 0 < g[0].meta["seconds"] <= g[1].meta["seconds"]


# ============================================================================= comparison questions

Q_CMP = "Which film whose director is younger, Forbidden Ground or Free Guy?"


def test_options_are_detected_from_real_comparison_questions():
    assert comparison_options(Q_CMP) == ["Forbidden Ground", "Free Guy"]
    assert comparison_options("Which film has the director who died later, What Will You Do When You Catch Me? or "
                              "School On Fire?") == ["What Will You Do When You Catch Me?", "School On Fire"]
    assert comparison_options("Who is older, Annie Morton or Terry Richardson?") == ["Annie Morton", "Terry Richardson"]
    assert comparison_options("Were Scott Derrickson and Ed Wood of the same nationality?") == []


@pytest.mark.parametrize("answer, multi", [("Forbidden Ground or Free Guy", 1.0), ("Free Guy", 0.0),
                                           ("Free Guy and Forbidden Ground", 1.0), ("Forbidden Ground", 0.0),
                                           (None, 0.0)])
def test_multi_option_answers_are_flagged_and_left_out_of_strict_cover_em(answer, multi):
    assert multi_option(answer, Q_CMP, ["Free Guy"]) == multi
    ex = Example("c1", Q_CMP, ["Free Guy"], qtype="comparison")
    t = Trajectory("t#0", "c1", Q_CMP, "direct", [], answer=answer, finish_reason="answer")
    row = score([t], [ex])[0]
    assert row["multi_option"] == multi and row["cem_strict"] == (0.0 if multi else row["cem"])
    assert compute_features([t], [ex], encoder=False, cache=False).iloc[0]["multi_option"] == multi
    if answer == "Forbidden Ground or Free Guy":
        assert row["cem"] == 1.0 and row["cem_strict"] == 0.0
        s = summarize([row])
        assert (s["cem"], s["cem_strict"], s["multi_option"]) == (1.0, 0.0, 1.0)


# ============================================================================= few-shot leakage


def test_in_context_answers_of_every_protocol_prompt_are_found():
    for name in ("vanilla_rag", "direct", "search_r1", "dynasearcher"):
        proto = get_protocol(name)
        text = "\n".join(m["content"] for m in proto.messages(Example("x", "Q?", [])))
        found = in_context_answers(text)
        assert found, name
        assert not any(a.lower() in ("answer", "...") for a in found), found


def test_demo_leak_is_flagged_and_reported_per_method(tokenizer):
    proto = get_protocol("vanilla_rag")
    demo = in_context_answers("\n".join(m["content"] for m in proto.messages(EX[0])))
    leaked = next(a for a in demo if a != "Beijing")
    assert demo_leak(leaked, demo, ["Ada Quist"]) == 1.0
    assert demo_leak(f"It was {leaked}.", demo, ["Ada Quist"]) == 1.0  # contained
    assert demo_leak("Ada Quist", demo, ["Ada Quist"]) == 0.0
    assert demo_leak(leaked, demo, [leaked]) == 0.0  # the gold is the demo's answer: not a leak
    exs = [Example(f"q{i}", f"Who founded Mill {i}?", ["Ada Quist"]) for i in range(4)]
    be = ScriptedBackend(tokenizer, lambda text, turn: f"<answer> {leaked} </answer>" if "Mill 0?" in text
                         or "Mill 1?" in text else "<answer> Ada Quist </answer>")
    res = evaluate("vanilla_rag", exs, be, Toolbox({"search": _hits}), RolloutConfig(max_turns=1), progress=False)
    assert [r["demo_leak"] for r in res.rows] == [1.0, 1.0, 0.0, 0.0] and res.summary["demo_leak"] == 0.5
    feats = compute_features(res.trajectories, exs, encoder=False, cache=False)
    assert feats["demo_leak"].tolist() == [1.0, 1.0, 0.0, 0.0]


def test_trajectories_rebuilt_from_text_carry_the_protocols_prompt():
    """A completion scored from text (TRL, verl) has no stored prompt: the protocol's own prompt for the question is
    put back, so an answer copied from its demonstrations is still a demo leak."""
    from workbench.rewards.from_text import trajectory_from_text

    t = trajectory_from_text("Beijing", get_protocol("vanilla_rag"), EX[0])
    assert "Beijing" in t.prompt_text
    assert compute_features([t], EX, encoder=False, cache=False).iloc[0]["demo_leak"] == 1.0
    bare = Trajectory("t#0", "q1", EX[0].question, "vanilla_rag", [], answer="Beijing", finish_reason="answer")
    assert compute_features([bare], EX, encoder=False, cache=False).iloc[0]["demo_leak"] == 0.0  # no prompt kept


def test_baseline_demonstrations_do_not_answer_with_a_plausible_name():
    """The RAG baselines' demonstration answers are distinct placeholders, not names a real question could have."""
    for name in ("vanilla_rag", "iter_retgen", "ircot"):
        proto = get_protocol(name)
        text = "\n".join(m["content"] for m in proto.messages(EX[0]))
        assert "Ira Velt" not in text, name


# ============================================================================= unclosed and stray answer tags

FREE_TEXT = ("direct", "vanilla_rag", "iter_retgen", "ircot")
TAGGED = ("search_r1", "dynasearcher", "rsearch_evidence", "rsearch_dag", "when_to_search")


@pytest.mark.parametrize("text, answer", [
    ("<answer> Ira Velt", "Ira Velt"),                        # opening tag never closed (seen 13 times)
    ("<answer>Scott Derrickson", "Scott Derrickson"),
    ("The documents say so. <answer> Chicago", "Chicago"),
    ("<answer> a <answer> b </answer>", "b"),                 # nested: the innermost box
    ("Chicago</answer>", "Chicago"),
    ("Chicago", "Chicago"),
])
def test_free_text_answers_never_keep_a_tag(text, answer):
    for name in FREE_TEXT if "answer>" in text else ("direct", "vanilla_rag", "iter_retgen"):  # IRCoT: a sentence is a query
        a = get_protocol(name).parse(text)
        assert a.kind == ANSWER and get_protocol(name).answer_text(a) == answer, (name, a)


@pytest.mark.parametrize("text", ["</answer>", "<answer>", "<answer> </answer>", "  </answer>  "])
def test_a_bare_answer_tag_is_an_invalid_action(text):
    for name in FREE_TEXT + TAGGED:
        assert get_protocol(name).parse(text).kind == INVALID, name


@pytest.mark.parametrize("name", TAGGED)
def test_tag_grammar_protocols_treat_an_unclosed_answer_as_invalid(name):
    a = get_protocol(name).parse("<think> t </think>\n<answer> Ira Velt")
    assert a.kind == INVALID and "unclosed" in a.reason


def test_free_text_answer_says_why():
    assert free_text_answer("<answer> Ira Velt").reason.startswith("unclosed <answer>")
    assert free_text_answer("</answer>").reason.startswith("stray </answer>")
    assert free_text_answer("Paris").reason.startswith("no <answer> tags")


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_an_echoed_invalid_action_message_is_not_an_action(name):
    proto = get_protocol(name)
    msg = proto.invalid_observation(Action(INVALID, reason="no action")).text
    assert proto.parse(msg).kind == INVALID, (name, msg, proto.parse(msg))


def test_an_unclosed_answer_at_the_turn_limit_through_the_engine(tokenizer):
    """vanilla_rag: a final turn cut by the token limit inside its box is scored on its text, without the tag."""
    be = ScriptedBackend(tokenizer, ["<answer> Ada Quist was the founder of the mill in the year"], append_eos=False)
    (t,) = rollout(EX, get_protocol("vanilla_rag"), Toolbox({"search": _hits}), be,
                   RolloutConfig(max_turns=1, max_new_tokens=6), progress=False)
    assert t.turns[-1].finish_reason == "length"
    assert t.answer is not None and "<" not in t.answer and t.answer.startswith("Ada Quist")
    assert not t.flags["format_ok"]


# ============================================================================= memory budgets of the HF backend


def test_hf_backend_batches_fit_the_memory_budget_and_change_nothing(policy):
    from workbench.rollout.backends.base import SamplingParams
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    prompts = [tok.encode(f"Question {i}: where is Ulmbridge?" + " word" * (3 * i), add_special_tokens=False)
               for i in range(4)]
    p = SamplingParams(max_new_tokens=4, temperature=0.0)
    whole = HFBackend(model, tok, batch_bytes=1 << 40)
    per_tok = whole.kv_bytes_per_token
    assert per_tok == 2 * model.config.num_hidden_layers * model.config.num_key_value_heads * 64 * 4  # fp32
    tight = HFBackend(model, tok, batch_bytes=2 * (len(prompts[-1]) + 4) * per_tok)
    assert whole._batches(prompts, [4] * 4) == [(0, 4)]
    assert tight._batches(prompts, [4] * 4) == [(0, 2), (2, 4)]
    assert HFBackend(model, tok, batch_bytes=1)._batches(prompts, [4] * 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    a, b = whole.generate(prompts, p), tight.generate(prompts, p)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    # a kept cache is freed as it is reused, and one superseded by a longer one is dropped
    tight.generate([prompts[0] + a[0].token_ids + prompts[1]], p)
    assert all(len(k) != len(prompts[0]) + len(a[0].token_ids) - 1 for k in tight._store)
    assert tight._store_bytes == sum(e.nbytes for e in tight._store.values())
