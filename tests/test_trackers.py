"""``--report-to`` (workbench/rl/trackers.py): a training run, an SFT run and an eval run are copied into each
installed tracker, and each copy, read back with the library's own reader, equals the run's files (metrics.jsonl,
config.json, the steps' trajectories and rewards). A tracker whose library is not installed is skipped, saying how to
install it (``make setup`` installs TensorBoard and Trackio)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workbench.apps.cli import main
from workbench.core.trajectory import load_trajectories
from workbench.rl.trackers import (
    PROJECT,
    STEP_TABLE_ROWS,
    TRACKERS,
    Trackers,
    completions_table,
    flatten,
    scalars,
    tracker_names,
)
from workbench.storage.runs import open_run


def installed(name: str) -> bool:
    try:
        tracker_names(name)
        return True
    except ModuleNotFoundError:
        return False


INSTALLED = [n for n in TRACKERS if installed(n)]


def need(name: str) -> None:
    if name not in INSTALLED:
        pytest.skip(f"{name} is not installed: pip install -e '.[{TRACKERS[name].extra}]'")


# ============================================================================= readers: each library's own


def read_tensorboard(run_dir: Path) -> tuple[dict, dict]:
    """``({tag: {step: value}}, {tag: {step: 2-D list of str}})`` through TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, TENSORS, EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={SCALARS: 0, TENSORS: 0})
    acc.Reload()
    values = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}

    def text(event):
        arr = tensor_util.make_ndarray(event.tensor_proto)
        return arr.item().decode() if arr.ndim == 0 else [[c.decode() for c in row] for row in arr.tolist()]

    texts = {tag: {e.step: text(e) for e in acc.Tensors(tag)} for tag in acc.Tags()["tensors"]}
    return values, texts


def read_wandb(run_dir: Path) -> tuple[dict, dict, dict]:
    """``({step: history row}, config, {(key, step): table JSON})`` through ``wandb leet inspect --json``, the reader of
    W&B's own transaction log (wandb-core), and the table files the history rows name."""
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    (log,) = folder.glob("run-*.wandb")
    cli = Path(sys.executable).with_name("wandb")
    out = subprocess.run([str(cli), "leet", "inspect", "--json", str(log)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    history = {int(r["history"]["item"]["_step"]): r["history"]["item"] for r in records if r["type"] == "history"}
    summary = json.loads(subprocess.run([str(cli), "leet", "inspect", "--json", "--summary", str(log)],
                                        capture_output=True, text=True, timeout=120, check=True).stdout)
    tables = {}
    for step, item in history.items():
        for k, v in item.items():
            if k.endswith("._type") and v == "table-file":
                key = k[: -len("._type")]
                tables[(key, step)] = json.loads((folder / "files" / item[f"{key}.path"]).read_text())
    return history, summary["config"], tables


def read_mlflow(run_dir: Path) -> tuple[dict, dict, dict, object]:
    """``({key: {step: value}}, params, config.json, client/run)`` through ``MlflowClient`` on the run's store."""
    import mlflow.artifacts
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(PROJECT).experiment_id])
    values = {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in run.data.metrics}
    config = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/config.json")
    return values, run.data.params, config, run


def read_trackio(run_dir: Path, run_name: str, monkeypatch) -> tuple[dict, dict]:
    """``({step: merged log}, config)`` through trackio's ``SQLiteStorage`` on the run's store (pointed at it as
    trackio's own tests do)."""
    from trackio.sqlite_storage import SQLiteStorage

    monkeypatch.setattr("trackio.sqlite_storage.TRACKIO_DIR", run_dir / "trackio")
    steps: dict[int, dict] = {}
    for log in SQLiteStorage.get_logs(PROJECT, run_name):
        steps.setdefault(int(log["step"]), {}).update(log)
    return steps, SQLiteStorage.get_run_config(PROJECT, run_name)


# ============================================================================= what they should hold


def expected_values(run) -> dict[str, dict[int, float]]:
    """Every finite number of metrics.jsonl, by name and step."""
    out: dict[str, dict[int, float]] = {}
    for row in run.step_metrics():
        for k, v in scalars(row).items():
            out.setdefault(k, {})[int(row["step"])] = v
    return out


def expected_table(run, step: int) -> pd.DataFrame:
    d = run.path / "steps"
    return completions_table(load_trajectories(d / f"{step:06d}.trajectories.parquet"),
                             pd.read_parquet(d / f"{step:06d}.features.parquet"), run.examples(), STEP_TABLE_ROWS)


def assert_values(got: dict, want: dict, rel: float = 1e-9) -> None:
    assert set(want) <= set(got), sorted(set(want) - set(got))
    for k, steps in want.items():
        for step, v in steps.items():
            assert got[k][step] == pytest.approx(v, rel=rel, abs=1e-12), (k, step)


def assert_table(rows: list[dict], want: pd.DataFrame) -> None:
    """A table read back (records) equals the one made from the step's files: text columns exactly, numbers."""
    assert len(rows) == len(want) > 0
    for got, (_, w) in zip(rows, want.iterrows()):
        for c in ("question", "gold", "turns", "answer"):
            assert got[c] == w[c], c
        for c in [c for c in want.columns if c == "reward" or c.startswith("reward_")]:
            assert (got[c] is None and math.isnan(w[c])) or got[c] == pytest.approx(w[c], rel=1e-6, abs=1e-9), c


# ============================================================================= a training run


TRAIN = ["train", "--steps", "2", "--questions-per-step", "1", "--group-size", "2", "--max-turns", "1",
         "--max-new-tokens", "8", "--micro-batch-size", "2", "--save-every", "0", "--eval-limit", "1",
         "--reward", "dynasearcher", "--encoder", "none", "--protocol-kwargs",
         '{"observation_mode": "chat", "few_shot": false}', "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_thread, tiny_model):
    """`workbench train --report-to <every installed tracker>`: 2 steps, 1 held-out question, on the random-init model
    of the default architecture (conftest.tiny_model: what is logged, not what the model learns, is tested here)."""
    if not INSTALLED:
        pytest.skip("no tracker library installed: pip install -e '.[tensorboard,trackio]' (make setup)")
    out = tmp_path_factory.mktemp("runs")
    assert main([*TRAIN, "--model", tiny_model, "--out", str(out), "--report-to", ",".join(INSTALLED)]) == 0
    (path,) = out.iterdir()
    run = open_run(path)
    assert run.complete and run.config["report_to"] == ",".join(INSTALLED)
    return run


def test_train_config_and_flags():
    from workbench.rl.train_config import TrainConfig

    assert TrainConfig().report_to == "none"
    assert TrainConfig(report_to=" NONE ,").report_to == "none"
    if "tensorboard" in INSTALLED:
        assert TrainConfig(report_to=["tensorboard", "tensorboard"]).report_to == "tensorboard"  # a YAML list too
    with pytest.raises(ValueError, match=r"unknown tracker 'tensorbored'; valid: tensorboard, wandb, mlflow, trackio"):
        TrainConfig(report_to="tensorbored")


def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    class Missing(TRACKERS["tensorboard"]):
        name, module, extra = "tensorboard", "workbench_no_such_library", "tensorboard"

    monkeypatch.setitem(TRACKERS, "tensorboard", Missing)
    for cmd in (["train", "--steps", "1"], ["sft", "--traces", '["x"]'], ["eval", "--method", "direct"]):
        assert main([*cmd, "--report-to", "tensorboard", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith("--report-to tensorboard needs the workbench_no_such_library package: "
                            "pip install -e '.[tensorboard]'") and "\n" not in err, err
    assert not list(tmp_path.iterdir())  # refused before any run directory


def test_tensorboard_holds_the_metrics_config_and_completions(trained):
    need("tensorboard")
    values, texts = read_tensorboard(trained.path)
    assert_values(values, expected_values(trained), rel=1e-6)  # TensorBoard keeps float32 scalars
    want = expected_values(trained)
    assert {"loss", "kl", "kept_group_share", "reward_r_acc_mean", "reward_r_acc_std", "rollout_logprob_diff",
            "time_rollout_s", "eval_cem"} <= set(want)  # what the issue asks for is in metrics.jsonl, so here too
    assert json.loads(texts["config"][0].strip("`\n")) == trained.config
    for step in (1, 2):
        header, *rows = texts["completions"][step]
        want = expected_table(trained, step)
        assert header == list(want.columns)
        records = [dict(zip(header, r)) for r in rows]
        assert [r["question"] for r in records] == list(want["question"])
        assert [r["answer"] for r in records] == list(want["answer"])
        assert [float(r["reward"]) for r in records] == pytest.approx(list(want["reward"]), rel=1e-3)


def test_wandb_holds_the_metrics_config_and_completions(trained):
    need("wandb")
    history, config, tables = read_wandb(trained.path)
    got = {}
    for step, item in history.items():
        for k, v in item.items():
            if isinstance(v, (int, float)) and not k.startswith("_") and "." not in k:
                got.setdefault(k, {})[step] = v
    assert_values(got, expected_values(trained))
    assert flatten(config) == flatten(json.loads(json.dumps(trained.config)))  # (W&B drops empty dicts)
    for step in (1, 2):
        t = tables[("completions", step)]
        assert_table([dict(zip(t["columns"], r)) for r in t["data"]], expected_table(trained, step))


def test_mlflow_holds_the_metrics_config_and_completions(trained):
    need("mlflow")
    import mlflow.artifacts

    values, params, config, run = read_mlflow(trained.path)
    assert_values(values, expected_values(trained))
    assert config == trained.config
    assert params["loss/kl_coef"] == str(flatten(trained.config)["loss/kl_coef"])
    assert run.info.run_name == trained.id and run.info.status == "FINISHED"
    for step in (1, 2):
        t = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/completions/step_{step:06d}.json")
        assert_table([dict(zip(t["columns"], r)) for r in t["data"]], expected_table(trained, step))


def test_trackio_holds_the_metrics_config_and_completions(trained, monkeypatch):
    need("trackio")
    steps, config = read_trackio(trained.path, trained.id, monkeypatch)
    got = {}
    for step, log in steps.items():
        for k, v in log.items():
            if isinstance(v, (int, float)) and k != "step":
                got.setdefault(k, {})[step] = v
    assert_values(got, expected_values(trained))
    assert {k: v for k, v in config.items() if not k.startswith("_")} == json.loads(json.dumps(trained.config))
    for step in (1, 2):
        table = steps[step]["completions"]
        assert table["_type"] == "trackio.table"
        assert_table(table["_value"], expected_table(trained, step))


# ============================================================================= sft and eval


def test_sft_reports_its_rows(traces_run, tmp_path, one_thread, tiny_model):
    """`workbench sft --report-to`: each SFT row (loss, tokens, grad norm...) in TensorBoard and Trackio."""
    names = [n for n in ("tensorboard", "trackio") if n in INSTALLED]
    if not names:
        pytest.skip("neither TensorBoard nor Trackio is installed: pip install -e '.[tensorboard,trackio]'")
    assert main(["sft", "--method", "search_r1", "--traces", json.dumps([str(traces_run)]), "--max-traces", "2",
                 "--steps", "2", "--batch-size", "1", "--micro-batch-size", "1", "--eval-limit", "0",
                 "--save-every", "0", "--protocol-kwargs", '{"observation_mode": "chat", "few_shot": false}',
                 "--model", tiny_model, "--report-to", ",".join(names), "--out", str(tmp_path), "--no-progress"]) == 0
    (path,) = tmp_path.iterdir()
    run = open_run(path)
    want = expected_values(run)
    assert {"loss", "grad_norm", "tokens_per_s"} <= set(want) and want["loss"].keys() == {1, 2}
    if "tensorboard" in names:
        values, texts = read_tensorboard(run.path)
        assert_values(values, want, rel=1e-6)
        assert json.loads(texts["config"][0].strip("`\n"))["kind"] == "sft"


def test_eval_reports_metrics_and_a_table_per_method(tokenizer, tmp_path, monkeypatch):
    """`run_eval(report_to=...)` (what `workbench eval --report-to` calls): metrics.json's numbers and one completions
    table per method, equal to the run's files."""
    names = [n for n in ("tensorboard", "trackio") if n in INSTALLED]
    if not names:
        pytest.skip("neither TensorBoard nor Trackio is installed: pip install -e '.[tensorboard,trackio]'")
    from workbench.eval.runner import run_eval
    from workbench.rollout.backends.scripted import ScriptedBackend

    backend = ScriptedBackend(tokenizer, lambda prompt, i: "<answer> Nobody </answer>")
    run = run_eval("direct,search_r1", "world", backend, out=tmp_path, limit=3, progress=False, log=None,
                   report_to=",".join(names))
    want = flatten(run.metrics())
    frame = run.trajectories_frame(columns=["question", "method"])
    if "tensorboard" in names:
        values, texts = read_tensorboard(run.path)
        assert {k for k, v in want.items() if isinstance(v, (int, float))} <= set(values)
        assert values["methods/direct/f1"][0] == pytest.approx(want["methods/direct/f1"])
        for method in ("direct", "search_r1"):
            header, *rows = texts[f"completions/{method}"][0]
            assert [dict(zip(header, r))["question"] for r in rows] == list(frame.question[frame.method == method])
    if "trackio" in names:
        steps, _ = read_trackio(run.path, run.id, monkeypatch)
        assert steps[0]["methods/direct/n"] == want["methods/direct/n"] == 3
        assert [r["answer"] for r in steps[0]["completions/search_r1"]["_value"]] == ["Nobody"] * 3


@pytest.fixture(scope="module")
def traces_run(world, tokenizer, tmp_path_factory):
    """An expert run of three one-hop search_r1 traces (short prompt), as tests/test_sft.py makes."""
    from workbench.eval.expert import write_expert_run
    from workbench.methods import get_method
    from workbench.rl.expert import expert_traces
    from workbench.tools.toolbox import build_toolbox

    method = get_method("search_r1")
    protocol = method.training_protocol(observation_mode="chat", few_shot=False)
    exs = [e for e in world.split("train") if e.hops == 1][:3]
    res = expert_traces(exs, protocol, method.expert, build_toolbox(protocol, world, tokenizer=tokenizer), tokenizer,
                        world)
    return write_expert_run(res, "search_r1", protocol, out=tmp_path_factory.mktemp("expert")).path


# ============================================================================= the pieces


def test_trackers_without_names_do_nothing(tmp_path):
    t = Trackers("none", run=None)
    assert not t
    t.log_row({"step": 1, "loss": 1.0})
    t.log_table("x", pd.DataFrame({"a": [1]}), 1)
    t.close()  # no run was needed


def test_completions_table_columns(world):
    from workbench.core.trajectory import POLICY, Trajectory, Turn

    ex = world.split("train")[0]
    t = Trajectory("a#0", ex.id, ex.question, "search_r1", [1], answer="x" * 3, meta={"step": 4})
    t.turns = [Turn(POLICY, "y" * 5000, [5], [-0.1])]
    feats = pd.DataFrame({"reward": [0.5], "reward_r_acc": [1.0], "reward_preset": ["p"], "kept": [1], "f1": [0.2]})
    table = completions_table([t], feats, [ex])
    assert list(table.columns) == ["step", "question", "gold", "turns", "answer", "searches", "reward", "reward_r_acc",
                                   "kept"]
    row = table.iloc[0]
    assert row["step"] == 4 and row["gold"] == " | ".join(ex.answers) and len(row["turns"]) == 4000
    assert row["turns"].endswith("…") and bool(row["kept"]) is True
