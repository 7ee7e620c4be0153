"""Trajectories -> padded training tensors, and mini/micro-batch splitting.

Alignment (the one convention every ``(B, T)`` tensor here follows): **column t refers to
token ``input_ids[:, t]``**. Its log-probability comes from the logits at position ``t − 1``
(the logit at position t predicts token t + 1); :meth:`LoRAPolicy.logprobs
<workbench.rl.policy.LoRAPolicy.logprobs>` returns exactly this layout, so ``loss_mask``,
``old_logprobs`` and the policy's logprobs line up column by column. Column 0 is never a
target (nothing predicts the first token).

Sequences are right-padded (real tokens first, positions 0..n−1, then ``pad_id`` with
``attention_mask`` 0). ``loss_mask`` is 1 exactly on the policy tokens of the response
(``Trajectory.loss_mask``): prompt, observation and padding tokens are 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from workbench.core.trajectory import Trajectory
from workbench.rl.losses import normalizers


@dataclass
class RLBatch:
    """Padded tensors of a list of trajectories (see the module docstring for the alignment)."""

    input_ids: Tensor
    """``(B, T)`` long: prompt + response ids, right-padded."""
    attention_mask: Tensor
    """``(B, T)`` long: 1 on real tokens."""
    loss_mask: Tensor
    """``(B, T)`` float: 1 on policy tokens of the response."""
    old_logprobs: Tensor
    """``(B, T)`` float32: sampling logprob of token t (from ``Trajectory.response_logprobs``), 0 off policy tokens."""
    advantages: Tensor | None = None
    """``(B,)`` float32, one per sequence, if given."""
    rewards: Tensor | None = None
    """``(B,)`` float32, if given."""
    ref_logprobs: Tensor | None = None
    """``(B, T)`` float32 reference logprobs, once computed (kept through splitting)."""
    group_ids: list[str] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    """Position of each row in the list of trajectories it was built from."""
    global_tokens: int = 0
    """Policy tokens of the (mini-)batch this one normalizes with (kept by micro-batches)."""
    global_seqs: int = 0
    """Sequences with policy tokens of the (mini-)batch this one normalizes with."""

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: str | torch.device) -> RLBatch:
        kw = {f.name: getattr(self, f.name).to(device) for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}
        return replace(self, **kw)

    def select(self, rows: Sequence[int] | Tensor, recount: bool) -> RLBatch:
        """Rows ``rows`` (trailing all-padding columns trimmed). ``recount=True`` makes the subset
        its own normalization unit (a mini-batch = one optimizer step); ``False`` keeps this
        batch's global counts (a micro-batch for gradient accumulation)."""
        rows_t = torch.as_tensor(list(rows) if not isinstance(rows, Tensor) else rows, dtype=torch.long)
        T = int(self.attention_mask[rows_t].sum(-1).max()) if len(rows_t) else 0
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                v = v[rows_t.to(v.device)]
                kw[f.name] = v[:, :T] if v.dim() == 2 else v
        kw["group_ids"] = [self.group_ids[i] for i in rows_t.tolist()] if self.group_ids else []
        kw["index"] = [self.index[i] for i in rows_t.tolist()] if self.index else []
        out = replace(self, **kw)
        if recount:
            out.global_tokens, out.global_seqs = normalizers(out.loss_mask)
        return out

    def micro_batches(self, size: int) -> list[RLBatch]:
        """Consecutive chunks of ``size`` rows that keep this batch's ``global_tokens`` /
        ``global_seqs``: summing their ``policy_loss`` values (and gradients) gives the loss of
        the whole batch."""
        if size < 1:
            raise ValueError(f"micro-batch size must be >= 1, got {size}")
        return [self.select(range(i, min(i + size, len(self))), recount=False) for i in range(0, len(self), size)]

    def mini_batches(self, n: int, generator: torch.Generator | None = None) -> list[RLBatch]:
        """Split into ``n`` mini-batches (``LossConfig.num_mini_batches``), each its own
        normalization unit; rows are shuffled if a ``generator`` is given. Whole groups are not
        kept together (advantages are computed before splitting)."""
        if not 1 <= n <= len(self):
            raise ValueError(f"num_mini_batches must be in [1, {len(self)}] for a batch of {len(self)}, got {n}")
        order = torch.randperm(len(self), generator=generator) if generator is not None else torch.arange(len(self))
        return [self.select(chunk, recount=True) for chunk in torch.tensor_split(order, n)]


def build_batch(trajectories: Sequence[Trajectory], advantages: Sequence[float] | Tensor | None = None,
                rewards: Sequence[float] | Tensor | None = None, pad_id: int = 0,
                max_tokens: int | None = None) -> RLBatch:
    """Pad ``trajectories`` into an :class:`RLBatch` (right padding, ``pad_id``).

    ``max_tokens``: raise if a trajectory is longer (nothing is truncated silently).
    """
    if not trajectories:
        raise ValueError("build_batch: no trajectories")
    B = len(trajectories)
    seqs = [t.token_ids for t in trajectories]
    T = max(len(s) for s in seqs)
    if max_tokens is not None and T > max_tokens:
        i = max(range(B), key=lambda k: len(seqs[k]))
        raise ValueError(f"trajectory {trajectories[i].id!r} has {len(seqs[i])} tokens > max_tokens={max_tokens}")
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.float32)
    old = torch.zeros((B, T), dtype=torch.float32)
    for b, tr in enumerate(trajectories):
        n, p = len(seqs[b]), len(tr.prompt_ids)
        if p == 0 and tr.response_loss_mask[:1] == [1]:
            raise ValueError(f"trajectory {tr.id!r} has no prompt: its first (policy) token cannot be a target")
        input_ids[b, :n] = torch.tensor(seqs[b], dtype=torch.long)
        attention_mask[b, :n] = 1
        loss_mask[b, :n] = torch.tensor(tr.loss_mask, dtype=torch.float32)
        old[b, p:n] = torch.tensor(tr.response_logprobs, dtype=torch.float32)
    old = old * loss_mask  # 0 off policy tokens
    n_tok, n_seq = normalizers(loss_mask)

    def vec(x, name):
        if x is None:
            return None
        v = torch.as_tensor(x, dtype=torch.float32).reshape(-1)
        if v.shape[0] != B:
            raise ValueError(f"build_batch: {v.shape[0]} {name} for {B} trajectories")
        return v

    return RLBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        old_logprobs=old,
        advantages=vec(advantages, "advantages"),
        rewards=vec(rewards, "rewards"),
        group_ids=[t.group_id for t in trajectories],
        index=list(range(B)),
        global_tokens=n_tok,
        global_seqs=n_seq,
    )


def empty_batch() -> RLBatch:
    """A batch with no sequences (a step whose every group was filtered out still logs and steps)."""
    z = torch.zeros((0, 1))
    return RLBatch(z.long(), z.long(), z, z)
