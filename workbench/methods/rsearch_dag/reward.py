"""The NL-DAG R-Search reward (Shi & Shen, 2025, Eq. 3): ``R = 0.25·F_fmt + 0.25·F_dag + 0.5·F_ans``."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.components import answer_score
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Columns, Rubric, one_of, params

_ANSWER_SOURCES = ("auto", "judge", "f1", "cem", "em")


def F_fmt(c: Columns) -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_fmt = 1`` iff think/search/result/answer appear exactly once, in order (``format_ok``)."""
    return c["format_ok"]


def F_dag(c: Columns) -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_dag = 1`` iff the NL-DAG passes every validation (``dag_valid``)."""
    return c["dag_valid"]


@params(
    answer_source=one_of(*_ANSWER_SOURCES, description="F_ans: judge similarity, a string metric, or auto"),
    fallback=one_of("f1", "cem", "em", description="string metric used by answer_source='auto' without a judge column"),
)
def F_ans(c: Columns, *, answer_source: str = "auto", fallback: str = "f1") -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_ans`` = the judge's similarity in [0, 1] (``judge_similarity``).

    ``answer_source="auto"`` uses the judge column when the table has one, else
    ``fallback`` (F1 by default); a failed judgment (NaN) stays missing. On multiple-choice questions
    (lettered options) ``auto`` uses the F1 between option sets (``option_f1``), as the paper does.
    """
    score = answer_score(c, answer_source, "judge_similarity", fallback)
    if answer_source == "auto" and c.has("option_f1"):
        mc = c["option_f1"]
        score = np.where(np.isnan(mc), score, mc)
    return score


def rsearch_dag(**kw: Any) -> Rubric:
    """R-Search multi-source NL-DAG (file 003): ``R = 0.25·F_fmt + 0.25·F_dag + 0.5·F_ans`` (Eq. 3).

    The α_fmt : α_dag : α_ans = 0.25 : 0.25 : 0.5 coefficients are the rubric weights
    (``with_weights`` changes them). Needs ``format_ok``, ``dag_valid`` and
    ``judge_similarity`` (or the fallback string metric).
    """
    return Rubric([F_fmt, F_dag, F_ans], [0.25, 0.25, 0.5], kw, name="rsearch_dag", doc=rsearch_dag.__doc__ or "")


#: Eq. 3's F_ans reads a similarity judge when one is configured (F1 otherwise).
PRESET = RewardPreset("rsearch_dag", rsearch_dag, FeatureNeeds(judges=("similarity",)))
