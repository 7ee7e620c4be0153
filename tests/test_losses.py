"""Losses, aggregation, KL, metrics and LossConfig presets, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.rl import losses as L
from workbench.rl.config import PRESETS, LossConfig, get_loss_config


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def random_batch(B=6, T=9, seed=0, stale=0.3):
    """Random logp/old/ref/mask with uneven lengths, a masked observation span and extreme values off-mask."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = logp + stale * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        n = 2 + (b * 5) % (T - 2)  # uneven lengths
        mask[b, 1 : 1 + n] = 1
    mask[:, 4:6] = 0  # an observation span
    old = torch.where(mask.bool(), old, torch.full_like(old, -80.0))  # garbage off-mask must not matter
    ref = torch.where(mask.bool(), ref, torch.full_like(ref, 60.0))
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    return logp, old, ref, mask, adv


# ---------------------------------------------------------------------------- ratios and surrogate
def test_token_ratio_hand_values():
    logp = t([[-1.0, -2.0, -0.5]])
    old = t([[-1.0, -2.5, -3.0]])
    mask = t([[1, 1, 0]])
    r = L.token_ratio(logp, old, mask)
    # exp(0) = 1; exp(-2.0 + 2.5) = exp(0.5) = 1.6487213; masked position -> exactly 1
    assert torch.allclose(r, t([[1.0, 1.6487212707, 1.0]]))


def test_clipped_surrogate_hand_values_decoupled_eps():
    ratio = t([[0.5, 1.0, 1.5, 1.5, 0.5]])
    adv = t([[1.0, 1.0, 1.0, -1.0, -1.0]])
    loss = L.clipped_surrogate(ratio, adv, eps_low=0.2, eps_high=0.28)
    # r=0.5,A=+1: min(0.5, clip->0.8) = 0.5      -> -0.5
    # r=1.0,A=+1: min(1, 1) = 1                    -> -1
    # r=1.5,A=+1: min(1.5, clip->1.28) = 1.28      -> -1.28   (clip active)
    # r=1.5,A=-1: min(-1.5, -1.28) = -1.5          -> +1.5
    # r=0.5,A=-1: min(-0.5, clip->-0.8) = -0.8     -> +0.8    (clip active)
    assert torch.allclose(loss, t([[-0.5, -1.0, -1.28, 1.5, 0.8]]))
    frac = L.clip_fraction(ratio, adv, torch.ones_like(ratio), 0.2, 0.28)
    assert frac.item() == pytest.approx(2 / 5)
    # a clipped token's gradient is zero, an unclipped one's is -A
    r = ratio.clone().requires_grad_(True)
    L.clipped_surrogate(r, adv, 0.2, 0.28).sum().backward()
    assert r.grad.tolist() == [[-1.0, -1.0, 0.0, 1.0, 0.0]]


def test_sequence_ratio_is_geometric_mean_over_policy_tokens():
    logp = t([[-1.0, -1.0, -1.0, -1.0], [-0.5, -0.5, -0.5, -0.5]])
    old = t([[-1.3, -0.9, -6.0, -1.4], [-0.5, -0.7, 0.0, 0.0]])
    mask = t([[1, 1, 0, 1], [1, 1, 0, 0]])
    # seq 0 diffs on policy tokens: 0.3, -0.1, 0.4 -> mean 0.2 -> s = e^0.2 = 1.2214028
    # seq 1: 0.0, 0.2 -> mean 0.1 -> s = e^0.1 = 1.1051709
    s = L.sequence_ratio(logp, old, mask)
    assert torch.allclose(s, t([math.exp(0.2), math.exp(0.1)]))
    # the token-level GSPO form has the value s_i at every token
    st = L.sequence_ratio_token(logp, old, mask)
    assert torch.allclose(st, s[:, None].expand(2, 4))
    # and equals exp(mean token log-ratio) computed from token_ratio
    tok = L.token_ratio(logp, old, mask)
    geo = torch.exp((torch.log(tok) * mask).sum(-1) / mask.sum(-1))
    assert torch.allclose(st[:, 0], geo)


@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.03, 0.04)])  # the second clips some sequences
def test_gspo_token_form_gradient_matches_sequence_objective(eps):
    logp, old, _, mask, adv = random_batch(B=5, T=8, seed=3, stale=0.05)
    el, eh = eps
    # DSPO Eq. 11 written directly on sequences: -mean_i min(s_i A_i, clip(s_i) A_i)
    lp1 = logp.clone().requires_grad_(True)
    s = L.sequence_ratio(lp1, old, mask)
    seq_obj = -torch.minimum(s * adv, s.clamp(1 - el, 1 + eh) * adv).mean()
    seq_obj.backward()
    # token form + seq-mean-token-mean
    lp2 = logp.clone().requires_grad_(True)
    st = L.sequence_ratio_token(lp2, old, mask)
    tok_obj = L.aggregate(L.clipped_surrogate(st, adv, el, eh), mask, "seq-mean-token-mean")
    tok_obj.backward()
    assert torch.allclose(seq_obj, tok_obj)
    assert torch.allclose(lp1.grad, lp2.grad, atol=1e-12)
    assert lp1.grad.abs().sum() > 0
    if el == 0.03:  # some sequences clipped: their gradient vanishes in both forms
        clipped = L.clip_active(s.detach()[:, None].expand_as(logp), adv, el, eh)[:, 0]
        assert clipped.any() and not clipped.all()
        assert (lp2.grad[clipped] == 0).all()


def test_gspo_unclipped_gradient_hand_value():
    # one sequence, 2 policy tokens, ratio 1 (on-policy), A = 2:
    # d/dlogp_t [-s A] = -A * s * (1/|y|) = -2 * 1 * 0.5 = -1 on each policy token
    logp = t([[-1.0, -2.0, -3.0]]).requires_grad_(True)
    mask = t([[1, 1, 0]])
    st = L.sequence_ratio_token(logp, logp.detach(), mask)
    L.aggregate(L.clipped_surrogate(st, t([2.0]), 0.2, 0.2), mask, "seq-mean-token-mean").backward()
    assert logp.grad.tolist() == [[-1.0, -1.0, 0.0]]


# ---------------------------------------------------------------------------- aggregation
def test_aggregations_hand_values():
    loss = t([[1.0, 2.0, 3.0, float("nan")], [5.0, 1e9, 0.0, 0.0]])  # NaN / huge values off-mask
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0]])
    # token-mean: (1 + 2 + 3 + 5) / 4 tokens = 2.75
    assert L.aggregate(loss, mask, "token-mean").item() == pytest.approx(2.75)
    # seq-mean-token-mean: seq0 (1+2+3)/3 = 2, seq1 5/1 = 5 -> (2 + 5)/2 = 3.5
    assert L.aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.5)
    # seq-mean-token-sum-norm, max_len 4: seq0 6/4 = 1.5, seq1 5/4 = 1.25 -> 1.375
    assert L.aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=4).item() == pytest.approx(1.375)
    # global counts replace the local ones: token-mean over 10 tokens = 11/10; seq-mean over 7 seqs = 7/7
    assert L.aggregate(loss, mask, "token-mean", global_tokens=10).item() == pytest.approx(1.1)
    assert L.aggregate(loss, mask, "seq-mean-token-mean", global_seqs=7).item() == pytest.approx(1.0)
    # a sequence without policy tokens does not count as a sequence
    mask2 = t([[1, 1, 1, 0], [0, 0, 0, 0]])
    assert L.aggregate(loss, mask2, "seq-mean-token-mean").item() == pytest.approx(2.0)
    assert L.normalizers(mask2) == (3, 1)


def test_aggregate_errors():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="token-mean"):
        L.aggregate(x, x, "mean")
    with pytest.raises(ValueError, match="max_len"):
        L.aggregate(x, x, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="same shape"):
        L.aggregate(x, torch.zeros(2, 4), "token-mean")


# ---------------------------------------------------------------------------- KL and metrics
def test_kl_k3_hand_values():
    logp = t([[-1.0, -2.0, -1.0]])
    ref = t([[-1.5, -1.0, 9.0]])
    mask = t([[1, 1, 0]])
    # d = ref - logp = -0.5: e^-0.5 + 0.5 - 1 = 0.1065307
    # d = 1.0: e - 1 - 1 = 0.7182818; masked -> 0
    assert torch.allclose(L.kl_k3(logp, ref, mask), t([[math.exp(-0.5) - 0.5, math.e - 2.0, 0.0]]))
    assert (L.kl_k3(logp, logp, mask) == 0).all()  # zero at the reference


def test_kl_coef_schedule():
    # Shi & Shen: 0.1 -> 0.01 linearly over 10 steps; step 3 of 0..9: 0.1 - 0.09 * 3/9 = 0.07
    assert L.kl_coef_at(0, 10, 0.1, 0.01) == pytest.approx(0.1)
    assert L.kl_coef_at(3, 10, 0.1, 0.01) == pytest.approx(0.07)
    assert L.kl_coef_at(9, 10, 0.1, 0.01) == pytest.approx(0.01)
    assert L.kl_coef_at(50, 10, 0.1, 0.01) == pytest.approx(0.01)
    assert L.kl_coef_at(7, 10, 1e-3) == 1e-3  # constant
    cfg = get_loss_config("grpo", kl_coef=0.1, kl_coef_end=0.01, kl_anneal_steps=10)
    assert cfg.kl_coef_at(3) == pytest.approx(0.07)
    assert get_loss_config("grpo").kl_coef_at(1000) == 1e-3


def test_entropy_hand_values_and_chunked():
    # [0, 0] -> ln 2; [0, ln 3] -> p = (1/4, 3/4): -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    h = L.entropy_from_logits(logits)
    assert torch.allclose(h, torch.tensor([math.log(2.0), 0.25 * math.log(4) + 0.75 * math.log(4 / 3)]))
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 7, 11, generator=g)
    z1, z2 = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    full, chunked = L.entropy_from_logits(z1), L.entropy_from_logits_chunked(z2, chunk_size=4)
    assert chunked.shape == (3, 7)
    assert torch.allclose(full, chunked, atol=1e-6)
    full.sum().backward()
    chunked.sum().backward()
    assert torch.allclose(z1.grad, z2.grad, atol=1e-6)


def test_approx_kl_hand_value():
    logp, old, mask = t([[-1.0, -1.0]]), t([[-1.5, -7.0]]), t([[1, 0]])
    # r = e^0.5: (r - 1) - log r = 0.6487213 - 0.5 = 0.1487213 (second token masked)
    assert L.approx_kl(logp, old, mask).item() == pytest.approx(math.exp(0.5) - 1.5)


# ---------------------------------------------------------------------------- policy_loss
def test_policy_loss_grpo_hand_value():
    cfg = get_loss_config("grpo")  # seq-mean-token-mean, KL 1e-3
    logp = t([[-1.0, -2.0], [-1.0, -3.0]])
    ref = t([[-0.5, -2.0], [-1.5, 0.0]])
    mask = t([[1, 1], [1, 0]])
    loss, st = L.policy_loss(logp, logp.detach(), ref, t([2.0, 1.0]), mask, cfg)
    # ratio 1 -> pg per token = -A: seq0 -2, -2 (mean -2), seq1 -1 -> pg_loss = (-2 - 1)/2 = -1.5
    # k3: seq0 d=0.5 -> e^0.5 - 1.5 = 0.1487213, d=0 -> 0: mean 0.0743606; seq1 d=-0.5 -> 0.1065307
    # kl = (0.0743606 + 0.1065307)/2 = 0.0904457; loss = -1.5 + 1e-3 * 0.0904457
    kl = ((math.exp(0.5) - 1.5) / 2 + (math.exp(-0.5) - 0.5)) / 2
    assert st["pg_loss"] == pytest.approx(-1.5)
    assert st["kl"] == pytest.approx(kl)
    assert loss.item() == pytest.approx(-1.5 + 1e-3 * kl)
    assert st["kl_coef"] == 1e-3 and st["n_tokens"] == 3


def test_policy_loss_dapo_hand_value_token_mean():
    cfg = get_loss_config("dapo")  # token-mean, eps 0.2 / 0.28, no KL
    logp = t([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    old = t([[-0.5, 0.0, 0.0], [0.5, 0.0, 0.0]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    loss, st = L.policy_loss(logp, old, None, t([1.0, -1.0]), mask, cfg)
    # ratios: e^0.5 = 1.6487 (A=+1 -> clipped at 1.28), 1, 1; seq1: e^-0.5 = 0.6065 (A=-1 -> clipped at 0.8)
    # per-token loss: -1.28, -1, -1, +0.8 -> token-mean over 4 = (-1.28 - 2 + 0.8)/4 = -0.62
    assert loss.item() == pytest.approx(-0.62)
    assert st["clip_frac"] == pytest.approx(0.5)  # 2 of 4 policy tokens clipped
    assert st["ratio_max"] == pytest.approx(math.exp(0.5))
    assert st["ratio_min"] == pytest.approx(math.exp(-0.5))


def test_policy_loss_needs_ref_when_kl_on():
    logp, old, _, mask, adv = random_batch()
    with pytest.raises(ValueError, match="ref_logp"):
        L.policy_loss(logp, old, None, adv, mask, get_loss_config("grpo"))
    # annealed β: step 0 also needs it
    cfg = get_loss_config("dapo", kl_coef=0.1, kl_coef_end=0.01, kl_anneal_steps=5)
    with pytest.raises(ValueError, match="ref_logp"):
        L.policy_loss(logp, old, None, adv, mask, cfg)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_masked_tokens_get_exactly_zero_gradient(name):
    cfg = get_loss_config(name, kl_coef=0.05)  # KL on for every preset, so its gradient is checked too
    logp, old, ref, mask, adv = random_batch(seed=1)
    lp = logp.clone().requires_grad_(True)
    loss, _ = L.policy_loss(lp, old, ref, adv, mask, cfg)
    assert torch.isfinite(loss)
    loss.backward()
    assert (lp.grad[mask == 0] == 0).all()
    assert (lp.grad[mask == 1] != 0).sum() > mask.sum() / 2


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_on_policy_first_epoch_ratio_one_no_clipping(name):
    cfg = PRESETS[name]
    logp, _, ref, mask, adv = random_batch(seed=2)
    lp = logp.clone().requires_grad_(True)
    ratio = L.IMPORTANCE[cfg.importance_level](lp, lp.detach(), mask)
    assert (ratio[mask == 1] == 1).all()
    loss, st = L.policy_loss(lp, lp.detach(), ref, adv, mask, cfg)
    assert st["clip_frac"] == 0 and st["ratio_min"] == 1 and st["ratio_max"] == 1
    assert st["approx_kl"] == 0
    # old_logp=None means on-policy
    loss2, _ = L.policy_loss(lp, None, ref, adv, mask, cfg)
    assert loss2.item() == loss.item()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_micro_batch_invariance(name):
    cfg = get_loss_config(name, kl_coef=0.05)
    logp, old, ref, mask, adv = random_batch(B=6, T=9, seed=4, stale=0.3)
    lp_full = logp.clone().requires_grad_(True)
    full, st_full = L.policy_loss(lp_full, old, ref, adv, mask, cfg)
    full.backward()
    if cfg.eps_high < 0.1:
        assert st_full["clip_frac"] > 0  # stale batch: clipping acts, so the invariance covers it

    n_tok, n_seq = L.normalizers(mask)
    lp = logp.clone().requires_grad_(True)
    total, sums = 0.0, {}
    for rows in ([0, 1], [2, 3, 4], [5]):  # uneven micro-batches
        loss, st = L.policy_loss(lp[rows], old[rows], ref[rows], adv[rows], mask[rows], cfg,
                                 global_tokens=n_tok, global_seqs=n_seq)
        loss.backward()
        total += loss.item()
        for k in ("pg_loss", "kl", "clip_frac", "approx_kl", "ratio_mean", "n_tokens"):
            sums[k] = sums.get(k, 0.0) + st[k]
    assert total == pytest.approx(full.item(), rel=1e-12, abs=1e-12)
    assert torch.allclose(lp.grad, lp_full.grad, atol=1e-14)
    for k, v in sums.items():
        assert v == pytest.approx(st_full[k], rel=1e-9, abs=1e-12), k

    # without the global counts the micro-batch losses do NOT add up (so the test above can fail)
    local = sum(L.policy_loss(logp[r], old[r], ref[r], adv[r], mask[r], cfg)[0].item() for r in ([0, 1], [2, 3, 4], [5]))
    assert local != pytest.approx(full.item(), rel=1e-6)


def test_sequence_importance_with_token_mean_works():
    # the token-level GSPO form aggregates with token-mean: a sequence weighs by its policy-token count
    cfg = get_loss_config("gspo", agg="token-mean")
    logp = t([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]).requires_grad_(True)
    mask = t([[1, 1, 1], [1, 0, 0]])
    loss, _ = L.policy_loss(logp, logp.detach(), None, t([1.0, 1.0]), mask, cfg)
    loss.backward()
    # s_i = 1; loss = -(3 tokens·1 + 1 token·1)/4 = -1; d/dlogp: seq0 each token -(1/4)·(1/3)·3 = -1/4... per token:
    # token-mean gives each token weight 1/4 and each s_i,t gradient s_i·A·∂log π_t = 1 -> -1/4 everywhere on mask
    assert loss.item() == pytest.approx(-1.0)
    assert torch.allclose(logp.grad, t([[-0.25, -0.25, -0.25], [-0.25, 0.0, 0.0]]))


# ---------------------------------------------------------------------------- configs
def test_preset_values_and_sources():
    g, d, s, ds, dr = (PRESETS[k] for k in ("grpo", "dapo", "gspo", "dspo", "dr_grpo"))
    assert (g.importance_level, g.agg, g.eps_low, g.eps_high, g.kl_coef) == ("token", "seq-mean-token-mean", 0.2, 0.2, 1e-3)
    assert (d.agg, d.eps_low, d.eps_high, d.kl_coef, d.dynamic_filter) == ("token-mean", 0.2, 0.28, 0.0, True)
    assert (s.importance_level, s.eps_low, s.eps_high, s.kl_coef, s.dynamic_filter) == ("sequence", 3e-4, 4e-4, 0.0, False)
    assert ds == s.replace(name="dspo", dynamic_filter=True)  # DSPO = GSPO + dynamic filter
    assert (dr.agg, dr.adv_norm, dr.kl_coef) == ("seq-mean-token-sum-norm", "group_mean", 0.0)
    assert dr.max_len is not None
    rp = PRESETS["reinforce_pp"]  # R1-Searcher / REINFORCE++ (Hu 2025)
    assert (rp.surrogate, rp.eps_low, rp.eps_high, rp.adv_norm, rp.adv_std) == ("clipped_token", 0.2, 0.2, "reinforce_pp", "sample")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_constructs_and_runs(name):
    cfg = get_loss_config(name)
    assert isinstance(cfg, LossConfig) and cfg.name == name
    assert get_loss_config(name, group_size=4).group_size == 4
    logp, old, ref, mask, adv = random_batch(seed=5)
    loss, st = L.policy_loss(logp.clone().requires_grad_(True), old, ref, adv, mask, cfg)
    assert torch.isfinite(loss) and set(st) >= {"loss", "pg_loss", "kl", "clip_frac", "approx_kl"}


def test_unknown_preset_lists_names():
    with pytest.raises(ValueError, match="grpo, dapo, gspo, dspo, dr_grpo"):
        get_loss_config("ppo")
    with pytest.raises(ValueError, match="no field.*'clip'"):
        get_loss_config("grpo", clip=0.2)


@pytest.mark.parametrize(
    ("overrides", "field", "hint"),
    [
        ({"agg": "seq-mean-token-sum-norm", "max_len": None}, "max_len", "generation budget"),
        ({"eps_low": -0.1}, "eps_low", ">= 0"),
        ({"eps_high": -0.2}, "eps_high", ">= 0"),
        ({"eps_low": 1.0}, "eps_low", "< 1"),
        ({"kl_coef_end": 0.01}, "kl_coef_end", "kl_anneal_steps"),
        ({"kl_anneal_steps": 100}, "kl_anneal_steps", "kl_coef_end"),
        ({"kl_coef": -1.0}, "kl_coef", ">= 0"),
        ({"dynamic_filter": True, "group_size": 1}, "dynamic_filter", "raise group_size"),
        ({"group_size": 1}, "group_size", "group_size >= 2"),
        ({"importance_level": "seq"}, "importance_level", "'token', 'sequence'"),
        ({"surrogate": "ppo"}, "surrogate", "dual_clip"),
        ({"kl_estimator": "k4"}, "kl_estimator", "k3"),
        ({"kl_clamp": 0.0}, "kl_clamp", "> 0"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c", "> 1"),
        ({"adv_std": "unbiased"}, "adv_std", "sample"),
        ({"filter_criterion": "std"}, "filter_criterion", "std_gt_0"),
        ({"empty_seqs": "drop"}, "empty_seqs", "count"),
        ({"agg": "mean"}, "agg", "token-mean"),
        ({"adv_norm": "std"}, "adv_norm", "group_std"),
        ({"adv_eps": -1e-6}, "adv_eps", ">= 0"),
        ({"ppo_epochs": 0}, "ppo_epochs", ">= 1"),
        ({"num_mini_batches": 0}, "num_mini_batches", ">= 1"),
        ({"filter_max_rounds": 0}, "filter_max_rounds", ">= 1"),
    ],
)
def test_bad_mixes_fail_naming_the_field(overrides, field, hint):
    with pytest.raises(ValueError) as e:
        get_loss_config("grpo", **overrides)
    msg = str(e.value)
    assert f".{field}:" in msg and hint in msg, msg


def test_good_mixes_work():
    # DSPO optimizer with Shi & Shen's annealed KL and mean-only advantages, DAPO aggregation
    cfg = get_loss_config("dspo", agg="token-mean", kl_coef=0.1, kl_coef_end=0.01, kl_anneal_steps=50,
                          adv_norm="mean_only", group_size=4)
    assert cfg.needs_ref and not cfg.on_policy
    assert get_loss_config("grpo").on_policy
    logp, old, ref, mask, adv = random_batch(seed=6)
    loss, st = L.policy_loss(logp.clone().requires_grad_(True), old, ref, adv, mask, cfg, step=49)
    assert torch.isfinite(loss) and st["kl_coef"] == pytest.approx(0.01)


# ---------------------------------------------------------------------------- registries and new variants
def test_old_names_still_load():
    # configs written before the registries: importance_level="sequence" and adv_norm="mean_only"
    old = get_loss_config("grpo", importance_level="sequence", adv_norm="mean_only")
    assert (old.surrogate, old.importance_level, old.adv_norm) == ("sequence", "sequence", "group_mean")
    back = get_loss_config("dspo", importance_level="token")
    assert (back.surrogate, back.importance_level) == ("clipped_token", "token")
    dual = get_loss_config("dspo", surrogate="dual_clip")
    assert (dual.surrogate, dual.importance_level) == ("dual_clip", "token")
    with pytest.raises(ValueError, match="contradicts surrogate"):
        LossConfig(surrogate="dual_clip", importance_level="sequence")


def test_policy_loss_reads_the_registries(monkeypatch):
    # a registered surrogate is used by name, no code in policy_loss names it
    seen = []

    def mine(logp, old, mask, adv, cfg):
        seen.append(cfg.name)
        return L.SURROGATES["clipped_token"](logp, old, mask, adv, cfg)

    monkeypatch.setitem(L.SURROGATES, "mine", mine)
    cfg = get_loss_config("grpo", surrogate="mine", kl_coef=0.0)
    logp, old, _, mask, adv = random_batch()
    a, _ = L.policy_loss(logp, old, None, adv, mask, cfg)
    b, _ = L.policy_loss(logp, old, None, adv, mask, get_loss_config("grpo", kl_coef=0.0))
    assert seen == ["grpo"] and a.item() == b.item()


def test_dual_clip_hand_values():
    # Ye et al. 2020 Eq. 5, c = 3: A = -1 and r = e^2 = 7.389: clipped PPO loss = -min(-7.389, -1.2) = 7.389,
    # capped at -c·A = 3. A = +1, r = e^2: PPO clip gives -1.2 (dual clip leaves A > 0 alone).
    # A = -1, r = 0.5: -min(-0.5, -0.8) = 0.8 < 3, unchanged.
    ratio = t([[math.exp(2.0), math.exp(2.0), 0.5]])
    adv = t([[-1.0, 1.0, -1.0]])
    out = L.dual_clip_surrogate(ratio, adv, 0.2, 0.2, 3.0)
    assert out[0].tolist() == pytest.approx([3.0, -1.2, 0.8])
    cfg = get_loss_config("grpo", surrogate="dual_clip", kl_coef=0.0)
    logp, old, mask = t([[0.0, 0.0, 0.0]]), t([[-2.0, -2.0, math.log(2.0)]]), t([[1, 1, 1]])
    loss, _ = L.policy_loss(logp, old, None, adv, mask, cfg)
    assert loss.item() == pytest.approx((3.0 - 1.2 + 0.8) / 3)
    # without the second clip the same batch gives the plain PPO value
    plain, _ = L.policy_loss(logp, old, None, adv, mask, get_loss_config("grpo", kl_coef=0.0))
    assert plain.item() == pytest.approx((math.exp(2.0) - 1.2 + 0.8) / 3)


def test_kl_estimators_hand_values_and_clamp():
    logp, ref, mask = t([[-1.0, -2.0, -1.0]]), t([[-0.5, -3.0, 50.0]]), t([[1, 1, 0]])
    # d = ref - logp: 0.5, -1.0 (third token masked)
    assert L.kl_k1(logp, ref, mask)[0].tolist() == pytest.approx([-0.5, 1.0, 0.0])
    assert L.kl_k2(logp, ref, mask)[0].tolist() == pytest.approx([0.125, 0.5, 0.0])
    assert L.kl_k3(logp, ref, mask)[0].tolist() == pytest.approx([math.exp(0.5) - 1.5, math.exp(-1.0), 0.0])
    big = L.kl_term(t([[-30.0]]), t([[-5.0]]), t([[1]]), "k3", clamp=10.0)  # k3 = e^20 - 21 -> 10 (verl clamp)
    assert big.item() == 10.0
    cfg = get_loss_config("grpo", kl_estimator="k1")
    _, st = L.policy_loss(logp, None, ref, t([0.0]), mask, cfg)
    assert st["kl"] == pytest.approx((-0.5 + 1.0) / 2)


def test_seq_mean_token_sum_and_empty_rows():
    loss = t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = t([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # the third row has no policy tokens
    assert L.aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    # TRL / verl count every row in the sequence mean; ours skips empty rows by default
    assert L.aggregate(loss, mask, "seq-mean-token-sum", count_empty=True).item() == pytest.approx(10 / 3)
    assert L.aggregate(loss, mask, "seq-mean-token-mean", count_empty=True).item() == pytest.approx((2 + 4) / 3)
    # Dr. GRPO with TRL's normalization: Σ / (B · max_len)
    assert L.aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=5, count_empty=True).item() == pytest.approx(10 / 15)
    assert L.aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(10 / 10)


def test_register_loss_preset():
    from workbench.rl.config import PRESETS as P
    from workbench.rl.config import register_loss_preset

    cfg = PRESETS["grpo"].replace(name="test_only_preset", surrogate="dual_clip", adv_norm="rloo")
    try:
        assert register_loss_preset(cfg) is cfg and get_loss_config("test_only_preset") == cfg
        assert register_loss_preset(cfg) is cfg  # the same values again: fine
        with pytest.raises(ValueError, match="already registered"):
            register_loss_preset(cfg.replace(eps_high=0.3))
        with pytest.raises(ValueError, match="name"):
            register_loss_preset(LossConfig())
    finally:
        P.pop("test_only_preset", None)


def test_kl_anneal_counts_training_steps():
    # gspo, steps=100, β 0.1 -> 0.01: training step 25 (1-based, index 24) has β = 0.078
    from workbench.rl.config import kl_coef_at

    cfg = get_loss_config("gspo", kl_coef=0.1, kl_coef_end=0.01, kl_anneal_steps=100)
    assert cfg.kl_coef_at(24) == pytest.approx(0.1 - 0.09 * 24 / 99) == pytest.approx(0.0782, abs=1e-4)
    assert kl_coef_at(24, 100, 0.1, 0.01) == cfg.kl_coef_at(24)
    assert L.kl_coef_at is kl_coef_at  # still importable from losses
    logp, old, ref, mask, adv = random_batch()
    _, st = L.policy_loss(logp, old, ref, adv, mask, cfg, step=24)
    assert st["kl_coef"] == pytest.approx(cfg.kl_coef_at(24))
