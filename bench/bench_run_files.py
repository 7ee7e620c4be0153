"""Cost of the typed run files and of the dashboard's failure counts.

A features table of N rows (a scripted eval's rows repeated: every registered column, rewards beside them,
a quarter of the rows failed) is written and read back two ways: the typed writer
(``save_features`` / ``load_features``: counts int64, flags bool, NULL = missing) and pandas' own
(``to_parquet`` / ``read_parquet``: counts and flags DOUBLE). Then ``failure_counts`` over R run
directories (the runs table's ``failed`` column) and one run's ``run_failures`` (the drill-down).

    .venv/bin/python bench/bench_run_files.py [--rows 20000] [--runs 50]

Prints one table; record it in bench/RESULTS.md with the date, machine and load (`uptime`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd


def _features(n: int) -> pd.DataFrame:
    from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
    from workbench.core.types import ToolCall
    from workbench.data.example import Example
    from workbench.methods import get_preset
    from workbench.rewards.features import compute_features
    from workbench.rewards.run_rewards import add_rewards

    ex = Example("q", "Who founded Tarnholm Mills?", ["Ada Quist"], hops=1)
    ok = Trajectory("ok", "q", ex.question, "search_r1", [], answer="Ada Quist", finish_reason="answer",
                    turns=[Turn(POLICY, "<answer> Ada Quist </answer>", [])], flags={"format_ok": True})
    bad = Trajectory("bad", "q", ex.question, "search_r1", [], finish_reason="answer",
                     turns=[Turn(OBSERVATION, "", [], tool_calls=[ToolCall("search", {}, error="timed out")])])
    base = compute_features([ok, ok, ok, bad], [ex], encoder=False, cache=False)
    base = add_rewards(base, [get_preset("dynasearcher")] * len(base))
    df = pd.concat([base] * (n // len(base) + 1), ignore_index=True).iloc[:n]
    return df.assign(id=[f"t{i}" for i in range(len(df))])


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    from workbench.dashboard import failures as fq
    from workbench.rewards.features import load_features, save_features

    df = _features(args.rows)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "typed").mkdir()
        (d / "pandas").mkdir()
        rows.append(("write typed (save_features)", _time(lambda: save_features(d / "typed", df)),
                     os.path.getsize(d / "typed" / "features.parquet")))
        rows.append(("write pandas (to_parquet)", _time(lambda: df.to_parquet(d / "pandas" / "features.parquet")),
                     os.path.getsize(d / "pandas" / "features.parquet")))
        rows.append(("read typed (load_features)", _time(lambda: load_features(d / "typed")), None))
        rows.append(("read pandas (read_parquet)", _time(lambda: pd.read_parquet(d / "pandas" / "features.parquet")), None))
        root = d / "runs"
        small = df.iloc[:200]
        for i in range(args.runs):
            r = root / f"run{i:03d}"
            r.mkdir(parents=True)
            (r / "config.json").write_text('{"kind": "eval"}')
            save_features(r, small)
        rows.append((f"failure_counts over {args.runs} runs of {len(small)} rows", _time(lambda: fq.failure_counts(root)), None))
        (root / "run000" / "features.parquet").replace(root / "run000" / "small.parquet")
        save_features(root / "run000", df)
        rows.append((f"run_failures of one run of {len(df)} rows", _time(lambda: fq.run_failures(root, "run000")), None))
    print(f"features table: {len(df)} rows x {len(df.columns)} columns")
    print(f"{'what':<44} {'seconds':>8} {'bytes':>10}")
    for what, secs, size in rows:
        print(f"{what:<44} {secs:>8.3f} {'' if size is None else size:>10}")


if __name__ == "__main__":
    main()
