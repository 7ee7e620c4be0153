"""Failures are recorded, never scored as answers.

A judge or evidence model that cannot be reached gives NaN with the backend's own message and
caches nothing; a trajectory whose policy backend or tool failed has NaN rewards under every
preset and named failure columns; eval means leave out questions without gold answers and
failed trajectories, and count them; the inspector shows and filters failures.
"""

from __future__ import annotations

import math
import socket

import numpy as np
import pytest

from workbench.core.trajectory import POLICY, Trajectory, Turn
from workbench.core.types import Hit
from workbench.data.example import Example
from workbench.eval.filters import filter_trajectories
from workbench.eval.runner import score, summarize
from workbench.methods import get_preset, get_protocol
from workbench.rewards.cache import FeatureCache
from workbench.rewards.evidence import EvidenceScorer
from workbench.rewards.features import FAILURE_COLUMNS, QUESTION_COLUMNS, compute_features, trajectory_failures
from workbench.rewards.judges import YesNoJudge
from workbench.rollout.backends import OpenAIBackend
from workbench.rollout.backends.base import EOS, ERROR, Backend, ChatError, Generation
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox

PRESETS = ("dynasearcher", "rsearch_evidence", "dspo", "rsearch_dag", "when_to_search")


class CharTok:
    """One id per character, id 0 is EOS (no chat template: prompts are encoded as text)."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


class ReplyBackend(Backend):
    """A working backend that answers each prompt with ``reply(prompt)``; ``None`` = that generation fails."""

    def __init__(self, reply, model_id):
        self.tokenizer, self.reply, self.model_id = CharTok(), reply, model_id
        self.prompts: list[str] = []

    def generate(self, prompts, params, max_new_tokens=None):
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            self.prompts.append(text)
            r = self.reply(text)
            out.append(Generation([], [], ERROR, error="HTTP 503 from /completions: overloaded") if r is None
                       else Generation([ord(c) for c in r] + [0], [0.0] * (len(r) + 1), EOS))
        return out


@pytest.fixture
def closed_port():
    """A port on 127.0.0.1 nobody listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def unreachable(port, model_id):
    be = OpenAIBackend(f"http://127.0.0.1:{port}", "judge", CharTok(), max_retries=0, timeout_s=5)
    be.model_id = model_id
    return be


# ============================================================================= judges and the evidence model


def test_backend_chat_raises_the_generation_error_instead_of_an_empty_reply(closed_port):
    with pytest.raises(ChatError, match="(?i)connection (error|refused)") as e:
        unreachable(closed_port, "m").chat("hello")
    assert e.value.replies == [None] and "refused" in e.value.errors[0].lower()


def test_judge_on_a_closed_port_records_the_real_error_and_caches_nothing(closed_port):
    cache = FeatureCache(":memory:")
    item = ("Who founded Tarnholm Mills?", ["Ada Quist"], "Ada Quist")
    down = YesNoJudge(unreachable(closed_port, "judge-model"), cache=cache).score(*item)
    assert math.isnan(down.value) and down.failed and not down.cached
    assert "unparseable" not in down.error and "refused" in down.error.lower()
    assert len(cache) == 0  # the failure is not cached
    # the same judge model, now reachable, on the same cache: it is asked and scores
    working = ReplyBackend(lambda p: "YES", "judge-model")
    up = YesNoJudge(working, cache=cache).score(*item)
    assert (up.value, up.error, up.cached) == (1.0, None, False) and len(working.prompts) == 1
    again = YesNoJudge(working, cache=cache).score(*item)
    assert again.value == 1.0 and again.cached and len(working.prompts) == 1


def test_a_partly_failed_batch_caches_only_the_replies():
    cache = FeatureCache(":memory:")
    flaky = ReplyBackend(lambda p: None if "bo lind" in p else "NO", "judge-model")
    judge = YesNoJudge(flaky, cache=cache)
    out = judge.score_many([("q", ["Ada Quist"], "Bo Lind"), ("q", ["Ada Quist"], "Cy Moss")])
    assert math.isnan(out[0].value) and out[0].error == "HTTP 503 from /completions: overloaded"
    assert out[1].value == 0.0 and len(cache) == 1
    judge.score_many([("q", ["Ada Quist"], "Bo Lind"), ("q", ["Ada Quist"], "Cy Moss")])
    assert len(flaky.prompts) == 3  # the failed prompt is asked again, the answered one is not


def _traj(i, answer="Ada Quist", evidence=None, **kw):
    flags = {"format_ok": True, "answer_boxes": 1}
    if evidence is not None:
        flags.update(evidence=evidence, evidence_boxes=1)
    return Trajectory(f"t{i}", "q1", "Who founded Tarnholm Mills?", "x", [], group_id="q1", sample_idx=i,
                      turns=[Turn(POLICY, "", [], action={"kind": "answer", "payload": answer})], answer=answer,
                      flags=flags, **kw)


EX = Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"], hops=1, supporting_titles=["Tarnholm Mills"])


def test_unreachable_evidence_model_is_a_failure_not_a_zero(closed_port):
    cache = FeatureCache(":memory:")
    trajs = [_traj(0, evidence="Tarnholm Mills was founded by Ada Quist.")]
    down = EvidenceScorer(unreachable(closed_port, "evidence-model"), cache=cache)
    df = compute_features(trajs, [EX], evidence_model=down, encoder=False, cache=cache)
    assert math.isnan(df["evidence_f1"][0]) and df["failed_evidence"][0] == 1.0
    assert df["failure"][0].startswith("evidence model failed: connection") and len(cache) == 0
    assert math.isnan(get_preset("rsearch_evidence")(df).total[0])
    up = EvidenceScorer(ReplyBackend(lambda p: "Ada Quist", "evidence-model"), cache=cache)
    df = compute_features(trajs, [EX], evidence_model=up, encoder=False, cache=cache)
    assert df["evidence_f1"][0] == 1.0 and df["failed_evidence"][0] == 0.0 and df["failure"][0] is None


def test_failed_judgments_are_counted_and_named():
    llm = ReplyBackend(lambda p: None if "bo lind" in p else ("maybe" if "cy" in p else "YES"), "j")
    df = compute_features([_traj(0), _traj(1, "Bo Lind"), _traj(2, "Cy Moss")], [EX], judges=[YesNoJudge(llm)],
                          encoder=False, cache=False)
    assert df["failed_judge"].tolist() == [0.0, 1.0, 1.0]
    assert df["failure"][1] == "judge yesno failed: HTTP 503 from /completions: overloaded"
    assert df["failure"][2] == "judge yesno failed: unparseable judgment"
    total = get_preset("when_to_search", correct_metric="judge")(df.assign(n_searches=0.0, query_concise=1.0)).total
    assert total[0] == 2.0 and np.isnan(total[1:]).all()
    nogold = compute_features([_traj(3)], [Example("q1", "Who?", [])], judges=[YesNoJudge(llm)], encoder=False,
                              cache=False)
    assert nogold["failed_judge"][0] == 0.0 and math.isnan(nogold["judge_yesno"][0])  # nothing to judge: not a failure


# ============================================================================= the policy's backend and tools


def search_tool(query, k=3):
    return [Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)]


def broken_tool(query, k=3):
    raise RuntimeError("index offline")


TWO_TURNS = ["<think> look it up </think>\n<search> Tarnholm Mills founder </search>", "<answer> Ada Quist </answer>"]


@pytest.fixture(scope="module")
def rollouts(tokenizer):
    """The same scripted search-then-answer rollout with a working tool, a broken tool and a broken backend."""

    class Broken(ScriptedBackend):
        def generate(self, prompts, params, max_new_tokens=None):
            raise RuntimeError("CUDA out of memory")

    proto = get_protocol("search_r1")
    cfg = RolloutConfig(max_turns=3)
    ok = rollout([EX], proto, Toolbox({"search": search_tool}), ScriptedBackend(tokenizer, TWO_TURNS), cfg,
                 progress=False)[0]
    tool = rollout([EX], proto, Toolbox({"search": broken_tool}), ScriptedBackend(tokenizer, TWO_TURNS), cfg,
                   progress=False)[0]
    backend = rollout([EX], proto, Toolbox({"search": search_tool}), Broken(tokenizer, []), cfg, progress=False)[0]
    for i, t in enumerate((ok, tool, backend)):
        t.id, t.sample_idx = f"t{i}", i
    return ok, tool, backend


def test_failed_tool_and_backend_are_flagged_and_their_rewards_are_nan(rollouts):
    ok, tool, backend = rollouts
    assert ok.answer == tool.answer == "Ada Quist"  # the same answer: only the search failed
    df = compute_features([ok, tool, backend], [EX], encoder=False, cache=False)
    assert df["failed_tool"].tolist() == [0.0, 1.0, 0.0] and df["backend_error"].tolist() == [0.0, 0.0, 1.0]
    assert df["failure"][0] is None
    assert df["failure"][1] == "search tool failed: tool 'search' raised RuntimeError: index offline"
    assert df["failure"][2] == "policy backend failed: RuntimeError: CUDA out of memory"
    for col in ("em", "cem", "f1", "answered", "format_ok", "recall", "n_searches"):
        assert df[col][0] == df[col][0] and np.isnan(df[col][1:]).all(), col
    for col in QUESTION_COLUMNS:  # facts about the question stay
        assert df[col].notna().all(), col
    assert df[list(FAILURE_COLUMNS)].notna().all().all()
    for name in PRESETS:
        total = get_preset(name)(df).total
        assert np.isnan(total[1:]).all(), name
    assert get_preset("dspo")(df).total[0] == 1.0
    # stage 1: correct → r_a = 1; one concise query → r_s = 0; format ok → r_f = 1
    assert get_preset("when_to_search", correct_metric="cem")(df).total[0] == 2.0
    # the clean row scores as it did alone
    alone = compute_features([ok], [EX], encoder=False, cache=False)
    for name in PRESETS:
        np.testing.assert_array_equal(get_preset(name)(alone).total, get_preset(name)(df).total[:1])


def test_eval_metrics_leave_out_failures_and_questions_without_gold(rollouts):
    ok, tool, backend = rollouts
    nogold = Trajectory("t3", "q2", "Who?", "search_r1", [], answer="A", finish_reason="answer", sample_idx=0)
    rows = score([ok, tool, backend, nogold], [EX, Example("q2", "Who?", [])])
    assert [r["has_gold"] for r in rows] == [1.0, 1.0, 1.0, 0.0]
    assert rows[0]["em"] == 1.0 and all(math.isnan(r["em"]) for r in rows[1:])
    assert rows[1]["failure"].startswith("search tool failed") and rows[1]["n_searches"] == 1  # costs are kept
    s = summarize(rows)
    assert (s["n"], s["n_without_gold"], s["n_failed"]) == (4, 1, 2)
    assert s["em"] == s["cem"] == s["f1"] == 1.0  # the one scorable row, not 1/4
    assert s["n_searches"] == pytest.approx(np.mean([r["n_searches"] for r in rows]))


def test_trajectory_failures_lists_each_failure():
    from workbench.core.trajectory import OBSERVATION
    from workbench.core.types import ToolCall

    calls = [ToolCall("search", {}, error="tool 'search' timed out after 30s"),
             ToolCall("wiki", {}, error="skipped: unknown source", meta={"skipped": True}),  # the plan's fault
             ToolCall("search", {}, results=[{"title": "T", "text": "x"}])]
    t = Trajectory("t", "q", "Q?", "x", [], turns=[Turn(OBSERVATION, "", [], tool_calls=calls)])
    assert trajectory_failures(t) == ["search tool failed: tool 'search' timed out after 30s"]


# ============================================================================= the inspector


def test_inspector_shows_and_filters_failures(rollouts, tmp_path):
    from widgets.inspector import trajectory_inspector
    from workbench.rewards.features import save_features
    from workbench.storage.runs import Run

    ok, tool, backend = rollouts
    run = Run.create(tmp_path, kind="eval", config={"reward": "dspo"})
    run.write_trajectories([ok, tool, backend])
    run.write_examples([EX])
    judge = YesNoJudge(ReplyBackend(lambda p: None, "j"))
    save_features(run, compute_features([ok, tool, backend], [EX], judges=[judge], encoder=False, cache=False))
    ins = trajectory_inspector(run).inspector
    assert ins.frame["failed"].tolist() == ["judge", "tool", "backend"]
    assert ins.set_filters(failed="tool") == [1]
    assert ins.set_filters(failed=True) == [0, 1, 2] and ins.set_filters(failed=False) == []
    (i,) = ins.set_filters(failed="backend")
    assert "policy backend failed: RuntimeError: CUDA out of memory" in ins.transcript.value
    assert "color:#b00" in ins.transcript.value
    ins.set_filters(failed="judge")
    assert "judge yesno failed: HTTP 503" in ins.transcript.value
    assert ins.set_filters(failed=None) == [0, 1, 2]
    assert filter_trajectories(ins.frame, failed=["tool", "backend"]) == [1, 2]
    with pytest.raises(ValueError, match="failure kind"):
        filter_trajectories(ins.frame, failed="disk")
