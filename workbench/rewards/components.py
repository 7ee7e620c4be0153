"""Reward building blocks several papers' rubrics share: which answer metric decides correctness, a [0, 1] answer
score from a judge or a string metric, and a component shown under another name.

Each published reward lives in its method's package (``workbench/methods/<paper>/reward.py``) as a
:class:`~workbench.rewards.preset.RewardPreset`; its components are plain vectorized functions of feature columns
(see ``workbench.rewards.features`` for the column contract) whose docstrings name the paper and equation.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from workbench.rewards.rubric import Columns, nan_where

# ----------------------------------------------------------------------------- shared: metric choices

#: Column read for each answer-metric name a preset parameter may name.
METRIC_COLUMNS = {
    "em": "em",
    "cem": "cem",
    "sub_em": "cem",  # DSPO's name for cover-EM: the same column
    "f1": "f1",
    "judge": "judge_yesno",
    "judge_yesno": "judge_yesno",
    "judge_lasj": "judge_lasj",
    "judge_similarity": "judge_similarity",
}
_CORRECT_RE = re.compile(r"^\s*([a-z_0-9]+)\s*(?:>=\s*([0-9]*\.?[0-9]+))?\s*$")


def check_correct_metric(value: object) -> str | None:
    """None if ``value`` names a way to decide correctness (``correct_metric``), else what is allowed."""
    allowed = "'auto', 'judge', 'em', 'cem', 'sub_em', or '<metric>>=<threshold>' e.g. 'f1>=0.5', 'judge_lasj>=0.8'"
    if not isinstance(value, str):
        return f"expected a string: {allowed}"
    if value == "auto":
        return None
    m = _CORRECT_RE.match(value)
    if not m or m.group(1) not in METRIC_COLUMNS:
        return f"allowed: {allowed} (metrics: {', '.join(METRIC_COLUMNS)})"
    if m.group(2) is not None and not 0.0 <= float(m.group(2)) <= 1.0:
        return "thresholds must be in [0, 1]"
    return None


def correct(c: Columns, metric: str, auto_judge: str = "judge_yesno", auto_fallback: str = "cem") -> np.ndarray:
    """Correctness as 1/0/NaN from a metric name (``correct_metric`` of When-to-Search).

    ``"auto"``: the judge column ``auto_judge`` if the table has it, else ``auto_fallback``
    (a NaN judgment stays NaN: a failed judge call is never replaced by a string metric).
    ``"cem"``/``"em"``/``"judge"``: the 0/1 column; ``"f1>=0.5"``: thresholded.
    """
    if metric == "auto":
        metric = auto_judge if c.has(auto_judge) else auto_fallback
    m = _CORRECT_RE.match(metric)
    if not m or m.group(1) not in METRIC_COLUMNS:
        raise ValueError(f"unknown correctness metric {metric!r}")
    x = c[METRIC_COLUMNS[m.group(1)]]
    thr = 1.0 if m.group(2) is None else float(m.group(2))
    return nan_where(x >= thr, 1.0, 0.0, x)


def answer_score(c: Columns, source: str, judge: str = "judge_similarity", fallback: str = "f1") -> np.ndarray:
    """A [0, 1] answer score: ``"judge"``, a string metric, or ``"auto"`` (judge column if present, else ``fallback``)."""
    if source == "auto":
        return c[judge] if c.has(judge) else c[METRIC_COLUMNS[fallback]]
    if source == "judge":
        return c[judge]
    return c[METRIC_COLUMNS[source]]


def renamed(fn: Callable, name: str) -> Callable:
    """The same component under another name in the breakdown."""

    def wrapper(c: Columns) -> np.ndarray:
        return fn(c)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = fn.__doc__
    return wrapper
