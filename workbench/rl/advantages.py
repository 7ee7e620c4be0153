"""Group-relative advantages and the dynamic-sampling filter, as pure functions.

Inputs are ``rewards`` ``(N,)`` (one per trajectory) and ``group_ids`` (one per trajectory:
strings such as ``Trajectory.group_id``, or an integer tensor); outputs are ``(N,)`` float32.
Members of a group need not be contiguous.

- **Failed rewards.** A NaN reward (a failed judge, tool or backend) is excluded from
  its group's statistics (and the batch's) and gets advantage 0; ``±inf`` is an error.
- **Standard deviations** are **population** standard deviations by default (``std="population"``,
  divide by G): the std of the group's rewards as they are. TRL and verl use ``torch.std``
  (``std="sample"``, divide by G − 1), which makes their advantages smaller by a factor
  ``sqrt((G − 1)/G)`` (0.87 for G = 4, 0.94 for G = 8). A group of one has advantage 0 here
  (verl: mean 0, std 1, i.e. the raw reward), except in ``reinforce_pp``, which follows verl.

Registry: :data:`ADVANTAGES` (``LossConfig.adv_norm``); ``mean_only`` is an accepted alias of
``group_mean`` (:data:`ADV_ALIASES`). Adding an estimator = one decorated function, one test.

    >>> group_std_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], eps=0.0).tolist()
    [1.0, -1.0, 0.0, 0.0]
    >>> group_std_advantages([1.0, 0.0, float("nan")], ["a", "a", "a"], eps=0.0).tolist()
    [1.0, -1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

GroupIds = Sequence[Hashable] | Tensor
#: What :func:`fill_batch` keeps, one per trajectory: whatever its caller needs later.
Item = TypeVar("Item")
STD_KINDS = ("population", "sample")


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
    """float64 ``(n,)``; NaN allowed (a failed reward), ±inf refused."""
    r = torch.as_tensor(rewards, dtype=torch.float64).detach().cpu().reshape(-1)
    if r.shape[0] != n:
        raise ValueError(f"{r.shape[0]} rewards for {n} group ids")
    if torch.isinf(r).any():
        raise ValueError(f"rewards must be finite or NaN (a failed reward), got {r.tolist()}")
    return r


def _check_std(std: str) -> None:
    if std not in STD_KINDS:
        raise ValueError(f"std must be one of {STD_KINDS}, got {std!r}")


def group_stats(rewards: Sequence[float] | Tensor, group_ids: GroupIds,
                std: str = "population") -> tuple[Tensor, Tensor, Tensor]:
    """Per-entry ``(mean, std, n)`` of its group's finite rewards, float64 ``(N,)`` each.

    ``std="sample"`` divides by ``n − 1`` (0 for a group of one finite reward)."""
    _check_std(std)
    inv, G = group_index(group_ids)
    r = _as_rewards(rewards, inv.shape[0])
    ok = ~torch.isnan(r)
    rv = torch.where(ok, r, torch.zeros_like(r))
    w = ok.to(torch.float64)
    count = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, w)
    mean = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, rv) / count.clamp(min=1)
    ss = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, w * (rv - mean[inv]) ** 2)
    denom = (count - 1) if std == "sample" else count
    var = torch.where(denom > 0, ss / denom.clamp(min=1), torch.zeros_like(ss))
    return mean[inv], var.sqrt()[inv], count[inv]


def group_mean_std(rewards: Sequence[float] | Tensor, group_ids: GroupIds,
                   std: str = "population") -> tuple[Tensor, Tensor]:
    """Per-entry mean and std of its group's (finite) rewards, float64 ``(N,)`` each."""
    mean, sd, _ = group_stats(rewards, group_ids, std)
    return mean, sd


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    # den == 0 only when std == 0 and eps == 0, i.e. a uniform group whose numerators are all 0
    return torch.where(den > 0, num / den.clamp(min=torch.finfo(den.dtype).tiny), torch.zeros_like(num))


def _finish(adv: Tensor, r: Tensor) -> Tensor:
    """NaN rewards get advantage 0; float32."""
    return torch.where(torch.isnan(r), torch.zeros_like(adv), adv).float()


#: ``LossConfig.adv_norm`` -> ``(rewards, group_ids, eps=..., std=..., lengths=None) -> (N,)``.
ADVANTAGES: dict[str, Callable[..., Tensor]] = {}
#: Old names still accepted (so configs written before the rename load).
ADV_ALIASES: dict[str, str] = {"mean_only": "group_mean"}


def register_advantage(name: str):
    """Decorator: add an advantage estimator to :data:`ADVANTAGES` (its docstring documents the name)."""

    def deco(fn):
        if name in ADVANTAGES and ADVANTAGES[name] is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGES[name] = fn
        return fn

    return deco


def canonical_adv_norm(name: str) -> str:
    """``name`` with aliases resolved (``mean_only`` -> ``group_mean``)."""
    return ADV_ALIASES.get(name, name)


@register_advantage("group_std")
def group_std_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 1e-6,
                         std: str = "population", lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """GRPO (DeepSeekMath Eq. 3) / DSPO Eq. 10: ``A_i = (r_i − mean_g) / (std_g + eps)``."""
    r = _as_rewards(rewards, len(group_ids))
    mean, sd, _ = group_stats(r, group_ids, std)
    return _finish(_safe_div(r - mean, sd + eps), r)


@register_advantage("group_mean")
def group_mean_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 0.0,
                          std: str = "population", lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """Dr. GRPO (Liu et al. 2025); Shi & Shen Eq. 4 (file 003): ``A_i = r_i − mean_g`` (no std
    division; ``eps`` and ``std`` unused). Alias: ``mean_only``."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _, _ = group_stats(r, group_ids)
    return _finish(r - mean, r)


mean_only_advantages = group_mean_advantages  # the old name


def _batch_std(r: Tensor, std: str) -> Tensor:
    v = r[~torch.isnan(r)]
    if v.numel() < (2 if std == "sample" else 1):
        return torch.zeros((), dtype=torch.float64)
    return v.std(unbiased=std == "sample")


@register_advantage("batch_std")
def batch_std_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 1e-6,
                         std: str = "population", lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """Group mean, batch std (TRL ``scale_rewards="batch"``; Liu et al. 2025 "Lite PPO"):
    ``A_i = (r_i − mean_g) / (std(r over the whole batch) + eps)``."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _, _ = group_stats(r, group_ids)
    return _finish(_safe_div(r - mean, _batch_std(r, std) + eps), r)


@register_advantage("rloo")
def rloo_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 0.0,
                    std: str = "population", lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024, Eq. 4): leave-one-out baseline
    ``A_i = r_i − mean_{j≠i} r_j = G/(G−1)·(r_i − mean_g)`` over the group's finite rewards. A group
    with one finite reward has no baseline: advantage 0 (verl keeps the raw reward)."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _, n = group_stats(r, group_ids)
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))
    return _finish(scale * (r - mean), r)


@register_advantage("reinforce_pp")
def reinforce_pp_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, eps: float = 1e-8,
                            std: str = "sample", lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """REINFORCE++-baseline (Hu 2025, arXiv 2501.03262; R1-Searcher): subtract the group mean, then
    normalize over the whole batch: ``A_i = (a_i − mean_B(a)) / sqrt(var_B(a) + eps)`` with
    ``a_i = r_i − mean_g``. Matches verl's ``compute_reinforce_plus_plus_baseline_outcome_advantage``
    (``core_algos.py``): a group of one has baseline 0; batch statistics are over policy tokens
    (each sequence weighted by ``lengths``, its policy-token count, as ``masked_whiten`` does; equal
    weights when None), ``std="sample"`` applies the Bessel correction, ``eps`` sits inside the sqrt
    (verl: 1e-8)."""
    r = _as_rewards(rewards, len(group_ids))
    mean, _, n = group_stats(r, group_ids)
    a = r - torch.where(n > 1, mean, torch.zeros_like(mean))
    ok = ~torch.isnan(r)
    w = torch.ones_like(r) if lengths is None else torch.as_tensor(lengths, dtype=torch.float64).reshape(-1)
    if w.shape != r.shape:
        raise ValueError(f"{w.shape[0]} lengths for {r.shape[0]} rewards")
    w = torch.where(ok, w, torch.zeros_like(w))
    tot = w.sum()
    if tot <= 0:
        return torch.zeros_like(r).float()
    av = torch.where(ok, a, torch.zeros_like(a))
    mu = (w * av).sum() / tot
    var = (w * (av - mu) ** 2).sum() / tot
    if std == "sample":
        var = var * tot / (tot - 1) if tot > 1 else torch.zeros_like(var)
    return _finish((a - mu) / torch.sqrt(var + eps), r)


def compute_advantages(rewards: Sequence[float] | Tensor, group_ids: GroupIds, mode: str = "group_std",
                       eps: float = 1e-6, std: str = "population",
                       lengths: Sequence[int] | Tensor | None = None) -> Tensor:
    """Advantages with ``mode`` (``LossConfig.adv_norm``), ``eps`` (``adv_eps``) and ``std`` (``adv_std``).

    ``lengths``: policy tokens per trajectory (read by ``reinforce_pp``'s token-weighted batch
    normalization)."""
    mode = canonical_adv_norm(mode)
    if mode not in ADVANTAGES:
        raise ValueError(f"unknown advantage mode {mode!r}; choose one of: {', '.join(ADVANTAGES)}")
    _check_std(std)
    return ADVANTAGES[mode](rewards, group_ids, eps=eps, std=std, lengths=lengths)


# ---------------------------------------------------------------------------- dynamic filter
def _range_mixed(r: Tensor, inv: Tensor, G: int) -> Tensor:
    """``max_gt_min``: DSPO Eq. 9 / DAPO dynamic sampling, ``0 < #correct < G`` as the exact test
    ``max(r_g) > min(r_g)`` over the group's finite rewards."""
    ok = ~torch.isnan(r)
    hi = torch.full((G,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, inv, torch.where(ok, r, torch.full_like(r, -torch.inf)), "amax")
    lo = torch.full((G,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, inv, torch.where(ok, r, torch.full_like(r, torch.inf)), "amin")
    return hi > lo


def _std_mixed(r: Tensor, inv: Tensor, G: int) -> Tensor:
    """``std_gt_0``: verl's DAPO recipe (``recipe/dapo/dapo_ray_trainer.py``), ``np.std(r_g) > 0``;
    float rounding can make it keep a group of equal non-binary rewards."""
    _, sd, _ = group_stats(r, inv)
    return torch.zeros(G, dtype=torch.bool).index_put_((inv,), sd > 0)


#: ``LossConfig.filter_criterion`` -> ``(rewards, inverse, n_groups) -> (G,)`` bool "the group's rewards differ".
FILTER_CRITERIA: dict[str, Callable[[Tensor, Tensor, int], Tensor]] = {
    "max_gt_min": _range_mixed,  # exact: DSPO Eq. 9 "0 < #correct < G"
    "std_gt_0": _std_mixed,  # verl recipe/dapo: np.std(rewards) > 0 (float rounding can keep a uniform group)
}


def keep_groups(rewards: Sequence[float] | Tensor, group_ids: GroupIds, criterion: str = "max_gt_min",
                keep_singletons: bool = False) -> Tensor:
    """DSPO Eq. 9 / DAPO dynamic sampling: keep the members of groups whose (finite) rewards are not
    all equal. Bool ``(N,)``.

    ``criterion``: ``max_gt_min`` (exact, default) or ``std_gt_0`` (verl). ``keep_singletons``: keep
    groups with a single finite reward (verl keeps one-member groups; the paper's filter drops them,
    as they carry no group-relative signal). A group whose rewards all failed (NaN) is dropped."""
    if criterion not in FILTER_CRITERIA:
        raise ValueError(f"unknown filter criterion {criterion!r}; choose one of: {', '.join(FILTER_CRITERIA)}")
    inv, G = group_index(group_ids)
    r = _as_rewards(rewards, inv.shape[0])
    keep = FILTER_CRITERIA[criterion](r, inv, G)
    if keep_singletons:
        n = torch.zeros(G, dtype=torch.float64).index_add_(0, inv, (~torch.isnan(r)).to(torch.float64))
        keep = keep | (n == 1)
    return keep[inv]


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
    dropped_failed: int = 0
    """Groups whose rewards were all NaN (failed judge / tool / backend), dropped."""
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
                f"{self.dropped_failed} failed, {self.surplus} surplus")


def fill_batch(sample_round: Callable[[int], tuple[Sequence[float] | Tensor, GroupIds, Sequence[Item]]],
               target_groups: int, max_rounds: int = 3, criterion: str = "max_gt_min",
               keep_singletons: bool = False) -> tuple[list[Item], FilterStats]:
    """Generate groups until ``target_groups`` mixed groups are kept (DAPO dynamic sampling, DSPO Eq. 9).

    ``sample_round(needed)`` is called with the number of groups still missing and returns
    ``(rewards (n,), group_ids (n,), items (n,))`` for the groups it generated (it may generate
    more than ``needed``, e.g. to allow for the expected drop rate). Items are whatever the
    caller needs later (a trajectory with its reward, say); group ids are scoped to one round.
    Uniform groups are dropped (:func:`keep_groups` with ``criterion`` / ``keep_singletons``), mixed ones kept in the order generated
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
    kept: list[list[Item]] = []
    while len(kept) < target_groups and stats.rounds < max_rounds:
        rewards, group_ids, items = sample_round(target_groups - len(kept))
        items = list(items)
        inv, G = group_index(group_ids)
        r = _as_rewards(rewards, inv.shape[0])
        if len(items) != r.shape[0]:
            raise ValueError(f"sample_round returned {len(items)} items for {r.shape[0]} rewards")
        keep = keep_groups(r, inv, criterion, keep_singletons)
        stats.rounds += 1
        stats.generated += G
        stats.generated_trajectories += len(items)
        members: list[list[int]] = [[] for _ in range(G)]
        for i, g in enumerate(inv.tolist()):
            members[g].append(i)
        for idx in members:
            if not keep[idx[0]]:
                finite = r[idx][~torch.isnan(r[idx])]
                if finite.numel() == 0:
                    stats.dropped_failed += 1
                elif finite[0] > 0:
                    stats.dropped_all_correct += 1
                else:
                    stats.dropped_all_wrong += 1
            elif len(kept) < target_groups:
                kept.append([items[i] for i in idx])
                stats.kept += 1
            else:
                stats.surplus += 1
    return [x for group in kept for x in group], stats
