"""Judging one answer against its gold aliases, and comparing two sources (runs or methods) question by question.

Pure functions over tables with one row per trajectory (the inspector's table, or the dashboard's rows of two
runs): the views draw what these return. A *source* is a ``source`` value of such a table: a method name, or
``run · method`` when several runs are open.

- :func:`judge`: the gold aliases beside the prediction, every string score, the metric that decides
  correctness and the alias it matched (:func:`~workbench.rewards.metrics.matching_gold`).
- :func:`pair_table`: two sources compared on the questions both answered, one row per question (a source with
  several samples judged by most of them), both answers and scores, and a :data:`CATEGORIES` label per question:
  *fixed* (only the right-hand source is correct), *broken* (only the left), *both right*, *both wrong*; questions
  without a gold answer are *unknown*.
- :func:`show`: the one rendering of a missing value (:data:`MISSING`) every view uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench.eval.filters import CORRECT_METRICS, correct_mask
from workbench.rewards.metrics import answer_metrics, matching_gold

#: How every view shows a missing value (no answer, no gold, a NaN score or reward).
MISSING = "–"
#: The categories of a compared pair, in the order the comparison table lists them.
CATEGORIES = ("fixed", "broken", "both wrong", "both right", "unknown")
#: Readable names of the correctness metrics.
METRIC_NAMES = {"cem": "cover-EM", "em": "EM", "f1": "F1"}


def is_missing(v: Any) -> bool:
    """None, NaN, pandas' NA, or an empty string.

    >>> [is_missing(v) for v in (None, float("nan"), pd.NA, "", "x", 0)]
    [True, True, True, True, False, False]
    """
    if v is None or v is pd.NA or (isinstance(v, str) and not v):
        return True
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def show(v: Any, digits: int = 3) -> str:
    """A value as text: :data:`MISSING` for a missing one, floats with ``digits`` decimals (whole floats as ints).

    >>> show(None), show(float("nan")), show(0.5), show(2.0), show("Ostrel")
    ('–', '–', '0.500', '2', 'Ostrel')
    """
    if is_missing(v):
        return MISSING
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:.{digits}f}"
    return str(v)


def gold_list(golds: Any) -> list[str]:
    """Gold aliases as a list of strings (a string, a sequence, or missing → [])."""
    if golds is None or (not isinstance(golds, str) and not isinstance(golds, (list, tuple, np.ndarray))):
        return []
    if isinstance(golds, str):
        return [golds] if golds else []
    return [str(g) for g in golds if not is_missing(g)]


@dataclass
class Verdict:
    """One answer judged: ``correct`` is None without a gold answer."""

    prediction: str | None
    gold: list[str]
    metric: str
    threshold: float
    scores: dict[str, float]
    matched: str | None
    correct: bool | None

    @property
    def rule(self) -> str:
        """How ``correct`` was decided: "cover-EM = 1" or "F1 ≥ 0.5"."""
        return "cover-EM = 1" if self.metric == "cem" else f"{METRIC_NAMES[self.metric]} ≥ {self.threshold:g}"

    def reason(self) -> str:
        """The scores, the rule and the gold aliases in one line, the answer's score kept apart from the rule.

        >>> judge("Ada Quist", ["A. Quist", "Ada Quist"]).reason()
        "cover-EM 1, F1 1.00; correct means cover-EM = 1, matched 'Ada Quist'; gold: A. Quist | Ada Quist"
        """
        matched = f", matched {self.matched!r}" if self.correct and self.matched else ""
        return (f"cover-EM {self.scores['cem']:g}, F1 {self.scores['f1']:.2f}; correct means {self.rule}{matched}; "
                f"gold: {' | '.join(self.gold)}")


def judge(prediction: Any, golds: Any, metric: str = "cem", threshold: float = 0.5) -> Verdict:
    """The prediction against its gold aliases: EM, cover-EM, F1 (maxed over aliases), the alias it matched best,
    and whether it is correct by ``metric`` (cover-EM = 1, or F1 ≥ ``threshold``) as the inspector's filter counts it.

    >>> v = judge("Ada Quist", ["A. Quist", "Ada Quist"])
    >>> v.correct, v.matched, v.scores["f1"]
    (True, 'Ada Quist', 1.0)
    >>> judge(None, ["Paris"]).correct, judge("Paris", []).correct
    (False, None)
    """
    if metric not in CORRECT_METRICS:
        raise ValueError(f"correct metric {metric!r}; valid: {', '.join(CORRECT_METRICS)}")
    pred = None if is_missing(prediction) else str(prediction)
    gold = gold_list(golds)
    scores = answer_metrics(pred, gold)
    ok = correct_mask(pd.DataFrame({metric: [scores[metric]]}), metric, threshold).iloc[0]
    return Verdict(pred, gold, metric, threshold, scores, matching_gold(pred, gold) if gold else None,
                   None if pd.isna(ok) else bool(ok == 1.0))


def category(left_ok: Any, right_ok: Any) -> str:
    """The category of a pair from the correctness of its left and right answer (1 / 0 / NaN).

    >>> category(0, 1), category(1, 0), category(1, 1), category(0, 0), category(float("nan"), 1)
    ('fixed', 'broken', 'both right', 'both wrong', 'unknown')
    """
    if is_missing(left_ok) or is_missing(right_ok):
        return "unknown"
    return {(0, 1): "fixed", (1, 0): "broken", (1, 1): "both right", (0, 0): "both wrong"}[(int(left_ok), int(right_ok))]


PAIR_COLUMNS = ("question", "sample_idx", "gold", "left_row", "right_row", "left_answer", "right_answer",
                "left_score", "right_score", "left_f1", "right_f1", "category", "left_samples", "right_samples")


def pair_table(frame: pd.DataFrame, left: str, right: str, metric: str = "cem", threshold: float = 0.5) -> pd.DataFrame:
    """Sources ``left`` and ``right`` compared on the questions both answered: one row per question, whatever the
    number of samples each drew of it.

    ``frame``: one row per trajectory with ``source``, ``question``, ``sample_idx``, ``answer``, the metric
    columns (``cem``, ``f1``...) and optionally ``gold`` (the aliases). A side's verdict on a question is that of
    most of its samples (right when at least half are; one sample: its own), its scores the means over them, and
    the trajectory shown for it (``*_row``: positions in ``frame``; ``*_answer``; ``sample_idx`` is the left one's)
    its first sample that agrees with that verdict. So a run of 3 samples against one of 1 counts each question
    once, not its one sample three times. Columns: :data:`PAIR_COLUMNS` (``*_score``: ``metric``; ``*_samples``: how
    many each side drew). Sorted by :data:`CATEGORIES`, then by how much the right-hand F1 gained. ``attrs``:
    ``only_left`` / ``only_right`` (questions one source answered and the other did not), ``left_samples`` /
    ``right_samples`` (each side's trajectories on the shared questions).

    >>> f = pd.DataFrame({"source": ["a", "a", "b", "b", "b"], "question": ["q1", "q2", "q1", "q1", "q2"],
    ...                   "sample_idx": [0, 0, 0, 1, 0], "answer": ["x", "Ada", "Ada", "Ada", "y"],
    ...                   "cem": [0.0, 1.0, 1.0, 1.0, 0.0], "f1": [0.0, 1.0, 1.0, 1.0, 0.0]})
    >>> pair_table(f, "a", "b")[["question", "category", "right_samples"]].values.tolist()
    [['q1', 'fixed', 2], ['q2', 'broken', 1]]
    """
    if metric not in CORRECT_METRICS:
        raise ValueError(f"correct metric {metric!r}; valid: {', '.join(CORRECT_METRICS)}")
    src = frame["source"]
    ok = correct_mask(frame, metric, threshold)
    cols = ["question", "sample_idx", "answer", metric, "f1"] + (["gold"] if "gold" in frame.columns else [])

    def side(name: str) -> pd.DataFrame:
        """One row per question: the verdict of most samples, the mean scores, the first sample that agrees."""
        rows = np.flatnonzero((src == name).to_numpy())
        part = frame.iloc[rows][list(dict.fromkeys(cols))].copy()
        part["row"], part["ok"] = rows, ok.iloc[rows].to_numpy()
        part["score"] = pd.to_numeric(part[metric], errors="coerce")
        part["f1n"] = pd.to_numeric(part["f1"], errors="coerce")
        part = part.sort_values(["question", "sample_idx", "row"], kind="stable")
        g = part.groupby("question", sort=False)
        share = g["ok"].mean()  # NaN when no sample could be judged
        verdict = (share >= 0.5).astype(float).where(share.notna())
        mine = part["question"].map(verdict)
        part["agrees"] = (part["ok"] == mine) | mine.isna()
        shown = part.sort_values(["agrees"], ascending=False, kind="stable").drop_duplicates("question")
        out = shown.set_index("question")
        out["ok"], out["score"], out["f1n"], out["n"] = verdict, g["score"].mean(), g["f1n"].mean(), g.size()
        return out

    lf, rf = side(left), side(right)
    shared = [q for q in lf.index if q in rf.index]
    L, R = lf.loc[shared], rf.loc[shared]
    out = pd.DataFrame({
        "question": shared, "sample_idx": L["sample_idx"].to_numpy(),
        "gold": L["gold"].to_numpy() if "gold" in L.columns else [None] * len(shared),
        "left_row": L["row"].astype(np.int64).to_numpy(), "right_row": R["row"].astype(np.int64).to_numpy(),
        "left_answer": L["answer"].to_numpy(), "right_answer": R["answer"].to_numpy(),
        "left_score": L["score"].to_numpy(), "right_score": R["score"].to_numpy(),
        "left_f1": L["f1n"].to_numpy(), "right_f1": R["f1n"].to_numpy(),
        "category": [category(a, b) for a, b in zip(L["ok"], R["ok"])],
        "left_samples": L["n"].astype(np.int64).to_numpy(), "right_samples": R["n"].astype(np.int64).to_numpy(),
    }, columns=list(PAIR_COLUMNS))
    order = out["category"].map({c: i for i, c in enumerate(CATEGORIES)}).to_numpy()
    gain = np.nan_to_num(out["right_f1"].to_numpy() - out["left_f1"].to_numpy(), nan=0.0)
    out = out.iloc[np.lexsort((out["left_row"].to_numpy(), -gain, order))].reset_index(drop=True)
    out.attrs.update(left=left, right=right, metric=metric, threshold=threshold,
                     only_left=len(set(lf.index) - set(rf.index)), only_right=len(set(rf.index) - set(lf.index)),
                     left_samples=int(out["left_samples"].sum()), right_samples=int(out["right_samples"].sum()))
    return out


def category_counts(pairs: pd.DataFrame) -> dict[str, int]:
    """Pairs per category (every category of :data:`CATEGORIES` but *unknown*, which is listed only when present)."""
    counts = pairs["category"].value_counts()
    return {c: int(counts.get(c, 0)) for c in CATEGORIES if c != "unknown" or counts.get(c, 0)}


def best_gain(frame: pd.DataFrame, left: str, right: str, metric: str = "cem") -> tuple[str | None, str]:
    """The question where ``right``'s mean ``metric`` beats ``left``'s most (ties broken by F1 when ``metric`` is not
    F1), and a note: which score decided, or that both score the same on every question they share (then the first
    shared question in table order). None when the two share no question.

    >>> f = pd.DataFrame({"source": ["a", "b", "a", "b"], "question": ["q1", "q1", "q2", "q2"],
    ...                   "cem": [0.0, 0.0, 0.0, 0.0], "f1": [0.0, 0.0, 0.2, 0.6]})
    >>> best_gain(f, "a", "b")
    ('q2', 'b and a score the same cover-EM on every shared question: opened where b gained most F1 over a')
    """
    keys = [metric] + (["f1"] if metric != "f1" and "f1" in frame.columns else [])
    shared = None
    for k in keys:
        score = pd.to_numeric(frame[k], errors="coerce")
        by = score.groupby([frame["question"], frame["source"]], sort=False).mean().unstack()
        if left not in by.columns or right not in by.columns:
            return None, f"{left} and {right} share no question"
        gap = (by[right] - by[left]).dropna()
        if shared is None:
            shared = gap.index
        gap = gap[gap != 0]
        if not gap.empty:
            ranked = gap.sort_values(ascending=False, kind="stable")
            q, name = ranked.index[0], METRIC_NAMES.get(k, k)
            where = (f"opened where {right} gained most {name} over {left}" if ranked.iloc[0] > 0 else
                     f"{right} gains {name} on no shared question: opened where it lost least to {left}")
            note = where if k == metric else (f"{right} and {left} score the same {METRIC_NAMES.get(metric, metric)} "
                                              f"on every shared question: {where}")
            return q, note
    if shared is None or not len(shared):
        return None, f"{left} and {right} share no question"
    names = " or ".join(METRIC_NAMES.get(k, k) for k in keys)
    return shared[0], (f"{left} and {right} score the same {names} on every one of their {len(shared)} shared "
                       "questions: opened on the first")


def word_diff(a: Any, b: Any) -> list[tuple[str, str, str]]:
    """Words of ``a`` and ``b`` aligned: ``(op, a_part, b_part)`` with op ``equal``, ``replace``, ``delete``, ``insert``.

    >>> word_diff("born in 1886", "born in 1931")
    [('equal', 'born in', 'born in'), ('replace', '1886', '1931')]
    """
    import difflib

    wa, wb = ("" if is_missing(a) else str(a)).split(), ("" if is_missing(b) else str(b)).split()
    ops = difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes()
    return [(op, " ".join(wa[i1:i2]), " ".join(wb[j1:j2])) for op, i1, i2, j1, j2 in ops]


def sources_of(frame: pd.DataFrame) -> Sequence[str]:
    """The table's sources, sorted."""
    return sorted(pd.unique(frame["source"].dropna()).tolist())
