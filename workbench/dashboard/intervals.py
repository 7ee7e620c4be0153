"""The 95% intervals the dashboard draws: one per bar, per point of a per-hop line, per pair of sources.

Every interval is over questions: a question's value is its mean over the samples drawn of it (as
``workbench.eval.paired.run_scores`` reads a run), so three samples of one question count once. The intervals are
``workbench.eval.paired``'s: Wilson's for a share (:data:`SHARES`) whose every value is 0 or 1, else the percentile
bootstrap of the mean (10,000 resamples, seed 0, so a page shows the same numbers each time it is built); the
difference of two sources on their shared questions is the paired bootstrap of :func:`~workbench.eval.paired.paired_summary`.
So a bar, a question-by-question comparison and notebook 05's table of the same run and method show one number.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pandas as pd

from workbench.eval.paired import PROPORTION_METRICS, mean_interval, paired_summary, proportion_interval

#: Metrics that are shares of questions (right answers, valid formats, answers given): Wilson's interval.
SHARES = (*PROPORTION_METRICS, "format_ok", "answered")


@functools.lru_cache(maxsize=16384)
def _interval(share: bool, values: bytes) -> tuple[float, float]:
    v = np.frombuffer(values)
    return proportion_interval(v) if share else mean_interval(v)


def interval(values: Sequence[float] | np.ndarray | pd.Series, metric: str) -> tuple[float, float]:
    """The 95% interval of the mean of ``values`` (one per question; missing ones left out) of ``metric``; kept by
    value, so the next page built over the same runs does not bootstrap again.

    >>> [round(x, 3) for x in interval([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0], "cem")]  # Wilson's
    [0.237, 0.763]
    """
    v = np.asarray(values, float)
    return _interval(metric in SHARES, np.ascontiguousarray(v[~np.isnan(v)]).tobytes())


def metric_intervals(questions: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` in a frame of one row per question (``queries.question_metrics``), for each metric ``m``:
    ``m_n`` (the questions with a value) and its 95% interval ``m_lo``, ``m_hi``."""
    by = list(by)
    cols = [*by, *(f"{m}_{x}" for m in metrics for x in ("n", "lo", "hi"))]
    rows = []
    for key, g in questions.groupby(by, sort=False, dropna=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for m in metrics:
            row[f"{m}_n"] = int(g[m].notna().sum())
            row[f"{m}_lo"], row[f"{m}_hi"] = interval(g[m], m)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def pair_difference(pairs: pd.DataFrame, ids: Sequence[str] | None = None) -> dict[str, float] | None:
    """Two sources on their shared questions (``workbench.eval.compare.pair_table``): each one's mean score with its
    95% interval and the paired difference right − left with its bootstrap interval
    (:func:`~workbench.eval.paired.paired_summary`: ``a`` is the left source, ``b`` the right), over the questions
    both have a score for; None when there is none. A question's score is its mean over a source's samples, and the
    questions are taken in the order of their ``ids`` (example ids, one per pair), as ``workbench.eval.paired`` reads
    a run: a bootstrap resamples positions, so only the same order gives a comparison of the same two runs the same
    interval."""
    left, right = pairs["left_score"].to_numpy(float), pairs["right_score"].to_numpy(float)
    if ids is not None:
        order = np.argsort(np.asarray(ids, dtype=object).astype(str), kind="stable")
        left, right = left[order], right[order]
    both = ~(np.isnan(left) | np.isnan(right))
    if not both.any():
        return None
    return paired_summary(left[both], right[both], proportion=pairs.attrs.get("metric", "cem") in PROPORTION_METRICS)
