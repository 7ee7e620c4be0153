"""Advantages and the dynamic-sampling filter, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.rl import advantages as A


def approx(x, rel=1e-6, abs=1e-6):
    return pytest.approx(x, rel=rel, abs=abs)


def test_group_std_hand_values_with_eps():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    groups = ["a"] * 4 + ["b"] * 4
    adv = A.group_std_advantages(rewards, groups, eps=0.1)
    # group a: mean 0.5, population std 0.5 -> ±0.5 / 0.6 = ±0.8333333
    # group b: mean 0.75, std sqrt(0.75·0.25) = 0.4330127 -> 0.25/0.5330127 = 0.4690416, -0.75/0.5330127 = -1.4071247
    sb = math.sqrt(0.75 * 0.25) + 0.1
    assert adv.tolist() == approx([0.5 / 0.6, -0.5 / 0.6, -0.5 / 0.6, 0.5 / 0.6, 0.25 / sb, 0.25 / sb, 0.25 / sb, -0.75 / sb])
    assert adv.dtype == torch.float32 and adv.shape == (8,)


def test_group_std_uses_population_std():
    # G = 2, rewards {1, 0}: population std 0.5 -> A = ±1 (sample std 0.7071 would give ±0.7071)
    assert A.group_std_advantages([1.0, 0.0], ["g", "g"], eps=0.0).tolist() == [1.0, -1.0]


def test_group_std_uniform_and_singleton_groups_are_zero_not_nan():
    adv = A.group_std_advantages([1.0, 1.0, 0.0, 0.0, 0.7], ["a", "a", "b", "b", "c"], eps=0.0)
    assert adv.tolist() == [0.0] * 5


def test_mean_only_hand_values_noncontiguous_groups():
    # Shi & Shen Eq. 4: x = {0.25, 1.0} mean 0.625; y = {0.75, 0.0} mean 0.375
    adv = A.mean_only_advantages([0.25, 0.75, 1.0, 0.0], ["x", "y", "x", "y"])
    assert adv.tolist() == approx([-0.375, 0.375, 0.375, -0.375])


def test_batch_std_hand_values():
    # group means: a = 0.5, b = 1 -> centered [0.5, -0.5, 0, 0]
    # batch population std of [1, 0, 1, 1]: mean 0.75, var (3·0.0625 + 0.5625)/4 = 0.1875 -> 0.4330127
    adv = A.batch_std_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], eps=0.0)
    s = math.sqrt(0.1875)
    assert adv.tolist() == approx([0.5 / s, -0.5 / s, 0.0, 0.0])


def test_tensor_group_ids_and_tensor_rewards():
    adv = A.compute_advantages(torch.tensor([1.0, 0.0, 3.0, 5.0]), torch.tensor([7, 7, 9, 9]), "mean_only")
    assert adv.tolist() == approx([0.5, -0.5, -1.0, 1.0])


@pytest.mark.parametrize("mode", sorted(A.ADVANTAGES))
def test_every_mode_centers_each_group(mode):
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=g)
    groups = [i % 3 for i in range(12)]
    adv = A.compute_advantages(rewards, groups, mode, eps=1e-6)
    assert adv.shape == (12,) and torch.isfinite(adv).all()
    for k in range(3):
        assert adv[[i for i in range(12) if groups[i] == k]].sum().item() == approx(0.0, abs=1e-5)
    assert adv.abs().sum() > 0


def test_bad_inputs():
    with pytest.raises(ValueError, match="group_std"):
        A.compute_advantages([1.0], ["a"], "zscore")
    with pytest.raises(ValueError, match="2 rewards for 3"):
        A.group_std_advantages([1.0, 0.0], ["a", "a", "b"])
    with pytest.raises(ValueError, match="finite or NaN"):
        A.group_mean_advantages([1.0, float("inf")], ["a", "a"])
    with pytest.raises(ValueError, match="std must be"):
        A.compute_advantages([1.0, 0.0], ["a", "a"], std="biased")


@pytest.mark.parametrize("mode", sorted(A.ADVANTAGES))
def test_failed_rewards_are_left_out_and_get_zero(mode):
    # a NaN reward (failed judge / tool) is not a 0: it is excluded from the statistics
    nan = float("nan")
    r, g = [1.0, 0.0, nan, 0.5, 0.25, 1.0], ["a", "a", "a", "b", "b", "b"]
    adv = A.compute_advantages(r, g, mode, eps=1e-6)
    without = A.compute_advantages([1.0, 0.0, 0.5, 0.25, 1.0], ["a", "a", "b", "b", "b"], mode, eps=1e-6)
    assert adv[2].item() == 0.0 and torch.isfinite(adv).all()
    assert adv[[0, 1, 3, 4, 5]].tolist() == approx(without.tolist())


def test_mean_only_is_an_alias_of_group_mean():
    r, g = [0.25, 0.75, 1.0, 0.0], ["x", "y", "x", "y"]
    assert A.compute_advantages(r, g, "mean_only").tolist() == A.compute_advantages(r, g, "group_mean").tolist()
    assert A.mean_only_advantages is A.group_mean_advantages


def test_sample_std_option_matches_torch_std():
    # TRL / verl divide by G - 1: rewards {1, 0} -> sample std 0.7071 -> A = ±0.5/0.7071 = ±0.7071 (population: ±1)
    adv = A.group_std_advantages([1.0, 0.0], ["g", "g"], eps=0.0, std="sample")
    assert adv.tolist() == approx([math.sqrt(0.5), -math.sqrt(0.5)])
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv = A.batch_std_advantages(r, ["a", "a", "b", "b"], eps=0.0, std="sample")
    assert adv.tolist() == approx([0.5 / r.std().item(), -0.5 / r.std().item(), 0.0, 0.0])


def test_rloo_hand_values():
    # RLOO: A_i = r_i - mean of the others. a = {1, 0, 0.5}: 1 - 0.25 = 0.75, 0 - 0.75 = -0.75, 0.5 - 0.5 = 0
    adv = A.rloo_advantages([1.0, 0.0, 0.5, 0.7], ["a", "a", "a", "solo"])
    assert adv.tolist() == approx([0.75, -0.75, 0.0, 0.0])  # a group of one has no baseline


def _verl_reinforce_pp_baseline(scores, index, lengths, T=6):
    """verl core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage, re-typed for the test."""
    scores = torch.tensor(scores, dtype=torch.float64)
    mask = torch.zeros(len(scores), T, dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    by = {}
    for i, k in enumerate(index):
        by.setdefault(k, []).append(scores[i])
    mean = {k: (torch.stack(v).mean() if len(v) > 1 else torch.tensor(0.0, dtype=torch.float64)) for k, v in by.items()}
    s = torch.stack([scores[i] - mean[k] for i, k in enumerate(index)])
    tok = s[:, None].expand(-1, T) * mask
    mu = (tok * mask).sum() / mask.sum()  # verl_F.masked_whiten: masked mean, Bessel-corrected masked var
    var = (((tok - mu) ** 2) * mask).sum() / mask.sum() * mask.sum() / (mask.sum() - 1)
    white = (tok - mu) * torch.rsqrt(var + 1e-8) * mask
    return [white[i, 0].item() for i in range(len(scores))]


def test_reinforce_pp_matches_verl():
    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 0.3, 0.9, 0.2]
    index = ["a", "a", "a", "b", "b", "c", "c", "solo"]
    lengths = [3, 5, 2, 6, 1, 4, 4, 2]
    ours = A.compute_advantages(scores, index, "reinforce_pp", eps=1e-8, std="sample", lengths=lengths)
    assert ours.tolist() == approx(_verl_reinforce_pp_baseline(scores, index, lengths), rel=1e-5)
    # the preset uses exactly these settings
    from workbench.rl.config import PRESETS

    p = PRESETS["reinforce_pp"]
    assert (p.adv_norm, p.adv_eps, p.adv_std) == ("reinforce_pp", 1e-8, "sample")


# ---------------------------------------------------------------------------- filter
def test_keep_groups_keeps_exactly_the_mixed_groups():
    rewards = [1, 1, 0, 0, 1, 0, 0.5, 0.3, 0.0, 0.3, 1.0]
    groups = ["all1", "all1", "all0", "all0", "mix", "mix", "solo", "cont", "mix2", "cont", "mix2"]
    keep = A.keep_groups(rewards, groups)
    expected = [g in ("mix", "mix2") for g in groups]  # "cont" has 0.3 twice: uniform, dropped
    assert keep.tolist() == expected
    # verl's options: keep groups of one, and the std > 0 criterion (the same on exact values)
    singles = A.keep_groups(rewards, groups, keep_singletons=True)
    assert singles.tolist() == [g in ("mix", "mix2", "solo") for g in groups]
    assert A.keep_groups(rewards, groups, criterion="std_gt_0").tolist() == expected


def test_filter_criteria_differ_on_float_rounding():
    # three equal rewards of 0.1: max > min is False (exact), but the float mean 0.1 + 0.1 + 0.1 / 3
    # is not exactly 0.1, so the std is a tiny positive number and verl's std > 0 keeps the group
    r = [0.1, 0.1, 0.1]
    assert A.keep_groups(r, ["g"] * 3).tolist() == [False] * 3
    _, sd = A.group_mean_std(r, ["g"] * 3)
    assert A.keep_groups(r, ["g"] * 3, criterion="std_gt_0").tolist() == [bool(sd[0] > 0)] * 3


def test_keep_groups_with_failed_rewards():
    nan = float("nan")
    r = [1.0, 0.0, nan, nan, nan, 1.0, nan]
    g = ["a", "a", "a", "dead", "dead", "one", "one"]
    assert A.keep_groups(r, g).tolist() == [True, True, True, False, False, False, False]
    assert A.keep_groups(r, g, keep_singletons=True).tolist() == [True, True, True, False, False, True, True]


class Sampler:
    """Scripted rounds: each is a list of groups given as reward lists."""

    def __init__(self, rounds):
        self.rounds, self.calls = rounds, []

    def __call__(self, needed):
        groups = self.rounds[len(self.calls)]
        self.calls.append(needed)
        rewards, gids, items = [], [], []
        for g, rs in enumerate(groups):
            for j, r in enumerate(rs):
                rewards.append(r)
                gids.append(f"q{g}")  # ids repeat across rounds: they are scoped to one round
                items.append((len(self.calls), g, j))
        return rewards, gids, items


def test_fill_batch_stops_when_full_and_counts():
    s = Sampler([
        [[1, 0], [1, 1], [0, 0], [1, 1]],  # round 1: 1 mixed, 2 all-correct, 1 all-wrong
        [[0, 1], [0, 0], [1, 0], [1, 0]],  # round 2: 3 mixed (1 surplus), 1 all-wrong
        [[1, 0]] * 4,  # never reached
    ])
    items, st = A.fill_batch(s, target_groups=3, max_rounds=5)
    assert s.calls == [3, 2]  # asked for what was still missing; stopped once full
    assert (st.rounds, st.generated, st.kept, st.dropped_all_correct, st.dropped_all_wrong, st.surplus) == (2, 8, 3, 2, 2, 1)
    assert st.full and st.short_by == 0 and st.generated_trajectories == 16
    assert st.keep_rate == approx(4 / 8)
    # kept groups, members together, in generation order: r1 q0, r2 q0, r2 q2
    assert items == [(1, 0, 0), (1, 0, 1), (2, 0, 0), (2, 0, 1), (2, 2, 0), (2, 2, 1)]
    assert st.to_dict()["full"] is True


def test_fill_batch_respects_max_rounds_and_reports_short():
    s = Sampler([[[1, 1], [0, 0]], [[0, 0], [1, 0]], [[1, 1]], [[1, 0]]])
    items, st = A.fill_batch(s, target_groups=4, max_rounds=3)
    assert len(s.calls) == 3 and st.rounds == 3
    assert (st.kept, st.dropped_all_correct, st.dropped_all_wrong) == (1, 2, 2)
    assert not st.full and st.short_by == 3
    assert len(items) == 2
    assert "SHORT by 3" in str(st)


def test_fill_batch_options_and_failed_groups():
    s = Sampler([[[1, 0], [float("nan"), float("nan")], [1, float("nan")]]])
    items, st = A.fill_batch(s, target_groups=3, max_rounds=1)
    assert (st.kept, st.dropped_failed, st.dropped_all_correct) == (1, 1, 1)  # [1, nan]: one finite reward
    s = Sampler([[[1, 0], [float("nan"), float("nan")], [1, float("nan")]]])
    items, st = A.fill_batch(s, target_groups=3, max_rounds=1, keep_singletons=True)
    assert (st.kept, st.dropped_failed) == (2, 1) and "1 failed" in str(st)


def test_fill_batch_argument_errors():
    with pytest.raises(ValueError, match="target_groups"):
        A.fill_batch(Sampler([]), target_groups=0)
    with pytest.raises(ValueError, match="max_rounds"):
        A.fill_batch(Sampler([]), target_groups=1, max_rounds=0)
    with pytest.raises(ValueError, match="3 items for 2 rewards"):
        A.fill_batch(lambda n: ([1.0, 0.0], ["a", "a"], [1, 2, 3]), target_groups=1)
