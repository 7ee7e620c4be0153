"""LLM judges and the cross-family evidence reward: prompts, robust parsing, caching, failures as missing."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from workbench.core.trajectory import POLICY, Trajectory, Turn
from workbench.data.example import Example
from workbench.methods import get_preset
from workbench.rewards.evidence import EVIDENCE_TEMPLATE, EvidenceScorer, extract_short_answer
from workbench.rewards.features import FeatureCache, compute_features
from workbench.rewards.judges import (
    JUDGES,
    LASJ_PROMPT,
    AccuracyJudge,
    SimilarityJudge,
    YesNoJudge,
    get_judge,
    parse_scaled_score,
    parse_yes_no,
)

NAN = float("nan")


class CountingLLM:
    """A ``str -> str`` fake model that counts calls and replies from a function of the prompt."""

    model_id = "fake-llm"

    def __init__(self, reply):
        self.reply = reply
        self.prompts: list[str] = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return self.reply(prompt)


class BatchBackend:
    """Backend-like: judges use ``chat_batch`` (one call per batch)."""

    model_id = "fake-backend"

    def __init__(self, reply):
        self.reply = reply
        self.batches: list[list[str]] = []

    def chat_batch(self, prompts, params=None):
        self.batches.append(list(prompts))
        return [self.reply(p) for p in prompts]


# ============================================================================= parsers


@pytest.mark.parametrize(
    "text, expected",
    [("4", 4.0), ("Score: 4/5", 4.0), ("**3**", 3.0), ("Evaluation result: 5", 5.0), ("8 out of 10", 4.0),
     ("I'd say 2.5.", 2.5), ("0", 0.0), ("Score: 80%", 4.0), (" 5\n", 5.0), ("Rating - 1", 1.0),
     ("7", None), ("-1", None), ("", None), (None, None), ("It is good.", None), ("between 2 and 4", None),
     ("Score: 6/5", None)],
)
def test_parse_0_5_score(text, expected):
    assert parse_scaled_score(text, 5.0) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("0.85", 0.85), ("Similarity: 0.7", 0.7), ("85%", 0.85), ("8/10", 0.8), ("**1**", 1.0), ("1.5", None),
     ("high", None)],
)
def test_parse_unit_score(text, expected):
    got = parse_scaled_score(text, 1.0)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    "text, expected",
    [("YES", 1.0), ("**YES**", 1.0), ("yes.", 1.0), ("Yes, it matches.", 1.0), ("NO", 0.0), ("no", 0.0),
     ("Answer: NO", 0.0), ("The prediction matches: YES", 1.0), ("maybe", None), ("", None), (None, None),
     ("yes or no", None), ("I cannot tell", None)],
)
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) == expected


# ============================================================================= prompts


def test_prompts_follow_the_papers():
    lasj = AccuracyJudge(CountingLLM(lambda p: "5"))
    p = lasj.prompt("Who founded X?", ["Ada Quist", "A. Quist"], "It was Ada.")
    assert p.startswith("You will be provided with three pieces of content")
    assert "Questioner’s question:\n\nWho founded X?" in p and '["Ada Quist", "A. Quist"]' in p
    assert p.rstrip().endswith("Evaluation result (output only the score between 0 and 5):")
    assert LASJ_PROMPT.count("{") == 3
    yn = YesNoJudge(CountingLLM(lambda p: "YES")).prompt("q", ["The Eiffel Tower!"], "the eiffel-tower")
    # B.4: the prediction and the references are normalized
    assert "Prediction: eiffeltower" in yn and 'Reference Answers: ["eiffel tower"]' in yn
    assert "Only respond with YES or NO." in yn
    sim = SimilarityJudge(CountingLLM(lambda p: "1")).prompt("q?", ["Oslo"], "Oslo, Norway")
    assert "between 0 and 1" in sim and "Oslo, Norway" in sim
    long = lasj.prompt("q", ["a"], lasj._cut("word " * 10_000))
    assert "…[truncated]" in long and len(long) < 6000
    assert set(JUDGES) == {"lasj", "yesno", "similarity"}
    with pytest.raises(ValueError, match="valid names: lasj, similarity, yesno"):
        get_judge("gpt", CountingLLM(lambda p: ""))


# ============================================================================= scoring, caching, failures


def test_judge_caches_by_name_model_and_prompt():
    llm = CountingLLM(lambda p: "Score: 4/5" if "Ada" in p else "1")
    cache = FeatureCache(":memory:")
    judge = AccuracyJudge(llm, cache=cache)
    items = [("q", ["Ada Quist"], "Ada Quist"), ("q", ["Oslo"], "Paris"), ("q", ["Ada Quist"], "Ada Quist")]
    first = judge.score_many(items)
    assert [j.score for j in first] == [4.0, 1.0, 4.0] and [j.value for j in first] == [0.8, 0.2, 0.8]
    assert len(llm.prompts) == 2  # the duplicate prompt is sent once
    second = judge.score_many(items)
    assert len(llm.prompts) == 2 and all(j.cached for j in second)  # nothing re-sent
    assert [j.value for j in second] == [j.value for j in first]
    # another judge or another model id on the same text is a different cache entry
    AccuracyJudge(llm, model_id="other-model", cache=cache).score_many(items[:1])
    assert len(llm.prompts) == 3
    assert judge.calls == 2


def test_failed_or_unparseable_judgments_are_missing_with_raw_text():
    replies = {"prose": "The response seems mostly fine to me.", "empty": "", "none": None}

    def reply(p):
        for k, v in replies.items():
            if f"{k} answer" in p:  # the YES/NO prompt normalizes the prediction
                return v
        raise ConnectionError("server down")

    llm = CountingLLM(reply)
    judge = YesNoJudge(llm, cache=FeatureCache(":memory:"))
    out = judge.score_many([("q", ["x"], "prose answer"), ("q", ["x"], "empty answer"), ("q", ["x"], "none answer")])
    assert all(math.isnan(j.value) and math.isnan(j.score) for j in out)
    assert out[0].raw == replies["prose"] and out[0].error == "unparseable judgment"
    assert out[1].raw == "" and out[2].error.startswith("model returned nothing")
    crash = judge.score("q", ["x"], "boom")
    assert math.isnan(crash.value) and "ConnectionError: server down" in crash.error
    n = len(llm.prompts)
    judge.score("q", ["x"], "boom")
    assert len(llm.prompts) == n + 1  # failures are not cached: retried
    # no answer → 0 without a call; no gold answers → missing
    no_answer, no_gold = judge.score_many([("q", ["x"], None), ("q", [], "Paris")])
    assert (no_answer.value, no_answer.raw) == (0.0, "(no answer)") and math.isnan(no_gold.value)
    assert len(llm.prompts) == n + 1


def test_backend_judge_batches_uncached_prompts():
    be = BatchBackend(lambda p: "0.9" if "Oslo" in p else "0.1")
    judge = SimilarityJudge(be, cache=FeatureCache(":memory:"))
    out = judge.score_many([("q", ["Oslo"], "Oslo"), ("q", ["Rome"], "Paris")])
    assert [j.value for j in out] == [0.9, 0.1] and len(be.batches) == 1 and len(be.batches[0]) == 2
    judge.score_many([("q", ["Oslo"], "Oslo"), ("q", ["Bern"], "Bern")])
    assert be.batches[1] == [judge.prompt("q", ["Bern"], "Bern")]  # only the new prompt


def _traj(i, answer, evidence=None):
    flags = {"format_ok": True}
    if evidence is not None:
        flags.update(evidence=evidence, evidence_boxes=1, answer_boxes=1)
    return Trajectory(f"t{i}", "q1", "Who founded Tarnholm Mills?", "x", [], group_id="q1", sample_idx=i,
                      turns=[Turn(POLICY, "", [], action={"kind": "answer", "payload": answer})], answer=answer, flags=flags)


EX = Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"])


def test_judge_columns_in_features_and_missing_counts_in_the_rubric():
    llm = CountingLLM(lambda p: "YES" if "ada quist" in p.split("Reference")[0].lower() else
                      ("hmm, hard to say" if "miller" in p else "NO"))
    cache = FeatureCache(":memory:")
    trajs = [_traj(0, "Ada Quist"), _traj(1, "Bo Lind"), _traj(2, "a miller"), _traj(3, None)]
    df = compute_features(trajs, [EX], judges=[YesNoJudge(llm), AccuracyJudge(CountingLLM(lambda p: "3"))],
                          encoder=False, cache=cache)
    assert {"judge_yesno", "judge_yesno_raw", "judge_lasj", "judge_lasj_score", "judge_lasj_raw"} <= set(df.columns)
    np.testing.assert_array_equal(df["judge_yesno"].to_numpy()[[0, 1, 3]], [1.0, 0.0, 0.0])
    assert math.isnan(df["judge_yesno"][2]) and df["judge_yesno_raw"][2] == "hmm, hard to say"
    assert df["judge_lasj_score"].tolist()[:3] == [3.0] * 3 and df["judge_lasj"][0] == pytest.approx(0.6)
    t = get_preset("when_to_search", correct_metric="judge")(df.assign(n_searches=0.0, query_concise=1.0))
    # r_a stage 1: judge YES → 1, NO → −1, unparseable → missing (not −1), no answer → −1
    assert t["r_a"][0] == 1.0 and t["r_a"][1] == -1.0 and math.isnan(t["r_a"][2]) and t["r_a"][3] == -1.0
    assert t.missing["r_a"] == 1 and t.breakdown.loc["total", "missing"] == 1
    n = len(llm.prompts)
    compute_features(trajs, [EX], judges=[YesNoJudge(llm)], encoder=False, cache=cache)
    assert len(llm.prompts) == n  # re-scoring costs nothing


# ============================================================================= evidence (R-Search)


def test_evidence_template_is_table_5():
    assert EVIDENCE_TEMPLATE.startswith("Answer the question based on the given passages. Only give me the answer")
    assert "The following are given passages: {evidence}" in EVIDENCE_TEMPLATE
    assert EVIDENCE_TEMPLATE.rstrip().endswith("Question: {query}\n\nAnswer:")
    assert extract_short_answer("Ada Quist\n\nThe passages say...") == "Ada Quist"
    assert extract_short_answer("The final answer is \\boxed{Oslo}.") == "Oslo"


def test_evidence_feature_with_a_cross_family_model():
    llm = CountingLLM(lambda p: "Answer: Ada Quist" if "founded by Ada Quist" in p else "unknown")
    scorer = EvidenceScorer(llm, cache=FeatureCache(":memory:"))
    trajs = [_traj(0, "Ada", "- Tarnholm Mills was founded by Ada Quist."), _traj(1, "Ada", "- Nothing useful."),
             _traj(2, "Ada")]
    df = compute_features(trajs, [EX], evidence_model=scorer, encoder=False, cache=False)
    assert df["evidence_answer"].tolist()[:2] == ["Ada Quist", "unknown"]
    assert df["evidence_f1"].tolist()[:2] == [1.0, 0.0] and math.isnan(df["evidence_f1"][2])  # no evidence flag
    assert len(llm.prompts) == 2 and llm.prompts[0] == EVIDENCE_TEMPLATE.format(
        evidence="- Tarnholm Mills was founded by Ada Quist.", query="Who founded Tarnholm Mills?")
    t = get_preset("rsearch_evidence")(df)
    # row 0: F1("Ada", "Ada Quist") = 2/3, evidence F1 1, no search: r_fmt = 0.2 + 0.2 = 0.4
    assert t.total[0] == pytest.approx(2 / 3 + 1 + 0.4) and math.isnan(t.total[2])
    scorer.answer_many([("Who founded Tarnholm Mills?", "- Tarnholm Mills was founded by Ada Quist.")])
    assert len(llm.prompts) == 2  # cached


def test_evidence_falls_back_to_the_base_model_with_a_warning():
    with pytest.raises(ValueError, match="cross-family"):
        EvidenceScorer()

    class PeftLike:
        def __init__(self):
            self.disabled = 0

        def disable_adapter(self):
            model = self

            class Ctx:
                def __enter__(self):
                    model.disabled += 1

                def __exit__(self, *a):
                    return False

            return Ctx()

    class BaseBackend(BatchBackend):
        def __init__(self):
            super().__init__(lambda p: "Ada Quist")
            self.model = PeftLike()
            self.cleared = 0

        def clear_cache(self):
            self.cleared += 1

    be = BaseBackend()
    with pytest.warns(UserWarning, match="different family"):
        scorer = EvidenceScorer(base_backend=be, cache=FeatureCache(":memory:"))
    assert scorer.score("q", "evidence", ["Ada Quist"]) == 1.0
    assert be.model.disabled == 1 and be.cleared == 2  # adapter off during the call; KV prefix cache cleared
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EvidenceScorer(CountingLLM(lambda p: "x"))  # a configured model: no warning
    failing = EvidenceScorer(CountingLLM(lambda p: 1 / 0), cache=FeatureCache(":memory:"))
    assert math.isnan(failing.score("q", "e", ["x"]))


def test_empty_evidence_scores_zero_without_a_call_and_templates_agree():
    from workbench.methods.rsearch_evidence.protocol import EVIDENCE_TEMPLATE as PROTOCOL_TEMPLATE

    assert PROTOCOL_TEMPLATE == EVIDENCE_TEMPLATE  # one template for the reward and R-Search-as-a-Tool
    llm = CountingLLM(lambda p: "Ada Quist")
    df = compute_features([_traj(0, "Ada", "  ")], [EX], evidence_model=EvidenceScorer(llm), encoder=False,
                          cache=FeatureCache(":memory:"))
    assert (df["evidence_answer"][0], df["evidence_f1"][0]) == ("", 0.0) and llm.prompts == []
