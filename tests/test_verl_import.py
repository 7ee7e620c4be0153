"""`workbench import verl`: verl's rollout/validation dumps and metrics log as a workbench run.

The dumps are written by :func:`write_generations`, a copy of verl 0.9.1's ``RayPPOTrainer._write_generations``
(the test in ``.venv-verl`` checks the two write the same bytes); the responses are what our protocol and the
world's toolbox produce, and the scores come from the exported reward (as verl's reward manager computes them).
"""

from __future__ import annotations

import json
import math
import os

import pytest

pd = pytest.importorskip("pandas")

from tests.verl_env import requires_verl_env, run_in_verl  # noqa: E402
from workbench.apps.cli import main  # noqa: E402
from workbench.integrations.verl.export import export_verl  # noqa: E402
from workbench.integrations.verl.importer import import_verl, question_of, read_metrics  # noqa: E402

METHOD = "search_r1"


def write_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps):
    """verl 0.9.1 ``RayPPOTrainer._write_generations`` (verl/trainer/ppo/ray_trainer.py), line for line."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_steps] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


def responses(proto, toolbox, ex, right: bool) -> str:
    """An inline Search-R1 response as the engine appends it: a search, its rendered observation, an answer."""
    search = f"<think> look it up </think>\n<search> {ex.question} </search>"
    obs = proto.act(proto.parse(search), toolbox, ex).text
    return f"{search}{obs}<think> done </think>\n<answer> {ex.answers[0] if right else 'Nobody'} </answer>"


@pytest.fixture(scope="module")
def verl_dir(tmp_path_factory):
    """An export directory with two rollout steps, one validation step and the file logger's metrics."""
    from workbench.core.models import load_tokenizer
    from workbench.data.world import load_world
    from workbench.integrations.verl.reward import make_compute_score
    from workbench.rollout.backends.base import encode_chat
    from workbench.tools.toolbox import build_toolbox

    out = tmp_path_factory.mktemp("verl-run")
    export_verl(METHOD, "world", out, limit=3)
    world, tok = load_world(), load_tokenizer()
    rows = pd.read_parquet(out / "train.parquet").to_dict("records")
    by_id = {e.id: e for e in world.examples}
    from workbench.methods import get_method

    proto = get_method(METHOD).get_protocol()
    toolbox = build_toolbox(proto, world)
    score = make_compute_score(METHOD)
    plan = {}
    for step, folder in ((1, "rollouts"), (2, "rollouts"), (2, "validation")):
        inputs, outputs, gts, scores, extra = [], [], [], [], {}
        for i, r in enumerate(rows):
            ex = by_id[r["extra_info"]["example_id"]]
            right = (i + step) % 2 == 0
            text = responses(proto, toolbox, ex, right)
            # what verl dumps: prompt and response decoded with skip_special_tokens=True
            inputs.append(tok.decode(encode_chat(tok, list(r["prompt"])), skip_special_tokens=True))
            outputs.append(tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True))
            gts.append(r["reward_model"]["ground_truth"])
            s = score(r["data_source"], text, r["reward_model"]["ground_truth"], r["extra_info"])
            scores.append(s["score"])
            for k, v in s.items():
                if k != "score":
                    extra.setdefault(k, []).append(v)
            plan[(folder, step, i)] = (ex, right, s["score"])
        write_generations(inputs, outputs, gts, scores, extra, str(out / folder), step)
    with open(out / "metrics.jsonl", "w") as f:  # verl's FileLogger: {"step": n, "data": {...}}
        for step in (1, 2):
            f.write(json.dumps({"step": step, "data": {"critic/score/mean": 0.1 * step, "actor/pg_loss": -0.5}}) + "\n")
    return out, plan


@pytest.fixture(scope="module")
def imported(verl_dir, tmp_path_factory):
    out, plan = verl_dir
    root = tmp_path_factory.mktemp("runs")
    return import_verl(out, METHOD, out=root), root, plan


def test_every_dumped_sample_becomes_a_trajectory_parsed_by_the_protocol(imported):
    run, _, plan = imported
    trajs = run.trajectories()
    assert len(trajs) == len(plan) == 9
    frame = run.trajectories_frame()
    for t, (_, row) in zip(trajs, frame.iterrows()):
        source, step, i = t.id.split("-")
        ex, right, score = plan[("rollouts" if source == "rollout" else "validation", int(step), int(i))]
        assert t.example_id == ex.id and t.question == ex.question  # matched to the export's rows
        assert t.n_searches == 1 and (t.answer == ex.answers[0]) == right
        assert row["em"] == float(right) and row["step"] == int(step)
        assert math.isclose(row["reward"], score)
        hits = [h for c in t.tool_calls for h in c.results]
        assert hits and all(h["id"].startswith("p") for h in hits)  # rendered passages resolved to corpus ids
    assert set(frame["method"]) == {METHOD, f"{METHOD}:validation"}
    assert run.config["kind"] == "train" and run.config["source"] == "verl"
    assert {e.id for e in run.examples()} == {t.example_id for t in trajs}


def test_step_metrics_join_verls_log_with_the_dumps(imported):
    run, _, plan = imported
    rows = {r["step"]: r for r in run.step_metrics()}
    assert set(rows) == {1, 2} and rows[2]["critic/score/mean"] == pytest.approx(0.2)
    step2 = [s for (f, st, _), (_, _, s) in plan.items() if f == "rollouts" and st == 2]
    assert rows[2]["reward_mean"] == pytest.approx(sum(step2) / len(step2))
    val = [r for (f, _, _), (_, r, _) in plan.items() if f == "validation"]
    assert rows[2]["eval_em"] == pytest.approx(sum(val) / len(val)) and "eval_em" not in rows[1]


def test_imported_run_is_complete(imported):
    run, _, _ = imported
    assert run.complete and run.status.note == ""  # its completion marker is written last


def test_imported_run_opens_in_the_dashboard_and_the_inspector(imported):
    from widgets.inspector_data import load_inspector_data
    from workbench.dashboard.queries import method_metrics, runs_table, training_curves

    run, root, _ = imported
    table = runs_table(root)
    row = table[table["run_id"] == run.id].iloc[0]
    assert row["kind"] == "train" and row["error"] == "" and row["n_trajectories"] == 9 and row["steps"] == 2
    curves = training_curves(root)
    assert {"critic/score/mean", "reward_mean", "eval_em"} <= set(curves["metric"])
    assert set(method_metrics(root)["method"]) >= {METHOD, f"{METHOD}:validation"}
    data = load_inspector_data(run)
    assert len(data.frame) == 9 and data.reward_stored and data.frame["step"].notna().all()
    assert data.features is not None and "reward_search_r1" not in data.notes  # features.parquet was written
    assert data.trajectories[0].n_searches == 1


def test_read_metrics_reads_the_console_log_too(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("(TaskRunner pid=1) step:3 - critic/score/mean:0.25 - actor/lr:1e-06 - timing_s/gen:4.5\n"
                   "noise line\nstep:4 - critic/score/mean:nan\n")
    got = read_metrics(log)
    assert got == {3: {"critic/score/mean": 0.25, "actor/lr": 1e-06, "timing_s/gen": 4.5}}  # NaN dropped, not 0


def test_question_of_a_decoded_prompt():
    assert question_of("system\nAnswer...\nuser\nQuestion: Who? \nassistant\n") == "Who?"


def test_cli_imports_and_bad_input_is_one_line_exit_2(verl_dir, tmp_path, capsys):
    out, _ = verl_dir
    assert main(["import", "verl", str(out / "rollouts"), "--method", METHOD, "--out", str(tmp_path),
                 "--no-features"]) == 0
    assert "9 trajectories over 2 step(s)" in capsys.readouterr().out  # validation/ found beside rollouts/
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "3.jsonl").write_bytes(bytes(range(256)) * 64)  # a dump that is not JSON lines
    for args in ([str(tmp_path / "nope")], [str(tmp_path)], [str(out), "--metrics", str(tmp_path / "x.log")],
                 [str(binary)]):
        assert main(["import", "verl", *args, "--method", METHOD, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("workbench import: error:") and "\n" not in err
    assert "no readable samples" in err and not (tmp_path / "r").exists()  # no 0-trajectory run


@requires_verl_env
def test_dump_writer_is_verls_own(tmp_path):
    """verl's ``RayPPOTrainer._write_generations`` writes the same bytes as :func:`write_generations`."""
    args = (["in a", "in b"], ["out <answer> x </answer>", "ö"], [{"target": ["x"]}, {"target": ["y"]}], [1.0, 0.0],
            {"f1": [1.0, 0.0], "short": [1]})
    write_generations(*args, str(tmp_path / "ours"), 5)
    code = ("import json, sys; from verl.trainer.ppo.ray_trainer import RayPPOTrainer as T; "
            "a = json.loads(sys.argv[1]); T._write_generations(*a, sys.argv[2], 5)")
    proc = run_in_verl(["-c", code, json.dumps(args), str(tmp_path / "verl")], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "verl" / "5.jsonl").read_bytes() == (tmp_path / "ours" / "5.jsonl").read_bytes()
