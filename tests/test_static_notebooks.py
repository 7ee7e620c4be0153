"""Executed notebooks read well without a kernel: rendered to HTML (nbconvert), their plots draw
in headless Chromium, and widgets show their values with a note instead of ``VBox(children=...)``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.apps.notebooks import SETUP_TAG, execute_notebook, render_html, with_setup_cell

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def test_setup_cell_goes_first_once():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]})])
    nb = with_setup_cell(with_setup_cell(nb))
    assert [SETUP_TAG in c.metadata.get("tags", []) for c in nb.cells] == [True, False]
    assert "static_outputs()" in nb.cells[0].source


def test_widget_html_shows_values_and_the_note():
    import ipywidgets as W
    import plotly.graph_objects as go

    from widgets.figures import STATIC_NOTE, widget_html

    box = W.VBox([W.HTML("<b>summary</b> 3 groups"), W.HBox([W.Dropdown(options=["dspo", "grpo"], value="grpo",
                                                                          description="preset"),
                                                              W.FloatSlider(value=0.25, description="gamma")]),
                  go.FigureWidget(go.Bar(x=[1, 2], y=[3, 4])), W.Button(description="reset")])
    page = widget_html(box)
    assert STATIC_NOTE in page and "<b>summary</b> 3 groups" in page
    assert "<b>preset</b>: grpo" in page and "<b>gamma</b>: 0.25" in page
    assert "Plotly.newPlot" in page and "VBox(" not in page


def test_a_tab_shows_its_open_tab_first_and_folds_the_others():
    import ipywidgets as W

    from widgets.figures import widget_html

    tabs = W.Tab(children=[W.HTML("TURNS"), W.HTML("DIFF")], titles=("turns", "diff"))
    tabs.selected_index = 1
    page = widget_html(tabs)
    assert page.index("DIFF") < page.index("TURNS") and "(open tab)" in page
    assert "<details" in page.split("DIFF", 1)[1]  # the other tab folded


def _executed(tmp_path: Path, *sources: str) -> list[dict]:
    """The cells of a notebook (a parameters cell, then ``sources``) executed by papermill with the setup cell first,
    as saved."""
    import nbformat
    import papermill as pm

    from workbench.apps.notebooks import kernel_name

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                                         *(nbformat.v4.new_code_cell(src) for src in sources)])
    src, out = tmp_path / "t.ipynb", tmp_path / "out.ipynb"
    nbformat.write(with_setup_cell(nb), src)
    pm.execute_notebook(str(src), str(out), kernel_name=kernel_name(), progress_bar=False, store_widget_state=False)
    return json.loads(out.read_text(encoding="utf-8"))["cells"]


@pytest.mark.slow
def test_widgets_show_the_state_the_last_cell_left(tmp_path):
    """A widget shown early and changed by a later cell is saved as the later cell left it; a closed one (a
    finished progress bar) is gone."""
    cells = _executed(tmp_path, "import ipywidgets as W\nh = W.HTML('FIRST STATE')\nh",
                      "from IPython.display import display\nbar = W.FloatProgress(value=1)\ndisplay(bar)",
                      "h.value = 'LAST STATE'\nbar.close()")
    first, bar = (c["outputs"][0]["data"] for c in cells[2:4])
    page = "".join(first["text/html"])
    assert "LAST STATE" in page and "FIRST STATE" not in page and "application/vnd.jupyter.widget-view+json" in first
    assert "".join(bar.get("text/html", "")) == ""


@pytest.mark.slow
def test_a_finished_progress_bar_stays_drawn_without_errors(tmp_path):
    """tqdm's notebook bar keeps a weak proxy to its bar object: a bar left on screen (leave=True, as the trainer's)
    and collected must not make each later cell's snapshot refresh raise ReferenceError; it keeps its final values."""
    cells = _executed(tmp_path, "import gc\nfrom tqdm.auto import tqdm\n\ndef train():\n"
                                "    bar = tqdm(total=3, desc='TRAINBAR')\n    bar.update(3)\n    bar.close()\n\n"
                                "train()\ngc.collect()",
                      "y = 2", "y + 1")
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"], [o.get("ename") for o in outputs]
    bar = next(o["data"] for o in cells[2]["outputs"] if "text/html" in o.get("data", {}))
    page = "".join(bar["text/html"])
    assert "TRAINBAR" in page and "3/3" in page  # the final values, refreshed after the cell
    assert "".join(cells[4]["outputs"][0]["data"]["text/plain"]) == "3"


def _runs_root(root: Path, tokenizer) -> Path:
    from workbench.core.types import Hit
    from workbench.data.example import Example
    from workbench.eval.runner import evaluate, write_eval_run
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig
    from workbench.storage.runs import Run
    from workbench.tools.base import Toolbox

    examples = [Example("a1", "Who founded Tarnholm Mills?", ["Ada Quist"], dataset="world", hops=1),
                Example("a2", "Where is Ulmbridge?", ["Ostrevia"], dataset="world", hops=2)]
    tools = Toolbox({"search": lambda q, k=3: [Hit("p1", "Tarnholm Mills", "Founded by Ada Quist.", 1.0)]})
    scripts = {"direct": ["<answer> Ada Quist </answer>"],
               "search_r1": ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"]}
    results = [evaluate(m, examples, ScriptedBackend(tokenizer, s), tools, RolloutConfig(max_turns=3), progress=False)
               for m, s in scripts.items()]
    run = Run.create(root, kind="eval", run_id="20261123-100000-eval-static", config={"model": "scripted",
                                                                                       "dataset": "world"})
    write_eval_run(run, results, examples, features=False)
    return root


@pytest.mark.slow
def test_executed_notebook_rendered_to_html_draws_its_plots_offline(tmp_path, tokenizer, capfd):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    root = _runs_root(tmp_path / "runs", tokenizer)
    executed = execute_notebook("05_results_dashboard", tmp_path / "05.ipynb",
                                {"runs_dir": str(root), "out_dir": str(tmp_path / "out"), "write_html": False})
    assert "without encryption" not in capfd.readouterr().err  # the kernel talks over IPC sockets
    nb = json.loads(executed.read_text(encoding="utf-8"))
    bundles = [o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])]
    figures = [b for b in bundles if "application/vnd.plotly.v1+json" in b]
    assert figures and all("text/html" in b for b in figures), "every figure carries a static rendering"
    assert executed.read_text(encoding="utf-8").count("* plotly.js v") == 1, "plotly.js embedded once per notebook"
    page = render_html(executed)
    text = page.read_text(encoding="utf-8")
    assert text.count("Plotly.newPlot") >= len(figures) and "static_outputs()" not in text  # setup input hidden
    assert "* plotly.js v" not in text and (page.parent / "plotly.min.js").exists()  # the shared copy instead
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1200, "height": 900})
        pg.route("http*://**", lambda route: route.abort())  # offline: nothing but the file itself
        pg.goto(page.as_uri())
        pg.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        drawn = pg.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].map("
                            "d => d.querySelectorAll('.main-svg path, .main-svg rect, .main-svg text').length)")
        pg.screenshot(path=str(tmp_path / "05.png"), full_page=True)
        browser.close()
    assert len(drawn) >= len(figures) and all(n > 10 for n in drawn), drawn
    from workbench.util.paths import runs_dir

    art = runs_dir() / "test-artifacts"
    art.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / "05.png", art / "static-notebook-05.png")


def test_kernels_shut_down_without_an_interrupt(tmp_path):
    """A SIGINT before the shutdown request makes a kernel still finishing a message log `KeyboardInterrupt caught in
    kernel` as an ERROR in the demo's output; the manager that execute_notebook passes papermill sends none, where
    jupyter_client's own does (the control run shows the check can fail)."""
    import signal

    import nbformat
    import papermill as pm
    from jupyter_client.manager import AsyncKernelManager

    from workbench.apps.notebooks import kernel_name, quiet_shutdown_manager

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1 + 1")])
    src = tmp_path / "t.ipynb"
    nbformat.write(nb, src)
    sent: dict[str, list[int]] = {}

    def recording(base: type, name: str) -> type:
        async def _async_signal_kernel(self, signum: int) -> None:
            sent.setdefault(name, []).append(signum)
            await base._async_signal_kernel(self, signum)

        return type(f"Recording{name}", (base,), {"_async_signal_kernel": _async_signal_kernel})

    for name, base in (("quiet", quiet_shutdown_manager()), ("jupyter", AsyncKernelManager)):
        pm.execute_notebook(str(src), str(tmp_path / f"{name}.ipynb"), kernel_name=kernel_name(), progress_bar=False,
                            kernel_manager_class=recording(base, name))
    assert signal.SIGINT in sent.get("jupyter", [])
    assert signal.SIGINT not in sent.get("quiet", [])


def test_notebooks_run_side_by_side_leave_the_working_directory_alone(tmp_path, monkeypatch):
    """papermill's cwd= changed this process's working directory for the whole run: two notebooks run in threads (the
    demo's) raced, and a relative path elsewhere in the process resolved against notebooks/ meanwhile, or after. Each
    kernel still starts in its own folder."""
    import os
    import threading
    import time

    import nbformat

    from workbench.apps import notebooks

    monkeypatch.setattr(notebooks, "notebooks_dir", lambda: tmp_path)
    cell = "import os, time, pathlib\npathlib.Path(out_dir, 'cwd.txt').write_text(os.getcwd())\ntime.sleep(1)"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("out_dir = ''", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell(cell)],
                                  metadata={"kernelspec": {"name": "workbench", "language": "python", "display_name": "w"},
                                            "language_info": {"name": "python"}})
    nbformat.write(nb, tmp_path / "t.ipynb")
    dirs = {k: tmp_path / k for k in "ab"}
    for d in dirs.values():
        d.mkdir()
    here, seen = os.getcwd(), set()
    threads = [threading.Thread(target=notebooks.execute_notebook, args=("t", d / "out.ipynb", {"out_dir": str(d)}),
                                kwargs={"cwd": d, "static": False}) for d in dirs.values()]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        seen.add(os.getcwd())
        time.sleep(0.02)
    assert seen == {here} and os.getcwd() == here
    assert {k: (d / "cwd.txt").read_text() for k, d in dirs.items()} == {k: str(d) for k, d in dirs.items()}
