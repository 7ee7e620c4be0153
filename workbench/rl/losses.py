"""Policy-gradient losses as pure tensor functions, and one ``policy_loss`` that composes them.

Conventions (all ``(B, T)`` tensors share them):

- ``logp``: log π_θ of each target token (with gradient), ``old_logp``: log π_old (the sampling
  policy), ``ref_logp``: log π_ref (base model, adapter disabled); column ``t`` is token ``t``
  of the padded sequence (see :mod:`workbench.rl.batch`).
- ``mask``: 1 on policy tokens, 0 on prompt, observation and padding tokens. Masked positions
  never reach the loss: functions select with ``torch.where`` (not multiply), so their
  gradients are exactly zero even if a masked log-prob is extreme.
- ``advantages``: ``(B,)`` (one per sequence, broadcast over its tokens) or ``(B, T)``.
- A per-token loss is turned into a number by :func:`aggregate`, never inside a variant.

Registries (``LossConfig`` validates its names against them, the CLI reaches them through
``--loss-overrides``): :data:`SURROGATES` (``clipped_token`` | ``sequence`` | ``dual_clip``),
:data:`KL_ESTIMATORS` (``k1`` | ``k2`` | ``k3``) and :data:`AGGREGATIONS`. Adding a variant = one
decorated function (its docstring names the paper and equation), one test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

LOG_RATIO_CLAMP = 20.0
"""Token log-ratios are clamped to ±20 before ``exp`` (as verl does) so a stale batch cannot overflow."""


class LossSwitches(Protocol):
    """The switches the loss reads: :class:`workbench.rl.config.LossConfig` has them (that module checks its names
    against the registries here, so this one names the fields it reads instead of importing the class)."""

    name: str
    surrogate: str
    eps_low: float
    eps_high: float
    clip_ratio_c: float
    kl_estimator: str
    kl_clamp: float | None
    agg: str
    max_len: int | None
    empty_seqs: str

    def kl_coef_at(self, step: int) -> float: ...


# ---------------------------------------------------------------------------- helpers
def normalizers(mask: Tensor) -> tuple[int, int]:
    """``(policy tokens, sequences with at least one policy token)`` of a ``(B, T)`` mask.

    Compute them on the whole (mini-)batch and pass them as ``global_tokens`` / ``global_seqs``
    to every micro-batch so that the micro-batch losses sum to the batch loss.
    """
    m = mask.bool()
    return int(m.sum()), int((m.sum(-1) > 0).sum())


def masked_sum(x: Tensor, mask: Tensor) -> Tensor:
    """Σ x over ``mask`` (selected with ``where``: masked values never propagate, not even NaN)."""
    return torch.where(mask.bool(), x, torch.zeros_like(x)).sum()


def masked_mean(x: Tensor, mask: Tensor, denom: float | int | Tensor | None = None) -> Tensor:
    """Σ x over ``mask`` / ``denom`` (default: the number of masked-in entries, at least 1)."""
    n = mask.bool().sum() if denom is None else denom
    return masked_sum(x, mask) / _at_least_one(n)


def _at_least_one(n: float | int | Tensor) -> float | Tensor:
    return n.clamp(min=1) if isinstance(n, Tensor) else max(n, 1)


def _check(logp: Tensor, *others: Tensor | None) -> None:
    for o in others:
        if o is not None and o.shape != logp.shape:
            raise ValueError(f"shape mismatch: {tuple(o.shape)} vs logp {tuple(logp.shape)}; all (B, T) inputs must align")


# ---------------------------------------------------------------------------- ratios
def log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``log π_θ − log π_old`` per policy token, 0 elsewhere, clamped to ±``LOG_RATIO_CLAMP``."""
    d = torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp))
    return d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """PPO / GRPO token ratio ``r_t = exp(log π_θ(y_t) − log π_old(y_t))`` (DAPO Eq. 3 in file 004).

    ``(B, T)``; exactly 1 on masked positions.
    """
    return torch.exp(log_ratio(logp, old_logp, mask))


def truncated_is_weights(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Truncated importance sampling weights ``w_t = min(π_old(y_t) / π_rollout(y_t), C)``, detached; 1 off
    the mask and where the rollout logprob is missing (NaN). Yao et al. (2025), "Your efficient RL framework
    secretly brings you off-policy RL training" (verl's ``tis_imp_ratio_cap``): the rollout engine's
    sampling distribution differs from the trainer's, so each token's policy-gradient term is reweighted.

    >>> truncated_is_weights(torch.tensor([[0.0, 0.0]]), torch.tensor([[-1.0, 0.5]]), torch.ones(1, 2), 2.0)
    tensor([[2.0000, 0.6065]])
    """
    m = mask.bool() & torch.isfinite(rollout_logp)
    return torch.exp(log_ratio(old_logp, torch.nan_to_num(rollout_logp), m)).clamp(max=cap).detach()


def sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``log s_i = (1/|y_i|) Σ_{t∈policy} (log π_θ − log π_old)`` (DSPO Eq. 6, GSPO). ``(B,)``.

    ``|y_i|`` counts policy tokens only (observation tokens are masked, DSPO §3.3); a sequence
    without policy tokens gets 0.
    """
    B, T = logp.shape
    m = mask.bool()
    return log_ratio(logp, old_logp, m).sum(-1) / m.sum(-1).clamp(min=1)


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """DSPO Eq. 6 / GSPO: ``s_i = exp(mean_{t∈policy} log(π_θ(y_t)/π_old(y_t)))``, the geometric
    mean of the token ratios of sequence ``i``. ``(B,)``, differentiable (the sequence objective)."""
    return torch.exp(sequence_log_ratio(logp, old_logp, mask))


def sequence_ratio_token(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO-token (Zheng et al. 2025, §4.3): ``s_i,t = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]``. ``(B, T)``.

    Its value is ``s_i`` (DSPO Eq. 6) at every token of sequence ``i``, and the gradient of
    ``mean_t s_i,t`` equals that of ``s_i``: ``s_i · mean_t ∇log π_θ(y_t)``. So with per-sequence
    advantages and ``seq-mean-token-mean`` aggregation the clipped loss is exactly DSPO Eq. 11,
    and the same tensor also aggregates like any token loss (``token-mean`` ...).
    """
    m = mask.bool()
    log_s = sequence_log_ratio(logp, old_logp, m).detach()  # sg[s_i]
    live = torch.where(m, logp - logp.detach(), torch.zeros_like(logp))  # value 0, gradient ∇log π_θ(y_t)
    return torch.exp(log_s[:, None] + live)


#: Importance level -> ``(logp, old_logp, mask) -> (B, T)`` ratio (``LossConfig.importance_level``, which
#: each surrogate implies: ``sequence`` for :func:`surrogate_sequence`, ``token`` otherwise).
IMPORTANCE: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "token": token_ratio,
    "sequence": sequence_ratio_token,
}


# ---------------------------------------------------------------------------- surrogate
def _expand_adv(advantages: Tensor, B: int, T: int) -> Tensor:
    if advantages.dim() == 1:
        if advantages.shape[0] != B:
            raise ValueError(f"advantages has {advantages.shape[0]} entries for a batch of {B} sequences")
        return advantages[:, None].expand(B, T)
    if advantages.shape != (B, T):
        raise ValueError(f"advantages must be (B,) or (B, T) = ({B}, {T}), got {tuple(advantages.shape)}")
    return advantages


def clipped_surrogate(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """Decoupled-clip PPO surrogate per token (DAPO Eq. 3 in file 004; DSPO Eq. 11 with ``s_i``):

    ``ℓ_t = −min(r_t·A, clip(r_t, 1 − eps_low, 1 + eps_high)·A)``. ``(B, T)``, not yet masked.
    """
    B, T = ratio.shape
    A = _expand_adv(advantages, B, T).to(ratio.dtype)
    unclipped = ratio * A
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * A
    return -torch.minimum(unclipped, clipped)


def clip_active(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """Where the clip changes the surrogate (and zeroes its gradient): ``A > 0`` and
    ``r > 1 + eps_high``, or ``A < 0`` and ``r < 1 − eps_low``. Bool ``(B, T)``."""
    B, T = ratio.shape
    A = _expand_adv(advantages, B, T)
    return ((A > 0) & (ratio > 1.0 + eps_high)) | ((A < 0) & (ratio < 1.0 - eps_low))


# ---------------------------------------------------------------------------- surrogates
#: ``LossConfig.surrogate`` -> ``(logp, old_logp, mask, advantages, cfg) -> (per-token loss (B, T), ratio (B, T))``.
SURROGATES: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}


def register_surrogate(name: str):
    """Decorator: add a surrogate to :data:`SURROGATES` (its docstring documents the name)."""

    def deco(fn):
        if name in SURROGATES and SURROGATES[name] is not fn:
            raise ValueError(f"surrogate {name!r} is already registered")
        SURROGATES[name] = fn
        return fn

    return deco


@register_surrogate("clipped_token")
def surrogate_clipped_token(logp: Tensor, old_logp: Tensor, mask: Tensor, advantages: Tensor,
                            cfg: LossSwitches) -> tuple[Tensor, Tensor]:
    """PPO / GRPO / DAPO (file 004 Eq. 3): token ratio ``r_t`` in the decoupled clip
    ``−min(r_t·A, clip(r_t, 1 − eps_low, 1 + eps_high)·A)``."""
    ratio = token_ratio(logp, old_logp, mask)
    return clipped_surrogate(ratio, advantages, cfg.eps_low, cfg.eps_high), ratio


@register_surrogate("sequence")
def surrogate_sequence(logp: Tensor, old_logp: Tensor, mask: Tensor, advantages: Tensor,
                       cfg: LossSwitches) -> tuple[Tensor, Tensor]:
    """GSPO (Zheng et al. 2025) / DSPO Eq. 6 + Eq. 11: the sequence ratio ``s_i`` (geometric mean of
    the token ratios over policy tokens) in the clipped surrogate, in GSPO-token form
    (:func:`sequence_ratio_token`) so that it aggregates like a token loss."""
    ratio = sequence_ratio_token(logp, old_logp, mask)
    return clipped_surrogate(ratio, advantages, cfg.eps_low, cfg.eps_high), ratio


@register_surrogate("dual_clip")
def surrogate_dual_clip(logp: Tensor, old_logp: Tensor, mask: Tensor, advantages: Tensor,
                        cfg: LossSwitches) -> tuple[Tensor, Tensor]:
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games", Eq. 5; verl
    ``clip_ratio_c``): the token clipped surrogate, and for ``A < 0`` the loss is also capped at
    ``−c·A`` (``c = clip_ratio_c``, default 3.0), so one very large ratio cannot dominate."""
    ratio = token_ratio(logp, old_logp, mask)
    return dual_clip_surrogate(ratio, advantages, cfg.eps_low, cfg.eps_high, cfg.clip_ratio_c), ratio


def dual_clip_surrogate(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float, clip_c: float) -> Tensor:
    """Ye et al. 2020 Eq. 5: ``ℓ = min(ℓ_clip, −c·A)`` where ``A < 0``, ``ℓ_clip`` elsewhere. ``(B, T)``."""
    B, T = ratio.shape
    A = _expand_adv(advantages, B, T).to(ratio.dtype)
    pg = clipped_surrogate(ratio, A, eps_low, eps_high)
    return torch.where(A < 0, torch.minimum(pg, -clip_c * A), pg)


# ---------------------------------------------------------------------------- KL
#: ``LossConfig.kl_estimator`` -> ``(logp, ref_logp, mask) -> (B, T)`` per-token estimate of KL(π_θ ‖ π_ref), 0 off-mask.
KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {}


def register_kl_estimator(name: str):
    """Decorator: add a KL estimator to :data:`KL_ESTIMATORS` (its docstring documents the name)."""

    def deco(fn):
        if name in KL_ESTIMATORS and KL_ESTIMATORS[name] is not fn:
            raise ValueError(f"KL estimator {name!r} is already registered")
        KL_ESTIMATORS[name] = fn
        return fn

    return deco


def _ref_log_ratio(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask.bool(), ref_logp - logp, torch.zeros_like(logp)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@register_kl_estimator("k1")
def kl_k1(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """k1 estimate of KL(π_θ ‖ π_ref) (Schulman, http://joschu.net/blog/kl-approx.html):
    ``logp − ref`` per policy token; unbiased, high variance, can be negative. ``(B, T)``."""
    return -_ref_log_ratio(logp, ref_logp, mask)


@register_kl_estimator("k2")
def kl_k2(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """k2 estimate (Schulman, http://joschu.net/blog/kl-approx.html; verl ``mse``):
    ``½ (logp − ref)²`` per policy token, ≥ 0. ``(B, T)``."""
    return 0.5 * _ref_log_ratio(logp, ref_logp, mask) ** 2


@register_kl_estimator("k3")
def kl_k3(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """k3 estimate of KL(π_θ ‖ π_ref) per policy token (DeepSeekMath GRPO Eq. 4; Schulman's
    http://joschu.net/blog/kl-approx.html): ``exp(ref − logp) − (ref − logp) − 1`` ≥ 0. ``(B, T)``, 0 off-mask."""
    d = _ref_log_ratio(logp, ref_logp, mask)
    return torch.exp(d) - d - 1.0


def kl_term(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", clamp: float | None = None) -> Tensor:
    """Per-token KL with ``estimator`` (:data:`KL_ESTIMATORS`), clamped to ``±clamp`` when given
    (verl clamps its k3 ``low_var_kl`` to ±10, ``core_algos.kl_penalty``). ``(B, T)``."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of: {', '.join(KL_ESTIMATORS)}")
    kl = KL_ESTIMATORS[estimator](logp, ref_logp, mask)
    return kl if clamp is None else kl.clamp(-clamp, clamp)


def kl_coef_at(step: int, total_steps: int, start: float, end: float | None = None) -> float:
    """KL coefficient β at training step ``step`` (0-based), annealed linearly from ``start``
    to ``end`` over ``total_steps`` training steps (Shi & Shen, file 003 §4: 0.1 → 0.01 over training).

    Step 0 uses ``start``, step ``total_steps − 1`` (the last) uses ``end``, later steps stay at
    ``end``. ``end=None`` means constant ``start``. The schedule counts training steps (rollout
    batches), not optimizer steps: with mini-batches or epochs every optimizer step of a training
    step uses the same β.

    >>> round(kl_coef_at(25, 100, 0.1, 0.01), 4)
    0.0773
    """
    if end is None:
        return float(start)
    if total_steps < 1:
        raise ValueError(f"kl_coef_at: total_steps must be >= 1, got {total_steps}")
    frac = min(max(step, 0) / max(total_steps - 1, 1), 1.0)
    return float(start * (1.0 - frac) + end * frac)


# ---------------------------------------------------------------------------- aggregation
#: Aggregation mode -> function ``(loss, mask, global_tokens, global_seqs, max_len, count_empty) -> scalar``.
AGGREGATIONS: dict[str, Callable[..., Tensor]] = {}


def register_aggregation(name: str):
    """Decorator: add an aggregation to :data:`AGGREGATIONS` (its docstring documents the name)."""

    def deco(fn):
        if name in AGGREGATIONS and AGGREGATIONS[name] is not fn:
            raise ValueError(f"aggregation {name!r} is already registered")
        AGGREGATIONS[name] = fn
        return fn

    return deco


def _n_seqs(m: Tensor, global_seqs: int | None, count_empty: bool) -> int | Tensor:
    if global_seqs is not None:
        return global_seqs
    return m.shape[0] if count_empty else (m.sum(-1) > 0).sum()


@register_aggregation("token-mean")
def agg_token_mean(loss: Tensor, mask: Tensor, global_tokens: int | None = None, global_seqs: int | None = None,
                   max_len: int | None = None, count_empty: bool = False) -> Tensor:
    """``token-mean`` (DAPO token-level loss; file 004 Eq. 3): ``Σ_{i,t} ℓ_i,t / Σ_i |y_i|`` over
    all policy tokens of the batch (``global_tokens`` when the batch is split)."""
    n = mask.bool().sum() if global_tokens is None else global_tokens
    return masked_sum(loss, mask) / _at_least_one(n)


@register_aggregation("seq-mean-token-mean")
def agg_seq_mean_token_mean(loss: Tensor, mask: Tensor, global_tokens: int | None = None,
                            global_seqs: int | None = None, max_len: int | None = None,
                            count_empty: bool = False) -> Tensor:
    """``seq-mean-token-mean`` (GRPO, DeepSeekMath Eq. 3; GSPO; DSPO Eq. 11):
    ``(1/G) Σ_i (1/|y_i|) Σ_t ℓ_i,t`` over sequences with policy tokens (``global_seqs`` when split;
    ``count_empty``: every row counts in G, as TRL's ``.mean()``)."""
    m = mask.bool()
    per_seq = torch.where(m, loss, torch.zeros_like(loss)).sum(-1) / m.sum(-1).clamp(min=1)
    return per_seq.sum() / _at_least_one(_n_seqs(m, global_seqs, count_empty))


@register_aggregation("seq-mean-token-sum")
def agg_seq_mean_token_sum(loss: Tensor, mask: Tensor, global_tokens: int | None = None,
                           global_seqs: int | None = None, max_len: int | None = None,
                           count_empty: bool = False) -> Tensor:
    """``seq-mean-token-sum`` (verl ``agg_loss``): ``(1/G) Σ_i Σ_t ℓ_i,t``, token sums averaged over
    sequences (longer sequences weigh more; no length normalization)."""
    m = mask.bool()
    per_seq = torch.where(m, loss, torch.zeros_like(loss)).sum(-1)
    return per_seq.sum() / _at_least_one(_n_seqs(m, global_seqs, count_empty))


@register_aggregation("seq-mean-token-sum-norm")
def agg_seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, global_tokens: int | None = None,
                                global_seqs: int | None = None, max_len: int | None = None,
                                count_empty: bool = False) -> Tensor:
    """``seq-mean-token-sum-norm`` (Dr. GRPO, Liu et al. 2025): ``(1/G) Σ_i Σ_t ℓ_i,t / max_len``;
    a constant divisor instead of ``|y_i|`` removes GRPO's length bias. ``count_empty`` counts every
    row in G (TRL's ``dr_grpo``: ``/(B · max_completion_length)``)."""
    if max_len is None or max_len < 1:
        raise ValueError(f"agg 'seq-mean-token-sum-norm' needs max_len >= 1 (the generation budget), got {max_len!r}")
    m = mask.bool()
    per_seq = torch.where(m, loss, torch.zeros_like(loss)).sum(-1) / max_len
    return per_seq.sum() / _at_least_one(_n_seqs(m, global_seqs, count_empty))


def aggregate(loss: Tensor, mask: Tensor, mode: str, global_tokens: int | None = None, global_seqs: int | None = None,
              max_len: int | None = None, count_empty: bool = False) -> Tensor:
    """Reduce a ``(B, T)`` per-token loss over policy tokens with ``mode`` (see :data:`AGGREGATIONS`).

    Each mode is a sum over this batch divided by a count. By default the count is this
    batch's; pass ``global_tokens`` / ``global_seqs`` (from :func:`normalizers` on the whole
    mini-batch) and the losses of its micro-batches sum to the mini-batch loss, with the same
    gradient. ``count_empty``: sequences without policy tokens count in the sequence means
    (``LossConfig.empty_seqs="count"``).
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; choose one of: {', '.join(AGGREGATIONS)}")
    if loss.shape != mask.shape or loss.dim() != 2:
        raise ValueError(f"aggregate needs (B, T) loss and mask of the same shape, got {tuple(loss.shape)} and {tuple(mask.shape)}")
    return AGGREGATIONS[mode](loss, mask, global_tokens=global_tokens, global_seqs=global_seqs, max_len=max_len,
                              count_empty=count_empty)


# ---------------------------------------------------------------------------- logging metrics
def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dimension, in (at least) float32: ``logsumexp(z) − Σ softmax(z)·z``."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)


def entropy_from_logits_chunked(logits: Tensor, chunk_size: int = 1024) -> Tensor:
    """:func:`entropy_from_logits` over ``chunk_size`` rows at a time, so the float32 softmax of
    a whole ``(B, T, V)`` tensor never exists at once (rows are recomputed in backward)."""
    shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    outs = []
    for i in range(0, flat.shape[0], chunk_size):
        c = flat[i : i + chunk_size]
        if torch.is_grad_enabled() and c.requires_grad:
            outs.append(checkpoint(entropy_from_logits, c, use_reentrant=False))
        else:
            outs.append(entropy_from_logits(c))
    return torch.cat(outs).reshape(shape) if outs else flat.new_zeros(shape, dtype=torch.promote_types(flat.dtype, torch.float32))


def clip_fraction(ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float,
                  global_tokens: int | None = None) -> Tensor:
    """Share of policy tokens where clipping was active (:func:`clip_active`), over ``global_tokens``
    if given (so micro-batch values sum to the batch value)."""
    active = clip_active(ratio.detach(), advantages.detach(), eps_low, eps_high).to(ratio.dtype)
    return masked_mean(active, mask, global_tokens)


def approx_kl(logp: Tensor, old_logp: Tensor, mask: Tensor, global_tokens: int | None = None) -> Tensor:
    """KL(π_old ‖ π_θ) from the sampled tokens, k3 estimator ``(r − 1) − log r``
    (http://joschu.net/blog/kl-approx.html); a logging metric of how far the update moved."""
    lr = log_ratio(logp.detach(), old_logp, mask)
    return masked_mean(torch.expm1(lr) - lr, mask, global_tokens)


# ---------------------------------------------------------------------------- composition
def policy_loss(logp: Tensor, old_logp: Tensor | None, ref_logp: Tensor | None, advantages: Tensor, mask: Tensor,
                cfg: LossSwitches, global_tokens: int | None = None, global_seqs: int | None = None,
                step: int = 0, is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """The loss of ``cfg`` on one (micro-)batch: the surrogate ``cfg.surrogate`` (:data:`SURROGATES`)
    + β·KL with ``cfg.kl_estimator`` (:data:`KL_ESTIMATORS`), both reduced with ``cfg.agg``.
    Returns ``(loss, stats)``.

    Args:
        logp: ``(B, T)`` log π_θ of the target tokens, with gradient.
        old_logp: ``(B, T)`` sampling logprobs; ``None`` = on-policy (``logp.detach()``).
        ref_logp: ``(B, T)`` reference logprobs; needed when β > 0 (else only logged if given).
        advantages: ``(B,)`` or ``(B, T)``.
        mask: ``(B, T)``, 1 on policy tokens.
        cfg: a :class:`~workbench.rl.config.LossConfig`.
        global_tokens, global_seqs: counts of the whole mini-batch (see :func:`normalizers`;
            with ``cfg.empty_seqs="count"`` pass the number of rows as ``global_seqs``).
        step: training step (0-based), for an annealed β (:meth:`LossConfig.kl_coef_at`).
        is_weights: ``(B, T)`` per-token weights of the surrogate (no gradient), e.g.
            :func:`truncated_is_weights`; None = 1.

    ``stats`` values are floats. ``loss``, ``pg_loss``, ``kl``, ``clip_frac``, ``approx_kl``,
    ``ratio_mean`` and ``n_tokens`` add up over micro-batches when the global counts are given;
    ``ratio_min`` / ``ratio_max`` combine by min / max; ``kl_coef`` is the β used.
    """
    B, T = logp.shape  # sequences, tokens
    _check(logp, old_logp, ref_logp, mask)
    m = mask.bool()
    old = logp.detach() if old_logp is None else old_logp

    if cfg.surrogate not in SURROGATES:
        raise ValueError(f"unknown surrogate {cfg.surrogate!r}; choose one of: {', '.join(SURROGATES)}")
    pg, ratio = SURROGATES[cfg.surrogate](logp, old, m, advantages, cfg)
    if is_weights is not None:
        _check(logp, is_weights)
        pg = pg * is_weights.detach()
    count_empty = cfg.empty_seqs == "count"

    def agg(x: Tensor) -> Tensor:
        return aggregate(x, m, cfg.agg, global_tokens=global_tokens, global_seqs=global_seqs, max_len=cfg.max_len,
                         count_empty=count_empty)

    pg_loss = agg(pg)
    beta = cfg.kl_coef_at(step)
    kl_loss = None
    if ref_logp is not None:
        kl_loss = agg(kl_term(logp, ref_logp, m, cfg.kl_estimator, cfg.kl_clamp))
    elif beta > 0:
        raise ValueError(
            f"LossConfig({cfg.name!r}) has kl_coef={beta:g} > 0 at step {step}, which needs ref_logp: compute it "
            "with LoRAPolicy.ref_logprobs(...) (adapter disabled), or set kl_coef=0"
        )
    loss = pg_loss + beta * kl_loss if (beta > 0 and kl_loss is not None) else pg_loss

    with torch.no_grad():
        r = ratio.detach()
        big, small = torch.full_like(r, -torch.inf), torch.full_like(r, torch.inf)
        stats = {
            "loss": float(loss.detach()),
            "pg_loss": float(pg_loss.detach()),
            "kl": float(kl_loss.detach()) if kl_loss is not None else 0.0,
            "kl_coef": float(beta),
            "clip_frac": float(clip_fraction(r, advantages, m, cfg.eps_low, cfg.eps_high, global_tokens)),
            "approx_kl": float(approx_kl(logp, old, m, global_tokens)),
            "ratio_mean": float(masked_mean(r, m, global_tokens)),
            "ratio_min": float(torch.where(m, r, small).min()) if m.any() else 1.0,
            "ratio_max": float(torch.where(m, r, big).max()) if m.any() else 1.0,
            "n_tokens": float(m.sum()),
        }
    return loss, stats
