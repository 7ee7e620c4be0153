"""The one-file GRPO step (workbench.rl.reference) moves the adapter exactly as the trainer's update does on the same
rollouts: the plain version a reader follows is the algorithm that runs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from workbench import methods as wm
from workbench.rl import reference
from workbench.rl.advantages import keep_groups
from workbench.rl.batch import build_batch


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model, one_thread):
    """A GRPO trainer on the random-init model of the default architecture, with the ``grpo`` preset's loss (clip 0.2,
    β 1e-3 k3 KL, group-std advantages), its first rollouts (3 questions x 4 samples) and rewards made up so that two
    groups are mixed and one is uniform (the filter must drop it)."""
    torch.manual_seed(0)
    cfg = wm.get_method("search_r1").train_config(
        preset="grpo", steps=1, questions_per_step=3, group_size=4, max_turns=2, max_new_tokens=16, eval_limit=0,
        save_every=0, model=tiny_model, lr=1e-3, micro_batch_size=3, micro_batching="sequential")
    trainer = wm.trainer(cfg, run=tmp_path_factory.mktemp("ref") / "run", progress=False)
    # the adapter starts at B = 0 (policy = reference); move it off so the KL term has a gradient too
    with torch.no_grad():
        for p in trainer.policy.trainable_parameters():
            p.add_(torch.randn_like(p) * 0.02)
    trajs = trainer.roll_out(trainer.sample_questions(3), seed=trainer.step_seed(1))
    groups = list(dict.fromkeys(t.group_id for t in trajs))
    pattern = {groups[0]: [1.0, 0.0, 0.5, 0.0], groups[1]: [0.0, 0.0, 0.0, 0.0], groups[2]: [1.0, 1.0, 0.0, 0.2]}
    seen: dict[str, int] = {}
    rewards = []
    for t in trajs:
        i = seen[t.group_id] = seen.get(t.group_id, -1) + 1
        rewards.append(pattern[t.group_id][i])
    return trainer, trajs, rewards


def _params(trainer):
    return [p.detach().clone() for p in trainer.policy.trainable_parameters()]


def test_the_reference_step_is_the_trainers_update(setup):
    trainer, trajs, rewards = setup
    lc = trainer.loss_cfg
    assert (lc.surrogate, lc.agg, lc.adv_norm, lc.kl_estimator) == ("clipped_token", "seq-mean-token-mean",
                                                                     "group_std", "k3")
    start, opt_state = _params(trainer), copy.deepcopy(trainer.optimizer.state_dict())

    # the trainer's pieces: its filter, its advantages, its batch and its update
    gids = [t.group_id for t in trajs]
    keep = keep_groups(torch.as_tensor(rewards), gids, lc.filter_criterion).tolist()
    assert keep == reference.keep_mixed_groups(rewards, gids) and sum(keep) == 8
    kept = [t for t, k in zip(trajs, keep) if k]
    kept_rewards = np.array([r for r, k in zip(rewards, keep) if k])
    adv = trainer.advantages(kept_rewards, [t.group_id for t in kept])
    assert np.allclose(adv, reference.group_advantages(kept_rewards, [t.group_id for t in kept], lc.adv_eps).numpy())
    stats = trainer.update(build_batch(kept, advantages=adv, rewards=kept_rewards, pad_id=trainer.pad_id), step=1)
    by_trainer = _params(trainer)

    # back to the start, then the one-file step with the same optimizer settings
    with torch.no_grad():
        for p, s in zip(trainer.policy.trainable_parameters(), start):
            p.copy_(s)
    trainer.optimizer.load_state_dict(opt_state)
    out = reference.grpo_step(trainer.policy.model, trainer.optimizer, trajs, rewards, eps_low=lc.eps_low,
                              eps_high=lc.eps_high, beta=lc.kl_coef, adv_eps=lc.adv_eps,
                              grad_clip=trainer.config.grad_clip, pad_id=trainer.pad_id)
    by_reference = _params(trainer)

    assert out["trained"] == 8
    assert out["loss"] == pytest.approx(stats["loss"], rel=1e-4, abs=1e-6)
    assert out["grad_norm"] == pytest.approx(stats["grad_norm"], rel=1e-4)
    moved = max(float((b - s).abs().max()) for b, s in zip(by_trainer, start))
    assert moved > 1e-4  # the step moved the adapter
    for a, b in zip(by_trainer, by_reference):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_a_step_whose_groups_are_all_uniform_trains_nothing(setup):
    trainer, trajs, _ = setup
    before = _params(trainer)
    out = reference.grpo_step(trainer.policy.model, trainer.optimizer, trajs, [1.0] * len(trajs))
    assert out == {"loss": 0.0, "grad_norm": 0.0, "trained": 0}
    assert all(torch.equal(a, b) for a, b in zip(before, _params(trainer)))
