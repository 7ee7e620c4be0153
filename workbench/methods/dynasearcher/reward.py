"""DynaSearcher's reward (Hao et al., 2025, Eqs. 1–6): ``r_overall = r_acc + r_gain``, recall by title or embedding."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Columns, Rubric, in_range, is_true, nan_where, params

_dyna = dict(
    alpha=in_range(0, None, description="α: scale of the gain reward (Eq. 4)"),
    gamma=in_range(0, 1, low_open=True, description="γ: decay of the hop penalty (Eq. 5)"),
    beta=in_range(-1, 1, description="β: lower bound of the hop penalty (Eq. 5)"),
    n=in_range(0, None, low_open=True, description="n: length multiple switching F1/CEM (Eq. 2)"),
)


@params(n=_dyna["n"])
def r_ans(c: Columns, *, n: float = 3.0) -> np.ndarray:
    """DynaSearcher Eq. 2: ``F1(pred, gold)`` if ``L_pred ≥ n·L_gt`` else ``CEM(pred, gold)``. n = 3."""
    L_pred, L_gt = c["L_pred"], c["L_gt"]
    return nan_where(L_pred >= n * L_gt, c["f1"], c["cem"], L_pred, L_gt)


@params(n=_dyna["n"])
def r_acc(c: Columns, *, n: float = 3.0) -> np.ndarray:
    """DynaSearcher Eq. 1: ``max(0.1, r_ans)`` if the format is correct (``format_ok``) else 0."""
    fmt = c["format_ok"]
    return nan_where(is_true(fmt), np.maximum(0.1, r_ans(c, n=n)), 0.0, fmt)


def r_recall(c: Columns) -> np.ndarray:
    """DynaSearcher Eq. 3: ``TP / (TP + FN)`` over the gold supporting passages (``recall``: title or embedding match)."""
    return c["recall"]


@params(beta=_dyna["beta"], gamma=_dyna["gamma"])
def r_penalty(c: Columns, *, beta: float = -0.2, gamma: float = 0.9) -> np.ndarray:
    """DynaSearcher Eq. 5: ``max(β, 1 − γ^(t − i))``, t = searches made, i = gold hops. β = −0.2, γ = 0.9.

    With β < 0: a bonus (≥ β) when t < i, 0 when t = i, a growing penalty when t > i.
    """
    t, i = c["n_searches"], c["hops"]
    # γ^(t−i) as exp((t−i)·ln γ): same value (exactly 1 at t = i), several times faster than np.power
    return np.maximum(beta, 1.0 - np.exp((t - i) * np.log(gamma)))  # np.maximum propagates NaN


@params(alpha=_dyna["alpha"], beta=_dyna["beta"], gamma=_dyna["gamma"])
def r_gain(c: Columns, *, alpha: float = 0.5, beta: float = -0.2, gamma: float = 0.9) -> np.ndarray:
    """DynaSearcher Eq. 4: ``α · (r_recall − r_penalty)``. α = 0.5."""
    return alpha * (r_recall(c) - r_penalty(c, beta=beta, gamma=gamma))


def r_short(c: Columns) -> np.ndarray:
    """Not in DynaSearcher: ``−max(0, i − t) / i`` for a trajectory that answered, 0 for one that did not: the share of
    the gold hops left unsearched when it answered (i = gold hops, t = searches made). Eq. 5 charges a search past
    the hops and, with β < 0, pays a little for stopping short; this charges stopping short. Weight 0 in the paper's
    rubric (reported only); ``--reward-weights '{"r_short": 0.5}'`` makes a 2-hop answer after one search cost 0.25.
    """
    t, i, answered = c["n_searches"], c["hops"], c["answered"]
    with np.errstate(invalid="ignore", divide="ignore"):
        short = 0.0 - np.maximum(0.0, i - t) / np.where(i > 0, i, np.nan)  # 0.0 - x: no -0.0
    short = np.where(i == 0, 0.0, short)  # no hops to search: nothing left short (NaN hops stay NaN)
    return nan_where(is_true(answered), short, 0.0, answered)


def dynasearcher(**kw: Any) -> Rubric:
    """DynaSearcher (file 000): ``r_overall = r_acc + r_gain`` (Eq. 6).

    Defaults α = 0.5, γ = 0.9, β = −0.2, n = 3 (Sec. 3.2). ``r_ans``, ``r_recall`` and
    ``r_penalty`` are reported with weight 0, and so is ``r_short`` (not the paper's: the hops left unsearched
    when answering; give it a weight to charge stopping short). Needs ``format_ok``, ``f1``, ``cem``,
    ``L_pred``, ``L_gt``, ``recall``, ``n_searches``, ``hops``, ``answered``.
    """
    return Rubric([r_acc, r_gain, r_ans, r_recall, r_penalty, r_short], [1, 1, 0, 0, 0, 0], kw, name="dynasearcher",
                  doc=dynasearcher.__doc__ or "")


#: Eq. 3 counts a gold passage found by title *or* embedding similarity: the feature step computes embeddings.
PRESET = RewardPreset("dynasearcher", dynasearcher, FeatureNeeds(encoder=True))
