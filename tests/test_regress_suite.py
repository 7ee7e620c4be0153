"""The real regression suite (``notebooks/regress.yaml``) guards the product: the suite, the notebooks and the
committed baselines agree with each other, and ``make test`` executes every case and fails on a regression or
a cell error, naming the case and the report."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

import papermill
import pytest
import yaml

from workbench.regress import TAKEN, Fixture, demo_flags, load_suite, make_fixture, run_regress
from workbench.storage.runs import open_run

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "notebooks" / "regress.yaml"


@pytest.fixture(scope="module")
def suite():
    return load_suite(SUITE)


def _declared(notebook: Path, caplog) -> set[str]:
    """The parameters papermill reads from a notebook's ``parameters`` cell; fails on a line it cannot parse
    (papermill only logs those, and the value on that line is then not a parameter)."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="papermill"):
        names = set(papermill.inspect_notebook(str(notebook)))
    unparsed = [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert not unparsed, f"{notebook.name}: papermill cannot parse its parameters cell: {unparsed}"
    return names


def test_every_notebooks_parameters_parse(caplog):
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        names = _declared(nb, caplog)
        assert "out_dir" in names, f"{nb.name} has no out_dir parameter: the suite passes one to every notebook"


def test_cases_pass_only_declared_parameters(suite, caplog):
    for case in suite.cases:
        declared = _declared(suite.notebooks_dir / f"{case.notebook}.ipynb", caplog)
        unknown = sorted(set(case.parameters) - declared)
        assert not unknown, f"case {case.name!r} passes {unknown}, which {case.notebook} does not declare ({sorted(declared)})"


def test_the_demo_passes_only_declared_parameters(caplog):
    """`make demo` executes notebooks with its own parameters (workbench.apps.demo.DEMO_NOTEBOOKS), as the suite's cases do."""
    from workbench.apps.demo import DEMO_NOTEBOOKS

    for name, params in DEMO_NOTEBOOKS.items():
        declared = _declared(ROOT / "notebooks" / f"{name}.ipynb", caplog)
        unknown = sorted(set(params) - declared)
        assert not unknown, f"the demo passes {unknown} to {name}, which does not declare them ({sorted(declared)})"


def test_baselines_match_the_cases_metrics_and_say_where_they_were_taken(suite):
    files = {p.stem for p in suite.baselines_dir.glob("*.json")}
    orphans = files - {c.name for c in suite.cases}
    assert not orphans, f"baselines without a case in {SUITE.name}: {sorted(orphans)}"
    for case in suite.cases:
        if not case.metrics:
            continue
        path = suite.baselines_dir / f"{case.name}.json"
        assert path.exists(), f"case {case.name!r} has no baseline: run `workbench regress --cases {case.name} --update-baselines`"
        baseline = json.loads(path.read_text(encoding="utf-8"))
        taken = baseline.pop(TAKEN, None)
        assert taken and taken.get("commit") and taken.get("date"), f"{path.name} does not say where it was taken"
        assert set(baseline) == set(case.metrics), (
            f"{path.name}: metrics without a baseline {sorted(set(case.metrics) - set(baseline))}, baseline values "
            f"no case names {sorted(set(baseline) - set(case.metrics))}")


def test_a_baseline_taken_in_this_checkout_names_its_commit():
    import subprocess

    from workbench.regress import provenance

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    taken = provenance(ROOT)
    assert head.stdout.startswith(taken["commit"]) and isinstance(taken["dirty"], bool)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`make demo`'s whole chain at the suite's setup options (the real model): the CLI, the eval of the four
    methods, the inspector notebook executed into the run and the static dashboard. The demo test checks it and
    every case of the suite reads it, so the model runs once for both; the demo's other notebooks run as cases."""
    from workbench.apps import demo
    from workbench.apps.cli import main

    (setup,) = load_suite(SUITE).fixtures
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setattr(demo, "DEMO_NOTEBOOKS", {k: v for k, v in demo.DEMO_NOTEBOOKS.items()
                                              if k == "01_trajectory_inspector"})
        rc = main(["demo", "--out", str(out), *demo_flags(setup.demo or {})])
    runs = [p for p in out.iterdir() if p.is_dir()]
    return rc, printed.getvalue(), runs


@pytest.fixture(scope="module")
def regress_run(demo_run, tmp_path_factory):
    """The real suite over the demo run (its setup entry given as that run), run once for this module: its report
    and what the say() callback printed."""
    rc, printed, runs = demo_run
    assert rc == 0 and len(runs) == 1, printed
    spec = yaml.safe_load(SUITE.read_text(encoding="utf-8"))
    spec["setup"] = [{"name": spec["setup"][0]["name"], "run": str(runs[0])}]
    work = tmp_path_factory.mktemp("regress")
    config = work / "regress.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    lines: list[str] = []
    report = run_regress(config, out=work / "regress", say=lines.append, notebooks_dir=SUITE.parent,
                         baselines_dir=SUITE.parent / "baselines")
    return report, lines


@pytest.mark.slow
def test_demo_writes_a_run_and_executes_the_notebook(demo_run):
    """`make demo` on a small budget: the summary it prints, the run's files, the four methods' metrics (the KG
    method, and the search agent with the shipped adapter), the inspector notebook's outputs and the dashboard."""
    rc, printed, (run_path,) = demo_run
    assert rc == 0
    assert "cover-EM" in printed and "search_r1" in printed and "direct" in printed
    run = open_run(run_path)
    for f in ("config.json", "trajectories.parquet", "metrics.json", "examples.jsonl"):
        assert (run.path / f).exists(), f
    metrics = run.metrics()
    group = run.config["eval"]["group_size"]
    assert set(metrics["methods"]) == {"direct", "search_r1", "search_r1+lora", "dynasearcher"}
    assert metrics["methods"]["direct"]["n"] == 2 * group and metrics["methods"]["direct"]["n_searches"] == 0
    assert run.config["eval"]["adapter"].endswith("data/adapters/search_r1-sft-grpo")
    assert run.config["methods"]["search_r1"]["protocol"]["observation_mode"] == "chat"  # the layout it learned
    assert len(run.trajectories()) == 2 * group * 4  # 2 questions x the group x 4 methods
    assert metrics["notebooks"]["01_trajectory_inspector"]["status"] == "ok" and (run.path / "dashboard.html").exists()
    assert "one file that opens offline" in printed
    # the demo keeps its own turn budget for the shipped adapter and says so, naming no flag the user did not pass
    assert "--override-adapter" not in printed and "kept by the demo's turn budget" in printed
    nb_dir = run.path / "notebooks" / "01_trajectory_inspector"
    nb_metrics = json.loads((nb_dir / "metrics.json").read_text())
    assert nb_metrics["n_trajectories"] == 2 * group * 4
    assert nb_metrics["direct.n_searches"] == 0.0
    assert (nb_dir / "metrics_by_method.html").exists()
    executed = json.loads((run.path / "notebooks" / "01_trajectory_inspector.ipynb").read_text())
    assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code")


def test_a_demo_setup_that_fails_names_its_command_and_log(tmp_path):
    """The suite's `demo:` setup runs `workbench demo` in a subprocess (the tests above give the suite the demo run
    they made): a failing one is one error naming the command and its log, with the log's tail."""
    with pytest.raises(RuntimeError, match=r"setup 'bad': `workbench.apps.cli demo --no-notebooks .*--limit 0` "
                                           r"failed \(exit 2\); log .*bad\.log") as e:
        make_fixture(Fixture("bad", {"limit": 0}), tmp_path)
    assert "--limit: expected a whole number >= 1" in str(e.value)  # the log's tail says why


@pytest.mark.slow
def test_the_regression_suite_passes(regress_run):
    """Every case of the real suite: the tiny demo (the real model), then each notebook through papermill."""
    report, lines = regress_run
    bad = [f"{c.name}: {c.status} - {c.note or (c.error or {}).get('evalue', '')}" for c in report.cases
           if c.status != "pass"]
    assert not bad and not report.failed, (
        "the notebook regression suite failed; report: " + str(Path(report.out_dir) / "report.md") + "\n"
        + "\n".join(bad) + "\n\n" + "\n".join(lines))


def _case(report, name: str):
    """The suite's case ``name`` as the report holds it: its parameters (``out_dir`` among them) and the
    ``metrics.json`` values it wrote."""
    (case,) = [c for c in report.cases if c.name == name]
    return Path(case.parameters["out_dir"]), case.values


@pytest.mark.slow
def test_the_training_notebook_writes_its_figures_and_resumes_its_run(regress_run, tmp_path):
    """The suite's training case (two LoRA DSPO steps on the real model in notebook 04) wrote its figures and the
    held-out score before and after; notebook 04 then continues a copy of that run from its newest checkpoint (a
    copy: the case's run stays as the case left it for the other tests that read it)."""
    import shutil

    from workbench.apps.notebooks import execute_notebook

    out, m = _case(regress_run[0], "lora_training_tiny")
    assert m["steps"] == 2 and m["n_step_rows"] == 2
    assert "eval_cem_before" in m and "eval_cem_after" in m
    assert (out / "training_curves.html").exists() and (out / "phase_times.html").exists()
    run_copy = tmp_path / "runs" / Path(m["run_dir"]).name
    shutil.copytree(m["run_dir"], run_copy)
    resumed = tmp_path / "resumed"
    execute_notebook("04_lora_grpo_training", tmp_path / "04b.ipynb",
                     {"steps": 3, "resume_dir": str(run_copy), "out_dir": str(resumed)})
    m2 = json.loads((resumed / "metrics.json").read_text(encoding="utf-8"))
    assert m2["steps"] == 3 and m2["checkpoint"] == "step_000003"


@pytest.fixture(scope="module")
def results_05(regress_run, demo_run, tmp_path_factory):
    """One runs root holding the demo's eval run, the training case's run and the eval run the quickstart case
    wrote, and notebook 05 executed over it once (its static dashboard too): the two tests below read it."""
    import shutil

    from workbench.apps.notebooks import execute_notebook

    report = regress_run[0]
    (demo,) = demo_run[2]
    qs, _ = _case(report, "quickstart_tiny")
    quickstart = [p.parent for p in qs.rglob("trajectories.parquet")]
    train_run = Path(json.loads((_case(report, "lora_training_tiny")[0] / "metrics.json").read_text())["run_dir"])
    work = tmp_path_factory.mktemp("results05")
    root = work / "runs"
    for run in (demo, train_run, *quickstart):
        shutil.copytree(run, root / run.name)
    out05 = work / "05"
    execute_notebook("05_results_dashboard", work / "05.ipynb", {"runs_dir": str(root), "out_dir": str(out05)})
    return {"root": root, "out": out05, "executed": work / "05.ipynb", "demo": demo, "train_run": train_run,
            "quickstart": quickstart, "metrics": json.loads((out05 / "metrics.json").read_text(encoding="utf-8"))}


@pytest.mark.slow
def test_the_dashboard_opens_the_run_the_quickstart_wrote(regress_run, results_05):
    """A user's first two notebooks in a row: the suite's quickstart case evaluated the real model into an eval
    run under its out_dir, and notebook 05 pointed at a runs root holding that run shows it."""
    from workbench.dashboard import queries as q

    _, m = _case(regress_run[0], "quickstart_tiny")
    assert m["n_trajectories"] == 4
    assert m["direct.n"] == 2 and m["search_r1.n"] == 2 and m["direct.n_searches"] == 0
    assert len(results_05["quickstart"]) == 1, "the quickstart writes one eval run"
    (quickstart,) = results_05["quickstart"]
    dash, d = results_05["out"], results_05["metrics"]
    assert d["n_runs"] == 3
    runs = q.trajectory_counts(results_05["root"]).set_index("run_id")
    assert runs.loc[quickstart.name, "n_trajectories"] == 4
    assert quickstart.name in (dash / "dashboard.html").read_text(encoding="utf-8")
    # the notebook's bars and hop points carry the 95% intervals the served dashboard draws from the same questions
    for figure in ("compare_methods.html", "hops.html"):
        assert '"error_y"' in (dash / figure).read_text(encoding="utf-8"), figure
    # the static dashboard is written outside the kernel: no Panel outputs that load from a CDN (54 of them before)
    executed = results_05["executed"].read_text(encoding="utf-8")
    assert "cdn.holoviz.org" not in executed
    assert max(len(c.get("outputs", [])) for c in json.loads(executed)["cells"]) <= 3


@pytest.mark.slow
def test_the_quickstart_page_reads_as_a_reader_sees_it(regress_run):
    """The suite's quickstart case (the real model) rendered to HTML and opened in headless Chromium, offline: the
    transcript's verdict beside the gold answer, the metrics table's short headers, no warning, no stderr, no
    sideways scrolling (``tests/test_notebook_pages.py`` does the same for notebooks 01-03)."""
    from tests.test_notebook_pages import _no_warnings, _open
    from workbench.apps.notebooks import render_html

    (case,) = [c for c in regress_run[0].cases if c.name == "quickstart_tiny"]
    executed = Path(case.executed)
    text, _, width = _open(render_html(executed), "00")
    _no_warnings(executed, text)
    assert "prediction" in text and "gold" in text and "correct means cover-EM = 1" in text  # the transcript's verdict
    assert "cover-EM" in text and "searches" in text  # the metrics table's short headers
    assert width <= 1400


@pytest.mark.slow
def test_the_executed_notebooks_and_the_served_dashboard_show_the_same_numbers(regress_run, results_05):
    """One runs root holding the demo's eval run, the training case's run and the quickstart's: what notebooks 01,
    04 and 05 wrote (their metrics.json, the numbers their tables print) is what the dashboard's Runs table and
    Compare data hold for the same runs — trajectories, per-method scores and training steps."""
    import panel as pn

    from workbench.dashboard import app as dash
    from workbench.dashboard import queries as q

    report = regress_run[0]
    demo, train_run, root = results_05["demo"], results_05["train_run"], results_05["root"]
    nb01, nb04 = (json.loads((_case(report, name)[0] / "metrics.json").read_text(encoding="utf-8"))
                  for name in ("trajectory_inspector_tiny", "lora_training_tiny"))

    app = dash.build_app(root)
    (table,) = [t for t in app.select(pn.widgets.Tabulator) if {"run_id", "steps"} <= set(t.value.columns)]
    shown = table.value.set_index("run_id")
    status = json.loads((train_run / "status.json").read_text(encoding="utf-8"))
    assert shown.loc[train_run.name, "steps"] == nb04["steps"] == status["steps"] == 2
    assert shown.loc[demo.name, "n_trajectories"] == nb01["n_trajectories"]
    per_method = q.method_metrics(root)  # what the Compare tab draws
    demo_rows = per_method[per_method["run_id"] == demo.name].set_index("method")
    for method in ("direct", "search_r1", "search_r1+lora"):
        for metric in ("em", "cem", "f1"):
            assert demo_rows.loc[method, metric] == pytest.approx(nb01[f"{method}.{metric}"], abs=1e-9), (method, metric)

    nb05 = results_05["metrics"]
    assert nb05["n_runs"] == len(shown) == 3
    assert nb05["n_trajectories"] == int(shown["n_trajectories"].sum())
    assert nb05["best_f1"] == pytest.approx(float(per_method["f1"].max()), abs=1e-9)


@pytest.mark.slow
def test_the_demos_dashboard_page_draws_copied_alone(demo_run, tmp_path):
    """The demo's ``<run>/dashboard.html`` copied into an empty folder and opened with every network request refused:
    its charts draw (plotly.js is inside the page, not in a file beside it)."""
    import shutil

    from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    (run_path,) = demo_run[2]
    alone = tmp_path / "elsewhere" / "dashboard.html"
    alone.parent.mkdir()
    shutil.copy(run_path / "dashboard.html", alone)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("http*://**", lambda route: route.abort())
        page.goto(alone.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        # a locator reaches into the page's shadow roots, where Panel puts the plots
        drawn = page.locator(".js-plotly-plot").evaluate_all(
            "els => els.map(d => d.querySelectorAll('.main-svg path, .main-svg rect, .main-svg text').length)")
        browser.close()
    assert drawn and all(n > 10 for n in drawn), drawn
    assert not errors, errors
