"""The dashboard and run folders against hostile names and partial or corrupt files.

- script planted in every field a run can carry (folder name, method, question, answer, config values, failure
  text) never runs, in the static export or the served page (headless Chromium);
- a run killed before its completion marker is listed as incomplete and never taken as the newest run;
- a file that does not read spoils only its own run: the sections leave that run out and say so, the runs table
  names the file, and the static export exits non-zero only when a whole section could not be built;
- a folder name with path separators is its own run id, a symlinked run outside the root is named as such, and a
  ``config.json`` that is a JSON list is an error cell, not an exception.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS, EX_A, _eval_run, _free_port
from workbench import cli
from workbench.dashboard import app as dash
from workbench.dashboard import failures as fq
from workbench.dashboard import queries as q
from workbench.data.example import Example
from workbench.runs import STATUS, Run, list_runs, newest_run, open_run, run_status

MARK = "__xss"
#: Each payload bumps ``window.__xss`` if the page ever runs it.
PAYLOADS = [
    f"<img src=x onerror=\"window.{MARK}=(window.{MARK}||0)+1\">",
    f"<script>window.{MARK}=(window.{MARK}||0)+1</script>",
    f"</script><script>window.{MARK}=(window.{MARK}||0)+1</script>",
    f"\"><svg onload=\"window.{MARK}=(window.{MARK}||0)+1\">",
    f"`<img src=x onerror=window.{MARK}=1>`",
    f"[x](javascript:window.{MARK}=1) <a href=\"javascript:window.{MARK}=1\">a</a>",
]
EVIL_DIR = f"20261123-100000-<img src=x onerror=window.{MARK}=1>"  # a folder name holds no "/"
EVIL = " ".join(PAYLOADS)
GOOD, KILLED = "20261123-090000-eval-good", "20261123-110000-eval-killed"


def _evil_search(query: str, k: int = 3):
    raise RuntimeError(EVIL)  # the failure text of the trajectories that search


@pytest.fixture(scope="module")
def evil_root(tmp_path_factory, tokenizer) -> Path:
    """One eval run whose every field carries script: folder, method, question, answer, config, failure text."""
    from workbench.eval.runner import evaluate, write_eval_run
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig
    from workbench.tools.base import Toolbox

    root = tmp_path_factory.mktemp("evil")
    examples = [Example("e1", f"Who? {EVIL}", [EVIL], dataset=EVIL, hops=1)]
    results = [evaluate(m, examples, ScriptedBackend(tokenizer, script), Toolbox({"search": _evil_search}),
                        RolloutConfig(max_turns=3), progress=False)
               for m, script in {"direct": ["<answer> x </answer>"],
                                 "search_r1": ["<search> x </search>", "<answer> x </answer>"]}.items()]
    for r in results:
        r.method = f"{r.method}{EVIL}"
        for t in r.trajectories:
            t.meta["method"] = r.method
            t.answer = EVIL
    run = Run.create(root, kind="eval", run_id=EVIL_DIR,
                     config={"model": EVIL, "dataset": EVIL, "corpus_setting": EVIL, "note": {"x": EVIL}})
    write_eval_run(run, results, examples)
    return root


def _page_runs_no_script(page, url: str) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(url, timeout=60_000)
    page.wait_for_selector(".tabulator-row", timeout=60_000)
    page.wait_for_timeout(1500)
    assert page.evaluate(f"window.{MARK}") is None and not dialogs


def _chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    return pytest.importorskip("playwright.sync_api")


def test_no_script_runs_in_the_static_export(evil_root, tmp_path):
    sync_api = _chromium()
    out = dash.save_static(tmp_path / "dash.html", evil_root, share_plotlyjs=False)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        _page_runs_no_script(page, out.as_uri())
        # the names are shown as text: the card title, the cells, the transcripts
        assert page.get_by_text(EVIL_DIR).count() >= 1
        for tab in ("Compare", "Breakdowns", "Trajectories"):
            page.locator(".bk-tab", has_text=tab).click()
            page.wait_for_timeout(500)
        page.locator("summary").first.click()  # open a transcript
        page.wait_for_timeout(500)
        assert page.evaluate(f"window.{MARK}") is None
        browser.close()


def test_no_script_runs_in_the_served_dashboard(evil_root):
    sync_api = _chromium()
    port = _free_port()
    server = dash.serve_dashboard(evil_root, port=port, threaded=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            _page_runs_no_script(page, f"http://127.0.0.1:{port}/")
            for tab in ("Compare", "Breakdowns", "Trajectories"):
                page.locator(".bk-tab", has_text=tab).click()
                page.wait_for_timeout(500)
            page.locator(".tabulator-row", has_text="e1").last.click()  # a transcript with the failure box
            page.get_by_text("failed:").first.wait_for(timeout=30_000)
            page.wait_for_timeout(500)
            assert page.evaluate(f"window.{MARK}") is None
            browser.close()
    finally:
        server.stop()


# --------------------------------------------------------------------------- complete and incomplete runs


@pytest.fixture()
def killed_root(tmp_path, tokenizer) -> Path:
    """GOOD: a finished eval. KILLED (newer): an eval killed after metrics.json, before features.parquet."""
    root = tmp_path / "runs"
    _eval_run(root, GOOD, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    killed = _eval_run(root, KILLED, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    (killed.path / "features.parquet").unlink()
    killed.mark_running()  # what a killed writer leaves: the marker Run.create wrote, never replaced
    return root


def test_a_killed_run_is_incomplete_and_never_the_newest(killed_root):
    assert run_status(killed_root / GOOD).complete and not run_status(killed_root / KILLED).complete
    runs = list_runs(killed_root)
    assert [r.id for r in runs] == [GOOD, KILLED]  # listed, but after the complete ones
    assert newest_run(killed_root).id == GOOD and runs[0].complete and not runs[1].complete
    assert "never marked complete" in runs[1].status.note
    table = q.runs_table(killed_root).set_index("run_id")
    assert table.loc[KILLED, "status"].startswith("incomplete") and table.loc[GOOD, "status"] == "complete"
    from workbench.rewards.feature_io import load_features

    with pytest.raises(FileNotFoundError, match="incomplete"):
        load_features(open_run(killed_root / KILLED))


def test_the_dashboard_says_which_runs_are_incomplete(killed_root):
    page = dash.build_app(killed_root)
    text = " ".join(str(getattr(o, "object", "")) for o in page.select())
    assert "1 incomplete" in text


def test_runs_from_before_the_marker_count_by_their_files(killed_root):
    (killed_root / GOOD / STATUS).unlink()
    assert run_status(killed_root / GOOD).complete and "no completion marker" in run_status(killed_root / GOOD).note
    (killed_root / KILLED / STATUS).unlink()
    (killed_root / KILLED / "metrics.json").unlink()
    assert not run_status(killed_root / KILLED).complete
    (killed_root / KILLED / STATUS).write_text("[oops", encoding="utf-8")
    assert "unreadable" in run_status(killed_root / KILLED).note
    with pytest.raises(FileNotFoundError, match="no complete run"):
        newest_run(killed_root / "empty")


def test_writers_mark_runs_complete_last(killed_root):
    good = killed_root / GOOD
    status = json.loads((good / STATUS).read_text())
    assert status["state"] == "complete" and status["kind"] == "eval" and status["finished"]
    newest = max(p.stat().st_mtime_ns for p in good.iterdir() if p.name != STATUS)
    assert (good / STATUS).stat().st_mtime_ns >= newest


# --------------------------------------------------------------------------- one bad file spoils one run


def corrupt_pages(path: Path) -> None:
    """Overwrite every data page of a Parquet file with noise, leaving its footer (schema, row groups) intact."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    rng = random.Random(32)
    for i in range(4, len(data) - 8 - footer):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))


@pytest.fixture()
def bad_root(tmp_path, tokenizer) -> Path:
    """GOOD, CORRUPT (trajectories: footer fine, pages noise) and TRUNC (features.parquet cut in half)."""
    root = tmp_path / "runs"
    for rid in (GOOD, "20261123-120000-eval-corrupt", "20261123-130000-eval-trunc"):
        _eval_run(root, rid, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"],
                                               "search_r1": ["<search> x </search>", "<answer> x </answer>"]}, "world")
    corrupt_pages(root / "20261123-120000-eval-corrupt" / "trajectories.parquet")
    f = root / "20261123-130000-eval-trunc" / "features.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return root


def test_corrupt_pages_leave_out_their_run_only(bad_root):
    bad = "20261123-120000-eval-corrupt"
    for frame in (q.method_metrics(bad_root), q.hop_breakdown(bad_root), q.protocol_breakdown(bad_root)):
        assert bad in frame.attrs["errors"]
    m = q.method_metrics(bad_root)
    assert set(m["run_id"]) == {GOOD, "20261123-130000-eval-trunc"} and len(m) == 4
    assert q.protocol_breakdown(bad_root).set_index("protocol").loc["direct", "runs"] == 2
    table = q.runs_table(bad_root).set_index("run_id")
    assert "trajectories.parquet" in table.loc[bad, "error"] and table.loc[GOOD, "error"] == ""
    page = dash.build_app(bad_root)
    text = " ".join(str(getattr(o, "object", "")) for o in page.select())
    assert "could not be built" not in text and "Left out 1 run(s)" in text


def test_a_truncated_features_table_is_named_and_spoils_nothing_else(bad_root, tmp_path, capsys):
    trunc = "20261123-130000-eval-trunc"
    runs = fq.runs_with_failures(q.runs_table(bad_root), bad_root).set_index("run_id")
    assert "features.parquet" in runs.loc[trunc, "error"] and runs.loc[GOOD, "failed"] == 0
    df = fq.run_trajectory_table(bad_root, trunc)
    assert len(df) == 4 and "features.parquet" in df.attrs["error"]
    out = tmp_path / "dash.html"
    assert cli.main(["dashboard", "--runs", str(bad_root), "--static", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "The failure flags of this run are unknown" in page and "could not be built" not in page
    assert GOOD in page and "observation (loss mask 0)" in page  # the other runs' cards and transcripts


def test_the_static_export_exits_non_zero_when_a_section_fails(bad_root, tmp_path, capsys, monkeypatch):
    def broken(_root):
        raise RuntimeError("simulated")

    monkeypatch.setattr(q, "hop_breakdown", broken)
    out = tmp_path / "dash.html"
    assert cli.main(["dashboard", "--runs", str(bad_root), "--static", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "breakdowns: RuntimeError: simulated" in err and "\n" not in err and out.exists()


# --------------------------------------------------------------------------- names and odd files


def test_a_folder_name_with_separators_is_its_own_run(killed_root):
    odd = "a\\..\\..\\" + GOOD.replace("good", "b")
    shutil.copytree(killed_root / GOOD, killed_root / odd)
    counts = q.trajectory_counts(killed_root).set_index("run_id")
    assert odd in counts.index and counts.loc[odd, "n_trajectories"] == 2
    assert set(q.method_metrics(killed_root)["run_id"]) == {GOOD, KILLED, odd}


def test_a_symlinked_run_outside_the_root_is_named(killed_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(killed_root / GOOD, elsewhere)
    (killed_root / "20261123-140000-linked").symlink_to(elsewhere, target_is_directory=True)
    status = q.runs_table(killed_root).set_index("run_id").loc["20261123-140000-linked", "status"]
    assert f"symlink to {elsewhere.resolve()} (outside the runs root)" in status


def test_a_config_that_is_a_json_list_is_an_error_cell(killed_root):
    (killed_root / GOOD / "config.json").write_text("[1, 2]", encoding="utf-8")
    assert set(q.summary_metrics(killed_root)["run_id"]) == {KILLED}
    assert "not a JSON object" in q.runs_table(killed_root).set_index("run_id").loc[GOOD, "error"]
