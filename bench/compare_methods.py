"""Per-hop comparison of two methods of one eval run (or of two eval runs), with 95% intervals (the recipe's held-out table).

    .venv/bin/python bench/compare_methods.py RUN_DIR [--a search_r1] [--b search_r1+lora] [--metric cem]
    .venv/bin/python bench/compare_methods.py SFT_EVAL --a search_r1+lora --b-run RL_EVAL --b search_r1+lora

With ``--b-run`` method B is read from another eval run of the same questions (e.g. the SFT adapter's
eval vs the SFT+RL adapter's), paired by question id; a question missing from either run is an error.
Several runs may be given for either side (e.g. the dev eval and the test eval): their questions are pooled.

    .venv/bin/python bench/compare_methods.py SFT_DEV SFT_TEST --a search_r1+lora --b-run RL_DEV RL_TEST

For each hop count and overall: n, the mean of ``--metric`` for A and B with Wilson 95% intervals
(a proportion per question: scipy's ``binomtest(...).proportion_ci(method="wilson")``; a bootstrap interval when a
question's value is not 0 or 1, e.g. the mean over several samples), and the paired difference B − A with a
bootstrap 95% interval over questions (scipy's ``bootstrap``, percentile method, 10,000 resamples, seed 0). Also
answered share, searches per question and format-valid share. Prints a markdown table.

``--reward PRESET`` compares a reward instead of a metric: the preset (``workbench.rewards``, e.g.
``dynasearcher``; ``--reward-params`` as JSON) scores each trajectory from the run's ``features.parquet``, so
held-out trajectories get the reward RL optimized; the means' intervals are then bootstrap intervals (a reward
is not a proportion).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion k/n (scipy)."""
    if n == 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(int(k), n).proportion_ci(confidence_level=0.95, method="wilson")
    return (float(ci.low), float(ci.high))


def mean_interval(v: np.ndarray, reps: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval (percentile) of the mean of ``v`` (for values that are not proportions)."""
    if len(v) == 0:
        return (float("nan"), float("nan"))
    if len(v) == 1:  # every resample is the one value (scipy wants two)
        return (float(v[0]), float(v[0]))
    ci = stats.bootstrap((v,), np.mean, n_resamples=reps, confidence_level=0.95, method="percentile",
                         rng=np.random.default_rng(seed)).confidence_interval
    return (float(ci.low), float(ci.high))


def proportion_interval(v: np.ndarray) -> tuple[float, float]:
    """Wilson's interval when every value is 0 or 1 (a proportion), else the bootstrap interval of the mean."""
    if np.isin(v, (0.0, 1.0)).all():
        return wilson(int(v.sum()), len(v))
    return mean_interval(v)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, reps: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(b − a) over paired questions."""
    return mean_interval(b - a, reps, seed)


def pa_numeric(t: Any) -> bool:
    import pyarrow.types as pt

    return pt.is_floating(t) or pt.is_integer(t) or pt.is_boolean(t)


def per_question(run_dir: str, method: str, metric: str, reward: Any = None) -> pd.DataFrame:
    """One row per question of ``method`` in the eval run ``run_dir``: the metric's mean over samples (``v``),
    hops, searches, answered and format-valid shares. With ``reward`` (a reward preset's ``Rubric``) the value is
    its total, computed from the run's ``features.parquet``."""
    from workbench.runs import open_run

    run = open_run(run_dir)
    cols = ["example_id", "method", "hops", "n_searches", "format_ok", "answer"] + (["id"] if reward is not None else [metric])
    if reward is None:  # a metric name that is not a column: one line naming the numeric columns there are
        import pyarrow.parquet as pq

        schema = pq.read_schema(run.path / "trajectories.parquet")
        numeric = [f.name for f in schema if pa_numeric(f.type) and f.name not in ("sample_idx", "hops")]
        if metric not in schema.names:
            raise SystemExit(f"compare_methods: --metric {metric!r} is not a column of {run_dir}'s trajectories; "
                             f"one of: {', '.join(numeric)}")
    df = pd.read_parquet(run.path / "trajectories.parquet", columns=cols)
    df = df[df["method"] == method]
    if reward is not None and not df.empty:
        feats = pd.read_parquet(run.path / "features.parquet")
        feats = feats[feats["id"].isin(df["id"])].reset_index(drop=True)
        total = pd.Series(np.asarray(reward(feats).total, float), index=feats["id"])
        df = df.assign(**{metric: df["id"].map(total)})
    if df.empty:
        raise SystemExit(f"compare_methods: {run_dir} has no trajectories of method {method!r}")
    df = df.assign(answered=df["answer"].notna())
    return df.groupby("example_id").agg(v=(metric, "mean"), hops=("hops", "first"), s=("n_searches", "mean"),
                                        ans=("answered", "mean"), fmt=("format_ok", "mean"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="+", help="eval run(s) method A is read from (pooled)")
    ap.add_argument("--a", default="search_r1")
    ap.add_argument("--b", default="search_r1+lora")
    ap.add_argument("--metric", default="cem")
    ap.add_argument("--reward", default=None, metavar="PRESET",
                    help="compare this reward preset's total (from features.parquet) instead of --metric")
    ap.add_argument("--reward-params", default="{}", metavar="JSON", help="the preset's parameters")
    ap.add_argument("--b-run", default=None, nargs="+",
                    help="read method B from these eval run(s) instead (pooled; paired with A by question id)")
    args = ap.parse_args()
    import json

    rubric = None
    try:
        params = json.loads(args.reward_params)
        if args.reward:
            from workbench.methods import get_preset

            rubric = get_preset(args.reward, **params)  # a bad name or parameter fails here, before any run is read
    except (ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"compare_methods: --reward {args.reward} --reward-params {args.reward_params}: {e}") from None
    if args.reward:
        args.metric = f"reward {args.reward}"

    def pooled(runs: list[str], method: str) -> pd.DataFrame:
        frames = [per_question(r, method, args.metric, rubric) for r in runs]
        dup = pd.concat([f.index.to_series() for f in frames]).duplicated()
        if dup.any():
            raise SystemExit(f"compare_methods: question {dup.index[dup.to_numpy()][0]!r} is in more than one of "
                             f"{', '.join(runs)}; pool runs of different splits")
        return pd.concat(frames)

    a = pooled(args.run_dir, args.a)
    b = pooled(args.b_run or args.run_dir, args.b)
    missing = a.index.symmetric_difference(b.index)
    if len(missing):
        raise SystemExit(f"compare_methods: {len(missing)} question(s) are in one run only (e.g. {missing[0]!r}); "
                         "compare evals of the same split and limit")
    b = b.reindex(a.index)
    unscored = a.index[a["v"].isna() | b["v"].isna()]
    if len(unscored):  # e.g. a reward term whose feature the eval did not compute (query embeddings)
        print(f"{len(unscored)} question(s) without a value on one side (a feature the reward needs is missing "
              f"there), left out of both: {', '.join(map(str, unscored[:5]))}{' ...' if len(unscored) > 5 else ''}\n")
        a, b = a.drop(unscored), b.drop(unscored)
    print(f"| hops | n | {args.metric} {args.a} [95% CI] | {args.metric} {args.b} [95% CI] | B − A [95% CI] "
          f"| answered A → B | searches A → B | format-valid A → B |")
    print("|---|---:|---|---|---|---|---|---|")
    groups = [(str(h), a.index[a["hops"] == h]) for h in sorted(a["hops"].dropna().unique())] + [("all", a.index)]
    for label, ix in groups:
        va, vb = a.loc[ix, "v"].to_numpy(float), b.loc[ix, "v"].to_numpy(float)
        n = len(ix)
        (la, ha), (lb, hb) = ((mean_interval(va), mean_interval(vb)) if args.reward
                              else (proportion_interval(va), proportion_interval(vb)))
        lo, hi = paired_bootstrap(va, vb)
        print(f"| {label} | {n} | {va.mean():.3f} [{la:.2f}, {ha:.2f}] | {vb.mean():.3f} [{lb:.2f}, {hb:.2f}] "
              f"| {vb.mean() - va.mean():+.3f} [{lo:+.2f}, {hi:+.2f}] | {a.loc[ix, 'ans'].mean():.2f} → "
              f"{b.loc[ix, 'ans'].mean():.2f} | {a.loc[ix, 's'].mean():.2f} → {b.loc[ix, 's'].mean():.2f} "
              f"| {a.loc[ix, 'fmt'].mean():.2f} → {b.loc[ix, 'fmt'].mean():.2f} |")


if __name__ == "__main__":
    main()
