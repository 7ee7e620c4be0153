"""workbench.eval.compare: one answer judged against its gold aliases, two sources paired question by question."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.eval.compare import (
    CATEGORIES,
    MISSING,
    best_gain,
    category_counts,
    judge,
    pair_table,
    show,
    word_diff,
)


def _frame() -> pd.DataFrame:
    """Two sources on three questions; ``b`` holds two samples of q1 and q2, ``a`` one of each and q3 alone."""
    rows = [  # source, question, sample, answer, cem, f1
        ("a", "q1", 0, "Ada", 0.0, 0.5), ("a", "q2", 0, "Ostrel", 1.0, 1.0), ("a", "q3", 0, None, 0.0, 0.0),
        ("b", "q1", 0, "Ada Quist", 1.0, 1.0), ("b", "q1", 1, "Ada Q.", 0.0, 0.8),
        ("b", "q2", 1, "Brackwater", 0.0, 0.0), ("b", "q2", 2, "Ostrel", 1.0, 1.0),
    ]
    f = pd.DataFrame(rows, columns=["source", "question", "sample_idx", "answer", "cem", "f1"])
    f["gold"] = [["Ada Quist"] if q == "q1" else ["Ostrel"] if q == "q2" else ["Velmora"] for q in f["question"]]
    return f


def test_judge_names_the_metric_and_the_alias_it_matched():
    v = judge("born in Tarnholm", ["Ulmbridge", "Tarnholm", "Tarnholm Mills"])
    assert v.correct is True and v.matched == "Tarnholm" and v.rule == "cover-EM = 1"
    assert v.scores["cem"] == 1.0 and v.scores["em"] == 0.0
    f = judge("Tarnholm Mills Ltd", ["Tarnholm Mills"], metric="f1", threshold=0.9)
    assert f.correct is False and f.rule == "F1 ≥ 0.9" and f.scores["f1"] == pytest.approx(0.8)
    none = judge(None, ["Paris"])
    assert none.prediction is None and none.correct is False and none.matched == "Paris"
    assert judge("x", None).correct is None and judge("x", []).gold == []
    with pytest.raises(ValueError, match="valid: cem, f1"):
        judge("x", ["y"], metric="bleu")


def test_one_rendering_of_a_missing_value():
    assert [show(v) for v in (None, float("nan"), np.float64("nan"), pd.NA, "")] == [MISSING] * 5
    assert show(0.25) == "0.250" and show(3.0) == "3" and show(7) == "7" and show("Ostrel") == "Ostrel"


def test_one_row_per_shared_question_judged_by_most_of_its_samples():
    pairs = pair_table(_frame(), "a", "b")
    assert len(pairs) == 2 and pairs.attrs["only_left"] == 1 and pairs.attrs["only_right"] == 0  # q3: only a
    q1, q2 = (pairs[pairs["question"] == q].iloc[0] for q in ("q1", "q2"))
    # b's q1: one of two samples right (half: right), shown by its sample that is right
    assert (q1["left_answer"], q1["right_answer"], q1["category"]) == ("Ada", "Ada Quist", "fixed")
    assert (q1["right_score"], q1["right_f1"], q1["right_samples"], q1["left_samples"]) == (0.5, 0.9, 2, 1)
    # b's q2: samples 1 (wrong) and 2 (right): half right, shown by sample 2 ("Ostrel", row 6); a is right too
    assert (q2["right_answer"], q2["right_row"], q2["category"]) == ("Ostrel", 6, "both right")
    assert q2["gold"] == ["Ostrel"] and list(pairs["category"]) == ["fixed", "both right"]
    assert category_counts(pairs) == {"fixed": 1, "broken": 0, "both wrong": 0, "both right": 1}
    assert (pairs.attrs["left_samples"], pairs.attrs["right_samples"]) == (2, 4)


def test_three_samples_against_one_count_each_question_once():
    """The issue's case: a run of 3 samples a question against one of 1 sample, on 2 questions. Counted by sample,
    the single sample was repeated three times: "6 shared question samples", fixed/broken inflated threefold."""
    rows = [("many", q, k, ans, cem, cem) for q, answers in (("q1", ("Ada", "Ada", "Bo")), ("q2", ("x", "y", "Ostrel")))
            for k, (ans, cem) in enumerate((a, float(a in ("Ada", "Ostrel"))) for a in answers)]
    rows += [("one", "q1", 0, "Bo", 0.0, 0.0), ("one", "q2", 0, "Ostrel", 1.0, 1.0)]
    f = pd.DataFrame(rows, columns=["source", "question", "sample_idx", "answer", "cem", "f1"])
    pairs = pair_table(f, "one", "many")
    assert len(pairs) == 2 and category_counts(pairs) == {"fixed": 1, "broken": 1, "both wrong": 0, "both right": 0}
    q1 = pairs.set_index("question").loc["q1"]
    assert (q1["right_answer"], q1["right_score"], q1["right_samples"]) == ("Ada", 2 / 3, 3)  # 2 of 3 right
    q2 = pairs.set_index("question").loc["q2"]
    assert (q2["category"], q2["right_answer"]) == ("broken", "x")  # 1 of 3 right: wrong, shown by a wrong sample
    from widgets.diff import counts_html

    line = counts_html(pairs)
    assert "over 2 shared questions (2 samples left, 6 right; a side with several is judged by most of them)" in line
    assert "1 fixed" in line and "1 broken" in line


def test_pairs_by_f1_threshold_and_unknown_gold():
    f = _frame()
    by_f1 = pair_table(f, "a", "b", metric="f1", threshold=0.5)
    assert by_f1.set_index("question").at["q1", "category"] == "both right"  # F1 0.5 and 1.0 both pass 0.5
    f.loc[f["question"] == "q1", "cem"] = math.nan  # no gold: neither side can be judged
    assert pair_table(f, "a", "b").set_index("question").at["q1", "category"] == "unknown"
    assert set(CATEGORIES) >= set(pair_table(f, "b", "a")["category"])


def test_best_gain_breaks_ties_by_f1_and_says_when_nothing_differs():
    f = _frame()
    assert best_gain(f, "a", "b") == ("q1", "opened where b gained most cover-EM over a")
    q, note = best_gain(f, "a", "a")
    assert q == "q1" and "score the same cover-EM or F1 on every one of their 3 shared questions" in note
    assert best_gain(f, "a", "c")[0] is None
    worse = f[f["question"] != "q1"]  # on q2 b averages 0.5 against a's 1: b gains nowhere
    assert best_gain(worse, "a", "b") == ("q2", "b gains cover-EM on no shared question: opened where it lost least to a")


def test_word_diff_marks_what_changed():
    assert word_diff("born in 1886", "born in 1931") == [("equal", "born in", "born in"), ("replace", "1886", "1931")]
    assert word_diff(None, "Ostrel") == [("insert", "", "Ostrel")]
