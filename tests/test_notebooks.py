"""Every notebook: one `parameters` cell of literals, committed without outputs; 00 and 05 execute.

(01, 02 and 03 are executed by the demo test and their own tests; 04 by tests/test_trainer.py.)
"""

from __future__ import annotations

import ast
import json

import pytest

from workbench.notebooks import execute_notebook, notebooks_dir

NOTEBOOKS = sorted(notebooks_dir().glob("*.ipynb"))


def test_the_six_notebooks_exist():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["00", "01", "02", "03", "04", "05"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_literal_parameters_cell_and_no_outputs(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "workbench"
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, f"{path.name}: {len(params)} cells tagged parameters"
    for node in ast.parse("".join(params[0]["source"])).body:
        assert isinstance(node, ast.Assign), f"{path.name}: only assignments in the parameters cell"
        ast.literal_eval(node.value)  # raises on anything but a literal
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert c.get("outputs") == [] and c.get("execution_count") is None, f"{path.name} has outputs"
    assert nb["cells"][0]["cell_type"] == "markdown" and nb["cells"][-1]["cell_type"] == "markdown"


@pytest.mark.slow
def test_quickstart_then_results_dashboard(tmp_path):
    qs = tmp_path / "quickstart"
    execute_notebook("00_quickstart", tmp_path / "00.ipynb",
                     {"limit": 1, "max_new_tokens": 16, "max_turns": 2, "out_dir": str(qs)})
    m = json.loads((qs / "metrics.json").read_text())
    assert m["n_trajectories"] == 2
    assert m["direct.n"] == 1 and m["search_r1.n"] == 1 and m["direct.n_searches"] == 0
    runs = [p.parent for p in qs.rglob("trajectories.parquet")]
    assert runs, "the quickstart writes an eval run"
    dash = tmp_path / "dash"
    execute_notebook("05_results_dashboard", tmp_path / "05.ipynb",
                     {"runs_dir": str(runs[0].parent), "out_dir": str(dash)})
    d = json.loads((dash / "metrics.json").read_text())
    assert d["n_runs"] == 1 and d["n_trajectories"] == 2
    assert (dash / "dashboard.html").exists()
