"""Group-relative advantages and the dynamic-sampling filter, as pure functions.

Inputs are ``rewards`` ``(N,)`` (one per trajectory) and ``group_ids`` (one per trajectory:
strings such as ``Trajectory.group_id``, or an integer tensor); outputs are ``(N,)`` float32.
Members of a group need not be contiguous. Standard deviations are **population** standard
deviations (divide by G, ``unbiased=False``): the std of the group's rewards as they are.
TRL and verl use ``torch.std`` (divide by G − 1), which makes their advantages smaller by a
factor ``sqrt((G − 1)/G)`` (0.87 for G = 4, 0.94 for G = 8); a group of one has std 0 here,
not NaN.

    >>> group_std_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], eps=0.0).tolist()
    [1.0, -1.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

GroupIds = Sequence[Hashable] | Tensor


def group_index(group_ids: GroupIds) -> tuple[Tensor, int]:
    """``(inverse, n_groups)``: the group number of each entry (in order of first appearance)."""
    if isinstance(group_ids, Tensor):
        keys = group_ids.tolist()
    else:
        keys = list(group_ids)
    first: dict[Hashable, int] = {}
    inverse = [first.setdefault(k, len(first)) for k in keys]
    return torch.tensor(inverse, dtype=torch.long), len(first)


def _as_rewards(rewards: Sequence[float] | Tensor, n: int) -> Tensor:
    r = torch.as_tensor(rewards, dtype=torch.float64).detach().cpu().reshape(-1)
    if r.shape[0] != n:
        raise ValueError(f"{r.shape[0]} rewards for {n} group ids")
    if not torch.isfinite(r).all():
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    return r


def group_mean_std(rewards: Sequence[float] | Tensor, group_ids: GroupIds) -> tuple[Tensor, Tensor]:
    """Per-entry mean and population std of its group's rewards, float64 ``(N,)`` each."""
    inv, G = group_index(group_ids)
    r = _as_rewards(rewards, inv.shape[0])
    count = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))
    mean = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, r) / count
    var = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, (r - mean[inv]) ** 2) / count
    return mean[inv], var.sqrt()[inv]


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    # den == 0 only when std == 0 and eps == 0, i.e. a uniform group whose numerators are all 0
    return torch.where(den > 0, num / den.clamp(min=torch.finfo(den.dtype).tiny), torch.zeros_like(num))


def group_std_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 1e-6) -> Tensor:
    """GRPO / DSPO Eq. 10: ``A_i = (r_i − mean_g) / (std_g + eps)``, population std of group g."""
    r = _as_rewards(rewards, len(group_ids))
    mean, std = group_mean_std(r, group_ids)
    return _safe_div(r - mean, std + eps).float()


def mean_only_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 0.0) -> Tensor:
    """Dr. GRPO; Shi & Shen Eq. 4 (file 003): ``A_i = r_i − mean_g`` (no std division; ``eps`` unused)."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _ = group_mean_std(r, group_ids)
    return (r - mean).float()


def batch_std_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 1e-6) -> Tensor:
    """Group mean, batch std (TRL ``scale_rewards="batch"``; Liu et al. 2025 "Lite PPO"):
    ``A_i = (r_i − mean_g) / (std(r over the whole batch) + eps)``, population std."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _ = group_mean_std(r, group_ids)
    return _safe_div(r - mean, r.std(unbiased=False) + eps).float()


#: ``LossConfig.adv_norm`` -> ``(rewards, group_ids, eps) -> (N,)``.
ADVANTAGES: dict[str, Callable[..., Tensor]] = {
    "group_std": group_std_advantages,
    "mean_only": mean_only_advantages,
    "batch_std": batch_std_advantages,
}


def compute_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, mode: str = "group_std",
                       eps: float = 1e-6) -> Tensor:
    """Advantages with ``mode`` (``LossConfig.adv_norm``) and ``eps`` (``LossConfig.adv_eps``)."""
    if mode not in ADVANTAGES:
        raise ValueError(f"unknown advantage mode {mode!r}; choose one of: {', '.join(ADVANTAGES)}")
    return ADVANTAGES[mode](rewards, group_ids, eps=eps)


# ---------------------------------------------------------------------------- dynamic filter
def keep_groups(rewards: Sequence[float] | Tensor, group_ids: GroupIds) -> Tensor:
    """DSPO Eq. 9 / DAPO dynamic sampling: keep the members of groups whose rewards are not all
    equal (std > 0; for binary rewards ``0 < #correct < G``). Bool ``(N,)``; a group of one is dropped."""
    inv, G = group_index(group_ids)
    r = _as_rewards(rewards, inv.shape[0])
    hi = torch.full((G,), -torch.inf, dtype=torch.float64).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((G,), torch.inf, dtype=torch.float64).scatter_reduce(0, inv, r, "amin")
    return (hi > lo)[inv]


@dataclass
class FilterStats:
    """What :func:`fill_batch` did. Counts are in groups."""

    target: int = 0
    """Groups wanted."""
    rounds: int = 0
    """Generation rounds run (calls to ``sample_round``)."""
    generated: int = 0
    """Groups generated over all rounds."""
    generated_trajectories: int = 0
    kept: int = 0
    """Mixed groups in the batch (at most ``target``)."""
    dropped_all_correct: int = 0
    """Uniform groups with reward > 0 (all succeeded), dropped."""
    dropped_all_wrong: int = 0
    """Uniform groups with reward <= 0 (all failed), dropped."""
    surplus: int = 0
    """Mixed groups generated beyond ``target`` in the last round, discarded."""

    @property
    def full(self) -> bool:
        return self.kept >= self.target

    @property
    def short_by(self) -> int:
        """Groups missing after the last round (0 when full)."""
        return max(self.target - self.kept, 0)

    @property
    def keep_rate(self) -> float:
        """Share of generated groups that were mixed (kept or surplus)."""
        return (self.kept + self.surplus) / self.generated if self.generated else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "full": self.full, "short_by": self.short_by, "keep_rate": self.keep_rate}

    def __str__(self) -> str:
        state = "full" if self.full else f"SHORT by {self.short_by} group(s) after max rounds"
        return (f"{self.kept}/{self.target} groups kept ({state}) from {self.generated} generated in {self.rounds} "
                f"round(s): dropped {self.dropped_all_correct} all-correct, {self.dropped_all_wrong} all-wrong, "
                f"{self.surplus} surplus")


def fill_batch(sample_round: Callable[[int], tuple[Sequence[float] | Tensor, GroupIds, Sequence[Any]]],
               target_groups: int, max_rounds: int = 3) -> tuple[list[Any], FilterStats]:
    """Generate groups until ``target_groups`` mixed groups are kept (DAPO dynamic sampling, DSPO Eq. 9).

    ``sample_round(needed)`` is called with the number of groups still missing and returns
    ``(rewards (n,), group_ids (n,), items (n,))`` for the groups it generated (it may generate
    more than ``needed``, e.g. to allow for the expected drop rate). Items are whatever the
    caller needs later (a trajectory with its reward, say); group ids are scoped to one round.
    Uniform groups are dropped (:func:`keep_groups`), mixed ones kept in the order generated
    until the batch is full (the rest counted as ``surplus``). After ``max_rounds`` calls the
    batch is returned as it is; ``stats.full`` / ``stats.short_by`` say whether it was filled.

    Returns the kept items (each kept group's members together, in their input order) and
    :class:`FilterStats`.
    """
    if target_groups < 1:
        raise ValueError(f"fill_batch: target_groups must be >= 1, got {target_groups}")
    if max_rounds < 1:
        raise ValueError(f"fill_batch: max_rounds must be >= 1, got {max_rounds}")
    stats = FilterStats(target=target_groups)
    kept: list[list[Any]] = []
    while len(kept) < target_groups and stats.rounds < max_rounds:
        rewards, group_ids, items = sample_round(target_groups - len(kept))
        items = list(items)
        inv, G = group_index(group_ids)
        r = _as_rewards(rewards, inv.shape[0])
        if len(items) != r.shape[0]:
            raise ValueError(f"sample_round returned {len(items)} items for {r.shape[0]} rewards")
        keep = keep_groups(r, inv)
        stats.rounds += 1
        stats.generated += G
        stats.generated_trajectories += len(items)
        members: list[list[int]] = [[] for _ in range(G)]
        for i, g in enumerate(inv.tolist()):
            members[g].append(i)
        for idx in members:
            if not keep[idx[0]]:
                if r[idx[0]] > 0:
                    stats.dropped_all_correct += 1
                else:
                    stats.dropped_all_wrong += 1
            elif len(kept) < target_groups:
                kept.append([items[i] for i in idx])
                stats.kept += 1
            else:
                stats.surplus += 1
    return [x for group in kept for x in group], stats
