"""Search-R1's outcome reward (Sec. 3.4): exact match of the extracted answer, no format term."""

from __future__ import annotations

from typing import Any

from workbench.rewards.preset import RewardPreset
from workbench.rewards.rubric import Columns, Rubric


def r_em(c: Columns) -> Any:
    """Search-R1 Sec. 3.4: the outcome reward is exact match of the extracted answer (``em``)."""
    return c["em"]


def search_r1(**kw: Any) -> Rubric:
    """Search-R1 (Jin et al., 2025), Sec. 3.4: ``r = EM(answer, gold)``, no format term."""
    return Rubric([r_em], [1], kw, name="search_r1", doc=search_r1.__doc__ or "")


PRESET = RewardPreset("search_r1", search_r1)
