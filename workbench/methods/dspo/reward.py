"""DSPO's reward: binary subEM of the final answer, no format term."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.preset import RewardPreset
from workbench.rewards.rubric import Columns, Rubric


def r_subem(c: Columns) -> np.ndarray:
    """DSPO: binary subEM, 1 if a normalized gold alias is a substring of the normalized answer (``cem``)."""
    return c["cem"]


def dspo(**kw: Any) -> Rubric:
    """DSPO (file 002): the reward is binary subEM of the final answer (no format term)."""
    return Rubric([r_subem], [1], kw, name="dspo", doc=dspo.__doc__ or "")


PRESET = RewardPreset("dspo", dspo)
