"""What a training run's reward paid for, by hop count and number of searches: the incentive behind a collapse.

    .venv/bin/python bench/rollout_incentives.py RUN [RUN...] [--steps 1-4] [--preset dynasearcher --params JSON]

Reads every step's rollouts (``steps/<n>.features.parquet``: the features, the reward and the advantage each
rollout trained with) and prints, per hop count and searches made: how many rollouts, the answered share, cover-EM,
the mean reward and the mean advantage. A policy that learns to stop after one search on two-hop questions shows
it here first: the (2 hops, 1 search) cell's advantage is not below the (2 hops, 2 searches) cell's. With
``--preset``/``--params`` the same rollouts are re-scored with another rubric (a preset of
``workbench.methods``, as the reward playground's sliders set it) and their group advantages recomputed (group
mean and std, as GRPO's: ``workbench.rl.advantages``), so a reward change is judged on the run's own rollouts
before any training; re-scored with the run's own preset, the table is the run's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(run: Path, steps: tuple[int, int] | None):
    import pandas as pd

    parts = sorted((run / "steps").glob("*.features.parquet"))
    frames = []
    for p in parts:
        step = int(p.name.split(".")[0])
        if steps is None or steps[0] <= step <= steps[1]:
            frames.append(pd.read_parquet(p).assign(step=step))
    if not frames:
        raise SystemExit(f"{run}: no steps/<n>.features.parquet (is it a training run?)")
    return pd.concat(frames, ignore_index=True)


def table(df, reward: str = "reward", advantage: str = "advantage"):
    cols = {"n": ("id", "size"), "answered": ("answered", "mean"), "cem": ("cem", "mean"),
            reward: (reward, "mean"), advantage: (advantage, "mean")}
    return (df.assign(searches=df["n_searches"].clip(upper=4)).groupby(["hops", "searches"])
            .agg(**cols).round(3).reset_index())


def rescore(df, preset: str, params: dict):
    """``df`` with ``reward_new`` (the rollouts scored by ``preset`` with ``params``) and ``advantage_new`` (group
    mean and std over each step's groups, as GRPO's)."""
    import numpy as np

    from workbench.methods import get_preset
    from workbench.rl.advantages import compute_advantages

    t = get_preset(preset, **params)(df)
    df = df.assign(reward_new=t.total.astype(np.float64))
    gids = (df["step"].astype(str) + ":" + df["group_id"].astype(str)).tolist()
    return df.assign(advantage_new=compute_advantages(df["reward_new"].to_numpy().copy(), gids, "group_std").numpy())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--steps", default=None, metavar="A-B", help="only these steps (default: all)")
    ap.add_argument("--preset", default=None, help="re-score with this reward preset")
    ap.add_argument("--params", default="{}", help="its parameters as JSON, e.g. '{\"beta\": 0.0}'")
    args = ap.parse_args()
    steps = tuple(int(x) for x in args.steps.split("-")) if args.steps else None
    for run in map(Path, args.runs):
        df = load(run, steps)
        print(f"\n{run} ({len(df)} rollouts, steps {df['step'].min()}-{df['step'].max()}); searches 4 = 4 or more")
        print(table(df).to_string(index=False))
        if args.preset:
            params = json.loads(args.params)
            df = rescore(df, args.preset, params)
            print(f"\nre-scored with {args.preset} {params} (group-std advantages over the same groups):")
            print(table(df, "reward_new", "advantage_new").to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
