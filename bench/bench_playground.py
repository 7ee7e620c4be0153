"""Reward-playground update latency: slider change to updated figures and table, in the builder.

Builds ``widgets.playground.reward_playground`` over a features table of ``--rows``
trajectories (groups of ``--group``) and, for each preset, sets one control ``--changes``
times (cycling over a spread of values in the slider's range, as a user dragging it) and
times each assignment ``slider.value = v``. The observers run synchronously, so when the
assignment returns the counterfactual re-score is done, all four FigureWidgets hold their
new bar heights and the rank-change table its new HTML. No browser: what is not measured is
the kernel → browser message and plotly's redraw.

Also reported: ``counterfactual(...)`` alone with the same parameters (the re-scoring share
of an update). The table comes from ``bench/bench_rubric.py``'s ``synthetic_features``
(valid feature values in realistic ranges, ~1% NaN in judge / evidence / similarity
columns), or with ``--run`` from a real run's features table, replicated with per-copy group
ids and perturbed (F1, recall, search count) to ``--rows``.

    .venv/bin/python bench/bench_playground.py                       # 10k rows, 3 presets
    .venv/bin/python bench/bench_playground.py --rows 100000 --presets dspo
    .venv/bin/python bench/bench_playground.py --run runs/<run_id>   # replicate a real run
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rubric import synthetic_features  # noqa: E402

from widgets.playground import playground_features, reward_playground  # noqa: E402
from workbench.methods import PRESETS  # noqa: E402
from workbench.rewards import counterfactual  # noqa: E402

#: The control moved for each preset (a numeric one where the preset has it).
CONTROL = {
    "dynasearcher": "gamma",
    "rsearch_evidence": "gamma_e",
    "when_to_search": "beta",
    "rsearch_dag": "w:F_ans",
    "dspo": "w:r_subem",
}


def replicated_features(run: str, n: int, group: int, rng: np.random.Generator) -> pd.DataFrame:
    """A real run's features copied to ``n`` rows: each copy gets its own group ids, F1 / recall jitter and
    ±1 searches, so rewards differ between copies; groups are regrouped into ``group`` rows."""
    base, _ = playground_features(run)
    reps = -(-n // len(base))
    df = pd.concat([base] * reps, ignore_index=True).iloc[:n].copy()
    df["group_id"] = [f"g{i // group}" for i in range(n)]
    df["id"] = [f"t{i}" for i in range(n)]
    for col, lo, hi in (("f1", 0.0, 1.0), ("recall", 0.0, 1.0)):
        if col in df:
            df[col] = np.clip(df[col] + rng.normal(0, 0.15, n), lo, hi)
    if "n_searches" in df:
        df["n_searches"] = np.maximum(0, df["n_searches"] + rng.integers(-1, 2, n))
    return df


def values_for(widget, k: int) -> list:
    """``k`` values spread over a control's range (options for a dropdown), never two equal in a row."""
    if hasattr(widget, "options") and not hasattr(widget, "min"):
        opts = list(widget.options)
        return [opts[i % len(opts)] for i in range(1, k + 1)]
    lo, hi = widget.min, widget.max
    grid = np.linspace(lo, hi, 7)[1:-1]
    return [float(grid[i % len(grid)]) for i in range(k)]


def bench_preset(box, preset: str, changes: int, df: pd.DataFrame) -> dict:
    box.set(preset=preset)
    control = CONTROL.get(preset) or next(iter(box.sliders))
    widget = box.weight_sliders[control[2:]] if control.startswith("w:") else box.sliders[control]
    times, cf_times = [], []
    for v in values_for(widget, changes):
        before = box.state.updates
        t0 = time.perf_counter()
        widget.value = v
        times.append(time.perf_counter() - t0)
        assert box.state.updates == before + 1 and box.state.error is None, box.state.error
        p, w = dict(box.state.params), dict(box.state.weights)
        t0 = time.perf_counter()
        counterfactual(df, box.state.base.with_weights(**w), p, base=box.state.base)
        cf_times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    return {"preset": preset, "control": control, "changes": len(times), "p50": float(np.percentile(ms, 50)),
            "p95": float(np.percentile(ms, 95)), "max": float(ms.max()),
            "cf_p50": float(np.percentile(np.array(cf_times) * 1e3, 50)),
            "changed": box.state.result.summary["rows_rank_changed"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--rows", type=int, default=10_000, help="trajectories in the features table")
    ap.add_argument("--group", type=int, default=8, help="trajectories per group")
    ap.add_argument("--changes", type=int, default=30, help="slider changes timed per preset")
    ap.add_argument("--presets", nargs="*", default=["dynasearcher", "when_to_search", "rsearch_evidence"],
                    choices=list(PRESETS))
    ap.add_argument("--run", default=None, help="replicate this run's features table instead of sampling one")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(1)  # a shared 2-core machine; the playground itself is numpy
    except ImportError:  # pragma: no cover
        pass
    rng = np.random.default_rng(args.seed)
    df = (replicated_features(args.run, args.rows, args.group, rng) if args.run
          else synthetic_features(args.rows, args.group, rng))
    t0 = time.perf_counter()
    box = reward_playground(df, args.presets[0])
    build_s = time.perf_counter() - t0
    results = [bench_preset(box, p, args.changes, df) for p in args.presets]
    print(f"# {platform.machine()} python {platform.python_version()}, {len(df)} rows in groups of {args.group} "
          f"({'replicated from ' + args.run if args.run else 'synthetic'}); first build {build_s * 1e3:.0f} ms")
    head = (f"{'preset':<18}{'control':<12}{'changes':>8}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}"
            f"{'counterfactual p50 ms':>23}{'rank changes (last)':>21}")
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r['preset']:<18}{r['control']:<12}{r['changes']:>8}{r['p50']:>9.1f}{r['p95']:>9.1f}{r['max']:>9.1f}"
              f"{r['cf_p50']:>23.1f}{r['changed']:>21}")


if __name__ == "__main__":
    main()
