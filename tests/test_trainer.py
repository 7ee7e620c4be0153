"""The RL loop: presets run, resume equals an uninterrupted run, micro-batching does not change the update,
reward stages switch, configs fail fast. The loop's mechanics run on a random-init model of the default model's
architecture (``tiny_model``); one preset runs the real default model (the training notebook does too, in
``test_regress_suite.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from workbench import methods as wm
from workbench.data.example import Example
from workbench.rewards.rubric import RewardTable
from workbench.rl.trainer import DataStream, TrainConfig, Trainer, latest_checkpoint

TINY = dict(questions_per_step=2, group_size=2, max_turns=1, max_new_tokens=12, max_total_tokens=1024,
            temperature=1.0, protocol_kwargs={"observation_mode": "chat", "few_shot": False}, save_every=0,
            micro_batch_size=2)


class LengthReward(Trainer):
    """The real loop with a reward that always differs inside a group (response length), so that
    every step has non-zero advantages and moves the adapter."""

    def score(self, features):
        trajs = self._last_trajs
        r = np.array([float(t.n_policy_tokens % 5) + 0.1 * t.sample_idx for t in trajs])
        return RewardTable({"total": r, "length": r}, {}, {"length": 1.0})

    def featurize(self, trajs, examples):
        self._last_trajs = list(trajs)
        return super().featurize(trajs, examples)


@pytest.fixture
def tiny(tiny_model):
    """TINY on the random-init model of the default architecture."""
    return dict(TINY, model=tiny_model)


def adapter_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters() if v.requires_grad}


# ----------------------------------------------------------------------------- config


def test_config_errors_name_the_field_and_the_fix():
    with pytest.raises(ValueError, match=r"TrainConfig.group_size.*>= 2"):
        TrainConfig(group_size=1)
    # names and the reward's parameters are checked against what they stand for when the config is built
    with pytest.raises(ValueError, match=r"TrainConfig.reward: unknown reward preset 'nope'; valid names: .*dynasearcher"):
        wm.train_config(reward="nope")
    with pytest.raises(ValueError, match=r"TrainConfig.protocol: unknown protocol 'nope'"):
        wm.train_config(protocol="nope")
    with pytest.raises(ValueError, match=r"stage_switch_step.*when_to_search"):
        wm.train_config(reward="dynasearcher", stage_switch_step=3)
    with pytest.raises(ValueError, match=r"curriculum"):
        TrainConfig(curriculum="random")
    with pytest.raises(ValueError, match=r"unknown TrainConfig field\(s\) \['stepz'\]"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ValueError, match=r"gamma"):  # preset parameters are validated by the rubric
        wm.train_config(reward="dynasearcher", reward_params={"gamma": -1.0})
    with pytest.raises(ValueError, match=r"max_len"):  # an unworkable optimizer mix fails in LossConfig
        TrainConfig(preset="grpo", loss_overrides={"agg": "seq-mean-token-sum-norm", "max_len": 0})


def test_config_file_round_trip_and_derived_loss(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("preset: dr_grpo\nsteps: 7\nreward: when_to_search\nstage_switch_step: 3\n")
    cfg = wm.train_config_file(p, group_size=3)
    assert (cfg.steps, cfg.group_size, cfg.preset) == (7, 3, "dr_grpo")
    lc = cfg.loss_config()
    assert lc.max_len == cfg.max_total_tokens and lc.group_size == 3
    annealed = TrainConfig(loss_overrides={"kl_coef": 0.1, "kl_coef_end": 0.01}, steps=10).loss_config()
    assert annealed.kl_coef_at(0) == pytest.approx(0.1) and annealed.kl_coef_at(10) == pytest.approx(0.01)


def test_every_config_field_is_in_one_named_section_and_files_may_use_them(tmp_path, capsys):
    import dataclasses

    from workbench.apps.cli import main
    from workbench.rl.sft import SFTConfig

    for cls in (TrainConfig, SFTConfig):
        listed = [f for fs in cls.SECTIONS.values() for f in fs]
        assert sorted(listed) == sorted(f.name for f in dataclasses.fields(cls)), cls  # each once, none left out
    assert TrainConfig(max_turns=5).sections()["rollout"]["max_turns"] == 5

    flat, grouped = tmp_path / "flat.yaml", tmp_path / "grouped.yaml"
    flat.write_text("preset: dr_grpo\nsteps: 7\nmax_turns: 2\nlora_r: 8\nlora_alpha: 16\n")
    grouped.write_text("optimization: {preset: dr_grpo, steps: 7}\nrollout:\n  max_turns: 2\n"
                       "lora: {lora_r: 8}\nlora_alpha: 16\n")
    assert wm.train_config_file(grouped) == wm.train_config_file(flat)
    for text, needle in (("rollout: {lr: 0.1}\n", "section 'rollout' has no field 'lr' (it is in 'optimization')"),
                         ("steps: 3\noptimization: {steps: 4}\n", "'steps' is given twice"),
                         ("rollout: {nope: 1}\n", "section 'rollout' has no field 'nope'; its fields: ")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ValueError, match="bad.yaml: ") as e:
            wm.train_config_file(bad)
        assert needle in str(e.value) and "\n" not in str(e.value)

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    titles = [line.rstrip(":") for line in out.splitlines() if line.startswith("TrainConfig ")]
    assert titles == [f"TrainConfig {s}" for s in TrainConfig.SECTIONS]
    rollout = out.index("\nTrainConfig rollout:")
    assert rollout < out.index("\n  --max-turns", rollout) < out.index("\nTrainConfig rewards:")  # under its title


def test_data_stream_curriculum_and_resume():
    exs = [Example(id=f"q{i}", question=f"q{i}?", answers=["a"], hops=h, sources=["wiki"] * (1 + i % 2))
           for i, h in enumerate([3, 1, 2, 1, 4, 2, 1, 3])]
    s = DataStream(exs, seed=1, curriculum="hops")
    first_epoch = [e.hops for e in s.take(len(exs))]
    assert first_epoch == sorted(first_epoch)
    s2 = DataStream(exs, seed=1, curriculum="none")
    s2.take(5)
    state = s2.state_dict()
    rest = [e.id for e in s2.take(7)]  # crosses into epoch 1
    s3 = DataStream(exs, seed=1, curriculum="none")
    s3.load_state_dict(state)
    assert [e.id for e in s3.take(7)] == rest
    srcs = DataStream(exs, seed=0, curriculum="sources").take(len(exs))
    assert [len(set(e.sources)) for e in srcs] == sorted(len(set(e.sources)) for e in srcs)


def test_hop_repeats_oversample_the_deep_questions_in_each_epoch():
    from workbench.rl.data_stream import repeat_by_hops

    exs = [Example(id=f"q{i}", question=f"q{i}?", answers=["a"], hops=h) for i, h in enumerate([1, 2, 3, 4, 2, 1])]
    more = repeat_by_hops(exs, lambda e: e.hops, {"3": 3, "4": 2})
    assert [e.id for e in more] == ["q0", "q1", "q2", "q2", "q2", "q3", "q3", "q4", "q5"]
    assert repeat_by_hops(exs, lambda e: e.hops, {}) == exs
    epoch = [e.hops for e in DataStream(more, seed=0).take(len(more))]
    assert sorted(epoch) == [1, 1, 2, 2, 3, 3, 3, 4, 4]
    assert TrainConfig(hop_repeats={"3": 3}).hop_repeats == TrainConfig(hop_repeats={3: 3}).hop_repeats == {"3": 3}
    for bad in ({"three": 3}, {"3": 0}, {"3": 1.5}, {"3": True}):
        with pytest.raises(ValueError, match="TrainConfig.hop_repeats"):
            TrainConfig(hop_repeats=bad)


def test_from_method_and_method_key_in_a_file(tmp_path):
    cfg = wm.get_method("rsearch_dag").train_config(steps=3)
    assert (cfg.method, cfg.protocol, cfg.reward, cfg.group_size, cfg.steps) == ("rsearch_dag", "rsearch_dag",
                                                                                  "rsearch_dag", 4, 3)
    assert cfg.protocol_kwargs["observation_mode"] == "chat" and cfg.to_dict()["method"] == "rsearch_dag"
    p = tmp_path / "m.yaml"
    p.write_text("method: rsearch_dag\npreset: dspo\nsteps: 5\n")
    f = wm.train_config_file(p)
    assert (f.method, f.protocol, f.preset, f.steps) == ("rsearch_dag", "rsearch_dag", "dspo", 5)
    with pytest.raises(ValueError, match="unknown method"):
        wm.train_config("nope")
    with pytest.raises(ValueError, match="TrainConfig.method: unknown method"):
        wm.run_parts(TrainConfig(method="nope"))
    with pytest.raises(ValueError, match=r"TrainConfig.judges.*similarity"):
        TrainConfig(judges=["gpt"])


class _FakePolicy:
    def save_adapter(self, d):
        (d / "adapter_model.safetensors").write_bytes(b"")

    def load_adapter(self, d):
        pass


def _fake_trainer(run_dir, seed=0):
    import types

    from workbench.storage.runs import Run

    torch.manual_seed(seed)
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1)
    lin(torch.ones(1, 3)).sum().backward()
    opt.step()
    run = Run.create(run_dir, kind="train", name="ck", config={})
    return types.SimpleNamespace(data=DataStream([Example(id="q", question="q?", answers=["a"])]), world_size=1,
                                 rank=0, run=run, step=3, opt_step=7, stage=2, policy=_FakePolicy(), optimizer=opt,
                                 config=TrainConfig(steps=3), lin=lin)


def test_checkpoint_state_round_trips_without_pickle(tmp_path):
    import random

    from workbench.rl import checkpoint as C

    a = _fake_trainer(tmp_path / "a")
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    ck = C.save_checkpoint(a)
    draws = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    b = _fake_trainer(tmp_path / "b", seed=1)
    b.step = b.opt_step = 0
    C.load_checkpoint(b, ck)
    assert (b.step, b.opt_step, b.stage) == (3, 7, 2)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == draws  # RNG restored exactly
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    for pid in sa["state"]:
        for k, v in sa["state"][pid].items():
            assert torch.equal(v, sb["state"][pid][k]), k
    assert sa["param_groups"] == sb["param_groups"]
    assert latest_checkpoint(a.run.path) == ck


def test_pickle_and_foreign_checkpoints_are_refused(tmp_path):
    from workbench.rl import checkpoint as C

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    old = tmp_path / "checkpoints" / "step_000001"
    old.mkdir(parents=True)
    torch.save({"step": 1, "x": Payload()}, old / "trainer_state.pt")
    assert latest_checkpoint(tmp_path) == old
    with pytest.raises(C.CheckpointError, match=r"trainer_state\.pt.*pickle.*not loaded.*Fix"):
        C.read_state(old)
    assert not marker.exists()
    (old / "trainer_state.json").write_text(json.dumps({"step": 1}))
    with pytest.raises(C.CheckpointError, match=r"trainer_state\.json is not a workbench trainer state"):
        C.read_state(old)
    (old / "trainer_state.json").write_text(json.dumps({"format": C.FORMAT, "version": C.VERSION}))
    (old / "trainer_state.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(C.CheckpointError, match=r"trainer_state\.safetensors"):
        C.read_state(old)


# ----------------------------------------------------------------------------- the loop


@pytest.mark.parametrize("preset", ["grpo", "dapo", "gspo", "dspo", "dr_grpo"])
def test_two_step_smoke_per_preset(preset, tmp_path, tiny):
    # grpo on the real default model, the other presets on the random-init one
    cfg = TrainConfig(preset=preset, steps=2, reward="dynasearcher", **(TINY if preset == "grpo" else tiny))
    tr = wm.trainer(cfg, run=tmp_path, progress=False)
    run = tr.train()
    rows = [r for r in run.step_metrics() if "reward_mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for k in ("reward_mean", "reward_std", "kept_group_share", "searches_per_answer", "response_len",
                  "tokens_per_s", "time_rollout_s", "time_reward_s", "time_step_s"):
            assert k in r and r[k] == r[k], k
        assert "reward_r_acc_mean" in r and "reward_r_penalty_mean" in r  # every component is logged
        if tr.loss_cfg.dynamic_filter:
            assert r["filter_rounds"] >= 1
        if r.get("skipped_update") != 1.0:
            for k in ("loss", "clip_frac", "kl", "entropy", "grad_norm"):
                assert k in r, k
            assert r["optimizer_steps"] >= 1
    ck = latest_checkpoint(run.path)
    assert ck is not None and (ck / "adapter_model.safetensors").exists()
    assert (ck / "trainer_state.json").exists() and (ck / "trainer_state.safetensors").exists()
    assert not (ck / "trainer_state.pt").exists()  # nothing pickled
    assert (run.path / "trajectories.parquet").exists() and (run.path / "features.parquet").exists()
    assert json.loads((run.path / "config.json").read_text())["loss"]["name"] == preset


def test_on_policy_first_epoch_has_ratio_one_and_learns(tmp_path, tiny):
    cfg = TrainConfig(preset="grpo", steps=1, reward="dynasearcher", lr=1e-3, **tiny)
    tr = LengthReward(cfg, wm.run_parts(cfg), run=tmp_path, progress=False)
    before = adapter_state(tr)
    row = tr.train_step()
    assert row["ratio_mean"] == pytest.approx(1.0) and row["clip_frac"] == 0.0
    assert row["reward_std"] > 0 and row["grad_norm"] > 0
    after = adapter_state(tr)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_resume_gives_the_same_next_step(tmp_path, tiny):
    base = dict(tiny, steps=2, reward="dynasearcher", preset="gspo", lr=1e-3)
    a_cfg = TrainConfig(**{**base, "save_every": 1})
    a = LengthReward(a_cfg, wm.run_parts(a_cfg), run=tmp_path / "a", progress=False)
    a.train()
    rows_a = [r for r in a.run.step_metrics() if "reward_mean" in r]

    b_cfg = TrainConfig(**{**base, "steps": 1})
    b = LengthReward(b_cfg, wm.run_parts(b_cfg), run=tmp_path / "b", progress=False)
    assert not b.run.complete  # a training run in progress is incomplete
    b.train()
    assert b.run.complete
    b_dir = b.run.path
    del b
    # a killed run may have logged past its checkpoint: the resumed run drops that and redoes it
    with open(b_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "reward_mean": 123.0}) + "\n")
    r = LengthReward.resume(b_dir, wm.run_parts, progress=False, steps=2)
    assert r.step == 1
    assert not r.run.complete  # resumed: incomplete until train() has finished
    r.train()
    assert r.run.complete and r.run.status.note == ""
    rows_b = [x for x in r.run.step_metrics() if "reward_mean" in x]
    assert [x["step"] for x in rows_b] == [1, 2]
    for k in ("reward_mean", "loss", "grad_norm", "ratio_mean", "response_len", "clip_frac"):
        assert rows_b[1][k] == pytest.approx(rows_a[1][k], rel=1e-6, abs=1e-9), k
    sa, sb = adapter_state(a), adapter_state(r)
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("engine", ["fp32", "int4"])
def test_the_same_command_twice_gives_the_same_adapter(tmp_path, tiny, engine):
    """Same config, seed, machine and rollout engine: bit-identical LoRA tensors, saved files and step metrics (the
    int4 engine where this CPU runs it); another seed gives another adapter."""
    from safetensors.torch import load_file

    from workbench.rollout.backends.quant import choose_engine

    cfg = dict(tiny, steps=2, reward="dynasearcher", preset="grpo", lr=1e-3, seed=3, rollout_engine=engine,
               loss_overrides={"dynamic_filter": False})
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("other", 4)):
        tr = LengthReward(TrainConfig(**{**cfg, "seed": seed}), wm.run_parts(TrainConfig(**cfg)), run=tmp_path / name,
                          progress=False)
        if name == "a" and engine != "fp32" and choose_engine(engine, tr.policy.model)[0] != engine:
            pytest.skip(f"this CPU or torch build does not run the {engine} engine")
        tr.train()
        runs[name] = (adapter_state(tr), load_file(latest_checkpoint(tr.run.path) / "adapter_model.safetensors"),
                      [r for r in tr.run.step_metrics() if "reward_mean" in r])
    (a, fa, rows_a), (b, fb, rows_b), (other, _, _) = runs["a"], runs["b"], runs["other"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa)
    def measured(row):  # everything but the clocks (seconds, rates)
        return {k: v for k, v in row.items() if not (k.endswith("_s") or "_per_s" in k or k.startswith("time_"))}

    assert [measured(r) for r in rows_a] == [measured(r) for r in rows_b] and len(measured(rows_a[0])) > 20
    assert any(not torch.equal(a[k], other[k]) for k in a)  # the seed matters: this test could fail


def test_micro_batches_do_not_change_the_update(tmp_path, tiny):
    cfg = dict(tiny, steps=1, reward="dynasearcher", preset="dapo", lr=1e-3,
               loss_overrides={"num_mini_batches": 1, "dynamic_filter": False})
    t1 = wm.trainer(TrainConfig(**{**cfg, "micro_batch_size": 1}), run=tmp_path / "a", progress=False)
    t4 = wm.trainer(TrainConfig(**{**cfg, "micro_batch_size": 4}), run=tmp_path / "b", progress=False)
    assert all(torch.equal(x, y) for x, y in zip(adapter_state(t1).values(), adapter_state(t4).values()))
    for t in (t1, t4):  # plain SGD: the step is -lr·grad (Adam's g/√v would amplify float noise in tiny grads)
        t.optimizer = torch.optim.SGD(t.policy.trainable_parameters(), lr=1.0)
    sb = t1.collect(1)
    adv = np.array([1.0, -1.0, 0.5, -0.5])[: len(sb.trajectories)]
    sb.advantages = adv
    s1 = t1.update(t1.build(sb), 1)
    s4 = t4.update(t4.build(sb), 1)
    assert s1["loss"] == pytest.approx(s4["loss"], abs=1e-6)
    assert s1["grad_norm"] == pytest.approx(s4["grad_norm"], rel=1e-4) and s1["grad_norm"] > 0
    for (k, x), y in zip(adapter_state(t1).items(), adapter_state(t4).values()):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6, msg=k)
    moved = [k for k, v in adapter_state(t1).items() if "lora_B" in k and v.abs().sum() > 0]
    assert moved, "the update should have moved the adapter (LoRA B starts at 0)"


def test_reward_stage_switches_at_the_configured_step(tmp_path, capsys, tiny):
    cfg = TrainConfig(reward="when_to_search", stage_switch_step=1, steps=2, preset="grpo", encoder="none", **tiny)
    tr = wm.trainer(cfg, run=tmp_path, progress=False)
    tr.train()
    # its r_s reads query embeddings: the run says so at the start, progress output or not
    assert 'warning: TrainConfig.encoder is "none"' in capsys.readouterr().err
    rows = [r for r in tr.run.step_metrics() if "reward_mean" in r]
    assert [r["stage"] for r in rows] == [1, 2]
    assert tr.current_rubric.params["stage"] == 2


def test_kl_anneal_follows_training_steps_not_optimizer_steps(tmp_path, tiny):
    # gspo has 4 mini-batches (4 optimizer steps per training step); β must follow training steps
    cfg = TrainConfig(**{**tiny, "steps": 100, "reward": "dynasearcher", "preset": "gspo", "encoder": "none",
                         "loss_overrides": {"kl_coef": 0.1, "kl_coef_end": 0.01, "num_mini_batches": 2}})
    tr = LengthReward(cfg, wm.run_parts(cfg), run=tmp_path, progress=False)
    sb = tr.collect(1)
    tr.opt_step = 48  # as after 24 training steps of 2 optimizer steps each
    st = tr.update(tr.build(sb), step=25)
    assert st["kl_coef"] == pytest.approx(0.1 - 0.09 * 24 / 99)  # 0.0782, not β at optimizer step 48 (0.0564)


class FailingReward(LengthReward):
    """The length reward with one failed (NaN) trajectory per step, or all failed."""

    fail_all = False

    def score(self, features):
        table = super().score(features)
        r = table.total.copy()
        r[:] = np.nan if self.fail_all else r
        r[0] = np.nan
        return RewardTable({"total": r, "judge": r}, {}, {"judge": 1.0})


def test_failed_rewards_get_zero_advantage_and_stop_the_run(tmp_path, tiny):
    cfg = TrainConfig(**{**tiny, "steps": 2, "reward": "dynasearcher", "preset": "grpo", "encoder": "none"})
    tr = FailingReward(cfg, wm.run_parts(cfg), run=tmp_path / "a", progress=False)
    sb = tr.collect(1)
    assert np.isnan(sb.features["reward"][0]) and sb.features["advantage"][0] == 0.0 and sb.n_failed == 1
    group = sb.features["group_id"] == sb.features["group_id"][0]
    others = sb.features["advantage"][group].to_numpy()[1:]
    assert len(others) == 1 and others[0] == 0.0  # the one finite reward of that group has no one to compare with
    row = tr.apply(sb)
    assert row["n_failed_rewards"] == 1
    assert json.loads((tr.run.path / "metrics.jsonl").read_text().splitlines()[-1])["n_failed_rewards"] == 1
    FailingReward.fail_all = True
    try:
        bad_cfg = TrainConfig(**{**cfg.to_dict(), "max_failed_share": 0.5})
        bad = FailingReward(bad_cfg, wm.run_parts(bad_cfg), run=tmp_path / "b", progress=False)
        from workbench.rl.trainer import FailedRewardsError

        # the reward declares embedding features and the config has no encoder: the error names that first
        with pytest.raises(FailedRewardsError, match=r"4 of 4 trajectories.*max_failed_share=0.5.*judge \(4 NaN\)\. "
                                                     r"TrainConfig.encoder is \"none\".*--encoder auto"):
            bad.collect(1)
    finally:
        FailingReward.fail_all = False
