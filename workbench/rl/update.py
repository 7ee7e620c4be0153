"""The update phase of a training step: optimizer epochs over mini-batches, gradient accumulation
over micro-batches (``Trainer.update`` calls :func:`run_update`).

Less work per update (``TrainConfig.micro_batching``):

- ``sequential``: micro-batches of consecutive rows (each padded to its longest row);
- ``bucket``: rows sorted by length first, so a micro-batch pads to rows of similar length;
- ``shared_prefix``: a micro-batch holds rows of one group (split into ``micro_batch_size`` rows), longest
  first, and their common prompt is run once with gradient (:mod:`workbench.rl.shared_prefix`).

None of them changes the gradient (micro-batch losses are normalized by the mini-batch's global counts).
Logged per step: ``padded_token_share`` (padding among the positions the update's forwards computed),
``trained_tokens`` (real tokens of the batch × epochs), ``trained_tokens_per_s`` (over ``time_update_s``;
``cpu_update_s`` is the same phase's process CPU time),
and the FLOPs of the update (:mod:`workbench.rl.flops`) with the achieved ``update_flops_per_s``.

Rollout/trainer mismatch (as verl logs it): the backend's sampling logprobs against the trainer's own
logprobs of the same tokens before the first optimizer step — ``rollout_logprob_diff`` (mean |Δ|),
``rollout_logprob_diff_max`` and ``rollout_ratio_mean`` (mean π_trainer / π_rollout, 1 when the
rollout engine served the current adapter). ``TrainConfig.tis_cap`` switches on truncated importance
sampling (:func:`workbench.rl.losses.truncated_is_weights`) and logs ``tis_clip_frac``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from workbench.core.choices import MICRO_BATCHING
from workbench.rl.batch import RLBatch
from workbench.rl.distributed import all_reduce_sum
from workbench.rl.flops import backward_flops, forward_flops, model_shape, work_of
from workbench.rl.losses import log_ratio, policy_loss, truncated_is_weights
from workbench.rl.shared_prefix import common_prefix_len
from workbench.rl.steplog import merge_micro_stats, summarize_updates

if TYPE_CHECKING:
    from workbench.rl.config import LossConfig
    from workbench.rl.policy import LoRAPolicy
    from workbench.rl.train_config import TrainConfig


@dataclass
class TrainBatch(RLBatch):
    """An :class:`RLBatch` that keeps the rollout engine's logprobs through splitting (``old_logprobs``
    may be replaced by the trainer's own recomputation)."""

    rollout_logprobs: Tensor | None = None

    @classmethod
    def of(cls, batch: RLBatch) -> TrainBatch:
        return cls(**{f.name: getattr(batch, f.name) for f in fields(RLBatch)}, rollout_logprobs=batch.old_logprobs.clone())


def plan_micro_batches(mb: RLBatch, size: int, mode: str) -> list[tuple[RLBatch, int]]:
    """``(micro-batch, shared prefix length)`` pairs covering ``mb`` (see the module docstring)."""
    if mode not in MICRO_BATCHING:
        raise ValueError(f"micro_batching {mode!r} is not one of {MICRO_BATCHING}")
    if mode == "sequential":
        return [(m, 0) for m in mb.micro_batches(size)]
    lengths = mb.attention_mask.sum(-1).tolist()
    if mode == "bucket":
        order = sorted(range(len(mb)), key=lambda i: (-lengths[i], i))
        return [(mb.select(order[i : i + size], recount=False), 0) for i in range(0, len(mb), size)]
    groups: dict[str, list[int]] = {}
    for i in range(len(mb)):
        groups.setdefault(mb.group_ids[i] if mb.group_ids else str(i), []).append(i)
    out = []
    for rows in groups.values():
        rows = sorted(rows, key=lambda i: (-lengths[i], i))
        for i in range(0, len(rows), size):
            m = mb.select(rows[i : i + size], recount=False)
            out.append((m, common_prefix_len(m.input_ids, m.attention_mask) if len(m) > 1 else 0))
    return out


class _Work:
    """Positions computed, real tokens, and FLOPs of the update's forwards/backwards."""

    def __init__(self, shape: Any):
        self.shape = shape
        self.computed = self.real = self.trained = 0
        self.flops = 0.0

    def add(self, m: RLBatch, prefix_len: int) -> None:
        lengths = m.attention_mask.sum(-1).tolist()
        B, T = m.input_ids.shape  # rows, columns
        P = prefix_len
        self.computed += P + B * (T - P) if P else B * T
        tokens, pairs, targets = work_of(lengths, int((m.loss_mask > 0).sum()), P)
        self.real += tokens
        self.trained += sum(lengths)
        self.flops += forward_flops(self.shape, tokens, pairs, targets) + backward_flops(self.shape, tokens, pairs, targets)


class Updated(Protocol):
    """What an update reads of a :class:`~workbench.rl.trainer.Trainer` (which imports this module), and its optimizer
    step count, which it advances."""

    opt_step: int

    @property
    def config(self) -> TrainConfig: ...

    @property
    def loss_cfg(self) -> LossConfig: ...

    @property
    def policy(self) -> LoRAPolicy: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def world_size(self) -> int: ...

    def step_seed(self, step: int, round_: int = 0) -> int: ...

    def reduce_grads(self) -> None: ...


@torch.no_grad()
def forward_no_grad(trainer: Updated, batch: RLBatch, ref: bool) -> Tensor:
    """Reference (adapter disabled) or current-policy logprobs of ``batch``, micro-batch by micro-batch."""
    out = torch.zeros_like(batch.old_logprobs)
    fn = trainer.policy.ref_logprobs if ref else trainer.policy.logprobs
    size = trainer.config.micro_batch_size
    for start in range(0, len(batch), size):
        sl = slice(start, start + size)
        T = int(batch.attention_mask[sl].sum(-1).max())
        lp = fn(batch.input_ids[sl, :T], batch.attention_mask[sl, :T], target_mask=batch.loss_mask[sl, :T] > 0)
        out[sl, :T] = lp.float().cpu()
    return out


def mismatch_sums(trainer_logp: Tensor, rollout_logp: Tensor | None, mask: Tensor) -> dict[str, float]:
    """Sums over policy tokens of |log π_trainer − log π_rollout| and π_trainer / π_rollout (and their max /
    count), to be divided by the token count: the rollout/trainer mismatch verl logs. Tokens whose rollout
    logprob is missing (NaN: a server without logprobs) are left out."""
    if rollout_logp is None:
        return {}
    m = (mask > 0) & torch.isfinite(rollout_logp)
    d = log_ratio(trainer_logp.detach().float(), torch.nan_to_num(rollout_logp.float()), m)
    a = d.abs()
    return {"diff": float(a[m].sum()), "diff_max": float(a[m].max()) if m.any() else 0.0,
            "ratio": float(torch.exp(d)[m].sum()), "n": float(m.sum())}


def _merge_mismatch(acc: dict[str, float], st: dict[str, float]) -> None:
    for k, v in st.items():
        acc[k] = max(acc.get(k, 0.0), v) if k == "diff_max" else acc.get(k, 0.0) + v


def run_update(trainer: Updated, batch: RLBatch, step: int) -> dict[str, float]:
    """Optimizer epochs over mini-batches, gradient accumulation over micro-batches; returns the stats.

    ``trainer``: a :class:`~workbench.rl.trainer.Trainer`, or anything with its ``config``, ``loss_cfg``, ``policy``,
    ``optimizer``, ``world_size``, ``opt_step`` (advanced here), ``step_seed`` and ``reduce_grads``
    (:class:`Updated`)."""
    cfg, lc = trainer.config, trainer.loss_cfg
    secs = {"reference": 0.0, "old_logprobs": 0.0, "update": 0.0}
    min_rows = len(batch)
    if trainer.world_size > 1:  # every process must take the same number of optimizer steps
        t = torch.tensor([len(batch)])
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
        min_rows = int(t)
    if min_rows == 0:
        return {"skipped_update": 1.0, **{f"time_{k}_s": v for k, v in secs.items()}}
    batch = TrainBatch.of(batch)
    if lc.needs_ref:
        t0 = time.perf_counter()
        batch.ref_logprobs = forward_no_grad(trainer, batch, ref=True)
        secs["reference"] = time.perf_counter() - t0
    on_policy = lc.on_policy
    mismatch: dict[str, float] = {}
    if not on_policy:
        t0 = time.perf_counter()
        recomputed = forward_no_grad(trainer, batch, ref=False)
        mismatch = mismatch_sums(recomputed, batch.rollout_logprobs, batch.loss_mask)
        batch.old_logprobs = recomputed  # the policy's own logprobs (temperature-free) at sampling time
        secs["old_logprobs"] = time.perf_counter() - t0
    n_mini = min(lc.num_mini_batches, min_rows)
    gen = torch.Generator().manual_seed(trainer.step_seed(step, 99))
    acc: dict[str, list[float]] = {}
    work = _Work(model_shape(trainer.policy.base))
    tis: dict[str, float] = {"clipped": 0.0, "n": 0.0}
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.policy.model.train(cfg.lora_dropout > 0)  # dropout only when there is some
    for _epoch in range(lc.ppo_epochs):
        minis = batch.mini_batches(n_mini, generator=gen if n_mini > 1 else None)
        for mb in minis:
            gt, gs, gr = all_reduce_sum([mb.global_tokens, mb.global_seqs, len(mb)], trainer.world_size)
            mb.global_tokens, mb.global_seqs = int(gt), int(gs)
            n_seqs = int(gr) if lc.empty_seqs == "count" else mb.global_seqs  # seq-mean denominators
            trainer.optimizer.zero_grad(set_to_none=True)
            sums: dict[str, float] = {}
            ent_sum = 0.0
            for micro, prefix_len in plan_micro_batches(mb, cfg.micro_batch_size, cfg.micro_batching):
                work.add(micro, prefix_len)
                micro = micro.to(trainer.policy.device)
                logp, ent = trainer.policy.logprobs(micro.input_ids, micro.attention_mask, target_mask=micro.loss_mask > 0,
                                                    with_entropy=True, prefix_len=prefix_len)
                old = None if on_policy else micro.old_logprobs
                if on_policy:  # before the first optimizer step: the trainer's logprobs at sampling time
                    _merge_mismatch(mismatch, mismatch_sums(logp, micro.rollout_logprobs, micro.loss_mask))
                is_w = None
                if cfg.tis_cap is not None and micro.rollout_logprobs is not None:
                    base = logp.detach() if on_policy else micro.old_logprobs
                    is_w = truncated_is_weights(base, micro.rollout_logprobs, micro.loss_mask, cfg.tis_cap)
                    m = (micro.loss_mask > 0) & torch.isfinite(micro.rollout_logprobs)
                    tis["clipped"] += float((is_w[m] >= cfg.tis_cap).sum())
                    tis["n"] += float(m.sum())
                loss, st = policy_loss(logp, old, micro.ref_logprobs, micro.advantages, micro.loss_mask, lc,
                                       mb.global_tokens, n_seqs, step=step - 1,  # β by training step (0-based)
                                       is_weights=is_w)
                loss.backward()
                merge_micro_stats(sums, st)
                ent_sum += float((ent.detach() * micro.loss_mask).sum())
            trainer.reduce_grads()
            gnorm = clip_grad_norm(trainer.policy.trainable_parameters(), cfg.grad_clip)
            trainer.optimizer.step()
            trainer.opt_step += 1
            sums["entropy"] = all_reduce_sum([ent_sum], trainer.world_size)[0] / max(1, mb.global_tokens)
            sums["grad_norm"] = gnorm
            for k, v in sums.items():
                acc.setdefault(k, []).append(v)
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.policy.model.eval()
    secs["update"] = time.perf_counter() - t0
    cpu_update = time.process_time() - c0  # the process's CPU time: less disturbed by other jobs than the wall time
    out = summarize_updates(acc)
    if mismatch.get("n"):
        n = mismatch["n"]
        out.update(rollout_logprob_diff=mismatch["diff"] / n, rollout_logprob_diff_max=mismatch["diff_max"],
                   rollout_ratio_mean=mismatch["ratio"] / n)
        if not on_policy:
            out["sampler_logprob_gap"] = out["rollout_logprob_diff"]  # its earlier name, kept for old notebooks
    if cfg.tis_cap is not None:
        out["tis_clip_frac"] = tis["clipped"] / max(1.0, tis["n"])
    out.update(trained_tokens=float(work.trained), update_flops=work.flops,
               padded_token_share=1.0 - work.real / max(1, work.computed),
               trained_tokens_per_s=work.trained / max(1e-9, secs["update"]),
               update_flops_per_s=work.flops / max(1e-9, secs["update"]), cpu_update_s=cpu_update)
    out.update({f"time_{k}_s": v for k, v in secs.items()})
    return out


def clip_grad_norm(params: Sequence[Tensor], clip: float) -> float:
    """The gradients' global L2 norm, after clipping them to ``clip`` when it is > 0 (the norm before clipping)."""
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
