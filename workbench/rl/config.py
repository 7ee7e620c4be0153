"""``LossConfig``: one dataclass of optimizer switches, and the named presets.

Every field is a switch of the one loss implementation in :mod:`workbench.rl.losses`
(the optimizers of the papers the methods cite; ``workbench methods NAME`` names each paper); the presets ``grpo``, ``dapo``,
``gspo``, ``dspo`` and ``dr_grpo`` are instances of it. Users mix switches freely; a mix that
cannot work fails in ``__post_init__`` with a message naming the field and the fix.

The names a field accepts come from the registries (:data:`workbench.rl.losses.SURROGATES`,
``KL_ESTIMATORS``, ``AGGREGATIONS``; :data:`workbench.rl.advantages.ADVANTAGES`), never from a copy;
:func:`valid_names` lists them. A method file adds a preset with :func:`register_loss_preset`.

    >>> cfg = get_loss_config("dspo", group_size=8)
    >>> cfg.surrogate, cfg.importance_level, cfg.agg, cfg.dynamic_filter
    ('sequence', 'sequence', 'seq-mean-token-mean', True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from workbench.rl.advantages import ADV_ALIASES, ADVANTAGES, FILTER_CRITERIA, STD_KINDS, canonical_adv_norm
from workbench.rl.losses import AGGREGATIONS, KL_ESTIMATORS, SURROGATES, kl_coef_at
from workbench.util.kinds import kinds_error

LEVELS = ("token", "sequence")
EMPTY_SEQS = ("skip", "count")


def valid_names() -> dict[str, tuple[str, ...]]:
    """The names each registry-backed ``LossConfig`` field accepts, read from the registries."""
    return {"surrogate": tuple(SURROGATES), "kl_estimator": tuple(KL_ESTIMATORS), "agg": tuple(AGGREGATIONS),
            "adv_norm": tuple(ADVANTAGES) + tuple(ADV_ALIASES), "adv_std": STD_KINDS,
            "filter_criterion": tuple(FILTER_CRITERIA), "empty_seqs": EMPTY_SEQS, "importance_level": LEVELS}


def surrogate_level(surrogate: str) -> str:
    """The importance level a surrogate uses: ``sequence`` for GSPO/DSPO's ratio, else ``token``."""
    return "sequence" if surrogate == "sequence" else "token"


@dataclass(frozen=True)
class LossConfig:
    """Switches of the clipped policy-gradient loss (defaults: GRPO as DynaSearcher runs it)."""

    name: str = "custom"
    """Label for logs; presets set their own name."""

    surrogate: str = "clipped_token"  # PPO / GRPO / DAPO
    """Policy-gradient surrogate (:data:`workbench.rl.losses.SURROGATES`): ``clipped_token``
    (PPO/GRPO/DAPO: per-token ratio ``r_t = π_θ/π_old`` in the decoupled clip), ``sequence``
    (GSPO/DSPO Eq. 6: ratio ``s_i`` = geometric mean of the token ratios over policy tokens, applied
    to every token in GSPO's token-level gradient form, so it aggregates like a token loss),
    ``dual_clip`` (dual-clip PPO, Ye et al. 2020: for A < 0 the loss is also capped at ``−clip_ratio_c·A``)."""

    importance_level: str | None = None
    """Legacy spelling of the ratio level (``token`` | ``sequence``), still accepted so that old
    configs load: ``sequence`` selects ``surrogate="sequence"``. After validation it always holds
    the level the surrogate uses."""

    clip_ratio_c: float = 3.0  # verl default, Ye et al. 2020
    """``dual_clip``: the cap ``c`` (> 1) of the loss of negative-advantage tokens, ``−c·A``."""

    agg: str = "seq-mean-token-mean"  # GRPO, GSPO
    """How per-token losses become one number (:data:`workbench.rl.losses.AGGREGATIONS`):
    ``token-mean`` (DAPO: all policy tokens of the batch count equally), ``seq-mean-token-mean``
    (GRPO, GSPO: mean over sequences of each sequence's token mean), ``seq-mean-token-sum`` (verl:
    mean over sequences of each sequence's token sum), ``seq-mean-token-sum-norm`` (Dr. GRPO: token
    sums / ``max_len``, then mean over sequences)."""

    empty_seqs: str = "skip"
    """Sequences without policy tokens (e.g. a rollout cut before it generated anything) in the
    ``seq-mean-*`` denominators: ``skip`` (ours: G counts sequences with policy tokens) or ``count``
    (TRL: ``.mean()`` over rows, Dr. GRPO ``/(B·max_len)``). Equal when no row is empty."""

    eps_low: float = 0.2  # GRPO / PPO clip 0.2 (DynaSearcher)
    """Lower clip range: ratios below ``1 - eps_low`` are clipped (where that matters, A < 0)."""

    eps_high: float = 0.2  # GRPO / PPO clip 0.2 (DynaSearcher)
    """Upper clip range: ratios above ``1 + eps_high`` are clipped (where that matters, A > 0).
    DAPO's clip-higher uses 0.28; GSPO's sequence ratios use 4e-4."""

    kl_coef: float = 1e-3  # DynaSearcher, R-Search (Zhao et al.)
    """β of the KL penalty to the reference policy (the base model, adapter disabled); 0 turns
    the KL term (and the reference forward) off. With ``kl_coef_end`` it is the start value."""

    kl_estimator: str = "k3"  # DeepSeekMath GRPO Eq. 4
    """Per-token KL estimator (:data:`workbench.rl.losses.KL_ESTIMATORS`, Schulman's
    http://joschu.net/blog/kl-approx.html): ``k1`` (``logp − ref``), ``k2`` (``½(logp − ref)²``),
    ``k3`` (``exp(ref − logp) − (ref − logp) − 1``, GRPO)."""

    kl_clamp: float | None = None
    """Clamp each token's KL estimate to ``±kl_clamp`` (verl clamps k3 at 10); None: no clamp."""

    kl_coef_end: float | None = None
    """End value of a linear KL anneal (Shi & Shen: 0.1 → 0.01); ``None`` keeps β constant.
    Needs ``kl_anneal_steps``."""

    kl_anneal_steps: int | None = None
    """Training steps (rollout batches, not optimizer steps) over which β goes linearly from
    ``kl_coef`` to ``kl_coef_end`` (usually the total number of training steps); β stays at
    ``kl_coef_end`` afterwards."""

    adv_norm: str = "group_std"  # GRPO
    """Advantage estimator (:data:`workbench.rl.advantages.ADVANTAGES`): ``group_std``
    ``(r - mean_g)/(std_g + adv_eps)`` (GRPO, DSPO Eq. 10), ``group_mean`` ``r - mean_g`` (Dr. GRPO,
    Shi & Shen Eq. 4; old name ``mean_only`` still accepted), ``batch_std``
    ``(r - mean_g)/(std_batch + adv_eps)`` (group mean, batch std), ``rloo`` (leave-one-out
    baseline ``r_i - mean_{j≠i} r_j``), ``reinforce_pp`` (REINFORCE++-baseline, Hu 2025: group mean
    subtracted, then whitened over the batch's policy tokens, as verl)."""

    adv_eps: float = 1e-6  # verl / DSPO Eq. 10 "small constant"
    """ε added to the standard deviation in ``group_std`` / ``batch_std`` (inside the sqrt of the
    variance in ``reinforce_pp``, verl: 1e-8)."""

    adv_std: str = "population"
    """Standard deviation in the advantages: ``population`` (divide by n; ours) or ``sample``
    (divide by n − 1, ``torch.std`` as TRL and verl). For G = 4 sample-std advantages are 0.87× ours."""

    dynamic_filter: bool = False
    """Keep only groups whose rewards differ and sample more groups until the batch is full (DAPO
    dynamic sampling, DSPO Eq. 9); see :func:`workbench.rl.advantages.fill_batch`."""

    filter_criterion: str = "max_gt_min"  # DSPO Eq. 9: 0 < #correct < G
    """With ``dynamic_filter``: when a group's rewards "differ": ``max_gt_min`` (exact, the paper's
    ``0 < #correct < G``) or ``std_gt_0`` (verl's ``np.std(rewards) > 0``, which float rounding can
    satisfy for equal non-binary rewards)."""

    filter_keep_singletons: bool = False  # DAPO / DSPO: a group of one has no mixed rewards
    """With ``dynamic_filter``: keep groups with a single (finite) reward, as verl does; the papers'
    filter drops them (no group-relative signal). A group of one arises with ``group_size=1`` in
    verl or, here, when all but one reward of a group failed (NaN)."""

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

        names = valid_names()
        for f in ("surrogate", "kl_estimator", "agg", "adv_norm", "adv_std", "filter_criterion", "empty_seqs"):
            if getattr(self, f) not in names[f]:
                raise bad(f, f"{getattr(self, f)!r} is not one of {names[f]}")
        object.__setattr__(self, "adv_norm", canonical_adv_norm(self.adv_norm))
        level = surrogate_level(self.surrogate)
        if self.importance_level is not None and self.importance_level != level:
            if self.importance_level not in LEVELS:
                raise bad("importance_level", f"{self.importance_level!r} is not one of {LEVELS}")
            if self.surrogate != "clipped_token":
                raise bad("importance_level", f"{self.importance_level!r} contradicts surrogate={self.surrogate!r} "
                          f"(which uses {level!r} ratios); set only surrogate")
            object.__setattr__(self, "surrogate", "sequence")  # legacy importance_level="sequence"
            level = "sequence"
        object.__setattr__(self, "importance_level", level)
        if self.clip_ratio_c <= 1:
            raise bad("clip_ratio_c", f"must be > 1 (dual-clip caps the loss of A < 0 tokens at -c·A with c > 1), "
                      f"got {self.clip_ratio_c}")
        if self.kl_clamp is not None and self.kl_clamp <= 0:
            raise bad("kl_clamp", f"must be > 0 (verl uses 10) or None for no clamp, got {self.kl_clamp}")
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
                    "is set but there is no schedule: also set kl_anneal_steps (the number of training steps "
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
        """β at training step ``step`` (0-based), following this config's schedule."""
        if self.kl_coef_end is None:
            return self.kl_coef
        return kl_coef_at(step, self.kl_anneal_steps, self.kl_coef, self.kl_coef_end)

    def replace(self, **overrides) -> LossConfig:
        """A copy with some fields changed (validated again).

        ``surrogate`` and the legacy ``importance_level`` stay consistent: overriding one re-derives
        the other (``importance_level="token"`` on a sequence preset selects ``clipped_token``)."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"LossConfig has no field(s) {unknown}; fields are: {', '.join(sorted(fields))}")
        error = kinds_error(LossConfig, overrides)
        if error:  # {"kl_coef": "abc"} from a file or --loss-overrides, before a comparison meets it
            raise ValueError(f"LossConfig({self.name!r}).{error}")
        over = dict(overrides)
        if "surrogate" in over and "importance_level" not in over:
            over["importance_level"] = None
        elif "importance_level" in over and "surrogate" not in over:
            lvl = over["importance_level"]
            if lvl is not None and lvl != surrogate_level(self.surrogate):
                over["surrogate"] = "clipped_token"  # then "sequence" is selected from the level
        return dataclasses.replace(self, **over)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: Named presets. Sources: DynaSearcher (file 000) for GRPO's clip 0.2 / KL 1e-3; DAPO (Yu et al.
#: 2025) as used by Wang et al. (file 004, Eq. 3): no KL, clip-higher 0.2/0.28, token-mean, dynamic
#: sampling; GSPO (Zheng et al. 2025): sequence ratio, ε 3e-4/4e-4, no KL, 4 mini-batches per
#: batch; DSPO (file 002) = GSPO + dynamic filter (Eq. 9-11); Dr. GRPO (Liu et al. 2025): no std
#: division, token sums over a constant length, no KL; REINFORCE++-baseline (Hu 2025) as R1-Searcher
#: (Song et al. 2025) trains with it. Method files add more with :func:`register_loss_preset`.
PRESETS: dict[str, LossConfig] = {
    "grpo": LossConfig(
        name="grpo",
        surrogate="clipped_token",
        agg="seq-mean-token-mean",  # GRPO (DeepSeekMath Eq. 3): 1/G Σ_i 1/|o_i| Σ_t
        eps_low=0.2,  # DynaSearcher clip 0.2
        eps_high=0.2,  # DynaSearcher clip 0.2
        kl_coef=1e-3,  # DynaSearcher, R-Search (Zhao et al.)
        adv_norm="group_std",  # GRPO
    ),
    "dapo": LossConfig(
        name="dapo",
        surrogate="clipped_token",
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
        surrogate="sequence",  # GSPO
        agg="seq-mean-token-mean",  # GSPO: mean over sequences
        eps_low=3e-4,  # GSPO
        eps_high=4e-4,  # GSPO
        kl_coef=0.0,  # GSPO: no KL
        adv_norm="group_std",  # GSPO
        num_mini_batches=4,  # GSPO: each rollout batch split into 4 mini-batches
    ),
    "dspo": LossConfig(
        name="dspo",
        surrogate="sequence",  # DSPO Eq. 6
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
        surrogate="clipped_token",
        agg="seq-mean-token-sum-norm",  # Dr. GRPO: no 1/|o_i|
        eps_low=0.2,  # Dr. GRPO keeps PPO's clip
        eps_high=0.2,
        kl_coef=0.0,  # Dr. GRPO: β = 0
        adv_norm="group_mean",  # Dr. GRPO: no std division
        max_len=4096,  # = RolloutConfig.max_total_tokens; set it to your generation budget
    ),
    "reinforce_pp": LossConfig(
        name="reinforce_pp",
        surrogate="clipped_token",  # REINFORCE++ keeps PPO's token clip
        agg="seq-mean-token-mean",  # OpenRLHF (R1-Searcher's trainer): per-sequence token mean
        eps_low=0.2,  # R1-Searcher / REINFORCE++: clip 0.2
        eps_high=0.2,
        kl_coef=0.0,  # R1-Searcher's Qwen-2.5-7B-Base training script: no KL (workbench/methods/r1_searcher.py)
        adv_norm="reinforce_pp",  # REINFORCE++-baseline (Hu 2025): group mean, then batch whitening
        adv_std="sample",  # verl masked_whiten: Bessel-corrected variance
        adv_eps=1e-8,  # verl masked_whiten: rsqrt(var + 1e-8)
    ),
}


def register_loss_preset(cfg: LossConfig) -> LossConfig:
    """Add ``cfg`` to :data:`PRESETS` under ``cfg.name`` (a method file's own optimizer preset).

    Registering the same name again must give an identical config.

    >>> register_loss_preset(PRESETS["grpo"]) is PRESETS["grpo"]  # same values again: a no-op
    True
    """
    if not isinstance(cfg, LossConfig):
        raise TypeError(f"register_loss_preset needs a LossConfig, got {type(cfg).__name__}")
    if cfg.name in ("", "custom"):
        raise ValueError("register_loss_preset: give the preset a name (LossConfig(name=...))")
    old = PRESETS.get(cfg.name)
    if old is not None and old != cfg:
        raise ValueError(f"loss preset {cfg.name!r} is already registered with different values")
    PRESETS[cfg.name] = cfg
    return cfg


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
