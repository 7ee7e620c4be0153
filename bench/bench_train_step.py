"""Seconds per training step by phase (rollout, reward, reference, old logprobs, update) for the
default model on this machine.

    .venv/bin/python bench/bench_train_step.py --steps 3 --preset grpo
    .venv/bin/python bench/bench_train_step.py --from-run runs/<train run>   # summarize an existing run

Prints a markdown table (mean over steps; the first step is reported separately because it
includes warm-up) to paste into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from workbench import methods as wm

PHASES = ("time_rollout_s", "time_reward_s", "time_reference_s", "time_old_logprobs_s", "time_update_s", "time_step_s")


def table(rows: list[dict], title: str) -> str:
    train = [r for r in rows if "reward_mean" in r]
    if not train:
        return f"{title}: no training steps"
    later = train[1:] or train
    lines = [f"### {title}", "", "| phase | step 1 (s) | mean of steps 2.. (s) | share |", "|---|---:|---:|---:|"]
    total = sum(r["time_step_s"] for r in later) / len(later)
    for k in PHASES:
        first = train[0].get(k, 0.0)
        mean = sum(r.get(k, 0.0) for r in later) / len(later)
        name = k.removeprefix("time_").removesuffix("_s")
        lines.append(f"| {name} | {first:.1f} | {mean:.1f} | {100 * mean / total:.0f}% |")
    toks = sum(r.get("tokens_per_s", 0.0) for r in later) / len(later)
    gen = sum(r.get("generated_trajectories", 0) for r in later) / len(later)
    lines += ["", f"{len(train)} steps; {gen:.0f} trajectories per step; rollout {toks:.1f} generated tokens/s"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--preset", default="grpo")
    ap.add_argument("--reward", default="dynasearcher")
    ap.add_argument("--questions-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--from-run", default=None, help="summarize this training run's metrics.jsonl instead of training")
    args = ap.parse_args()
    if args.from_run:
        rows = [json.loads(x) for x in (Path(args.from_run) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        print(table(rows, f"run {Path(args.from_run).name}"))
        return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from workbench.rl.trainer import TrainConfig

    cfg = TrainConfig(preset=args.preset, reward=args.reward, steps=args.steps, questions_per_step=args.questions_per_step,
                      group_size=args.group_size, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                      protocol_kwargs={"observation_mode": "chat", "demo": "one_hop"}, save_every=0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tr = wm.trainer(cfg, run=d, progress=False)
        init = time.perf_counter() - t0
        tr.train()
        rows = tr.run.step_metrics()
    print(f"{time.strftime('%Y-%m-%d')} · {platform.machine()} · {torch.get_num_threads()} torch threads · "
          f"{torch.__version__} · trainer init {init:.1f}s")
    print(table(rows, f"{args.preset} / {args.reward}: {args.questions_per_step}x{args.group_size} rollouts, "
                      f"{args.max_turns} turns x {args.max_new_tokens} tokens"))


if __name__ == "__main__":
    main()
