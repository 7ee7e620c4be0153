"""Health alarms (``workbench/rl/health.py``) and the adapter chosen by validation (``keep_best``): the rules'
arithmetic, a policy made to stop searching caught by the real training loop within two steps (and the run stopped
there with ``--stop-on-alarm``), the stored runs replayed through the rules, and the best validation checkpoint
kept as the run's adapter. The loop runs on the random-init model of the default architecture (``tiny_model``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench import methods as wm
from workbench.rl.health import (
    RULES,
    HealthMonitor,
    Rule,
    parse_stop_on,
    read_health,
    replay,
    rules_for,
    trajectory_signals,
)
from workbench.rl.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(questions_per_step=2, group_size=2, max_turns=2, max_new_tokens=16, max_total_tokens=1024,
            temperature=1.0, protocol_kwargs={"observation_mode": "chat", "few_shot": False}, save_every=0,
            micro_batch_size=2, reward="dynasearcher", encoder="none")


def test_each_kind_of_rule_holds_where_it_says():
    drop = Rule("d", "searches", "drop", 1 / 3, margin=0.3)
    assert drop.holds(1.0, 1.6) and not drop.holds(1.1, 1.6)  # -37.5% fires, -31% does not
    assert not drop.holds(0.05, 0.1)  # a third of a small number is under the margin
    rise = Rule("r", "out_of_turns", "rise", 3.0, margin=0.1)
    assert rise.holds(0.4, 0.1) and not rise.holds(0.25, 0.1) and not rise.holds(0.09, 0.02)
    above = Rule("a", "logprob_gap", "above", 0.05)
    assert above.holds(0.06, None) and not above.holds(0.05, None) and not above.holds(float("nan"), None)
    assert "down 38% from 1.6" in drop.describe(1.0, 1.6)
    assert rise.describe(0.375, 0.0) == "out_of_turns 0.375, up from 0 at the start"
    with pytest.raises(ValueError, match="when='fall' is not one of drop, rise, above, below"):
        Rule("x", "searches", "fall", 0.3)


def test_kl_drift_is_a_rise_from_the_starts_kl_not_a_level():
    """A run continuing an SFT adapter measures its KL against the base model (the adapter disabled): it starts
    0.33 nats a token away (a 2-step vLLM run of the README's stage), which is no drift; 0.2 more is."""
    (kl,) = [r for r in RULES if r.name == "kl_drift"]
    monitor = HealthMonitor((kl,))
    fired = [[a.name for a in monitor.observe(step, {"kl": v})[1]] for step, v in enumerate([0.33, 0.40, 0.56], 1)]
    assert fired == [[], [], ["kl_drift"]]
    fresh = HealthMonitor((kl,))  # a fresh adapter starts at the reference: KL 0
    assert [[a.name for a in fresh.observe(s, {"kl": v})[1]] for s, v in enumerate([0.0, 0.15, 0.25], 1)] == [
        [], [], ["kl_drift"]]


def test_an_alarm_fires_once_while_it_holds_and_again_after_it_clears():
    monitor = HealthMonitor((Rule("search_drop", "searches", "drop", 1 / 3, margin=0.3),
                             Rule("no_signal", "uniform_groups", "above", 0.9, steps=2)), reference_steps=2)
    seen = []
    for step, (searches, uniform) in enumerate([(2.0, 0.0), (1.8, 0.95), (1.0, 0.95), (0.9, 0.2), (1.9, 0.2),
                                                (1.0, 0.2)], start=1):
        row, fired = monitor.observe(step, {"searches": searches, "uniform_groups": uniform})
        seen.append([a.name for a in fired])
        assert row["step"] == step and row["reference"]["searches"] == pytest.approx(2.0 if step == 1 else 1.9)
    # the reference is steps 1-2 (1.9); no_signal needs two steps in a row above 0.9 (steps 2 and 3)
    assert seen == [[], [], ["search_drop", "no_signal"], [], [], ["search_drop"]]


def test_rules_are_a_table_a_run_extends_and_errors_name_the_fields():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) and {"search_drop", "format_drop", "out_of_turns", "stale_adapter"} <= set(names)
    rules = {r.name: r for r in rules_for([{"name": "search_drop", "amount": 0.25},
                                           {"name": "long", "signal": "response_len", "when": "above", "amount": 500}])}
    assert rules["search_drop"].amount == 0.25 and rules["search_drop"].signal == "searches"  # the rest kept
    assert rules["long"].when == "above"
    with pytest.raises(ValueError, match=r"health_rules\[0\] \(x\): unknown field\(s\) \['size'\]"):
        rules_for([{"name": "x", "size": 3}])
    with pytest.raises(ValueError, match=r"unknown alarm\(s\) \['serch_drop'\]"):
        parse_stop_on("serch_drop", RULES)
    assert parse_stop_on("all", RULES) == frozenset(names) and parse_stop_on("", RULES) == frozenset()
    with pytest.raises(ValueError, match="stop_on_alarm"):
        TrainConfig(stop_on_alarm="nope")


def test_trajectory_signals_count_short_answers_and_loops():
    recs = [{"hops": 2, "searches": 1, "answered": True, "finish_reason": "answer", "logprobs": [-0.5, -1.5]},
            {"hops": 2, "searches": 2, "answered": True, "finish_reason": "answer", "logprobs": [-1.0]},
            {"hops": 1, "searches": 4, "answered": False, "finish_reason": "max_turns", "logprobs": []},
            {"hops": None, "searches": 0, "answered": True, "finish_reason": "answer", "logprobs": None}]
    s = trajectory_signals(recs)
    assert s["short_answers"] == 0.5 and s["searches_multi"] == 1.5 and s["searches_h1"] == 4
    assert s["out_of_turns"] == 0.25 and s["neg_logprob"] == pytest.approx(1.0)


class _Scripted:
    """The policy made to stop searching: step 1's rollouts search once and answer, every later step answers at
    once (a scripted backend in the real loop)."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    def __call__(self, prompt: str, turn: int) -> str:
        if self.trainer.step == 0 and turn == 0:
            return "I should look this up. <search> who founded the company </search>"
        return "<answer> Tarnholm </answer>"


def _scripted_trainer(tmp_path, tiny_model, **kw) -> Trainer:
    from workbench.rollout.backends.scripted import ScriptedBackend

    cfg = TrainConfig(**{**TINY, "model": tiny_model, **kw})
    tr = wm.trainer(cfg, run=tmp_path, progress=False)
    tr.backend = ScriptedBackend(tr.tokenizer, _Scripted(tr), logprob=-0.01)
    return tr


def test_a_policy_that_stops_searching_trips_the_alarm_and_the_run_stops_there(tmp_path, tiny_model, capsys):
    tr = _scripted_trainer(tmp_path, tiny_model, steps=5, stop_on_alarm="search_drop")
    run = tr.train()
    health = read_health(run.path)
    assert [r["step"] for r in health] == [1, 2]  # stopped at the step that fired
    assert health[0]["signals"]["searches"] == 1.0 and health[1]["signals"]["searches"] == 0.0
    fired = {a["name"]: a for a in health[1]["fired"]}
    assert "search_drop" in fired and fired["search_drop"]["reference"] == 1.0
    # the scripted sampler is not the trained policy: its logprobs are not the trainer's, and that alarm fires too
    assert "stale_adapter" in {a["name"] for r in health for a in r["fired"]}
    err = capsys.readouterr().err
    assert "alarm search_drop at step 2: searches 0, down 100% from 1 at the start" in err
    assert "stopping at step 2: alarm search_drop is in --stop-on-alarm" in err
    m = run.metrics()
    assert m["stopped_by_alarm"] == {"name": "search_drop", "step": 2} and run.complete
    assert {a["name"] for a in m["alarms"]} >= {"search_drop"}
    assert [r["step"] for r in run.step_metrics() if "reward_mean" in r] == [1, 2]


def test_without_stop_on_alarm_the_run_goes_on_and_a_resume_keeps_the_reference(tmp_path, tiny_model):
    tr = _scripted_trainer(tmp_path, tiny_model, steps=2, save_every=1)
    run = tr.train()
    assert [r["step"] for r in read_health(run.path)] == [1, 2] and "stopped_by_alarm" not in run.metrics()
    del tr
    r = Trainer.resume(run.path, wm.run_parts, progress=False, steps=3)
    assert r.step == 2 and r.health.reference("searches") == 1.0  # read back from health.jsonl
    assert [a.name for a in r.health.alarms if a.name == "search_drop"] == ["search_drop"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_stored_collapsed_run_fires_and_the_healthy_one_does_not_stop_searching():
    """Replayed from their metrics rows: the H200 RL stage that collapsed into searching once (1.62 -> 1.04
    searches) trips search_drop at step 5; the 40-step GRPO run that learned to search does not trip a search or
    answer alarm (RESULTS lists every alarm each stored run fires)."""
    _, collapsed = replay(_rows(ROOT / "bench/gpu/results/h200-graph/device_check_train_metrics.jsonl"))
    assert [(a.name, a.step) for a in collapsed if a.name == "search_drop"] == [("search_drop", 5)]
    _, healthy = replay(_rows(ROOT / "bench/data/learn-grpo-dynasearcher-1hop.metrics.jsonl"))
    assert not {a.name for a in healthy} & {"search_drop", "deep_search_drop", "answer_drop", "format_drop"}


class _Validated(Trainer):
    """The real loop with validation scores set by step (the tiny model scores 0 on every question) and a training
    reward that differs inside each group (response length), so that every step moves the adapter."""

    SCORES = {0: 0.1, 2: 0.5, 4: 0.3, 6: 0.2}

    def featurize(self, trajs, examples):
        self._last = list(trajs)
        return super().featurize(trajs, examples)

    def score(self, features):
        from workbench.rewards.rubric import RewardTable

        r = np.array([float(t.n_policy_tokens % 5) + 0.1 * t.sample_idx for t in self._last])
        return RewardTable({"total": r, "length": r}, {}, {"length": 1.0})

    def evaluate(self, limit=None, save=True, examples=None, prefix="eval"):
        if prefix != "val":
            return super().evaluate(limit, save, examples, prefix)
        v = self.SCORES.get(self.step, 0.0)
        return {"val_cem": v, "val_f1": v, "val_em": v, "val_reward_mean": v, "val_n": float(len(self.val_examples)),
                "val_searches": 1.0, "val_answered": 1.0, "val_seconds": 0.0}


def test_keep_best_makes_the_best_validation_checkpoint_the_runs_adapter(tmp_path, tiny_model):
    from safetensors.torch import load_file

    from workbench.rl.policy import adapter_dir

    cfg = TrainConfig(**{**TINY, "model": tiny_model, "steps": 4, "eval_every": 2, "keep_best": "cem",
                         "save_every": 2, "keep_checkpoints": 3, "lr": 1e-3, "val_questions": 4})
    tr = _Validated(cfg, wm.run_parts(cfg), run=tmp_path, progress=False)
    assert len(tr.val_examples) == 4 and not {e.id for e in tr.val_examples} & {e.id for e in tr.data.examples}
    run = tr.train()
    best = run.path / "checkpoints" / "best"
    assert adapter_dir(run.path) == best  # the run's adapter: what --adapter RUN and --init-adapter RUN load
    sel = json.loads((best / "selection.json").read_text())
    assert sel["step"] == 2 and sel["metric"] == "cem" and sel["value"] == 0.5 and sel["val_questions"] == 4
    assert run.metrics()["best"]["step"] == 2
    step2 = load_file(run.path / "checkpoints" / "step_000002" / "adapter_model.safetensors")
    kept, last = load_file(best / "adapter_model.safetensors"), load_file(
        run.path / "checkpoints" / "step_000004" / "adapter_model.safetensors")
    assert all(torch.equal(step2[k], kept[k]) for k in step2)  # the step-2 adapter, not the last one
    assert any(not torch.equal(last[k], kept[k]) for k in last)
    vals = [r for r in run.step_metrics() if "val_cem" in r]
    assert [r["step"] for r in vals] == [0, 2, 4]


def test_early_stop_after_rounds_without_a_gain(tmp_path, tiny_model, capsys):
    class Falling(_Validated):
        SCORES = {0: 0.5, 1: 0.4, 2: 0.3, 3: 0.2}

    cfg = TrainConfig(**{**TINY, "model": tiny_model, "steps": 6, "eval_every": 1, "keep_best": "cem",
                         "early_stop": 2})
    tr = Falling(cfg, wm.run_parts(cfg), run=tmp_path, progress=True)
    run = tr.train()
    assert tr.step == 2 and run.metrics()["best"]["step"] == 0
    assert "early stop at step 2: 2 validation round(s) without a gain over step 0" in capsys.readouterr().out
    with pytest.raises(ValueError, match="keep_best: chooses among the checkpoints of validation rounds"):
        TrainConfig(keep_best="cem")


class _Learning(_Scripted):
    """Searches once at step 1 (a wrong answer), answers every question right at once from then on."""

    def __call__(self, prompt: str, turn: int) -> str:
        if self.trainer.step == 0:
            return "<search> who founded the company </search>" if turn == 0 else "<answer> nobody </answer>"
        for ex in self.trainer.eval_examples + self.trainer.data.examples:
            if ex.question in prompt:
                return f"<answer> {ex.answers[0]} </answer>"
        return "<answer> nobody </answer>"


def test_the_report_says_what_changed_between_start_and_end(tmp_path, tiny_model, capsys):
    from workbench.apps.cli import main
    from workbench.eval.run_report import format_report, run_report
    from workbench.rollout.backends.scripted import ScriptedBackend

    cfg = TrainConfig(**{**TINY, "model": tiny_model, "steps": 2, "eval_limit": 3})
    tr = wm.trainer(cfg, run=tmp_path, progress=False)
    tr.backend = ScriptedBackend(tr.tokenizer, _Learning(tr), logprob=-0.01)
    run = tr.train()
    r = run_report(run.path)
    held = r["held_out"]
    assert (held["first_step"], held["last_step"], held["n"]) == (0, 2, 3)
    assert sorted(held["fixed"]) == sorted(e.id for e in tr.eval_examples) and held["broken"] == []
    assert held["by_hops"]["all"] == {"n": 3, "before": 0.0, "after": 1.0}
    assert Path(held["changed_most_html"]).is_file() and "step 0" in Path(held["changed_most_html"]).read_text()
    b = r["behaviour"]
    assert (b["first_step"], b["last_step"]) == (1, 2)
    assert b["first"]["all"]["searches"] == 1.0 and b["last"]["all"]["searches"] == 0.0
    assert "search_drop" in {a["name"] for a in r["alarms"]}
    text = format_report(r)
    assert "3 questions: 3 fixed, 0 broken" in text and "search_drop" in text
    assert main(["report", str(run.path)]) == 0 and "fixed" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_the_dashboard_shows_the_alarms_and_each_runs_report(tmp_path, tiny_model):
    from workbench.dashboard import queries as q
    from workbench.dashboard.app import _health_part

    root = tmp_path / "runs"
    tr = _scripted_trainer(root, tiny_model, steps=2)
    run = tr.train()
    alarms = q.health_alarms(root)
    assert {"search_drop"} <= set(alarms["alarm"]) and set(alarms["run_id"]) == {run.path.name}
    row = alarms[alarms["alarm"] == "search_drop"].iloc[0]
    assert row["step"] == 2 and "down 100% from 1" in row["what happened"] and row["status"] == "complete"
    parts = _health_part(root)
    page = "".join(str(getattr(p, "object", "")) for p in parts)
    assert "what happened" in page and "behaviour by hop count" in page and run.path.name in page


def test_a_second_writer_of_a_run_is_refused_naming_the_first(tmp_path, tiny_model):
    """Two ``train --resume`` of one run both proceeded (the step-3 row logged twice, checkpoints last-writer-wins):
    a trainer holds the run's writer lock while it writes, a second is refused naming the first's process, and once
    the first has finished (or died) the run resumes."""
    import os
    import subprocess
    import sys

    from workbench.storage.runs import RunBusyError

    first = _scripted_trainer(tmp_path, tiny_model, steps=1, save_every=1)
    with pytest.raises(RunBusyError, match=rf"is being written by process {os.getpid()} on .*: wait for it"):
        Trainer.resume(first.run.path, wm.run_parts, progress=False, steps=2)
    cli = subprocess.run([sys.executable, "-m", "workbench", "train", "--resume", str(first.run.path), "--steps", "2",
                          "--no-progress"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and f"is being written by process {os.getpid()}" in cli.stderr, cli.stderr[-800:]
    assert "Traceback" not in cli.stderr
    first.train()  # finished: the lock is released
    again = Trainer.resume(first.run.path, wm.run_parts, progress=False, steps=2)
    assert again.step == 1


def test_a_failed_train_call_lets_the_same_process_resume(tmp_path, tiny_model, monkeypatch):
    """A step that raises (Ctrl-C in notebook 04) ends train() without the lock: the notebook that still holds the
    trainer can resume the run at once instead of being refused by its own process."""
    tr = _scripted_trainer(tmp_path, tiny_model, steps=3, save_every=1)
    real = tr.collect
    calls = []

    def collect_then_stop(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(tr, "collect", collect_then_stop)
    with pytest.raises(KeyboardInterrupt):
        tr.train()
    # the run says it stopped, where and why, not "running" (this process lives on) nor "killed"
    status = tr.run.status
    assert (status.state, status.note) == ("failed", "failed at step 1: interrupted (Ctrl-C)")
    again = Trainer.resume(tr.run.path, wm.run_parts, progress=False, steps=3)  # `tr` is still alive here
    assert again.step == 1 and again.run.status.state == "running"


def test_a_train_run_that_raises_is_marked_failed_with_its_error(tmp_path, tiny_model, monkeypatch):
    """A step that fails (a full disk, a bad batch) leaves the run marked failed, naming the error, in status.json and
    in the dashboard's runs table, where it was shown as still running until its process exited, then as killed."""
    from workbench.dashboard.queries import run_states

    tr = _scripted_trainer(tmp_path, tiny_model, steps=2, save_every=1)

    def no_space(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tr, "collect", no_space)
    with pytest.raises(OSError):
        tr.train()
    raw = json.loads((tr.run.path / "status.json").read_text())
    assert raw["state"] == "failed" and raw["step"] == 0 and raw["error"] == "OSError: [Errno 28] No space left on device"
    assert tr.run.status.note == "failed at step 0: OSError: [Errno 28] No space left on device"
    assert not tr.run.complete and run_states(tr.run.path.parent)[tr.run.id] == "failed"


def test_rollout_incentives_rescored_with_the_runs_own_rubric_is_the_run(tmp_path, tiny_model):
    """``bench/rollout_incentives.py`` re-scores a run's own rollouts: with the preset and parameters the run
    trained with, each rollout's reward and group advantage come back as stored; another weight moves them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rollout_incentives", ROOT / "bench" / "rollout_incentives.py")
    ri = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ri)
    cfg = TrainConfig(**{**TINY, "model": tiny_model, "steps": 2})
    run = wm.trainer(cfg, run=tmp_path, progress=False).train()  # the real policy samples: groups' rewards differ
    df = ri.load(run.path, None)
    assert len(df) == 2 * cfg.questions_per_step * cfg.group_size and set(df["step"]) == {1, 2}
    same = ri.rescore(df, "dynasearcher", {})
    np.testing.assert_allclose(same["reward_new"], df["reward"], atol=1e-6)
    np.testing.assert_allclose(same["advantage_new"], df["advantage"], atol=1e-4)
    table = ri.table(df)
    assert table["n"].sum() == len(df) and set(table.columns) >= {"hops", "searches", "cem", "advantage"}
    acc_only = ri.rescore(df, "dynasearcher", {"alpha": 0.0})  # the gain term off: the accuracy term alone
    np.testing.assert_allclose(acc_only["reward_new"], df["reward_r_acc"], atol=1e-6)


def test_notebook_curves_redraw_after_each_step_and_the_bar_names_the_phase(tmp_path, tiny_model, capsys, monkeypatch):
    """Notebook 04 hands ``LiveCurves.update`` to ``train(on_step=...)``: the displayed figure is replaced after each
    step with the curves read back from ``metrics.jsonl`` (one more point each time), and the progress bar says which
    phase a step is in (a CPU update takes minutes)."""
    import plotly.io as pio

    from widgets.training import LiveCurves

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # a kernel's renderer (JupyterLab's figures)
    tr = _scripted_trainer(tmp_path, tiny_model, steps=3)
    tr.progress = True
    shown: list[int] = []

    class Handle:  # what IPython's display(..., display_id=True) returns
        def update(self, bundle, raw=False):
            data = bundle["application/vnd.plotly.v1+json"]["data"]
            shown.append(max((len(t["x"]) for t in data if t.get("name") == "reward_mean"), default=0))

    live = LiveCurves(tr.run, title="t")
    live.handle = Handle()
    tr.train(on_step=live.update)
    assert shown[:3] == [1, 2, 3] and len(shown) == 4  # each step, then once after the final evaluation
    err = capsys.readouterr().err
    assert "step 1: rollouts" in err and "step 3: update of" in err


def test_a_tie_keeps_the_later_adapter_and_counts_as_no_gain(tmp_path, tiny_model, capsys):
    """24 validation questions tie often (a question is 0.042): a round that ties the best keeps its own, later
    adapter (the start is no longer kept over a stage that trained and scored the same), and still counts towards
    early_stop."""
    class Flat(_Validated):
        SCORES = {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.4}

    cfg = TrainConfig(**{**TINY, "model": tiny_model, "steps": 6, "eval_every": 1, "keep_best": "cem",
                         "early_stop": 2})
    run = Flat(cfg, wm.run_parts(cfg), run=tmp_path, progress=True).train()
    sel = json.loads((run.path / "checkpoints" / "best" / "selection.json").read_text())
    assert sel["step"] == 2 and sel["value"] == 0.5 and "tied since step 0, the latest round kept" in sel["why"]
    out = capsys.readouterr().out
    assert "ties the best 0.500: the later adapter is kept (1 round(s) without a gain)" in out
    assert "early stop at step 2: 2 validation round(s) without a gain over step 0" in out
