"""What each answer scored and what it cost: one row per trajectory (answer metrics against the gold answers,
answer checks, the number of searches, tokens, seconds, format flags) and their means per method and hop count.

The eval tables (``workbench eval``'s ``metrics.json``), the expert-trace yield and SFT's held-out breakdown read
these rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.data.example import Example

#: Means computed per method and per hop count.
MEAN_KEYS = ("em", "cem", "cem_strict", "f1", "multi_option", "demo_leak", "n_searches", "tokens", "seconds",
             "tool_seconds", "valid_actions", "answered", "format_ok")

#: Outcome columns of a row: NaN for a trajectory whose backend or a tool failed (it is not scored as an answer).
OUTCOME_KEYS = ("em", "cem", "cem_strict", "f1", "multi_option", "demo_leak", "valid_actions", "answered", "format_ok")


def score(trajs: list[Trajectory], examples: list[Example], features: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One row per trajectory: its answer's outcome, read from the features table (``features``, one row per
    trajectory by ``id``; computed here without embeddings when not given), and its costs from the trajectory.

    The answer metrics (``em``, ``cem``, ``f1``), the answer checks (``multi_option``, ``demo_leak``), ``answered``
    and ``format_ok`` are the features' own: one computation, read by the eval tables and the rewards alike. A question
    without gold answers has NaN ``em``/``cem``/``f1`` (``has_gold`` 0). A trajectory whose policy backend or a tool
    failed has NaN in every ``OUTCOME_KEYS`` column and says what failed in ``failure``; its costs (searches, tokens,
    seconds) are kept.
    """
    if features is None:
        from workbench.rewards.features import compute_features

        features = compute_features(trajs, examples, encoder=False, cache=False)
    by_id = {e.id: e for e in examples}
    feats = features.set_index("id")
    rows = []
    for t in trajs:
        ex = by_id.get(t.example_id)
        f = feats.loc[t.id]
        n_actions = len(t.actions)
        failure = f["failure"] if isinstance(f["failure"], str) and f["failure"] else None
        cem, multi = float(f["cem"]), float(f["multi_option"])
        row = {
            "id": t.id,
            "example_id": t.example_id,
            "protocol": t.protocol,
            "hops": ex.hops if ex else None,
            "qtype": ex.qtype if ex else None,
            "has_gold": float(f["has_gold"]),
            "em": float(f["em"]), "cem": cem, "f1": float(f["f1"]),
            "cem_strict": cem * (1.0 - multi),  # NaN without gold, like cem
            "multi_option": multi,
            "demo_leak": _float(f["demo_leak"]),
            "n_searches": t.n_searches,
            "tokens": t.n_policy_tokens,
            "seconds": t.latency_s,
            "tool_seconds": t.tool_latency_s,
            "valid_actions": (n_actions - t.n_invalid) / n_actions if n_actions else 0.0,
            "answered": _float(f["answered"]),
            "format_ok": _float(f["format_ok"]),
            "finish_reason": t.finish_reason,
            "failure": failure,
        }
        if failure:
            row.update(dict.fromkeys(OUTCOME_KEYS, float("nan")))
        rows.append(row)
    return rows


def _float(v: Any) -> float:
    """A flag or number as float (a missing one as NaN)."""
    return float("nan") if v is None or pd.isna(v) else float(v)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means of the metric columns, overall and per hop count (``by_hops``, keys are strings).

    A mean is over the rows where the value is known: questions without gold answers
    (``n_without_gold``) are left out of ``em``/``cem``/``f1``, failed trajectories
    (``n_failed``: backend or tool failure) out of every outcome mean. ``n`` counts all rows.
    """

    def means(rs: list[dict[str, Any]]) -> dict[str, float]:
        out: dict[str, float] = {
            "n": len(rs),
            "n_without_gold": sum(1 for r in rs if not r.get("has_gold", 1.0)),
            "n_failed": sum(1 for r in rs if r.get("failure")),
        }
        for k in MEAN_KEYS:
            vals = np.array([np.nan if r[k] is None else r[k] for r in rs], dtype=np.float64)
            vals = vals[~np.isnan(vals)]
            out[k] = float(vals.mean()) if vals.size else float("nan")
        return out

    summary = means(rows)
    hops = sorted({r["hops"] for r in rows if r.get("hops") is not None})
    summary["by_hops"] = {str(h): means([r for r in rows if r.get("hops") == h]) for h in hops}
    return summary
