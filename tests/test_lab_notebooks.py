"""Notebooks 02 and 03 as a researcher uses them: in JupyterLab, served on 127.0.0.1 and driven in headless Chromium,
offline. The notebooks are unedited copies of the committed files (the run is found through ``WORKBENCH_RUNS``).

Each opens unchanged once its kernel is up. After Run All the reward playground draws its figures, and draws them
again after the page is reloaded (the widgets then come back from the kernel's state, not from messages sent while
the cells ran). The KG explorer draws every label its figure holds, the gold path's among them, as the hops go
2 → 3 → 2, and again after a reload. Screenshots go to ``runs/test-artifacts/lab-<name>.png``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_kg_explorer import LABELS_UNDER, _label
from tests.test_notebook_pages import CHROMIUM, CHROMIUM_ARGS, demo_run  # noqa: F401 - the run both notebooks open
from workbench.apps.notebooks import KERNEL, notebook_path

pytestmark = pytest.mark.slow

NOTEBOOKS = ("02_reward_playground", "03_kg_explorer")
#: The open notebook's kernel is idle.
IDLE = ("() => { const w = window.jupyterapp && jupyterapp.shell.currentWidget;"
        " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
        " return !!k && k.status === 'idle'; }")
#: Every code cell has run ("done"), or one failed ("error: ..."); null while cells are still running.
RAN = ("() => { const w = jupyterapp.shell.currentWidget;"
       " const cells = w.content.widgets.filter(c => c.model.type === 'code');"
       " const bad = cells.flatMap(c => c.model.outputs.toJSON()).find(o => o.output_type === 'error');"
       " if (bad) return 'error: ' + bad.ename + ': ' + bad.evalue;"
       " const k = w.sessionContext.session.kernel;"
       " return k.status === 'idle' && cells.every(c => c.model.executionCount !== null) ? 'done' : null; }")
#: Title and drawn bars of each plot on the page.
PLOTS = ("() => [...document.querySelectorAll('.js-plotly-plot')].map("
         "d => [(d.querySelector('.gtitle') || {}).textContent || '', d.querySelectorAll('.barlayer .point path').length])")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(demo_run, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """``(url with its token, run)``: JupyterLab over a folder holding copies of notebooks 02 and 03."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL not in KernelSpecManager().find_kernel_specs():
        pytest.skip(f"the Jupyter kernel {KERNEL!r} is not installed (make setup)")
    run, _ = demo_run
    run.mark_complete()  # what a notebook opens without a run_dir: the newest complete run
    root = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOKS:
        shutil.copy(notebook_path(name), root / f"{name}.ipynb")
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, "WORKBENCH_RUNS": str(run.path.parent), "JUPYTER_CONFIG_DIR": str(root / ".config"),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"), "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    log = (root / ".lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}", "--expose-app-in-browser"],
        env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(root / '.lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield f"{url}/lab/tree/{{}}.ipynb?token={token}&reset", run
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def _notebook(url: str, name: str):
    """The notebook open in JupyterLab (its kernel started and idle); a screenshot is kept as a test artifact."""
    from playwright.sync_api import sync_playwright

    from workbench.util.paths import runs_dir

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith("http://127.0.0.1")
                 or route.request.url.startswith("data:") else route.abort())
        pg.goto(url.format(name))
        pg.wait_for_function(IDLE, timeout=120_000)
        try:
            yield pg
        finally:
            pg.evaluate("() => { const d = document.querySelector('.js-plotly-plot'); if (d) d.scrollIntoView(); }")
            art = runs_dir() / "test-artifacts"
            art.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(art / f"lab-{name[:2]}.png"))
            browser.close()


def _opens_unchanged(pg) -> None:
    """JupyterLab fills the notebook's kernel metadata once the kernel answers: an unedited notebook stays unchanged."""
    time.sleep(2)  # the kernel's info reply has been handled by now
    assert pg.evaluate("() => jupyterapp.shell.currentWidget.context.model.dirty") is False, pg.evaluate(
        "() => JSON.stringify(jupyterapp.shell.currentWidget.context.model.toJSON().metadata)")


def _run_all(pg) -> None:
    pg.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
    assert pg.wait_for_function(RAN, timeout=300_000).json_value() == "done"


def _save_and_reload(pg) -> None:
    """Save (as autosave would), then reload the page: the widgets come back from the kernel's state."""
    pg.evaluate("() => jupyterapp.commands.execute('docmanager:save')")
    pg.wait_for_function("() => !jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
    pg.reload()
    pg.wait_for_function(IDLE, timeout=120_000)


def _bars_drawn(pg, titles: tuple[str, ...], when: str) -> None:
    """Each plot titled ``titles`` is on the page with bars drawn (SVG paths of its traces' points)."""
    check = ("(titles) => { const plots = [...document.querySelectorAll('.js-plotly-plot')];"
             " return titles.every(t => plots.some(d => (d.querySelector('.gtitle') || {}).textContent === t"
             " && d.querySelectorAll('.barlayer .point path').length > 0)); }")
    try:
        pg.wait_for_function(check, arg=list(titles), timeout=60_000)
    except Exception:
        pytest.fail(f"{when}: plots drawn (title, bars): {pg.evaluate(PLOTS)}")


def test_02_playground_figures_draw_after_run_all_and_after_a_reload(lab):
    url, _ = lab
    with _notebook(url, "02_reward_playground") as pg:
        _opens_unchanged(pg)
        _run_all(pg)
        figures = ("Total reward", "Group advantages", "Reward components (weight 0: logged, not in the total)")
        _bars_drawn(pg, figures, "after Run All")
        _save_and_reload(pg)
        _bars_drawn(pg, figures, "after a reload")


def test_02_the_weights_set_in_the_page_reach_training_in_one_click(lab):
    """In JupyterLab, as a reader does it: Run All, a weight moved (its slider's kernel side), the command line shown
    under the sliders follows it, and a click on *save reward config* writes the file the page then names, which
    ``workbench train --reward-config`` reads back as the same reward."""
    from workbench.apps import cli

    url, run = lab
    path = run.path / "notebooks" / "02_reward_playground" / "reward_config.yaml"
    path.unlink(missing_ok=True)
    with _notebook(url, "02_reward_playground") as pg:
        _run_all(pg)
        pg.evaluate("(code) => jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute({code}).done",
                    "playground.weight_sliders['r_ans'].value = 1.0")
        shown = pg.get_by_text("train with this reward:").first
        shown.wait_for(timeout=60_000)
        for _ in range(100):  # the command follows the slider once the kernel has updated
            if '"r_ans": 1.0' in shown.inner_text():
                break
            pg.wait_for_timeout(100)
        command = shown.inner_text()
        assert '--reward-weights' in command and '"r_ans": 1.0' in command, command
        pg.get_by_role("button", name="save reward config").click()
        pg.get_by_text("saved:").first.wait_for(timeout=60_000)
        assert str(path) in pg.get_by_text("saved:").first.inner_text()
    fields = cli.reward_config_fields(path)
    assert fields["reward"] == "dynasearcher" and fields["reward_weights"]["r_ans"] == 1.0


def _drawn_network_labels(pg, hops: int) -> set[str]:
    """The labels drawn in the neighbourhood figure once it shows ``hops`` hops."""
    find = ("(t) => [...document.querySelectorAll('.js-plotly-plot')].find("
            "d => ((d.querySelector('.gtitle') || {}).textContent || '').endsWith(t))")
    title = f"{hops}-hop neighbourhood"
    pg.wait_for_function(f"(t) => !!({find})(t)", arg=title, timeout=60_000)
    return set(pg.evaluate(f"(t) => ({LABELS_UNDER})(({find})(t))", title))


def _set_hops(pg, hops: int) -> None:
    """Move the explorer's hops as its slider does (the kernel side of the same change)."""
    pg.evaluate("(code) => jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute({code}).done",
                f"ex.hops_w.value = {hops}")


def test_03_kg_labels_follow_the_hops_and_survive_a_reload(lab, world):
    from widgets.kg_explorer import kg_explorer
    from workbench.tools.kg.explore import gold_triples

    url, run = lab
    here = kg_explorer(world, run, hops=2, max_nodes=60).explorer  # what the notebook's explorer holds
    gold = {n for t in gold_triples(here.example) for n in (t.head_id, t.tail_id)}
    want, names = {}, {}
    for hops in (3, 2):
        here.hops_w.value = hops
        want[hops] = {_label(t) for t in here.fig.data[4].text if t}
        names[hops] = {here.neighbourhood.names[n] for n in gold | {here.neighbourhood.center}}
    with _notebook(url, "03_kg_explorer") as pg:
        _opens_unchanged(pg)
        _run_all(pg)
        assert names[2] <= _drawn_network_labels(pg, 2)
        for hops in (3, 2):
            _set_hops(pg, hops)
            drawn = _drawn_network_labels(pg, hops)
            assert drawn == want[hops] and names[hops] <= drawn, (hops, want[hops] ^ drawn)
        _save_and_reload(pg)
        drawn = _drawn_network_labels(pg, 2)
        assert drawn == want[2], ("after a reload", want[2] ^ drawn)
