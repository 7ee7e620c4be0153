"""Notebooks 01-03 as a reader sees them: executed (papermill), rendered to HTML (``render_html``) and opened in
headless Chromium, offline (notebook 00's page is checked on the regression suite's run of it, which evaluates the
real model once for both: ``tests/test_regress_suite.py``). Each page shows a gold answer beside a prediction; notebook 01's saved inspector is
open on the diff the notebook asked for (the comparison of two methods over the run); no output holds warning text
or a traceback, and nothing was written to stderr.

The run is scripted on two world questions: ``direct`` answers right without searching, ``search_r1`` searches
(and finds the gold passage) but answers wrong; each question's two trajectories share a group, so the reward
playground has something to re-rank. Screenshots go to ``runs/test-artifacts/notebook-<name>.png``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.apps.notebooks import execute_notebook, render_html

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
#: Text that must not appear in any output of an executed notebook.
WARNING_TEXT = ("Warning", "Traceback", "warnings.warn")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tokenizer, world, one_thread):
    from workbench.core.types import Hit
    from workbench.eval.runner import evaluate
    from workbench.rewards import compute_features, save_features
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig
    from workbench.storage.runs import Run
    from workbench.tools.base import Toolbox

    questions = [e for e in world.split("dev") if e.supporting_ids and e.hops == 2][:2]

    def search(query: str, k: int = 3):  # the question's first gold passage
        ex = next(e for e in questions if e.id == query.strip())
        return [Hit(ex.supporting_ids[0], ex.supporting_titles[0], f"{ex.question} The answer is written here.", 1.0)]

    def direct(prompt, turn):
        return "<answer> " + next(e.answers[0] for e in questions if e.question in prompt) + " </answer>"

    def agent(prompt, turn):
        ex = next(e for e in questions if e.question in prompt)
        return f"<search> {ex.id} </search>" if turn == 0 else "<answer> Nobody </answer>"

    tools = Toolbox({"search": search})
    results = [evaluate("direct", questions, ScriptedBackend(tokenizer, direct), tools, RolloutConfig(max_turns=1),
                        progress=False),
               evaluate("search_r1", questions, ScriptedBackend(tokenizer, agent), tools, RolloutConfig(max_turns=3),
                        progress=False)]
    trajs = [t for r in results for t in r.trajectories]
    for t in trajs:  # one group per question: the two methods' trajectories compete in it
        t.group_id = f"g-{t.example_id}"
    run = Run.create(tmp_path_factory.mktemp("runs"), kind="eval", run_id="20261125-100000-eval-pages",
                     config={"model": "smollm2-135m", "dataset": "world"})
    run.write_trajectories(trajs, extra_columns={"method": [r.method for r in results for _ in r.trajectories]})
    run.write_examples(questions)
    save_features(run, compute_features(trajs, questions, encoder=False, cache=False))
    return run, questions


def _open(page_path: Path, name: str):
    """The rendered page in Chromium (offline): its visible text, and a screenshot kept as a test artifact."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench.util.paths import runs_dir

    shot = page_path.with_suffix(".png")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.route("http*://**", lambda route: route.abort())
        pg.goto(page_path.as_uri())
        pg.wait_for_load_state("load")
        text = pg.inner_text("body")
        diff_open = pg.locator(".wb-diff-summary").first.is_visible() if pg.locator(".wb-diff-summary").count() else False
        width = pg.evaluate("() => document.documentElement.scrollWidth")
        pg.screenshot(path=str(shot), full_page=True)
        browser.close()
    art = runs_dir() / "test-artifacts"
    art.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, art / f"notebook-{name}.png")
    return text, diff_open, width


def _no_warnings(executed: Path, text: str) -> None:
    nb = json.loads(executed.read_text(encoding="utf-8"))
    streams = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") in ("stream", "error")]
    assert not [o for o in streams if o.get("name") == "stderr" or o["output_type"] == "error"], "stderr or an error"
    for word in WARNING_TEXT:
        assert word not in text, f"{word!r} in the page"


def test_01_inspector_page_opens_the_diff(demo_run, tmp_path):
    run, questions = demo_run
    executed = execute_notebook("01_trajectory_inspector", tmp_path / "01.ipynb", {
        "run_dir": str(run.path), "out_dir": str(tmp_path / "01"), "diff_methods": "direct,search_r1"})
    text, diff_open, _ = _open(render_html(executed), "01")
    _no_warnings(executed, text)
    assert diff_open and "diff (open tab)" in text  # the saved inspector is the one the last cell left
    assert "direct → search_r1 over 2 shared questions:" in text and "2 broken" in text
    assert all(e.answers[0] in text for e in questions)  # the gold answers
    m = json.loads((tmp_path / "01" / "metrics.json").read_text())
    assert m["diff"]["question"] in {e.question for e in questions}


def test_02_playground_page(demo_run, tmp_path):
    run, questions = demo_run
    executed = execute_notebook("02_reward_playground", tmp_path / "02.ipynb", {
        "run_dir": str(run.path), "out_dir": str(tmp_path / "02"), "weights": {"r_acc": 0.0}})
    text, _, _ = _open(render_html(executed), "02")
    _no_warnings(executed, text)
    m = json.loads((tmp_path / "02" / "metrics.json").read_text())
    # without r_acc the searcher (half the gold passages found) outranks the right answer given without searching
    assert m["rows_rank_changed"] == 4
    assert all(e.answers[0] in text for e in questions)  # the gold column of the rank changes


def test_03_kg_explorer_page(demo_run, tmp_path):
    run, questions = demo_run
    executed = execute_notebook("03_kg_explorer", tmp_path / "03.ipynb", {
        "run_dir": str(run.path), "out_dir": str(tmp_path / "03")})
    text, _, _ = _open(render_html(executed), "03")
    _no_warnings(executed, text)
    assert "gold answer" in text and questions[0].answers[0] in text
    assert "the run's answers: direct" in text and "search_r1 Nobody ✘" in text  # the predictions beside it
