"""Per-hop comparison of two methods of one eval run (or of two eval runs), with 95% intervals (the recipe's held-out table).

    .venv/bin/python bench/compare_methods.py RUN_DIR [--a search_r1] [--b search_r1+lora] [--metric cem]
    .venv/bin/python bench/compare_methods.py SFT_EVAL --a search_r1+lora --b-run RL_EVAL --b search_r1+lora

With ``--b-run`` method B is read from another eval run of the same questions (e.g. the SFT adapter's
eval vs the SFT+RL adapter's), paired by question id; a question missing from either run is an error.
Several runs may be given for either side (e.g. the dev eval and the test eval): their questions are pooled.

    .venv/bin/python bench/compare_methods.py SFT_DEV SFT_TEST --a search_r1+lora --b-run RL_DEV RL_TEST

With ``--b-seed-runs`` (repeated, one per training seed) B is several seeds of one recipe, each question's value
their mean, as ``bench/ablate.py`` pairs its arms: the start an RL stage left from against that stage's seeds.

    .venv/bin/python bench/compare_methods.py SFT_DEV SFT_TEST --a m+lora --b m+lora \
        --b-seed-runs RL0_DEV RL0_TEST --b-seed-runs RL1_DEV RL1_TEST

With ``--a-seed-runs`` as well (instead of A's positional runs) both sides are seeds, each question's value on a
side its mean over that side's seeds: two levers, or a lever against its control, each trained with its own seeds.

    .venv/bin/python bench/compare_methods.py --a m+lora --b m+lora --a-seed-runs C0_DEV C0_TEST \
        --a-seed-runs C1_DEV C1_TEST --b-seed-runs L0_DEV L0_TEST --b-seed-runs L1_DEV L1_TEST

``--metric`` is a column of the runs' trajectories (``cem``, ``f1``, ``n_searches``...), of their
``features.parquet`` (``recall`` of the gold passages...), or ``redundant`` (searched more often than the question has
hops) / ``extra_searches``, or ``world_leak`` (on real questions: the answer names an entity of the synthetic world
that the question does not).

For each hop count and overall: n, the mean of ``--metric`` for A and B with Wilson 95% intervals
(a proportion per question: scipy's ``binomtest(...).proportion_ci(method="wilson")``; a bootstrap interval when a
question's value is not 0 or 1, e.g. the mean over several samples), and the paired difference B − A with a
bootstrap 95% interval over questions (scipy's ``bootstrap``, percentile method, 10,000 resamples, seed 0). Also
answered share, searches per question and format-valid share. Prints a markdown table.

``--reward PRESET`` compares a reward instead of a metric: the preset (``workbench.rewards``, e.g.
``dynasearcher``; ``--reward-params`` as JSON) scores each trajectory from the run's ``features.parquet``, so
held-out trajectories get the reward RL optimized; the means' intervals are then bootstrap intervals (a reward
is not a proportion).

``--save PATH`` also writes the comparison as ``comparison.json`` (``workbench.eval.paired.Comparison``: both sides'
per-question values, the re-run command, each run's date, seed and adapter), which notebook 05 shows with the
intervals; ``bench/ablate.py`` writes the same for the seeds' ablations.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from workbench.eval.paired import (
    CompareError,
    Comparison,
    Side,
    align,
    markdown,
    mean_interval,
    paired_interval,
    paired_rows,
    proportion_interval,
    side_scores,
    wilson,
)

__all__ = ["main", "mean_interval", "paired_interval", "proportion_interval", "wilson"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="*", help="eval run(s) method A is read from (pooled)")
    ap.add_argument("--a", default="search_r1")
    ap.add_argument("--b", default="search_r1+lora")
    ap.add_argument("--a-label", default=None, help="what side A is called in the table and the saved comparison "
                    "(default: --a; name the adapter when both sides are one method)")
    ap.add_argument("--b-label", default=None, help="the same for side B (default: --b)")
    ap.add_argument("--metric", default="cem")
    ap.add_argument("--reward", default=None, metavar="PRESET",
                    help="compare this reward preset's total (from features.parquet) instead of --metric")
    ap.add_argument("--reward-params", default="{}", metavar="JSON", help="the preset's parameters")
    ap.add_argument("--b-run", default=None, nargs="+",
                    help="read method B from these eval run(s) instead (pooled; paired with A by question id)")
    ap.add_argument("--b-seed-runs", default=None, nargs="+", action="append", metavar="RUN",
                    help="one training seed's eval run(s) of method B (pooled), instead of --b-run; repeat the flag "
                         "once per seed: B is then each question's mean over the seeds, as bench/ablate.py pairs arms")
    ap.add_argument("--a-seed-runs", default=None, nargs="+", action="append", metavar="RUN",
                    help="one training seed's eval run(s) of method A (pooled), instead of the positional runs; "
                         "repeat the flag once per seed: A is then each question's mean over its seeds")
    ap.add_argument("--save", default=None, metavar="PATH",
                    help="also write the comparison as JSON (a folder gets comparison.json) for notebook 05")
    ap.add_argument("--name", default=None, help="the saved comparison's name (default: B vs A)")
    ap.add_argument("--question", default="", help="what the saved comparison asks, shown beside it")
    ap.add_argument("--runs-command", default="", metavar="TEXT",
                    help="the command that made the eval runs, stored with the saved comparison")
    args = ap.parse_args()
    if args.save and args.reward:
        raise SystemExit("compare_methods: --save stores a metric comparison; drop --reward or --save")
    if args.b_run and args.b_seed_runs:
        raise SystemExit("compare_methods: --b-run and --b-seed-runs both name B's runs; give one of them")
    if bool(args.run_dir) == bool(args.a_seed_runs):
        raise SystemExit("compare_methods: name A's eval runs once: as positional runs (one seed) or with "
                         "--a-seed-runs (repeated, one per seed)")
    if args.a_seed_runs and not (args.b_run or args.b_seed_runs):
        raise SystemExit("compare_methods: with --a-seed-runs, name B's runs with --b-run or --b-seed-runs")
    a_seeds = args.a_seed_runs or [args.run_dir]
    b_seeds = args.b_seed_runs or [args.b_run or args.run_dir]

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

    try:
        a, a_per_seed = side_scores(a_seeds, args.a, args.metric, rubric)  # one seed: its runs pooled
        b, per_seed = side_scores(b_seeds, args.b, args.metric, rubric)  # the mean over seeds, as ablate.py's arms
        a, b, unscored = align(a, b)  # nothing is unscored in a metric comparison, the only kind --save stores
    except CompareError as e:
        raise SystemExit(f"compare_methods: {e}") from None
    if unscored:  # e.g. a reward term whose feature the eval did not compute (query embeddings)
        print(f"{len(unscored)} question(s) without a value on one side (a feature the reward needs is missing "
              f"there), left out of both: {', '.join(unscored[:5])}{' ...' if len(unscored) > 5 else ''}\n")
    args.a_label, args.b_label = args.a_label or args.a, args.b_label or args.b
    print(markdown(paired_rows(a, b, proportion=not args.reward), args.a_label, args.b_label, args.metric))
    if args.save:
        save(args, a_seeds, a_per_seed, b_seeds, per_seed)


def save(args: argparse.Namespace, a_seeds: list[list[str]], a_per_seed: list[Any], b_seeds: list[list[str]],
         per_seed: list[Any]) -> None:
    """Both sides' per-seed tables read above as ``comparison.json`` (``workbench.eval.paired.Comparison``: each
    side one seed or more) with its re-run command."""

    path = Path(args.save)
    if path.suffix != ".json":
        path = path / "comparison.json"
    argv = list(sys.argv[1:])
    for i, arg in enumerate(argv):  # the runs' command is stored beside this one, not inside it
        if arg == "--runs-command":
            del argv[i:i + 2]
            break
        if arg.startswith("--runs-command="):
            del argv[i]
            break
    cmd = " ".join(shlex.quote(arg) for arg in [".venv/bin/python", "bench/compare_methods.py", *argv])
    runs = {}
    for r in dict.fromkeys(r for runs in [*a_seeds, *b_seeds] for r in runs):
        try:
            cfg = json.loads((Path(r) / "config.json").read_text())
        except (OSError, ValueError):
            cfg = {}
        ev = cfg.get("eval") or {}
        runs[str(r)] = {k: v for k, v in {"created": cfg.get("created"), "dataset": cfg.get("dataset"),
                                          "seed": cfg.get("seed"), "adapter": ev.get("adapter"),
                                          "rollout_engine": cfg.get("rollout_engine")}.items() if v is not None}
    c = Comparison(args.name or f"{args.b_label} vs {args.a_label}", args.metric,
                   Side(args.a_label, args.a, [list(runs) for runs in a_seeds]).store(a_per_seed),
                   Side(args.b_label, args.b, [list(runs) for runs in b_seeds]).store(per_seed), question=args.question,
                   command=" && ".join(x for x in (args.runs_command, cmd) if x),
                   provenance={"machine": f"{os.cpu_count()} cores", "runs": runs})
    print(f"wrote {c.save(path)}")


if __name__ == "__main__":
    main()
