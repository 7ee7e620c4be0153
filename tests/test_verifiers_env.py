"""``workbench export verifiers`` / ``import verifiers`` (``workbench/integrations/verifiers/``).

The export is checked here in the main environment; verifiers' side runs in ``.venv-verifiers`` (``vf-eval``, its
own evaluation CLI, in a subprocess) against the workbench's completion server: with a scripted policy, the same
trajectories rolled out by the workbench engine get the same rewards, component by component, from the method's
rubric as from the exported environment's; with the default model, ``export`` + ``vf-eval`` + ``import`` round-trip
into a run the inspector and the dashboard open.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from tests.verifiers_env import requires_verifiers_env, vf_eval
from workbench.apps.cli import main

METHODS = ("search_r1", "r1_searcher")
#: A policy turn per method: (search turn, answer turn); {q} is the query, {a} the answer.
SCRIPTS = {
    "search_r1": ("<think> I need to look it up. </think>\n<search> {q} </search>",
                  "<think> Found it. </think>\n<answer> {a} </answer>"),
    "r1_searcher": ("<think> I need to look it up. <|begin_of_query|> {q} <|end_of_query|>",
                    "Found it. </think>\n\n<answer> {a} </answer>"),
}

#: The totals of the two scripted trajectories, by hand: Search-R1's exact match is 1 for the gold answer, 0 for the
#: wrong one; R1-Searcher's stage 1 gives 0.5 for a search in the right format and 0.5 for the format, no answer term.
EXPECTED = {"search_r1": [1.0, 0.0], "r1_searcher": [1.0, 1.0]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each method's export of the world's first two dev questions."""
    root = tmp_path_factory.mktemp("vf-export")
    for m in METHODS:
        assert main(["export", "verifiers", m, "--limit", "2", "--out", str(root / m)]) == 0
    return root


def test_export_is_a_package_with_the_methods_rubric_and_questions(exported):
    from workbench.data.world import load_world
    from workbench.integrations.verifiers.export import package_name
    from workbench.methods import get_method

    dev = load_world().split("dev")[:2]
    for m in METHODS:
        pkg = exported / m / package_name(m)
        manifest = json.loads((pkg / "export.json").read_text())
        assert manifest["weights"] == dict(get_method(m).rubric().weights) and manifest["corpus"] == "world"
        assert manifest["max_turns"] >= 2 and manifest["n_questions"] == 2
        rows = [json.loads(x) for x in (pkg / "tasks.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == [ex.id for ex in dev] and rows[0]["answers"] == dev[0].answers
        init = (pkg / "__init__.py").read_text()
        assert "load_environment" in init and '"WorkbenchTaskset"' in init and '"WorkbenchHarness"' in init
        assert f'packages = ["{package_name(m)}"]' in (exported / m / "pyproject.toml").read_text()


def test_export_refuses_what_it_cannot_write_in_one_line(exported, tmp_path, capsys):
    for pos, args, says in (([], ["--method", "direct"], "no reward preset"),
                            ([], ["--method", "r1_searcher", "--out", str(exported / "search_r1")], "of another method"),
                            (["search_r1"], ["--limit", "0"], "--limit 0"),
                            ([], ["--method", "nope"], "nope"),
                            ([], [], "needs a method"),
                            (["search_r1"], ["--method", "r1_searcher"], "two methods named")):
        argv = ["export", "verifiers", *pos, "--out", str(tmp_path / "x"), *args]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("workbench export: error:") and "\n" not in err and says in err, err
    assert main(["export", "verl", "--method", "search_r1", "--max-turns", "2", "--out", str(tmp_path / "v")]) == 2
    assert "verifiers export setting" in capsys.readouterr().err


def test_import_refuses_what_is_not_a_verifiers_run_in_one_line(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "traces.jsonl").write_text('{"traces": [{"task": {"data": {}}, "env": 1}]}\nnot json\n')
    for d, says in ((tmp_path / "nowhere", "no verifiers run"), (tmp_path / "run", "names no workbench method")):
        assert main(["import", "verifiers", str(d), "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("workbench import: error:") and "\n" not in err and says in err, err
    assert main(["import", "verifiers", str(tmp_path / "run"), "--method", "search_r1", "--out", str(tmp_path / "r")]) == 2
    assert "carries no workbench example" in capsys.readouterr().err
    (tmp_path / "run" / "traces.jsonl").write_text('{"traces": [{"task": {"data": {"example": {"q": 1}}}}]}\n')
    assert main(["import", "verifiers", str(tmp_path / "run"), "--method", "search_r1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a workbench example" in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def _script(examples, method):
    """``(prompt_text, turn) -> text``: a search for the first supporting title, then the gold answer for the first
    question and a wrong one for the second (so the rewards differ)."""
    search, answer = SCRIPTS[method]
    plan = {ex.question: (ex.supporting_titles[0], ex.answers[0] if i == 0 else "Nobody Atall")
            for i, ex in enumerate(examples)}

    def play(prompt_text: str, turn: int) -> str:
        q = next(q for q in plan if q in prompt_text[prompt_text.rfind("Question:"):])
        query, gold = plan[q]
        return (search if turn == 0 else answer).format(q=query, a=gold)

    return play


def _episodes(out, package):
    lines = (out / package / "traces.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


#: Each exported package named on the command line loaded in verifiers, one line of JSON each (one interpreter for
#: all: verifiers' imports are most of its start).
LOAD = """
import importlib, json, sys
for pkg in sys.argv[1:]:
    env = importlib.import_module(pkg).load_environment()
    tasks = list(env.taskset)
    hooks = {kind: {f.__name__: getattr(f, "_vf_weight", None) for f in tasks[0].hooks(kind)} for kind in ("reward", "metric")}
    print(json.dumps({"env": type(env).__name__, "harness": type(env._harnesses["agent"]).__name__,
                      "runtime": env.config.agent.runtime.type, "ids": [t.data.id for t in tasks], **hooks}))
"""


@requires_verifiers_env
def test_load_environment_returns_the_methods_env_in_verifiers(exported):
    from tests.verifiers_env import VERIFIERS_PYTHON, run_in_verifiers
    from workbench.data.world import load_world
    from workbench.integrations.verifiers.export import package_name
    from workbench.methods import get_method

    dev = load_world().split("dev")[:2]
    loaded = ("search_r1", "dynasearcher")
    for m in loaded:
        if m not in METHODS:
            assert main(["export", "verifiers", "--method", m, "--limit", "2", "--out", str(exported / m)]) == 0
    proc = run_in_verifiers(VERIFIERS_PYTHON, ["-c", LOAD, *map(package_name, loaded)], exported / loaded[0],
                            also=tuple(exported / m for m in loaded[1:]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == len(loaded), proc.stdout[-3000:]
    for m, line in zip(loaded, lines):
        got = json.loads(line)
        weights = dict(get_method(m).rubric().weights)
        assert got["env"] == "WorkbenchEnv" and got["harness"] == "WorkbenchHarness" and got["runtime"] == "subprocess"
        assert got["ids"] == [ex.id for ex in dev]
        assert got["reward"] == {k: w for k, w in weights.items() if w}  # each weighted component, its weight
        assert set(got["metric"]) == {k for k, w in weights.items() if not w}  # weight 0: logged, not rewarded


@requires_verifiers_env
def test_the_same_trajectory_gets_the_same_rewards_from_both_rubrics(exported, tokenizer, tmp_path):
    """A scripted policy behind the completion server: verifiers' harness plays the protocol's turns; the engine plays
    the same script directly; the method's rubric on the engine's trajectories gives verifiers' recorded rewards."""
    from workbench.data.world import load_world
    from workbench.integrations.verifiers.export import chat_protocol, package_name
    from workbench.integrations.verifiers.importer import import_verifiers
    from workbench.methods import get_method
    from workbench.rewards.features import compute_features
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.rollout.server import serve
    from workbench.tools.toolbox import build_toolbox

    world = load_world()
    dev = world.split("dev")[:2]
    for m in METHODS:
        proto = chat_protocol(m)
        manifest = json.loads((exported / m / package_name(m) / "export.json").read_text())
        srv, url = serve(ScriptedBackend(tokenizer, _script(dev, m)), model_name="scripted")
        try:
            proc = vf_eval(package_name(m), exported / m, url, "scripted", tmp_path, 2)
        finally:
            srv.stop()
        assert proc.returncode == 0, proc.stderr[-3000:]
        cfg = RolloutConfig(temperature=0.0, max_turns=manifest["max_turns"], max_new_tokens=manifest["max_new_tokens"])
        direct = rollout(dev, proto, build_toolbox(proto, world), ScriptedBackend(tokenizer, _script(dev, m)), cfg,
                         progress=False)
        rubric = get_method(m).rubric()
        table = rubric(compute_features(direct, dev, encoder=False, cache=False))
        traces = {ep["traces"][0]["task"]["data"]["id"]: ep["traces"][0] for ep in _episodes(tmp_path, package_name(m))}
        assert sorted(traces) == sorted(ex.id for ex in dev)
        totals = []
        for i, t in enumerate(direct):
            tr = traces[t.example_id]
            assert tr["ok"] and not tr["errors"], tr["errors"]
            assert set(tr["rewards"]) | set(tr["metrics"]) == set(rubric.weights)
            for name, w in rubric.weights.items():
                got = tr["rewards"][name]["score"] if w else tr["metrics"][name]
                assert got == pytest.approx(float(table.frame[name].iloc[i]), abs=1e-9), (m, name)
                if w:
                    assert tr["rewards"][name]["weight"] == w
            total = sum(r["score"] * r["weight"] for r in tr["rewards"].values())
            assert total == pytest.approx(float(table.total[i]), abs=1e-9)
            totals.append(total)
            # the harness's turns are the engine's: the same policy texts, the same passages shown
            sent = [n["message"]["content"] for n in tr["nodes"] if n.get("sampled")]
            assert sent == [p.text for p in t.policy_turns]
        assert totals == EXPECTED[m]
    # and back: one run of both methods, each trajectory's reward verifiers' own
    run = import_verifiers(tmp_path, out=tmp_path / "runs")
    import pandas as pd

    df = pd.read_parquet(run.path / "trajectories.parquet")
    assert sorted(set(df["method"])) == sorted(METHODS) and len(df) == 4
    assert (df["n_searches"] == 1).all() and df["reward"].notna().all()


@pytest.mark.slow
@requires_verifiers_env
def test_export_vf_eval_import_round_trip_on_the_default_model(tmp_path):
    """The round trip of the issue: two exported methods evaluated by ``vf-eval`` against the completion server on
    the default model (``search_r1`` through the shipped adapter, loaded by the server's LoRA route, so that it
    searches; ``r1_searcher`` on the bare model), then ``workbench import verifiers``: a run whose trajectories carry
    the model's turns, the tool results and verifiers' rewards, and that the inspector and the dashboard open."""
    import urllib.request

    from tests.verifiers_env import ROOT
    from widgets.inspector_data import load_inspector_data
    from workbench.core.models import load_policy
    from workbench.dashboard.queries import method_metrics, runs_table
    from workbench.integrations.verifiers.export import chat_protocol, package_name
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.server import serve
    from workbench.storage.runs import Run

    t0 = time.perf_counter()
    exports = tmp_path / "exports"
    for m in METHODS:
        assert main(["export", "verifiers", "--method", m, "--limit", "2", "--max-turns", "3", "--max-new-tokens",
                     "64", "--out", str(exports / m)]) == 0
    out = tmp_path / "outputs"
    out.mkdir()
    model, tok = load_policy(device="cpu")  # a copy of its own: the server's LoRA route wraps it
    srv, url = serve(HFBackend(model, tok), model_name="smollm2-135m", enable_lora=True, lora_dir=str(ROOT / "data"))
    served = {"search_r1": "search_r1-sft-grpo", "r1_searcher": "smollm2-135m"}
    try:
        body = json.dumps({"lora_name": served["search_r1"],
                           "lora_path": str(ROOT / "data" / "adapters" / served["search_r1"])}).encode()
        req = urllib.request.Request(url + "/load_lora_adapter", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200
        for m in METHODS:
            proc = vf_eval(package_name(m), exports / m, url, served[m], out, 2)
            assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        srv.stop()
    vf_s = time.perf_counter() - t0
    root = tmp_path / "runs"
    assert main(["import", "verifiers", str(out), "--out", str(root)]) == 0
    (run_dir,) = root.iterdir()
    run = Run(run_dir)
    import pandas as pd

    df = pd.read_parquet(run.path / "trajectories.parquet")
    assert len(df) == 4 and sorted(set(df["method"])) == sorted(METHODS)
    traces = {}
    for m in METHODS:
        for ep in _episodes(out, package_name(m)):
            tr = ep["traces"][0]
            traces[f"{m}:{tr['id']}"] = tr
    data = load_inspector_data(run)

    def data_prompt(t):
        return len(chat_protocol(t.meta["method"]).messages(t_example(t)))

    def t_example(t):
        from workbench.data.example import Example

        return Example(id=t.example_id, question=t.question, answers=[])

    assert len(data.frame) == 4 and data.features is not None
    for t in data.trajectories:
        tr = traces[t.id]
        sampled = [n["message"]["content"] for n in tr["nodes"] if n.get("sampled")]
        assert [p.text for p in t.policy_turns] == sampled[:len(t.policy_turns)] and t.policy_turns
        recorded = sum(r["score"] * r["weight"] for r in tr["rewards"].values())
        assert float(df.loc[df["id"] == t.id, "reward"].iloc[0]) == pytest.approx(recorded)
        shown = [n["message"]["content"] for n in tr["nodes"][data_prompt(t):] if n["message"]["role"] == "user"]
        assert [o.text for o in t.turns if o.kind == "observation"] == shown  # every observation the model was shown
    # the adapter searched: its observations hold passages of the world, resolved to their ids
    searched = [c for t in data.trajectories if t.meta["method"] == "search_r1" for o in t.turns
                if o.kind == "observation" for c in o.tool_calls if c.results]
    assert searched and all(str(h.get("id", "")).startswith("p") for c in searched for h in c.results)
    from widgets.playground import reward_playground

    assert data.reward_stored and reward_playground(run) is not None  # the playground opens it on its features
    row = runs_table(root).iloc[0]
    assert row["kind"] == "eval" and row["error"] == "" and row["n_trajectories"] == 4
    assert set(method_metrics(root)["method"]) == set(METHODS)
    assert not math.isnan(json.loads((run.path / "metrics.json").read_text())["methods"]["search_r1"]["reward_mean"])
    print(f"round trip: {vf_s:.0f} s export + vf-eval (4 rollouts), {time.perf_counter() - t0 - vf_s:.0f} s import")
