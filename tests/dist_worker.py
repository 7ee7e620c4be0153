"""Worker for tests/test_trainer_distributed.py, run under ``accelerate launch --multi_gpu --num_processes 2`` (gloo without CUDA).

Trains one step of a tiny random-init Llama (the real loop, gloo backend) and writes, per rank,
the local gradients before the all-reduce, the reduced gradients, and the adapter afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from workbench.methods import run_parts
from workbench.rewards.rubric import RewardTable
from workbench.rl.trainer import TrainConfig, Trainer


class TokenSumReward(Trainer):
    """Rewards that differ inside every group (a hash of the sampled ids), so gradients are non-zero."""

    def featurize(self, trajs, examples):
        self._trajs = list(trajs)
        return super().featurize(trajs, examples)

    def score(self, features):
        r = np.array([float(sum(t.response_ids) % 7) + 0.01 * t.sample_idx for t in self._trajs])
        return RewardTable({"total": r, "hash": r}, {}, {"hash": 1.0})

    def reduce_grads(self):
        params = self.policy.trainable_parameters()
        self.local_grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
        super().reduce_grads()
        self.reduced_grads = [p.grad.detach().clone() for p in params]


def main(model_dir: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    cfg = TrainConfig(model=model_dir, steps=1, questions_per_step=2, group_size=2, max_turns=1, max_new_tokens=6,
                      temperature=1.0, preset="grpo", loss_overrides={"kl_coef": 0.0}, lr=1e-2, save_every=0,
                      lora_r=4, lora_alpha=8, protocol_kwargs={"observation_mode": "chat", "few_shot": False})
    tr = TokenSumReward(cfg, run_parts(cfg), run=Path(out_dir) / "runs", progress=False)
    tr.train_step()
    params = {k: v.detach().clone() for k, v in tr.policy.model.named_parameters() if v.requires_grad}
    torch.save({"rank": tr.rank, "world_size": tr.world_size, "local": tr.local_grads, "reduced": tr.reduced_grads,
                "params": params, "questions": [e.id for e in tr.data.examples[: tr.data.pos]]},
               Path(out_dir) / f"rank{tr.rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
