"""TRL's GRPOTrainer with our engine (``workbench/integrations/trl.py``): the rollout function's ids, masks and
trajectories equal the engine's, ``to_trl``'s rewards on them equal the Rubric's, and a real ``GRPOTrainer`` step
runs with LoRA, our rollout function and our reward functions (its mechanics on a random-init model of the default
architecture, ``conftest.tiny_model``; the recipe's step at the end runs on the default model itself, CPU)."""

from __future__ import annotations

import math

import pytest

from workbench.integrations.trl import (
    TRAJECTORY_KEY,
    RolloutFunc,
    grpo_config_kwargs,
    make_rollout_func,
    rollout_output,
    to_trl,
    trl_dataset,
    trl_row,
)
from workbench.methods import get_method
from workbench.rewards.features import compute_features
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.toolbox import build_toolbox

trl = pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]' (make setup installs it)")

METHOD = "search_r1"
# greedy, 3 turns of at most 64 tokens: the world's second training question searches twice with the default model
CFG = RolloutConfig(max_turns=3, max_new_tokens=64, temperature=0.0, seed=None, max_total_tokens=10**6)


@pytest.fixture(scope="module")
def setup(world, one_thread):
    proto = get_method(METHOD).get_protocol()
    return proto, build_toolbox(proto, world), world.split("train")[:2]


@pytest.fixture(scope="module")
def both(setup, hf_backend):
    """The same two questions through the engine and through the rollout function (greedy)."""
    proto, toolbox, examples = setup
    engine = rollout(examples, proto, toolbox, hf_backend, CFG, progress=False)
    f = make_rollout_func(METHOD, toolbox=toolbox, backend=hf_backend, config=CFG, examples=examples)
    out = f([trl_row(ex, proto)["prompt"] for ex in examples])
    return engine, out, f


def test_rollout_func_ids_and_masks_equal_the_engines(both):
    engine, out, f = both
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", TRAJECTORY_KEY}
    assert len(out["completion_ids"]) == len(engine) == 2 and f.calls == 1
    for i, t in enumerate(engine):
        assert out["prompt_ids"][i] == t.prompt_ids
        assert out["completion_ids"][i] == t.response_ids
        assert out["env_mask"][i] == t.response_loss_mask
        assert len(out["logprobs"][i]) == len(out["completion_ids"][i])
        assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(out["logprobs"][i], t.response_logprobs))
        mine = f.last_trajectories[i]
        assert (mine.example_id, mine.n_searches, mine.finish_reason, mine.answer, mine.flags) == (
            t.example_id, t.n_searches, t.finish_reason, t.answer, t.flags)


def test_observation_tokens_are_masked(both, tokenizer):
    engine, out, f = both
    multi = [i for i, t in enumerate(f.last_trajectories) if t.n_searches >= 1]
    assert multi, "no compared trajectory searched: the check would not cover observations"
    for i in multi:
        t, mask, ids = f.last_trajectories[i], out["env_mask"][i], out["completion_ids"][i]
        obs = [tid for tid, m in zip(ids, mask) if m == 0]
        assert obs and 1 in mask
        # the masked tokens are exactly the observations' ids (the retrieved passages), in order
        assert obs == [tid for turn in t.turns if turn.kind == "observation" for tid in turn.token_ids]
        assert "<information>" in tokenizer.decode(obs)
        assert all(lp == 0.0 for lp, m in zip(out["logprobs"][i], mask) if m == 0)


def test_trl_rewards_on_the_trajectories_equal_the_rubric(both, setup):
    """``to_trl``'s functions given the rollout function's trajectories: the Rubric's numbers on the engine's."""
    engine, out, _ = both
    _, _, examples = setup
    rubric = get_method(METHOD).rubric()
    want = rubric(compute_features(engine, examples, encoder=False, cache=False))
    funcs, weights = to_trl(get_method(METHOD).rubric(), get_method(METHOD).get_protocol(), encoder=False, cache=False)
    cols = {k: [trl_row(ex, get_method(METHOD).get_protocol())[k] for ex in examples]
            for k in ("answers", "question", "hops", "supporting_titles")}
    decoded = [[{"role": "assistant", "content": "<answer> not this </answer>"}]] * 2  # the trajectory wins
    for func, name in zip(funcs, rubric.weights):
        got = func(prompts=[None, None], completions=decoded, **cols, **{TRAJECTORY_KEY: out[TRAJECTORY_KEY]})
        assert got == [float(v) for v in want.frame[name]]
    assert weights == list(rubric.weights.values())


def test_prompts_outside_the_examples_and_bad_input(setup, hf_backend):
    proto, toolbox, examples = setup
    f = RolloutFunc(proto, toolbox, backend=hf_backend, config=RolloutConfig(max_turns=1, max_new_tokens=4, seed=1))
    out = f([trl_row(examples[0], proto)["prompt"]] * 2)  # no examples given: the question is the user message
    ids = [t.id for t in f.last_trajectories]
    assert ids[0].endswith("#0") and ids[1].endswith("#1") and ids[0].split("#")[0] == ids[1].split("#")[0]
    assert "Question:" in f.last_trajectories[0].question and len(out["completion_ids"]) == 2
    with pytest.raises(TypeError, match="a prompt must be a string or a list of chat messages"):
        f([42])
    with pytest.raises(ValueError, match="leave it at 1"):
        RolloutFunc(proto, toolbox, backend=hf_backend, config=RolloutConfig(group_size=4))
    with pytest.raises(ValueError, match="1 prompt_ids for 2 examples"):  # the engine's hook checks its input
        rollout(examples, proto, toolbox, hf_backend, CFG, progress=False, prompt_ids=[[1]])
    with pytest.raises(ValueError, match="no backend"):
        RolloutFunc(proto, toolbox)(["hi"])
    assert rollout_output([], 8) == {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                     TRAJECTORY_KEY)}


def test_rollout_output_cuts_and_fills():
    from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn

    t = Trajectory(id="a#0", example_id="a", question="q", protocol="search_r1", prompt_ids=[1, 2])
    t.turns = [Turn(POLICY, "x", [5, 6], [-0.5, -0.25], "stop", {}), Turn(OBSERVATION, "o", [7, 8, 9], None)]
    out = rollout_output([t], max_completion_length=4)
    assert out["completion_ids"] == [[5, 6, 7, 8]] and out["env_mask"] == [[1, 1, 0, 0]]
    assert out["logprobs"] == [[-0.5, -0.25, 0.0, 0.0]]
    empty = Trajectory(id="b#0", example_id="b", question="q", protocol="search_r1", prompt_ids=[1])
    assert rollout_output([empty], filler_id=3)["completion_ids"] == [[3]]
    assert rollout_output([empty], filler_id=3)["env_mask"] == [[0]]


def test_grpo_config_from_methods():
    kw, notes = grpo_config_kwargs("search_r1")
    assert kw["num_generations"] == 5 and kw["beta"] == 1e-3 and kw["learning_rate"] == 1e-6
    assert kw["loss_type"] == "grpo" and kw["scale_rewards"] == "group"
    kw, notes = grpo_config_kwargs("dspo")
    assert kw["importance_sampling_level"] == "sequence" and any("dynamic sampling" in n for n in notes)
    kw, _ = grpo_config_kwargs("when_to_search")
    trl.GRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False,  # TRL validates them
                   per_device_train_batch_size=kw["num_generations"], **kw)
    with pytest.raises(ValueError, match="no optimizer preset"):
        grpo_config_kwargs("vanilla_rag")


def r_distinct(completions, **kwargs):
    """Test reward (a plain TRL reward function): a number from each completion's text, different for two
    different samples, so no group has equal rewards and the step must move the adapter."""
    import zlib

    out = [zlib.crc32(str(c).encode()) % 997 / 997 for c in completions]
    r_distinct.seen.append(out)
    return out


r_distinct.seen = []


def r_invalid(c):
    """Test component: a penalty per invalid turn (varies within a group, so the step has a gradient)."""
    return -c["n_invalid"]


@pytest.mark.slow
def test_a_real_grpo_trainer_step(setup, tmp_path, monkeypatch, tiny_model):
    """One ``GRPOTrainer`` step: LoRA on a random-init model of the default architecture (two layers; the recipe
    test below takes a step on the default model), our rollout function and our reward functions."""
    import torch
    from peft import LoraConfig

    from workbench.core.models import load_policy
    from workbench.methods.search_r1.reward import r_em
    from workbench.rewards.rubric import Rubric

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    r_distinct.seen.clear()
    proto, toolbox, examples = setup
    model, tok = load_policy(tiny_model, device="cpu")  # its own copy: peft wraps the model it is given
    rf = RolloutFunc(proto, toolbox, config=RolloutConfig(max_turns=2, max_new_tokens=32, seed=0), examples=examples)
    rubric = Rubric([r_em, r_invalid], [1.0, 0.5], name="trl_test")
    funcs, weights = to_trl(rubric, proto, encoder=False, cache=False)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=96, learning_rate=1e-3, beta=0.0, reward_weights=[*weights, 1.0], logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0,
        gradient_checkpointing=False,
    )
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[*funcs, r_distinct], args=args, train_dataset=trl_dataset(examples, proto),
                              processing_class=tok, rollout_func=rf,
                              peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                     task_type="CAUSAL_LM"))
    # TRL's own code on our rollout function's output: its prompt tokenization gives our prompt ids, and its
    # per-token logprobs of the completions (teacher-forced; the adapter starts as a no-op) give the sampled ones
    probe = RolloutFunc(proto, toolbox, config=RolloutConfig(max_turns=2, max_new_tokens=32, seed=3),
                        examples=examples)
    prompts = [trl_row(ex, proto)["prompt"] for ex in examples]
    out = probe(prompts, trainer)
    assert trainer._tokenize_prompts(prompts)[0] == out["prompt_ids"]
    for p_ids, c_ids, lps, mask in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"]):
        ids = torch.tensor([p_ids + c_ids])
        with torch.no_grad():
            trl_lps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids),
                                                                 len(c_ids))[0][0]
        gaps = [abs(float(a) - b) for a, b, m in zip(trl_lps, lps, mask) if m == 1]
        assert gaps and max(gaps) < 2e-3, max(gaps)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert rf.calls == 1 and len(rf.last_trajectories) == 4
    # TRL repeated each prompt num_generations times: two groups of two
    assert sorted(t.id.split("#")[0] for t in rf.last_trajectories) == sorted([ex.id for ex in examples] * 2)
    log = next(e for e in trainer.state.log_history if "loss" in e)
    assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"])
    # the logged rewards are the Rubric's on the very trajectories we rolled out (weighted sum = TRL's "reward")
    table = rubric(compute_features(rf.last_trajectories, examples, encoder=False, cache=False))
    for func, name in zip(funcs, rubric.weights):
        assert math.isclose(log[f"rewards/{func.__name__}/mean"], float(table.frame[name].mean()), abs_tol=1e-6)
    (distinct,) = r_distinct.seen  # what TRL's one call gave the four completions
    assert len(set(distinct)) == 4 and math.isclose(log["rewards/r_distinct/mean"], sum(distinct) / 4, abs_tol=1e-6)
    assert math.isclose(log["reward"], float(table.total.mean()) + sum(distinct) / 4, abs_tol=1e-6)
    # TRL took our env_mask: its completion length counts policy tokens only
    policy = [sum(t.response_loss_mask[:96]) for t in rf.last_trajectories]
    assert math.isclose(log["completions/mean_length"], sum(policy) / 4, abs_tol=1e-6)
    # r_distinct differs between two different samples, so each group has a gradient: the LoRA weights move
    assert log["frac_reward_zero_std"] == 0 and log["grad_norm"] > 0
    moved = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(before[n], p)]
    # (LoRA's B starts at zero, so A's gradient is zero on the first step: every B moves, no A yet)
    lora_b = {n for n in before if "lora_B" in n}
    assert len(lora_b) == 2 * model.config.num_hidden_layers and set(moved) == lora_b, f"unchanged: {sorted(lora_b - set(moved))[:4]}"


def _recipe(argv: list[str]) -> int:
    """``workbench train --engine trl ARGV`` through the command line's own entry point."""
    from workbench.apps.cli import main

    return main(["train", "--engine", "trl", *argv])


def test_train_hands_engine_trl_command_lines_to_the_trl_trainer():
    from workbench.apps.cli import trl_argv

    assert trl_argv(["train", "--engine", "trl", "--steps", "2"]) == ["--steps", "2"]
    assert trl_argv(["-v", "train", "--steps", "2", "--engine=trl"]) == ["--steps", "2"]
    assert trl_argv(["train", "--engine", "workbench", "--steps", "2"]) is None
    assert trl_argv(["train", "--steps", "2"]) is None
    assert trl_argv(["eval", "--engine", "trl"]) is None and trl_argv([]) is None


def test_recipe_help_dry_run_and_bad_input(tmp_path, capsys):
    import json

    with pytest.raises(SystemExit) as e:
        _recipe(["--help"])
    assert e.value.code == 0 and "--group-size" in capsys.readouterr().out
    assert _recipe(["--out", str(tmp_path), "--dry-run", "--method", "dynasearcher", "--limit", "3",
                        "--group-size", "4", "--questions-per-step", "2"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["questions"] == 3 and plan["grpo"]["num_generations"] == 4
    assert plan["grpo"]["per_device_train_batch_size"] == 8 and plan["grpo"]["beta"] == 1e-3
    assert plan["rewards"][0] == "dynasearcher_r_acc" and len(plan["grpo"]["reward_weights"]) == len(plan["rewards"])
    for argv, needle in ((["--method", "nope"], "unknown method 'nope'"),
                         (["--method", "vanilla_rag"], "no optimizer preset"),
                         (["--group-size", "1"], "--group-size must be >= 2"),
                         (["--dataset", str(tmp_path / "missing.jsonl")], "not found")):
        with pytest.raises(SystemExit) as e:
            _recipe(["--out", str(tmp_path), "--dry-run", *argv])
        err = capsys.readouterr().err
        assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


# ============================================================================= the TRL run as a workbench run


def _trackers_here() -> list[str]:
    from workbench.rl.trackers import tracker_names

    here = []
    for name in ("tensorboard", "trackio"):
        try:
            here.append(tracker_names(name)[0])
        except ModuleNotFoundError:
            pass
    return here


def _opens_everywhere(run, n_rows: int) -> None:
    """The inspector, the reward playground and the dashboard open the run like a `workbench train` run."""
    from widgets.inspector_data import load_inspector_data
    from widgets.playground import playground_features
    from workbench.dashboard.queries import runs_table, training_curves

    data = load_inspector_data(run)
    assert len(data.frame) == n_rows and data.reward_stored and data.features is not None
    assert data.frame["step"].notna().all() and data.trajectories[0].turns
    feats, note = playground_features(run)
    assert len(feats) == n_rows and "features.parquet" in note
    table = runs_table(run.path.parent)
    row = table[table["run_id"] == run.id].iloc[0]
    assert (row["kind"], row["status"], row["error"], row["n_trajectories"]) == ("train", "complete", "", n_rows)
    assert {"reward_mean", "loss", "trl/loss"} <= set(training_curves(run.path.parent)["metric"])


def test_run_recorder_writes_each_step_as_the_trainer_does(setup, tokenizer, tmp_path):
    """``RunRecorder`` driven through TRL's callback order (step end, then the step's log) with the real engine on a
    scripted backend: one step file per step with the Rubric's rewards, metrics rows joining ours and TRL's."""
    from transformers import TrainerControl, TrainerState

    from workbench.integrations.trl import RunRecorder
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.storage.runs import open_run

    proto, toolbox, examples = setup
    gold = examples[0].answers[0]

    def script(prompt: str, turn: int) -> str:  # the first question answered right, the second wrong
        return f"<answer> {gold if examples[0].question in prompt else 'Nobody'} </answer>"

    rf = RolloutFunc(proto, toolbox, backend=ScriptedBackend(tokenizer, script), config=RolloutConfig(max_turns=1),
                     examples=examples)
    rubric = get_method(METHOD).rubric()
    rec = RunRecorder(rf, rubric, run=tmp_path, report_to=",".join(_trackers_here()) or "none",
                      config={"method": METHOD}, feature_kwargs={"encoder": False, "cache": False})
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False, report_to="none",
                          per_device_train_batch_size=4, num_generations=2)
    state, control = TrainerState(), TrainerControl()
    rec.on_train_begin(args, state, control)
    prompts = [trl_row(ex, proto)["prompt"] for ex in examples for _ in range(2)]  # TRL repeats each prompt G times
    for step in (1, 2):
        rec.on_step_begin(args, state, control)
        rf(prompts)
        state.global_step = step
        rec.on_step_end(args, state, control)
        rec.on_log(args, state, control, logs={"loss": 0.25 * step, "learning_rate": 1e-6, "kl": 0.0,
                                                "rewards/search_r1_r_em/mean": 0.5, "epoch": 0.5 * step})
    rec.on_log(args, state, control, logs={"train_runtime": 1.5, "train_loss": 0.375, "epoch": 1.0})
    rec.on_train_end(args, state, control)

    run = open_run(rec.run.path)
    assert run.complete and run.config["source"] == "trl" and run.config["reward"] == rubric.name
    assert run.config["trl"]["num_generations"] == 2 and run.config["method"] == METHOD
    rows = run.step_metrics()
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # ours (from the trajectories) and TRL's (ours renamed, all as trl/<name>) in one row
        assert r["reward_mean"] == 0.5 and r["reward_r_em_mean"] == 0.5 and r["generated_trajectories"] == 4
        assert r["mixed_group_share"] == 0.0 and r["cem"] == 0.5 and r["lr"] == 1e-6
        assert r["loss"] == r["trl/loss"] == 0.25 * r["step"] and r["trl/rewards/search_r1_r_em/mean"] == 0.5
    frame = run.trajectories_frame(columns=["step", "reward", "example_id"])
    assert list(frame.step) == [1] * 4 + [2] * 4
    assert list(frame.reward) == [1.0, 1.0, 0.0, 0.0] * 2  # the Rubric's numbers on each trajectory
    assert {e.id for e in run.examples()} == {e.id for e in examples}
    assert run.metrics()["trl"]["train_loss"] == 0.375 and run.metrics()["reward_last"] == 0.5
    _opens_everywhere(run, 8)
    if "tensorboard" in _trackers_here():
        from tests.test_trackers import read_tensorboard

        values, texts = read_tensorboard(run.path)
        assert values["trl/loss"] == {1: 0.25, 2: 0.5} and values["reward_mean"] == {1: 0.5, 2: 0.5}
        header, *table = texts["completions"][2]
        assert len(table) == 4 and dict(zip(header, table[0]))["gold"] == " | ".join(examples[0].answers)


@pytest.mark.slow
def test_the_recipe_writes_a_run_the_inspector_opens(tmp_path, capsys, monkeypatch):
    """``workbench train --engine trl`` with a real GRPOTrainer step: its run opens in the inspector, the playground and the
    dashboard, and its logs are in TensorBoard and Trackio (when installed)."""
    from workbench.storage.runs import open_run

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    here = _trackers_here()
    assert _recipe(["--method", METHOD, "--out", str(tmp_path), "--steps", "1", "--limit", "2",
                           "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "12", "--beta", "0",
                           "--max-completion-length", "64", "--report-to", ",".join(here) or "none"]) == 0
    (path,) = tmp_path.iterdir()
    assert f"run: {path}" in capsys.readouterr().out
    run = open_run(path)
    (row,) = run.step_metrics()
    assert row["step"] == 1 and math.isfinite(row["trl/loss"]) and row["generated_trajectories"] == 2
    assert row["response_len"] == pytest.approx(row["trl/completions/mean_length"])  # policy tokens, counted alike
    assert (run.path / "adapter" / "adapter_model.safetensors").exists() and (run.path / "recipe.json").exists()
    _opens_everywhere(run, 2)
    if "trackio" in here:
        from tests.test_trackers import read_trackio

        steps, config = read_trackio(run.path, run.id, monkeypatch)
        assert steps[1]["trl/loss"] == row["trl/loss"] and len(steps[1]["completions"]["_value"]) == 2
        assert config["source"] == "trl"
