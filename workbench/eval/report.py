"""Tables computed from a run directory, for notebooks and the dashboard."""

from __future__ import annotations

from typing import Any

import pandas as pd

from workbench.runs import Run

METRIC_COLUMNS = ["em", "cem", "f1", "format_ok"]


def trajectory_table(run: Run) -> pd.DataFrame:
    """One row per trajectory with scalar columns (no token lists): what filters and tables use."""
    df = run.trajectories_frame()
    drop = [c for c in ("prompt_ids", "response_ids", "response_loss_mask", "response_logprobs", "turns_json", "prompt_text") if c in df]
    df = df.drop(columns=drop)
    if "method" not in df:
        df["method"] = df["protocol"]
    meta = df.pop("meta_json").map(_loads) if "meta_json" in df else None
    if meta is not None:
        for key in ("dataset", "hops", "qtype"):
            df[key] = meta.map(lambda m, k=key: m.get(k))
    return df


def method_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean metrics per method (rows) from a trajectory table."""
    cols = [c for c in METRIC_COLUMNS + ["n_searches", "n_policy_tokens", "latency_s"] if c in df]
    out = df.groupby("method")[cols].mean()
    out.insert(0, "n", df.groupby("method").size())
    return out


def overview_metrics(df: pd.DataFrame) -> dict[str, Any]:
    """Flat numbers a notebook writes to ``metrics.json`` (and regressions compare)."""
    metrics: dict[str, Any] = {"n_trajectories": int(len(df))}
    for method, g in df.groupby("method"):
        for c in [c for c in METRIC_COLUMNS if c in g]:
            metrics[f"{method}.{c}"] = float(g[c].mean())
        metrics[f"{method}.searches"] = float(g["n_searches"].mean())
        metrics[f"{method}.search_share"] = float((g["n_searches"] > 0).mean())
    return metrics


def _loads(s: str) -> dict[str, Any]:
    import json

    try:
        return json.loads(s) if s else {}
    except json.JSONDecodeError:
        return {}
