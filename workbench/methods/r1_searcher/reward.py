"""R1-Searcher's two-stage outcome reward (Sec. 3.2): stage 1 ``r_retrieve + r_format``, stage 2 ``r_answer + r_format``."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.preset import RewardPreset
from workbench.rewards.rubric import Columns, Rubric, in_range, is_true, nan_where, one_of, params

_stage = one_of(1, 2, description="training stage: 1 (learn to search) or 2 (learn to answer)")


@params(stage=_stage, bonus=in_range(0, None, description="retrieve reward (Sec. 3.2: 0.5)"))
def r_retrieve(c: Columns, *, stage: int = 1, bonus: float = 0.5) -> np.ndarray:
    """R1-Searcher stage 1: ``0.5`` if the model searched (``n_searches ≥ 1``) and the format is right; 0 in stage 2."""
    fmt, n = c["format_ok"], c["n_searches"]
    val = nan_where(is_true(fmt) & (n >= 1), bonus, 0.0, fmt, n)
    return val if stage == 1 else np.where(np.isnan(val), np.nan, 0.0)


@params(stage=_stage, format_bonus=in_range(0, None, description="stage-1 format reward (0.5)"),
        format_penalty=in_range(0, None, description="stage-2 penalty for a wrong format (paper: 2; Llama code: 1)"))
def r_format(c: Columns, *, stage: int = 1, format_bonus: float = 0.5, format_penalty: float = 2.0) -> np.ndarray:
    """R1-Searcher format reward: stage 1 ``+0.5`` if the format is right; stage 2 ``−2`` if it is wrong."""
    fmt = c["format_ok"]
    if stage == 1:
        return nan_where(is_true(fmt), format_bonus, 0.0, fmt)
    return nan_where(is_true(fmt), 0.0, -format_penalty, fmt)


@params(stage=_stage)
def r_answer(c: Columns, *, stage: int = 1) -> np.ndarray:
    """R1-Searcher stage 2: ``F1(answer, gold)`` (0 without an answer); 0 in stage 1."""
    f1 = c["f1"]
    return f1 if stage == 2 else np.where(np.isnan(f1), np.nan, 0.0)


def r1_searcher(**kw: Any) -> Rubric:
    """R1-Searcher (Song et al., 2025), Sec. 3.2: stage 1 ``r_retrieve + r_format``; stage 2 ``r_answer + r_format``.

    ``stage`` (1 or 2) switches the terms; the trainer moves 1 → 2 by ``stage_switch_step`` or
    ``stage_switch_searches``. Needs ``format_ok``, ``n_searches``, ``f1``.
    """
    return Rubric([r_retrieve, r_format, r_answer], [1, 1, 1], kw, name="r1_searcher", doc=r1_searcher.__doc__ or "")


PRESET = RewardPreset("r1_searcher", r1_searcher)
