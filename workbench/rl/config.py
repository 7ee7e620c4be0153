"""``LossConfig``: one dataclass of optimizer switches, and the named presets.

Every field is a switch of the one loss implementation in :mod:`workbench.rl.losses`
(see the "Optimizer family" section of ``shared/SEEDS.md``); the presets ``grpo``, ``dapo``,
``gspo``, ``dspo`` and ``dr_grpo`` are instances of it. Users mix switches freely; a mix that
cannot work fails in ``__post_init__`` with a message naming the field and the fix.

    >>> cfg = get_loss_config("dspo", group_size=8)
    >>> cfg.importance_level, cfg.agg, cfg.dynamic_filter
    ('sequence', 'seq-mean-token-mean', True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

IMPORTANCE_LEVELS = ("token", "sequence")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ADV_NORMS = ("group_std", "mean_only", "batch_std")


@dataclass(frozen=True)
class LossConfig:
    """Switches of the clipped policy-gradient loss (defaults: GRPO as DynaSearcher runs it)."""

    name: str = "custom"
    """Label for logs; presets set their own name."""

    importance_level: str = "token"  # GRPO / DAPO
    """``token``: ratio per token ``r_t = π_θ/π_old`` (GRPO, DAPO). ``sequence``: GSPO/DSPO Eq. 6
    ratio ``s_i`` = geometric mean of the token ratios over policy tokens, applied to every
    token of the sequence in GSPO's token-level gradient form (aggregates like a token loss)."""

    agg: str = "seq-mean-token-mean"  # GRPO, GSPO
    """How per-token losses become one number: ``token-mean`` (DAPO: all policy tokens of the
    batch count equally), ``seq-mean-token-mean`` (GRPO, GSPO: mean over sequences of each
    sequence's token mean), ``seq-mean-token-sum-norm`` (Dr. GRPO: token sums / ``max_len``,
    then mean over sequences)."""

    eps_low: float = 0.2  # GRPO / PPO clip 0.2 (DynaSearcher)
    """Lower clip range: ratios below ``1 - eps_low`` are clipped (where that matters, A < 0)."""

    eps_high: float = 0.2  # GRPO / PPO clip 0.2 (DynaSearcher)
    """Upper clip range: ratios above ``1 + eps_high`` are clipped (where that matters, A > 0).
    DAPO's clip-higher uses 0.28; GSPO's sequence ratios use 4e-4."""

    kl_coef: float = 1e-3  # DynaSearcher, R-Search (Zhao et al.)
    """β of the k3 KL penalty to the reference policy (the base model, adapter disabled); 0 turns
    the KL term (and the reference forward) off. With ``kl_coef_end`` it is the start value."""

    kl_coef_end: float | None = None
    """End value of a linear KL anneal (Shi & Shen: 0.1 → 0.01); ``None`` keeps β constant.
    Needs ``kl_anneal_steps``."""

    kl_anneal_steps: int | None = None
    """Optimizer steps over which β goes linearly from ``kl_coef`` to ``kl_coef_end`` (usually
    the total number of training steps); β stays at ``kl_coef_end`` afterwards."""

    adv_norm: str = "group_std"  # GRPO
    """Advantage: ``group_std`` ``(r - mean_g)/(std_g + adv_eps)`` (GRPO, DSPO Eq. 10),
    ``mean_only`` ``r - mean_g`` (Dr. GRPO, Shi & Shen Eq. 4), ``batch_std``
    ``(r - mean_g)/(std_batch + adv_eps)`` (group mean, batch std)."""

    adv_eps: float = 1e-6  # verl / DSPO Eq. 10 "small constant"
    """ε added to the standard deviation in ``group_std`` / ``batch_std``."""

    dynamic_filter: bool = False
    """Keep only groups whose rewards differ (std > 0) and sample more groups until the batch is
    full (DAPO dynamic sampling, DSPO Eq. 9); see :func:`workbench.rl.advantages.fill_batch`."""

    filter_max_rounds: int = 3
    """With ``dynamic_filter``: at most this many generation rounds per batch (the first one
    included); a batch still short after that is trained on as is and reported."""

    group_size: int | None = None
    """Rollouts per question, when known (pass ``RolloutConfig.group_size``), so that settings
    that need groups can be checked here; ``None`` skips those checks."""

    ppo_epochs: int = 1  # GRPO μ = 1 (DeepSeekMath), DAPO, GSPO
    """Passes over each rollout batch. With 1 epoch and 1 mini-batch the update is on-policy:
    every ratio is 1 and clipping never acts."""

    num_mini_batches: int = 1  # DynaSearcher: ppo_mini_batch_size = train_batch_size = 16
    """Optimizer steps per epoch (the batch is split into this many mini-batches, each
    normalized on its own; gradient-accumulation micro-batches inside one keep its counts)."""

    max_len: int | None = None
    """The constant divisor of ``seq-mean-token-sum-norm`` (Dr. GRPO: the generation budget in
    tokens, e.g. ``RolloutConfig.max_total_tokens``); unused by the other modes."""

    def __post_init__(self) -> None:
        def bad(field: str, msg: str) -> ValueError:
            return ValueError(f"LossConfig({self.name!r}).{field}: {msg}")

        if self.importance_level not in IMPORTANCE_LEVELS:
            raise bad("importance_level", f"{self.importance_level!r} is not one of {IMPORTANCE_LEVELS}")
        if self.agg not in AGG_MODES:
            raise bad("agg", f"{self.agg!r} is not one of {AGG_MODES}")
        if self.adv_norm not in ADV_NORMS:
            raise bad("adv_norm", f"{self.adv_norm!r} is not one of {ADV_NORMS}")
        for f in ("eps_low", "eps_high"):
            v = getattr(self, f)
            if v < 0:
                raise bad(f, f"must be >= 0, got {v}; it is a distance from 1 (clip(r, 1 - eps_low, 1 + eps_high))")
        if self.eps_low >= 1:
            raise bad("eps_low", f"must be < 1 so that the lower clip bound 1 - eps_low stays positive, got {self.eps_low}")
        if self.kl_coef < 0:
            raise bad("kl_coef", f"must be >= 0 (0 disables the KL term), got {self.kl_coef}")
        if self.kl_coef_end is not None:
            if self.kl_coef_end < 0:
                raise bad("kl_coef_end", f"must be >= 0, got {self.kl_coef_end}")
            if self.kl_anneal_steps is None:
                raise bad(
                    "kl_coef_end",
                    "is set but there is no schedule: also set kl_anneal_steps (the number of optimizer steps "
                    "over which β goes from kl_coef to kl_coef_end, e.g. the total training steps), "
                    "or drop kl_coef_end for a constant β",
                )
        if self.kl_anneal_steps is not None:
            if self.kl_coef_end is None:
                raise bad("kl_anneal_steps", "has no effect without kl_coef_end; set kl_coef_end (the final β) or drop it")
            if self.kl_anneal_steps < 1:
                raise bad("kl_anneal_steps", f"must be >= 1, got {self.kl_anneal_steps}")
        if self.adv_eps < 0:
            raise bad("adv_eps", f"must be >= 0, got {self.adv_eps}")
        if self.agg == "seq-mean-token-sum-norm" and (self.max_len is None or self.max_len < 1):
            raise bad(
                "max_len",
                f"agg='seq-mean-token-sum-norm' divides each sequence's token sum by a constant max_len, got "
                f"{self.max_len!r}; set max_len to the generation budget in tokens (e.g. RolloutConfig.max_total_tokens)",
            )
        if self.group_size is not None and self.group_size < 1:
            raise bad("group_size", f"must be >= 1, got {self.group_size}")
        if self.dynamic_filter and self.group_size is not None and self.group_size < 2:
            raise bad(
                "dynamic_filter",
                f"needs groups of at least 2 rollouts (a group of {self.group_size} never has mixed rewards, so "
                "every group would be dropped); raise group_size (RolloutConfig.group_size) or set dynamic_filter=False",
            )
        if self.group_size == 1:
            raise bad(
                "group_size",
                f"adv_norm={self.adv_norm!r} centers each reward on its group's mean, which is the reward itself "
                "when group_size=1 (every advantage 0, no learning signal); use group_size >= 2",
            )
        if self.filter_max_rounds < 1:
            raise bad("filter_max_rounds", f"must be >= 1, got {self.filter_max_rounds}")
        if self.ppo_epochs < 1:
            raise bad("ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        if self.num_mini_batches < 1:
            raise bad("num_mini_batches", f"must be >= 1, got {self.num_mini_batches}")

    @property
    def needs_ref(self) -> bool:
        """Whether the loss needs reference logprobs (any β > 0 over the run)."""
        return self.kl_coef > 0 or bool(self.kl_coef_end)

    @property
    def on_policy(self) -> bool:
        """One optimizer step per batch: ratios are exactly 1, clipping never acts."""
        return self.ppo_epochs == 1 and self.num_mini_batches == 1

    def kl_coef_at(self, step: int) -> float:
        """β at optimizer step ``step`` (0-based), following this config's schedule."""
        from workbench.rl.losses import kl_coef_at

        if self.kl_coef_end is None:
            return self.kl_coef
        return kl_coef_at(step, self.kl_anneal_steps, self.kl_coef, self.kl_coef_end)

    def replace(self, **overrides) -> LossConfig:
        """A copy with some fields changed (validated again)."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"LossConfig has no field(s) {unknown}; fields are: {', '.join(sorted(fields))}")
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: Named presets. Sources: DynaSearcher (file 000) for GRPO's clip 0.2 / KL 1e-3; DAPO (Yu et al.
#: 2025) as used by Wang et al. (file 004, Eq. 3): no KL, clip-higher 0.2/0.28, token-mean, dynamic
#: sampling; GSPO (Zheng et al. 2025): sequence ratio, ε 3e-4/4e-4, no KL, 4 mini-batches per
#: batch; DSPO (file 002) = GSPO + dynamic filter (Eq. 9-11); Dr. GRPO (Liu et al. 2025): no std
#: division, token sums over a constant length, no KL.
PRESETS: dict[str, LossConfig] = {
    "grpo": LossConfig(
        name="grpo",
        importance_level="token",
        agg="seq-mean-token-mean",  # GRPO (DeepSeekMath Eq. 3): 1/G Σ_i 1/|o_i| Σ_t
        eps_low=0.2,  # DynaSearcher clip 0.2
        eps_high=0.2,  # DynaSearcher clip 0.2
        kl_coef=1e-3,  # DynaSearcher, R-Search (Zhao et al.)
        adv_norm="group_std",  # GRPO
    ),
    "dapo": LossConfig(
        name="dapo",
        importance_level="token",
        agg="token-mean",  # DAPO token-level policy-gradient loss
        eps_low=0.2,  # DAPO
        eps_high=0.28,  # DAPO clip-higher
        kl_coef=0.0,  # DAPO removes the KL term
        adv_norm="group_std",  # DAPO keeps GRPO's group normalization
        dynamic_filter=True,  # DAPO dynamic sampling
        num_mini_batches=16,  # DAPO: 16 gradient updates per rollout step
    ),
    "gspo": LossConfig(
        name="gspo",
        importance_level="sequence",  # GSPO
        agg="seq-mean-token-mean",  # GSPO: mean over sequences
        eps_low=3e-4,  # GSPO
        eps_high=4e-4,  # GSPO
        kl_coef=0.0,  # GSPO: no KL
        adv_norm="group_std",  # GSPO
        num_mini_batches=4,  # GSPO: each rollout batch split into 4 mini-batches
    ),
    "dspo": LossConfig(
        name="dspo",
        importance_level="sequence",  # DSPO Eq. 6
        agg="seq-mean-token-mean",  # DSPO Eq. 11: mean over sequences
        eps_low=3e-4,  # GSPO's ε, which DSPO inherits
        eps_high=4e-4,  # GSPO's ε, which DSPO inherits
        kl_coef=0.0,  # Eq. 11 has no KL term
        adv_norm="group_std",  # DSPO Eq. 10
        dynamic_filter=True,  # DSPO Eq. 9
        num_mini_batches=4,  # as GSPO
    ),
    "dr_grpo": LossConfig(
        name="dr_grpo",
        importance_level="token",
        agg="seq-mean-token-sum-norm",  # Dr. GRPO: no 1/|o_i|
        eps_low=0.2,  # Dr. GRPO keeps PPO's clip
        eps_high=0.2,
        kl_coef=0.0,  # Dr. GRPO: β = 0
        adv_norm="mean_only",  # Dr. GRPO: no std division
        max_len=4096,  # = RolloutConfig.max_total_tokens; set it to your generation budget
    ),
}


def get_loss_config(name: str, **overrides) -> LossConfig:
    """A preset by name, with fields overridden (and the mix validated).

    >>> get_loss_config("dapo").eps_high
    0.28
    >>> get_loss_config("grpo", kl_coef=0.1, kl_coef_end=0.01, kl_anneal_steps=100).kl_coef_at(99)
    0.01
    """
    if name not in PRESETS:
        raise ValueError(f"unknown loss preset {name!r}; choose one of: {', '.join(PRESETS)}")
    cfg = PRESETS[name]
    return cfg.replace(**overrides) if overrides else cfg
