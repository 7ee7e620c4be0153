"""Learning When to Search's two-stage reward (Eqs. 6–12): ``r_sum = r_a + r_s + r_f``."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.components import check_correct_metric, correct
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Columns, Rubric, Spec, in_range, is_true, nan_where, one_of, params


def r_f(c: Columns) -> np.ndarray:
    """When-to-Search Eq. 6: ``r_f = +1`` if the output structure fully matches (``format_ok``), else ``−1``."""
    fmt = c["format_ok"]
    return nan_where(is_true(fmt), 1.0, -1.0, fmt)


@params(sim_divisor=one_of("paper", "pairs", description="avg_sim divisor: 'paper' N(N−1) (Eq. 8) or 'pairs' N(N−1)/2"))
def r_s(c: Columns, *, sim_divisor: str = "paper") -> np.ndarray:
    """When-to-Search Eq. 9: ``0`` if RC ≤ 1 and the query is concise; ``−1`` if RC ≤ 1 and not concise;
    ``−avg_sim`` if RC > 1.

    avg_sim (Eq. 8) divides the sum over pairs i<j by N(N−1) as printed (``sim_divisor="paper"``,
    column ``query_sim_paper``); ``"pairs"`` uses the true mean over N(N−1)/2 pairs
    (``query_sim_mean``).
    """
    rc, concise = c["n_searches"], c["query_concise"]
    sim = c["query_sim_paper"] if sim_divisor == "paper" else c["query_sim_mean"]
    few = nan_where(is_true(concise), 0.0, -1.0, concise)
    return nan_where(rc > 1, -sim, few, rc)


@params(
    stage=one_of(1, 2, description="training stage: 1 (Eq. 10) or 2 (Eq. 11)"),
    beta=in_range(0, None, description="β: retrieval-count coefficient (Eqs. 10–11)"),
    correct_metric=Spec("how correctness is decided", validator=check_correct_metric),
)
def r_a(c: Columns, *, stage: int = 1, beta: float = 0.3, correct_metric: str = "auto") -> np.ndarray:
    """When-to-Search answer reward, β = 0.3, RC = ``n_searches``.

    Stage 1 (Eq. 10): ``1`` if correct else ``−1 + β·RC``.
    Stage 2 (Eq. 11): ``1 − β·RC`` if correct else ``−1``.
    Correctness: the YES/NO judge (``judge_yesno``) when the table has it, else cover-EM
    (``correct_metric="auto"``); or any ``correct_metric`` such as ``"em"`` or ``"f1>=0.5"``.
    """
    ok, rc = correct(c, correct_metric), c["n_searches"]
    if stage == 1:
        return nan_where(ok == 1.0, 1.0, -1.0 + beta * rc, ok, rc)
    return nan_where(ok == 1.0, 1.0 - beta * rc, -1.0, ok, rc)


def when_to_search(**kw: Any) -> Rubric:
    """Learning When to Search (file 004): ``r_sum = r_a + r_s + r_f`` (Eq. 12), β = 0.3, ``stage`` 1 or 2.

    Needs ``format_ok``, ``n_searches``, ``query_concise``, ``query_sim_paper`` /
    ``query_sim_mean`` (for RC > 1) and ``judge_yesno`` or a string metric.
    """
    return Rubric([r_a, r_s, r_f], [1, 1, 1], kw, name="when_to_search", doc=when_to_search.__doc__ or "")


#: Eq. 8's query similarity needs embeddings; correctness may come from a YES/NO judge (Appendix B.4).
PRESET = RewardPreset("when_to_search", when_to_search, FeatureNeeds(encoder=True, judges=("yesno",)))
