"""Every notebook: one `parameters` cell of literals, committed without outputs.

(Each notebook executes in the regression suite, tests/test_regress_suite.py, which also runs 05 on the run the
quickstart wrote and resumes 04's run; 01, 02 and 03 also in the demo test and their own tests.)
"""

from __future__ import annotations

import ast
import json
import platform

import pytest

from workbench.apps.notebooks import normal_form, notebooks_dir

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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_is_saved_as_jupyterlab_saves_it(path):
    """Opening an unedited notebook in JupyterLab leaves it unchanged: it already holds what JupyterLab writes on
    opening it (the kernel's kernelspec and full language_info, nbformat 4.5 cell ids, nbformat's JSON layout)."""
    text = path.read_text(encoding="utf-8")
    info = json.loads(text)["metadata"]["language_info"]
    # the kernel reports its own Python release: the locks' minor release, whichever patch release runs this
    assert info["version"].split(".")[:2] == platform.python_version().split(".")[:2], info
    assert text == normal_form(path, python_version=info["version"]), (
        f"{path.name} is not in the form JupyterLab saves: run "
        f"Path(p).write_text(workbench.apps.notebooks.normal_form(p)) on it")
