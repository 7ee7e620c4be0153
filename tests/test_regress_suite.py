"""The real regression suite (``notebooks/regress.yaml``) guards the product: the suite, the notebooks and the
committed baselines agree with each other, and ``make test`` executes every case and fails on a regression or
a cell error, naming the case and the report."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import papermill
import pytest

from workbench.regress import TAKEN, load_suite, run_regress

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


@pytest.mark.slow
def test_the_regression_suite_passes(tmp_path):
    """Every case of the real suite: the tiny demo (the real model), then each notebook through papermill."""
    lines: list[str] = []
    report = run_regress(SUITE, out=tmp_path / "regress", say=lines.append)
    bad = [f"{c.name}: {c.status} - {c.note or (c.error or {}).get('evalue', '')}" for c in report.cases
           if c.status != "pass"]
    assert not bad and not report.failed, (
        "the notebook regression suite failed; report: " + str(Path(report.out_dir) / "report.md") + "\n"
        + "\n".join(bad) + "\n\n" + "\n".join(lines))
