"""One GRPO step in one file, to read in one sitting: the trainer's update written out plainly.

The trainer (:mod:`workbench.rl.trainer`) does the same work spread over modules so that each part can be swapped
and scaled: advantages and the dynamic filter in :mod:`~workbench.rl.advantages`,
padding in :mod:`~workbench.rl.batch`, the loss in :mod:`~workbench.rl.losses`, micro-batches and the optimizer step
in :mod:`~workbench.rl.update`, log-probabilities in :mod:`~workbench.rl.policy`. Here is the plain version of the
``grpo`` preset's step (one epoch, one mini-batch, no rollout importance weights), and
``tests/test_reference_step.py`` checks that it moves the adapter exactly as ``Trainer.apply`` does on the same
rollouts. A step, from the rollouts on:

1. **reward** — each trajectory has a scalar reward (the rubric's total);
2. **filter** — a group whose rewards are all equal teaches nothing (its advantages are 0): DAPO's dynamic sampling
   drops it (:func:`keep_mixed_groups`);
3. **advantage** — ``A_i = (r_i − mean_g) / (std_g + ε)`` within each group of samples of one question
   (:func:`group_advantages`, DeepSeekMath Eq. 3);
4. **log-probabilities** — of every sampled token under the policy, and under the reference (the same model with
   the LoRA adapter switched off) for the KL term (:func:`token_logprobs`);
5. **loss** — the clipped surrogate ``−min(ρ_t A, clip(ρ_t, 1 − ε_low, 1 + ε_high) A)`` with ``ρ_t = π_θ / π_old``
   plus ``β`` times the k3 estimate of KL(π_θ ‖ π_ref), averaged over each sequence's tokens, then over sequences
   (:func:`grpo_loss`);
6. **optimizer step** — backward, clip the gradients' global norm, one AdamW step (:func:`grpo_step`).

In the first (and only) epoch of a step the policy is the one that sampled, so ``π_old`` is ``π_θ`` without its
gradient: ``ρ_t = 1`` and the clip is not active yet; it acts from the second epoch on (``ppo_epochs > 1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from workbench.core.trajectory import Trajectory


def keep_mixed_groups(rewards: Sequence[float], group_ids: Sequence[str]) -> list[bool]:
    """Whether each trajectory's group has rewards that differ (the dynamic filter keeps those groups)."""
    by_group: dict[str, set[float]] = {}
    for r, g in zip(rewards, group_ids):
        by_group.setdefault(g, set()).add(float(r))
    return [len(by_group[g]) > 1 for g in group_ids]


def group_advantages(rewards: Sequence[float], group_ids: Sequence[str], eps: float = 1e-6) -> Tensor:
    """``(r_i − mean_g) / (std_g + eps)`` per group of samples (population std), ``(B,)`` float32."""
    r = torch.tensor([float(x) for x in rewards], dtype=torch.float64)
    adv = torch.zeros_like(r)
    for g in dict.fromkeys(group_ids):
        rows = torch.tensor([i for i, h in enumerate(group_ids) if h == g])
        mean, std = r[rows].mean(), r[rows].std(correction=0)
        adv[rows] = (r[rows] - mean) / (std + eps)
    return adv.float()


def pad(trajectories: Sequence[Trajectory], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(input_ids, attention_mask, loss_mask)``, each ``(B, T)``, right-padded: prompt and response tokens, 1 on
    real tokens, 1 on the tokens the policy sampled (not the prompt, not tool output)."""
    T = max(len(t.token_ids) for t in trajectories)
    ids = torch.full((len(trajectories), T), pad_id, dtype=torch.long)
    attention = torch.zeros((len(trajectories), T), dtype=torch.long)
    loss_mask = torch.zeros((len(trajectories), T))
    for b, t in enumerate(trajectories):
        n = len(t.token_ids)
        ids[b, :n] = torch.tensor(t.token_ids)
        attention[b, :n] = 1
        loss_mask[b, :n] = torch.tensor(t.loss_mask, dtype=torch.float32)
    return ids, attention, loss_mask


def token_logprobs(model: torch.nn.Module, ids: Tensor, attention: Tensor) -> Tensor:
    """``(B, T)``: column t is ``log π(ids[:, t] | ids[:, :t])`` (column 0, which nothing predicts, is 0)."""
    logits = model(input_ids=ids, attention_mask=attention).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)


def grpo_loss(logp: Tensor, old_logp: Tensor, ref_logp: Tensor, adv: Tensor, mask: Tensor, eps_low: float,
              eps_high: float, beta: float) -> Tensor:
    """The GRPO objective to minimise: per token the clipped surrogate plus ``beta`` x k3 KL, averaged over each
    sequence's policy tokens, then over the sequences that have any."""
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]
    surrogate = -torch.minimum(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1  # k3 (Schulman): unbiased for KL(π_θ ‖ π_ref), never negative
    per_token = (surrogate + beta * kl) * mask
    n_tokens = mask.sum(-1)
    has = n_tokens > 0
    return (per_token.sum(-1)[has] / n_tokens[has]).mean()


def grpo_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajectories: Sequence[Trajectory],
              rewards: Sequence[float], *, eps_low: float = 0.2, eps_high: float = 0.2, beta: float = 1e-3,
              adv_eps: float = 1e-6, grad_clip: float = 1.0, pad_id: int = 0) -> dict[str, float]:
    """One GRPO update of the PEFT ``model``'s adapter on the rollouts of one step: filter, advantages, loss,
    backward, clip, step. ``trajectories`` carry ``group_id`` (one group per question). Returns the loss, the
    gradients' norm before clipping and how many trajectories trained."""
    group_ids = [t.group_id for t in trajectories]
    keep = keep_mixed_groups(rewards, group_ids)
    kept = [t for t, k in zip(trajectories, keep) if k]
    if not kept:
        return {"loss": 0.0, "grad_norm": 0.0, "trained": 0}
    adv = group_advantages([r for r, k in zip(rewards, keep) if k], [t.group_id for t in kept], adv_eps)
    ids, attention, mask = pad(kept, pad_id)
    with torch.no_grad(), model.disable_adapter():  # the reference policy: the base model without the adapter
        ref_logp = token_logprobs(model, ids, attention)
    model.train(False)  # no dropout in the update when the adapter has none
    logp = token_logprobs(model, ids, attention)
    loss = grpo_loss(logp, logp.detach(), ref_logp, adv, mask, eps_low, eps_high, beta)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": float(loss.detach()), "grad_norm": grad_norm, "trained": len(kept)}
