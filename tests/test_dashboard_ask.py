"""The dashboard's Ask tab: served, in headless Chromium, a question goes in and its steps appear as they happen; the
run it saves is then listed by the page (runs table, drill-down) without a reload.

The model turns are scripted (and slowed down, so that the page can be seen between them); everything else is real:
Panel's server and widgets, Chromium, the engine, BM25 over the world, the run written. The screenshot goes to
``runs/test-artifacts/dashboard-ask.png`` (``$WORKBENCH_RUNS/test-artifacts/`` when that is set).
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

from workbench.dashboard import app as dash
from workbench.eval.ask import Asker
from workbench.rollout.backends.scripted import ScriptedBackend

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
QUESTION = "Who founded Treimveex Textiles?"
SCRIPT = ["<think>I should look it up.</think>\n<search> Treimveex Textiles founder </search>",
          "<answer> Firnith Stullith Truxach </answer>"]


class SlowScript(ScriptedBackend):
    """Scripted turns, each taking ``delay_s``: the page shows a turn before the next one exists."""

    def __init__(self, tokenizer, script, delay_s: float):
        super().__init__(tokenizer, script)
        self.delay_s = delay_s

    def generate(self, prompts, params, max_new_tokens=None):
        time.sleep(self.delay_s)
        return super().generate(prompts, params, max_new_tokens)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ask_tab_streams_the_turns_and_saves_a_run_in_chromium(tokenizer, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    root = tmp_path / "runs"  # a new user: no runs yet
    port = _free_port()
    server = dash.serve_dashboard(root, port=port, threaded=True, asker=Asker(SlowScript(tokenizer, SCRIPT, 2.0)))
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/", timeout=60_000)
            page.get_by_text("No runs under").first.wait_for(timeout=60_000)
            page.locator(".bk-tab", has_text="Ask").click()
            page.locator("textarea").fill(QUESTION)
            page.get_by_placeholder("Firnith Truxach").fill("Firnith Stullith Truxach | F. S. Truxach")
            page.locator("select").select_option("search_r1")
            page.locator("button", has_text="Ask").click()
            page.locator(".wb-ask-search").wait_for(timeout=30_000)  # the first turn, while the second is generated
            assert "Treimveex Textiles founder" in page.locator(".wb-ask-search").inner_text()
            assert page.locator(".wb-ask-answer").count() == 0
            page.locator(".wb-ask-passages").wait_for(timeout=30_000)
            assert "Treimveex Textiles" in page.locator(".wb-ask-passages").inner_text()
            page.locator(".wb-ask-done").wait_for(timeout=30_000)
            assert "Firnith Stullith Truxach" in page.locator(".wb-ask-answer").inner_text()
            assert "Firnith Stullith Truxach" in page.locator(".wb-ask-done").inner_text()
            assert page.locator(".bk-tab.bk-active").inner_text() == "Ask"
            # the gold answer given: the tab says the verdict, and the run scored it
            assert "✔ correct" in page.locator(".wb-ask-verdict").inner_text()
            shot = tmp_path / "ask.png"
            page.screenshot(path=str(shot), full_page=True)
            # without a reload: the runs table lists the new run, the Ask tab still shows the exchange, and the
            # Trajectories tab's run picker offers it, opened on its question
            (run_dir,) = [d for d in root.iterdir() if d.is_dir()]
            page.locator(".tabulator-cell", has_text=run_dir.name).first.wait_for(timeout=30_000)
            assert page.get_by_text("No runs under").count() == 0
            assert "Firnith Stullith Truxach" in page.locator(".wb-ask-done").inner_text()
            assert page.locator(".bk-tab.bk-active").inner_text() == "Ask"
            page.locator(".bk-tab", has_text="Trajectories").click()
            assert page.locator("option", has_text=run_dir.name).count() >= 1
            page.locator(".tabulator-row", has_text=QUESTION).first.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "ask-listed.png"), full_page=True)
            browser.close()
    finally:
        server.stop()
    from workbench.util.paths import runs_dir

    (runs_dir() / "test-artifacts").mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, runs_dir() / "test-artifacts" / "dashboard-ask.png")
    (run,) = [d for d in root.iterdir() if d.is_dir()]
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["kind"] == "ask" and cfg["question"] == QUESTION and cfg["method"] == "search_r1"
    import pandas as pd

    assert pd.read_parquet(run / "trajectories.parquet")["cem"].tolist() == [1.0]
    assert json.loads((run / "status.json").read_text())["state"] == "complete"


def test_a_dashboard_served_to_others_asks_over_the_world_only(tokenizer, tmp_path):
    import panel as pn

    page = dash.build_app(tmp_path, asker=Asker(ScriptedBackend(tokenizer, SCRIPT)), ask_paths=False)
    (source,) = page.select(pn.widgets.RadioButtonGroup)
    assert source.options == ["world"]
    adapter = [w for w in page.select(pn.widgets.TextInput) if "adapter folder" in w.placeholder]
    assert adapter and adapter[0].disabled
    local = dash.build_app(tmp_path, asker=Asker(ScriptedBackend(tokenizer, SCRIPT)))
    (source,) = local.select(pn.widgets.RadioButtonGroup)
    assert source.options == ["world", "corpus file", "retrieval server"]
    assert not any(isinstance(o, pn.Tabs) for o in dash.build_app(tmp_path, static=True).select(pn.Tabs))
