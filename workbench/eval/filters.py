"""Selecting trajectories from a table (one row per trajectory, e.g. the trajectory inspector's):
by run, dataset, method, protocol, correctness, reward, search count, hops, failures and text."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

#: Correctness metrics the filter understands: cover-EM (0/1) or F1 against a threshold.
CORRECT_METRICS = ("cem", "f1")
#: What can fail in a trajectory (the ``failed`` column: these names, comma-separated; "" = nothing failed).
FAILURE_KINDS = ("backend", "tool", "judge", "evidence")


def failure_kinds(backend_error: float = 0, failed_tool: float = 0, failed_judge: float = 0,
                  failed_evidence: float = 0) -> str:
    """The ``failed`` value of a row from the failure counts of its features.

    >>> failure_kinds(failed_tool=2, failed_judge=1), failure_kinds()
    ('tool,judge', '')
    """
    counts = (backend_error, failed_tool, failed_judge, failed_evidence)
    return ",".join(k for k, n in zip(FAILURE_KINDS, counts) if n == n and n and n > 0)


def failed_mask(frame: pd.DataFrame, failed: bool | str | Collection[str]) -> pd.Series:
    """Rows with a failure (``True``), without one (``False``), or with one of the given kinds."""
    kinds = frame["failed"].fillna("").astype(str) if "failed" in frame else pd.Series("", index=frame.index)
    if failed is True or failed is False:
        return kinds.ne("") if failed else kinds.eq("")
    want = _pick(failed) or []
    unknown = sorted(set(want) - set(FAILURE_KINDS))
    if unknown:
        raise ValueError(f"failure kind(s) {unknown}; valid: {', '.join(FAILURE_KINDS)} (or True / False)")
    return kinds.map(lambda v: bool(set(v.split(",")) & set(want)))


def correct_mask(frame: pd.DataFrame, metric: str = "cem", threshold: float = 0.5) -> pd.Series:
    """Which rows count as correct: cover-EM = 1 (``cem``) or F1 >= ``threshold`` (``f1``); NaN where unknown."""
    if metric not in CORRECT_METRICS:
        raise ValueError(f"correct metric {metric!r}; valid: {', '.join(CORRECT_METRICS)}")
    v = pd.to_numeric(frame[metric], errors="coerce")
    cut = 0.5 if metric == "cem" else threshold  # cover-EM is 0 or 1
    return (v >= cut).astype(float).where(v.notna())


def _pick(values: Any) -> list[Any] | None:
    if values is None:
        return None
    if isinstance(values, (str, int, float)) or not isinstance(values, Collection):
        return [values]
    return list(values)


def filter_trajectories(
    frame: pd.DataFrame,
    *,
    run: str | Collection[str] | None = None,
    dataset: str | Collection[str] | None = None,
    method: str | Collection[str] | None = None,
    protocol: str | Collection[str] | None = None,
    correct: bool | None = None,
    correct_metric: str = "cem",
    f1_threshold: float = 0.5,
    reward: tuple[float, float] | None = None,
    searches: tuple[int, int] | None = None,
    hops: int | Collection[int] | None = None,
    failed: bool | str | Collection[str] | None = None,
    text: str = "",
    corpus: pd.Series | None = None,
) -> list[int]:
    """Positions of the rows of ``frame`` that pass every given filter (None / "" = no filter).

    ``run``, ``dataset``, ``method``, ``protocol``, ``hops``: a value or a collection of allowed
    values. ``correct``: True (correct only) or False (wrong only) by :func:`correct_mask`; rows
    without a gold answer pass neither. ``reward`` and ``searches``: inclusive ``(low, high)``
    ranges (a NaN reward is outside every range). ``failed``: True (something failed: the policy
    backend, a tool, a judge or the evidence model), False (nothing failed), or a kind of
    :data:`FAILURE_KINDS` (or several) from the ``failed`` column. ``text``: case-insensitive substring of the
    question, any turn or the answer; ``corpus`` is that text per row (lower-cased), else the
    question and answer columns are searched.

    >>> df = pd.DataFrame({"run": ["a", "a", "b"], "method": ["direct", "search_r1", "search_r1"],
    ...                    "cem": [1.0, 0.0, 1.0], "n_searches": [0, 2, 1], "question": ["q1", "q1", "q2"],
    ...                    "answer": ["Ostrel", "x", "y"]})
    >>> filter_trajectories(df, method="search_r1", correct=True)
    [2]
    >>> filter_trajectories(df, searches=(1, 5), text="OSTREL")
    []
    """
    keep = pd.Series(True, index=frame.index)
    for col, allowed in (("run", run), ("dataset", dataset), ("method", method), ("protocol", protocol)):
        allowed = _pick(allowed)
        if allowed is not None:
            keep &= frame[col].isin(allowed)
    hops = _pick(hops)
    if hops is not None:
        keep &= pd.to_numeric(frame["hops"], errors="coerce").isin([float(h) for h in hops])
    if correct is not None:
        ok = correct_mask(frame, correct_metric, f1_threshold)
        keep &= ok.eq(1.0 if correct else 0.0)
    if reward is not None:
        r = pd.to_numeric(frame["reward"], errors="coerce")
        keep &= r.between(reward[0], reward[1])
    if searches is not None:
        keep &= frame["n_searches"].between(searches[0], searches[1])
    if failed is not None:
        keep &= failed_mask(frame, failed)
    if text:
        if corpus is None:
            corpus = (frame["question"].astype(str) + "\n" + frame["answer"].astype(str)).str.lower()
        keep &= corpus.reindex(frame.index).str.contains(text.lower(), regex=False)
    return np.flatnonzero(keep.to_numpy()).tolist()


def describe_filters(run: Any = None, dataset: Any = None, method: Any = None, protocol: Any = None,
                     hops: Any = None, correct: bool | None = None, correct_metric: str = "cem",
                     f1_threshold: float = 0.5, reward: tuple[float, float] | None = None,
                     searches: tuple[int, int] | None = None, failed: Any = None, text: str = "") -> list[str]:
    """The active filters of :func:`filter_trajectories` as short phrases ([] when none is set).

    >>> describe_filters(correct=False, searches=(1, 3), method="search_r1")
    ['method search_r1', 'answer wrong (cover-EM)', 'searches 1–3']
    """
    out = [f"{name} {v if isinstance(v, str) or not isinstance(v, Collection) else ', '.join(map(str, v))}"
           for name, v in (("run", run), ("dataset", dataset), ("method", method), ("protocol", protocol),
                           ("hops", hops)) if v is not None]
    if correct is not None:
        rule = "cover-EM" if correct_metric == "cem" else f"F1 ≥ {f1_threshold:g}"
        out.append(f"answer {'right' if correct else 'wrong'} ({rule})")
    if reward is not None:
        out.append(f"reward {reward[0]:.3g}–{reward[1]:.3g}")
    if searches is not None:
        out.append(f"searches {searches[0]}–{searches[1]}")
    if failed is not None:
        out.append("something failed" if failed is True else "nothing failed" if failed is False else
                   f"{failed if isinstance(failed, str) else ', '.join(failed)} failed")
    if text:
        out.append(f"text “{text}”")
    return out


def same_question(frame: pd.DataFrame, i: int, source: str) -> int | None:
    """The row of ``source`` (a ``run · method`` label) on row ``i``'s question (same sample index first)."""
    q, s = frame.at[i, "question"], frame.at[i, "sample_idx"]
    hits = frame.index[(frame["source"] == source) & (frame["question"] == q)]
    if not len(hits):
        return None
    same = [j for j in hits if frame.at[j, "sample_idx"] == s]
    return int(same[0] if same else hits[0])
