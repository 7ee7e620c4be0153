"""The update phase side by side: trained tokens/s, padded-token share and achieved FLOP/s against the
measured fp32 matmul peak, for each ``TrainConfig.micro_batching`` mode on the same batch.

    .venv/bin/python bench/bench_update.py [--questions 4] [--group-size 4] [--reps 1] [--threads 1]

The batch is what a Search-R1 step with a one-hop demonstration trains on: the real prompts of world
questions (default model's chat template) and responses of realistic, differing lengths (random ids:
the update's cost does not depend on which tokens they are). Each mode runs the real update code
(``workbench.rl.update.run_update``) on the default model with LoRA r=16; modes alternate per rep so a
shared machine's load hits them alike. Prints one table; ``CPU s`` is the process's CPU time for the
update phase (``cpu_update_s``; one torch thread: close to the work done, less disturbed by other jobs than the
wall time).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

MODES = ("sequential", "bucket", "shared_prefix")


class _UpdateOnly:
    """What ``run_update`` reads from a Trainer, without rollouts, world or run directory."""

    def __init__(self, policy, config):
        import torch

        self.policy, self.config, self.loss_cfg = policy, config, config.loss_config()
        self.world_size, self.opt_step = 1, 0
        self.optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.lr)

    def reduce_grads(self):
        pass

    def step_seed(self, step, round_=0):
        return step * 1009 + round_


def make_batch(tokenizer, questions: int, group: int, seed: int = 0):
    import numpy as np

    from workbench.core.trajectory import POLICY, Trajectory, Turn
    from workbench.data.world import load_world
    from workbench.methods import get_protocol
    from workbench.rl.batch import build_batch
    from workbench.rollout.engine import build_prompt_ids

    rng = np.random.default_rng(seed)
    proto = get_protocol("search_r1", observation_mode="chat", demo="one_hop")
    exs = load_world().split("train")[:questions]
    trajs = []
    for ex in exs:
        prompt = build_prompt_ids(proto, tokenizer, ex)
        for g in range(group):
            n = int(rng.integers(40, 200))
            ids = rng.integers(100, 40000, n).tolist()
            t = Trajectory(id=f"{ex.id}#{g}", example_id=ex.id, question=ex.question, protocol=proto.name,
                           prompt_ids=list(prompt), group_id=ex.id, sample_idx=g)
            t.turns.append(Turn(POLICY, "", ids, [-1.0] * n, "length", {}))
            trajs.append(t)
    adv = rng.standard_normal(len(trajs))
    return build_batch(trajs, advantages=adv, rewards=adv, pad_id=tokenizer.pad_token_id or 0), trajs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--reps", type=int, default=1, help="updates per mode (alternating); the best is reported")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from bench_matmul_peak import measure_peak

    from workbench.rl.policy import LoRAPolicy
    from workbench.rl.train_config import TrainConfig
    from workbench.rl.update import run_update

    peak = measure_peak(args.threads)
    policy = LoRAPolicy(device="cpu")
    batch, trajs = make_batch(policy.tokenizer, args.questions, args.group_size)
    prompt = len(trajs[0].prompt_ids)
    resp = sum(t.n_policy_tokens for t in trajs) / len(trajs)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    best: dict[str, dict] = {}
    load0 = os.getloadavg()[0]
    for _ in range(args.reps):
        for mode in modes:
            cfg = TrainConfig(micro_batch_size=args.micro_batch_size, micro_batching=mode, group_size=args.group_size)
            st = run_update(_UpdateOnly(policy, cfg), batch, 1)
            if mode not in best or st["time_update_s"] < best[mode]["time_update_s"]:
                best[mode] = st
    print(f"{time.strftime('%Y-%m-%d')} · {platform.machine()} · {args.threads} torch thread(s) · torch "
          f"{torch.__version__} · load {load0:.1f} → {os.getloadavg()[0]:.1f} · fp32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(f"\n{args.questions} groups × {args.group_size}: prompt {prompt} tokens, responses {resp:.0f} tokens on average, "
          f"micro-batches of {args.micro_batch_size}; best of {args.reps}\n")
    print("| micro_batching | update (s) | trained tokens/s | vs sequential | padded share | GFLOP/s | of peak "
          "| CPU s | vs sequential (CPU s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ref = best.get("sequential", next(iter(best.values())))
    for mode, st in best.items():
        print(f"| {mode} | {st['time_update_s']:.1f} | {st['trained_tokens_per_s']:.0f} | "
              f"{st['trained_tokens_per_s'] / ref['trained_tokens_per_s']:.2f}× | {100 * st['padded_token_share']:.0f}% | "
              f"{st['update_flops_per_s'] / 1e9:.1f} | {100 * st['update_flops_per_s'] / peak:.0f}% | "
              f"{st['cpu_update_s']:.1f} | {ref['cpu_update_s'] / st['cpu_update_s']:.2f}× |")


if __name__ == "__main__":
    main()
