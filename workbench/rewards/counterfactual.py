"""Counterfactual re-scoring for the reward playground: what changes if the reward parameters change?

Given a features table (or a run) and new parameters, :func:`counterfactual` re-scores
every trajectory under the old and the new rubric and reports, vectorized over all rows:

- the rewards (old, new);
- the group advantages, std-normalized ``(r − mean_g) / (std_g + ε)`` (GRPO; DSPO Eq. 10)
  and mean-only ``r − mean_g`` (Dr. GRPO; Shi & Shen Eq. 4), with the same conventions as
  ``workbench.rl.advantages`` (population std by default; rewards must not import the
  trainer, so this is a NaN-aware numpy twin, tested against it);
- which groups the dynamic filter keeps (reward std > 0, i.e. not all equal; DSPO Eq. 9);
- how the ranking inside each group changed (old rank, new rank, changed flag; rank 1 =
  best, ties share the lowest rank).

A group with a NaN reward has NaN statistics and advantages and is not kept: a missing
reward is never averaged away.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from workbench.rewards.rubric import RewardTable, Rubric

if TYPE_CHECKING:
    from workbench.storage.runs import Run


@dataclass
class GroupStats:
    """Group statistics of one reward vector: per row (``mean``, ``std``, advantages, ``keep``,
    ``rank``) and per group (``group_mean``, ``group_std``, ``group_keep``, in order of first appearance)."""

    mean: np.ndarray
    std: np.ndarray
    adv_std: np.ndarray
    """(r − mean_g) / (std_g + eps)"""
    adv_mean: np.ndarray
    """r − mean_g"""
    keep: np.ndarray
    """The row's group passes the dynamic filter (reward std > 0, no NaN)."""
    rank: np.ndarray
    """Rank inside the group, 1 = highest reward (ties: lowest rank), NaN for NaN rewards."""
    group_mean: np.ndarray
    group_std: np.ndarray
    group_keep: np.ndarray


def _codes(groups: Any) -> tuple[np.ndarray, np.ndarray]:
    codes, uniq = pd.factorize(pd.Series(groups) if not isinstance(groups, pd.Series) else groups, sort=False)
    if (codes < 0).any():
        raise ValueError("group ids must not be missing (None/NaN)")
    return codes, np.asarray(uniq)


def _group_stats(r: np.ndarray, codes: np.ndarray, G: int, eps: float, ddof: int) -> GroupStats:
    n_rows = len(r)
    nan = np.isnan(r)
    n = np.bincount(codes, minlength=G).astype(np.float64)
    missing = np.bincount(codes, weights=nan.astype(np.float64), minlength=G) > 0
    rf = np.where(nan, 0.0, r)
    mean = np.bincount(codes, weights=rf, minlength=G) / np.maximum(n, 1)
    dev = np.where(nan, 0.0, rf - mean[codes])
    denom = n - ddof
    std = np.sqrt(np.divide(np.bincount(codes, weights=dev * dev, minlength=G), denom, out=np.zeros(G), where=denom > 0))
    # sort by group, then reward descending (NaN last): ranks, and max/min per group
    key = np.where(nan, -np.inf, r)
    # one sort by (group, dense value rank) as a single int64 key: much faster than np.lexsort
    by_value = np.argsort(-key)
    sorted_key = key[by_value]
    dense = np.empty(n_rows, dtype=np.int64)
    if n_rows:
        dense[by_value] = np.cumsum(np.r_[False, sorted_key[1:] != sorted_key[:-1]])
    order = np.argsort(codes.astype(np.int64) * (n_rows + 1) + dense)
    sc, sv = codes[order], key[order]
    pos = np.arange(n_rows)
    new_group = np.ones(n_rows, dtype=bool)
    new_group[1:] = sc[1:] != sc[:-1]
    new_value = new_group.copy()
    new_value[1:] |= sv[1:] != sv[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, pos, 0))
    value_start = np.maximum.accumulate(np.where(new_value, pos, 0))
    rank = np.empty(n_rows)
    rank[order] = value_start - group_start + 1.0
    rank[nan] = np.nan
    hi = np.full(G, -np.inf)
    lo = np.full(G, np.inf)
    if n_rows:
        starts = np.flatnonzero(new_group)
        ends = np.r_[starts[1:], n_rows] - 1
        hi[sc[starts]], lo[sc[starts]] = sv[starts], sv[ends]
    same = ~(hi > lo)  # all-equal groups: mean and std exact (no float residue), advantages exactly 0
    mean = np.where(same, hi, mean)
    std = np.where(same, 0.0, std)
    mean = np.where(missing, np.nan, mean)
    std = np.where(missing, np.nan, std)
    keep = (std > 0) & ~missing
    adv_mean = r - mean[codes]
    row_std = std[codes]
    adv_std = np.divide(adv_mean, row_std + eps, out=np.where(np.isnan(adv_mean), np.nan, 0.0), where=row_std > 0)
    return GroupStats(mean[codes], row_std, adv_std, adv_mean, keep[codes], rank, mean, std, keep)


def group_stats(rewards: np.ndarray, groups: Sequence[Hashable] | np.ndarray | pd.Series, eps: float = 1e-6,
                ddof: int = 0) -> GroupStats:
    """Group means, stds, advantages, filter and ranks, vectorized (numpy), NaN-aware.

    ``ddof=0``: population std, as the workbench trainer (``workbench.rl.advantages``);
    ``ddof=1``: the unbiased std of TRL / verl (``torch.std``). A single-member group has
    std 0 (advantage 0, not kept).

    >>> s = group_stats(np.array([1.0, 0.0, 0.5, 0.5]), ["a", "a", "b", "b"])
    >>> s.adv_mean.tolist(), s.keep.tolist(), s.rank.tolist()
    ([0.5, -0.5, 0.0, 0.0], [True, True, False, False], [1.0, 2.0, 1.0, 1.0])
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    codes, uniq = _codes(groups)
    return _group_stats(np.asarray(rewards, dtype=np.float64), codes, len(uniq), eps, ddof)


@dataclass
class Counterfactual:
    """Old vs new rewards, advantages, filter decisions and in-group rankings.

    ``rows``: one row per trajectory; ``groups``: one per group; ``summary``: counts.
    """

    rows: pd.DataFrame
    groups: pd.DataFrame
    old: RewardTable
    new: RewardTable
    summary: dict[str, Any] = field(default_factory=dict)


def _features(features: pd.DataFrame | Run | str | os.PathLike) -> pd.DataFrame:
    if isinstance(features, pd.DataFrame):
        return features
    from workbench.rewards.features import load_features

    return load_features(features)


def rescore(features: pd.DataFrame | Run | str | os.PathLike, rubric: Rubric, **params: Any) -> RewardTable:
    """Rewards of a features table (or a run's stored table) under a rubric with new parameters."""
    return _rubric(rubric, params)(_features(features))


def _rubric(rubric: Rubric, params: dict[str, Any] | None = None) -> Rubric:
    if not isinstance(rubric, Rubric):
        raise TypeError(f"expected a Rubric, got {type(rubric).__name__} {rubric!r}: build one from a preset's name "
                        "with workbench.methods.get_preset(name)")
    return rubric.with_params(**params) if params else rubric


def counterfactual(
    features: pd.DataFrame | Run | str | os.PathLike, rubric: Rubric, params: dict[str, Any] | None = None, *,
    base: Rubric | None = None, eps: float = 1e-6, ddof: int = 0,
) -> Counterfactual:
    """Compare rewards under ``base`` (default: ``rubric`` as given) and ``rubric.with_params(**params)``.

    Args:
        features: a features table, or a run / run directory with ``features.parquet``.
        rubric: a Rubric (the new rewards use it with ``params`` applied; a preset's: ``workbench.methods.get_preset``).
        params: the new parameter values.
        base: the rubric for the old rewards (default: ``rubric`` without ``params``).
        eps: ε of the std-normalized advantage.
        ddof: 0 (population group std, as the workbench trainer) or 1 (unbiased, as TRL / verl).
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    df = _features(features)
    if "group_id" not in df.columns:
        raise ValueError("counterfactual needs a 'group_id' column in the features table")
    old_rubric = _rubric(base if base is not None else rubric)
    new_rubric = _rubric(rubric, params)
    old, new = old_rubric(df), new_rubric(df)
    codes, uniq = _codes(df["group_id"])
    G = len(uniq)
    so, sn = _group_stats(old.total, codes, G, eps, ddof), _group_stats(new.total, codes, G, eps, ddof)
    changed = ~((so.rank == sn.rank) | (np.isnan(so.rank) & np.isnan(sn.rank)))
    keys = [k for k in ("id", "group_id", "sample_idx") if k in df.columns]
    numeric = pd.DataFrame({
        "reward_old": old.total, "reward_new": new.total, "delta": new.total - old.total,
        "adv_std_old": so.adv_std, "adv_std_new": sn.adv_std,
        "adv_mean_old": so.adv_mean, "adv_mean_new": sn.adv_mean,
        "keep_old": so.keep, "keep_new": sn.keep,
        "rank_old": so.rank, "rank_new": sn.rank, "rank_changed": changed,
    }, index=df.index)
    rows = pd.concat([df[keys], numeric], axis=1)
    group_changed = np.bincount(codes, weights=changed.astype(np.float64), minlength=G) > 0
    gdf = pd.DataFrame({
        "group_id": uniq, "n": np.bincount(codes, minlength=G),
        "mean_old": so.group_mean, "mean_new": sn.group_mean, "std_old": so.group_std, "std_new": sn.group_std,
        "keep_old": so.group_keep, "keep_new": sn.group_keep, "keep_changed": so.group_keep != sn.group_keep,
        "rank_changed": group_changed,
    })
    summary = {
        "rows": len(rows), "groups": G,
        "kept_old": int(so.group_keep.sum()), "kept_new": int(sn.group_keep.sum()),
        "groups_keep_changed": int((so.group_keep != sn.group_keep).sum()),
        "rows_rank_changed": int(changed.sum()), "groups_rank_changed": int(group_changed.sum()),
        "mean_old": _nanmean(old.total), "mean_new": _nanmean(new.total),
        "missing_old": int(np.isnan(old.total).sum()), "missing_new": int(np.isnan(new.total).sum()),
        "params_old": dict(old.params), "params_new": dict(new.params),
    }
    return Counterfactual(rows, gdf, old, new, summary)


def _nanmean(x: np.ndarray) -> float:
    ok = x[~np.isnan(x)]
    return float(ok.mean()) if ok.size else float("nan")
