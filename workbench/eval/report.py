"""Tables computed from a run directory, for notebooks and the dashboard."""

from __future__ import annotations

from typing import Any

import pandas as pd

from workbench.storage.runs import Run

METRIC_COLUMNS = ["em", "cem", "f1", "format_ok"]


#: Columns :func:`trajectory_table` never reads: token ids, logprobs and the texts of the prompt and turns
#: (~15 kB a trajectory; a view reads a trajectory's text when it shows it).
HEAVY_COLUMNS = ("prompt_ids", "response_ids", "response_loss_mask", "response_logprobs", "turns_json", "prompt_text",
                 "response_text")
#: Keys of ``meta_json`` that become columns (typed columns of newer files win).
META_KEYS = {"dataset": "VARCHAR", "hops": "BIGINT", "qtype": "VARCHAR"}


def trajectory_table(run: Run) -> pd.DataFrame:
    """One row per trajectory with scalar columns (no token lists, no prompt or turn text): what filters and
    tables use. Only those columns are read from ``trajectories.parquet`` (DuckDB), so a big run stays cheap."""
    from workbench.storage.parquet_sql import sql_literal as _quote
    from workbench.storage.runs import TRAJECTORIES
    from workbench.storage.trajectory_store import cursor, file_columns

    path = run.file(TRAJECTORIES)
    have = file_columns(path)
    select = [f'"{c}"' for c in have if c not in HEAVY_COLUMNS and c != "meta_json"]
    if "method" not in have:
        select.append('"protocol" AS "method"')
    for key, sql_type in META_KEYS.items():
        typed = f'CAST("{key}" AS {sql_type})' if key in have else None
        js = f"TRY_CAST(json_extract_string(meta_json, '$.{key}') AS {sql_type})" if "meta_json" in have else None
        parts = [x for x in (typed, js) if x]
        if parts:
            select = [c for c in select if c != f'"{key}"'] + [f'COALESCE({", ".join(parts)}) AS "{key}"']
    df = cursor().execute(f"SELECT {', '.join(select)} FROM read_parquet({_quote(path)})").df()
    if "hops" in df:
        df["hops"] = df["hops"].astype("Int64")
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
        metrics[f"{method}.n_searches"] = float(g["n_searches"].mean())
        metrics[f"{method}.search_share"] = float((g["n_searches"] > 0).mean())
    return metrics


def runs_overview_metrics(runs_dir: str | Any) -> dict[str, Any]:
    """Flat numbers over a runs root for ``metrics.json`` of the results dashboard: counts of runs
    (by kind, with errors), trajectories, methods, datasets, training curves and hop rows, and the
    best F1 of any eval method."""
    from workbench.dashboard import queries as q

    runs = q.runs_table(runs_dir)
    methods = q.method_metrics(runs_dir)
    curves = q.training_curves(runs_dir)
    hops = q.hop_breakdown(runs_dir)
    best = methods["f1"].max() if len(methods) and methods["f1"].notna().any() else None
    return {
        "n_runs": int(len(runs)),
        "n_eval_runs": int((runs["kind"] == "eval").sum()),
        "n_train_runs": int((runs["kind"] == "train").sum()),
        "n_runs_with_errors": int((runs["error"].fillna("") != "").sum()),
        "n_trajectories": int(runs["n_trajectories"].fillna(0).sum()),
        "n_methods": int(methods["method"].nunique()),
        "n_datasets": int(methods["dataset"].nunique()),
        "n_curve_metrics": len(q.curve_metrics(curves)),
        "n_hop_rows": int(len(hops)),
        "best_f1": None if best is None else float(best),
    }


def showcase_trajectory(run: Run, method: str | None = None) -> Any:
    """A trajectory worth reading first: of ``method`` (default: the last method of the run), the
    first that searched and answered, else the first that searched, else its first one."""
    trajs = run.trajectories()
    if not trajs:
        raise ValueError(f"run {run.path} has no trajectories")
    method = method or trajs[-1].meta.get("method", trajs[-1].protocol)
    mine = [t for t in trajs if t.meta.get("method", t.protocol) == method] or trajs
    searched = [t for t in mine if t.n_searches]
    answered = [t for t in searched if t.answer is not None]
    return (answered or searched or mine)[0]
