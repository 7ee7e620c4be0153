"""`workbench regress`: tolerances, suite parsing, and whole runs on tiny notebooks written into
tmp_path (a passing case, a planted regression, a planted cell error)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from workbench.apps import cli
from workbench.regress import (
    MISSING,
    NEW,
    OK,
    REGRESSED,
    Tolerance,
    compare,
    load_suite,
    lookup,
    run_regress,
)

# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize("spec,old,new,ok", [
    ({"abs": 0.2}, 0.5, 0.69, True),
    ({"abs": 0.2}, 0.5, 0.71, False),
    ({"abs": 0.2}, 0.5, 0.3, True),
    ({"rel": 0.1}, 10.0, 10.9, True),
    ({"rel": 0.1}, 10.0, 8.9, False),
    ({"exact": True}, 4, 4, True),
    ({"exact": True}, 4, 5, False),
    ({"exact": True}, "eos", "eos", True),
    ({"tolerance": {"abs": 0.5}}, 1.0, 1.4, True),
    (0.05, 1.0, 1.1, False),
    ({"abs": 0.2}, float("nan"), 0.1, False),
    ({"abs": 0.2}, float("nan"), float("nan"), True),
])
def test_tolerance(spec, old, new, ok):
    assert Tolerance.parse(spec).allows(old, new) is ok


@pytest.mark.parametrize("spec", [{"abs": -1}, {"within": 0.1}, {"exact": False}, "0.1", {"abs": 0.1, "rel": 0.1}])
def test_bad_tolerance_is_rejected(spec):
    with pytest.raises(ValueError):
        Tolerance.parse(spec, "here")


def test_compare_statuses_and_nested_lookup():
    tol = {"a": Tolerance("abs", 0.1), "b.c": Tolerance("exact"), "gone": Tolerance("abs", 1), "fresh": Tolerance("abs", 1)}
    values = {"a": 0.5, "b": {"c": 3}, "fresh": 1.0}
    baseline = {"a": 0.9, "b.c": 3, "gone": 1.0}
    res = {m.name: m for m in compare(values, baseline, tol)}
    assert res["a"].status == REGRESSED and res["a"].delta == pytest.approx(-0.4)
    assert res["b.c"].status == OK and res["b.c"].value == 3
    assert res["gone"].status == MISSING and res["fresh"].status == NEW
    assert lookup({"x": {"y": {"z": 1}}}, "x.y.z") == 1


def _write_suite(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_suite_validation(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    suite = load_suite(_write_suite(tmp_path, """
setup:
  - {name: fx, run: run}
cases:
  - {name: first, notebook: writer.ipynb, parameters: {run_dir: "{run_dir}"}, metrics: {value: {abs: 0.1}}}
  - {name: second, notebook: writer, parameters: {src: "{cases[first]}/metrics.json"}}
"""))
    assert suite.fixtures[0].run == str((tmp_path / "run").resolve())
    assert suite.baselines_dir == tmp_path / "baselines" and suite.notebooks_dir == tmp_path
    assert [c.name for c in suite.select(["second"])] == ["first", "second"]  # dependencies come along
    assert suite.cases[0].notebook == "writer" and suite.cases[1].needs_cases() == ["first"]
    with pytest.raises(ValueError, match="no case 'nope'"):
        suite.select(["nope"])

    bad = {
        "earlier case": "cases:\n  - {name: a, notebook: w, parameters: {x: '{cases[b]}'}}\n  - {name: b, notebook: w}\n",
        "not in setup": "cases:\n  - {name: a, notebook: w, parameters: {x: '{fixtures[zz]}'}}\n",
        "no setup entry": "cases:\n  - {name: a, notebook: w, parameters: {x: '{run_dir}'}}\n",
        "duplicate": "cases:\n  - {name: a, notebook: w}\n  - {name: a, notebook: w}\n",
        "unknown keys": "cases:\n  - {name: a, notebook: w, tolerance: 1}\n",
        "exactly one of": "setup:\n  - {name: f}\ncases: []\n",
        # papermill writes parameter names as they are into the injected cell: a name that is code is refused
        "not a Python name": "cases:\n  - name: a\n    notebook: w\n    parameters:\n"
                             "      \"y = 1\\nimport os; os.system('touch pwned')\\nz\": 1\n",
        "is not a Python name": "cases:\n  - {name: a, notebook: w, parameters: {class: 1}}\n",
        "parameters must be a mapping": "cases:\n  - {name: a, notebook: w, parameters: [1]}\n",
        # a notebook is named, not reached by a path: nothing outside the notebooks folder runs
        "no path": "cases:\n  - {name: a, notebook: ../../../elsewhere/nb}\n",
    }
    for msg, text in bad.items():
        with pytest.raises(ValueError, match=msg):
            load_suite(_write_suite(tmp_path, text))


def test_repo_suite_is_valid():
    from workbench.apps.notebooks import notebooks_dir

    suite = load_suite(notebooks_dir() / "regress.yaml")
    assert suite.cases and all((suite.notebooks_dir / f"{c.notebook}.ipynb").exists() for c in suite.cases)
    for c in suite.cases:  # every case has a committed baseline holding every compared metric
        baseline = json.loads((suite.baselines_dir / f"{c.name}.json").read_text())
        assert set(c.metrics) <= set(baseline), c.name


# --------------------------------------------------------------------------- whole runs (papermill)


def _notebook(path: Path, parameters: str, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)", "language": "python"}
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, str(path))


WRITER = """import json, pathlib
pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
metrics = {"value": value, "count": count, "nested": {"x": value * 2}, "seen_run": run_dir}
pathlib.Path(out_dir, "metrics.json").write_text(json.dumps(metrics))"""

BOOM = """total = value * 2
raise ValueError(f"planted failure {total}")"""

SUITE = """
setup:
  - {name: fixture_run, run: fixture_run}
cases:
  - name: ok
    notebook: writer
    parameters: {value: 0.5, count: 3, run_dir: "{run_dir}"}
    metrics: {value: {abs: 0.1}, count: {exact: true}, nested.x: {rel: 0.05}}
  - name: drift
    notebook: writer
    parameters: {value: 0.5, count: 3}
    metrics: {value: {abs: 0.1}, count: {exact: true}}
  - name: boom
    notebook: boom
    parameters: {value: 21}
    metrics: {value: {abs: 0.1}}
"""


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("suite")
    _notebook(d / "writer.ipynb", 'out_dir = ""\nvalue = 1.0\ncount = 0\nrun_dir = ""', WRITER)
    _notebook(d / "boom.ipynb", 'out_dir = ""\nvalue = 1', BOOM)
    (d / "fixture_run").mkdir()
    (d / "fixture_run" / "config.json").write_text('{"kind": "eval"}')
    (d / "regress.yaml").write_text(SUITE, encoding="utf-8")
    (d / "baselines").mkdir()
    (d / "baselines" / "ok.json").write_text(json.dumps({"value": 0.52, "count": 3, "nested.x": 1.0}))
    (d / "baselines" / "drift.json").write_text(json.dumps({"value": 9.5, "count": 3}))  # planted: far off
    (d / "baselines" / "boom.json").write_text(json.dumps({"value": 21}))
    return d


@pytest.fixture(scope="module")
def full_run(suite_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("regress-out")
    rc = cli.main(["regress", "--config", str(suite_dir / "regress.yaml"), "--out", str(out), "--jobs", "2",
                   "--cell-timeout", "120"])
    return rc, out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_regression_and_error_exit_non_zero_and_reports_exist(full_run):
    rc, out, results = full_run
    assert rc == 1 and results["failed"]
    assert results["counts"] == {"pass": 1, "regressed": 1, "error": 1, "new": 0}
    assert (out / "report.md").stat().st_size > 0 and (out / "report.html").stat().st_size > 0
    assert (out / "cases" / "ok" / "writer.ipynb").exists()  # executed notebooks are kept


@pytest.mark.slow
def test_report_links_each_executed_notebook_rendered_to_html(full_run):
    _, out, results = full_run
    page = (out / "report.html").read_text()
    for case in ("ok", "drift", "boom"):  # the failed one too: its HTML shows the failing cell
        c = next(c for c in results["cases"] if c["name"] == case)
        html_file = Path(c["executed_html"])
        assert html_file.exists() and html_file.suffix == ".html"
        assert f"href='{html_file.relative_to(out).as_posix()}'" in page
    assert "planted failure 42" in (out / "cases" / "boom" / "boom.html").read_text()
    assert "(cases/ok/writer.html)" in (out / "report.md").read_text()


@pytest.mark.slow
def test_passing_case_in_the_full_run(full_run):
    _, out, results = full_run
    ok = next(c for c in results["cases"] if c["name"] == "ok")
    assert ok["status"] == "pass" and {m["status"] for m in ok["metrics"]} == {"ok"}
    assert ok["values"]["seen_run"].endswith("fixture_run")  # {run_dir} was filled from the setup entry
    assert ok["parameters"]["out_dir"] == str((out / "cases" / "ok").resolve())


@pytest.mark.slow
def test_planted_regression_is_named(full_run):
    _, out, results = full_run
    drift = next(c for c in results["cases"] if c["name"] == "drift")
    assert drift["status"] == "regressed"
    bad = [m for m in drift["metrics"] if m["status"] == "regressed"]
    assert [m["name"] for m in bad] == ["value"] and bad[0]["baseline"] == 9.5 and bad[0]["value"] == 0.5
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## drift: regressed" in md and "| value | 9.5 | 0.5 | -9 | abs 0.1 | **regressed** |" in md
    assert "outside tolerance or missing: value" in md and "drift" in page and "regressed" in page


@pytest.mark.slow
def test_planted_cell_error_shows_source_and_error(full_run):
    _, out, results = full_run
    boom = next(c for c in results["cases"] if c["name"] == "boom")
    assert boom["status"] == "error"
    err = boom["error"]
    assert err["ename"] == "ValueError" and err["evalue"] == "planted failure 42"
    assert 'raise ValueError(f"planted failure {total}")' in err["source"]
    executed = nbformat.read(boom["executed"], as_version=4)
    assert executed.cells[err["cell_index"]].source == err["source"]  # the index points into the saved notebook
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "ValueError: planted failure 42" in md and 'raise ValueError(f"planted failure {total}")' in md
    assert "planted failure 42" in page and "raise ValueError(f&quot;planted failure {total}&quot;)" in page


@pytest.mark.slow
def test_selected_passing_case_exits_zero(suite_dir, tmp_path):
    rc = cli.main(["regress", "--config", str(suite_dir / "regress.yaml"), "--cases", "ok", "--out", str(tmp_path),
                   "--cell-timeout", "120"])
    assert rc == 0
    assert "workbench regress: OK" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_update_baselines_then_new_case(suite_dir, tmp_path):
    baselines = tmp_path / "baselines"
    report = run_regress(suite_dir / "regress.yaml", out=tmp_path / "a", cases=["drift"], baselines_dir=baselines,
                         cell_timeout=120, say=lambda *_: None)
    assert report.cases[0].status == NEW and not report.failed  # no baseline yet
    report = run_regress(suite_dir / "regress.yaml", out=tmp_path / "b", cases=["drift"], baselines_dir=baselines,
                         update_baselines=True, cell_timeout=120, say=lambda *_: None)
    written = json.loads((baselines / "drift.json").read_text())
    taken = written.pop("_taken")
    assert written == {"value": 0.5, "count": 3}
    # where it was taken: this suite is outside any git checkout, so no commit; a date and the machine
    assert taken["commit"] is None and taken["date"].startswith("20") and "cores" in taken["machine"]
    report = run_regress(suite_dir / "regress.yaml", out=tmp_path / "c", cases=["drift"], baselines_dir=baselines,
                         cell_timeout=120, say=lambda *_: None)
    assert report.cases[0].status == "pass" and report.cases[0].baseline_taken == taken
    assert "taken at no git commit on" in (tmp_path / "c" / "report.md").read_text()


@pytest.mark.slow
def test_cell_timeout_is_an_error_naming_the_cell(tmp_path):
    _notebook(tmp_path / "hang.ipynb", 'out_dir = ""', "import time\ntime.sleep(60)")
    (tmp_path / "s.yaml").write_text("cases:\n  - {name: hang, notebook: hang}\n")
    report = run_regress(tmp_path / "s.yaml", out=tmp_path / "out", cell_timeout=2, say=lambda *_: None)
    case = report.cases[0]
    assert report.failed and case.status == "error" and case.error["ename"] == "CellTimeoutError"
    assert case.error["source"] == "import time\ntime.sleep(60)"
    assert "time.sleep(60)" in (tmp_path / "out" / "report.md").read_text()
