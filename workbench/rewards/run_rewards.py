"""The rewards of a run's preset beside its features: one table a researcher can query.

An eval run holds several methods, each with its own reward preset (``Method.reward``, with the
method's parameters); :func:`add_rewards` scores every row with its own rubric and adds
``reward_preset``, ``reward`` (the total) and one ``reward_<component>`` column per component
(NaN in rows of another preset; ``workbench.rewards.columns.REWARD_COLUMNS``). A training step's
table carries the same ``reward`` / ``reward_<component>`` columns (``workbench.rl.trainer``).

The features of an eval run are computed without embeddings, judges or an evidence model, so a
preset that reads those scores what it can: its documented fallback (``correct_metric="auto"``
→ cover-EM, ``F_ans`` → F1), or NaN where it has none (a NaN input is never a silent 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from workbench.rewards.rubric import Rubric


def add_rewards(features: pd.DataFrame, rubrics: Sequence[Rubric | None]) -> pd.DataFrame:
    """``features`` with ``reward_preset``, ``reward`` and ``reward_<component>`` of each row's rubric.

    ``rubrics``: one :class:`~workbench.rewards.rubric.Rubric` (or None: no reward) per row, in row order;
    rows sharing a rubric object are scored together (vectorized).

    >>> from workbench.rewards.rubric import Rubric
    >>> subem = Rubric([lambda c: c["cem"]], [1], {}, name="dspo")
    >>> f = pd.DataFrame({"cem": [1.0, 0.0, np.nan]})
    >>> out = add_rewards(f, [subem] * 2 + [None])
    >>> out["reward"].tolist()[:2], out["reward_preset"].tolist()
    ([1.0, 0.0], ['dspo', 'dspo', None])
    """
    if len(rubrics) != len(features):
        raise ValueError(f"add_rewards: {len(rubrics)} rubrics for {len(features)} feature rows")
    out = features.copy()
    n = len(out)
    preset: list[str | None] = [None] * n
    total = np.full(n, np.nan)
    parts: dict[str, np.ndarray] = {}
    groups: dict[int, tuple[Rubric, list[int]]] = {}
    for i, r in enumerate(rubrics):
        if r is not None:
            groups.setdefault(id(r), (r, []))[1].append(i)
    for rubric, rows in groups.values():
        table = rubric(features.iloc[rows].reset_index(drop=True))
        for i in rows:
            preset[i] = rubric.name
        total[rows] = table.total
        for comp in table.components:
            parts.setdefault(comp, np.full(n, np.nan))[rows] = table.values[comp]
    out["reward_preset"] = pd.Series(preset, index=out.index, dtype=object)
    out["reward"] = total
    for comp, values in parts.items():
        out[f"reward_{comp}"] = values
    return out
