"""The dashboard and run folders against hostile names and partial or corrupt files.

- script planted in every field a run can carry (folder name, method, question, answer, config values, failure
  text) never runs, in the static export or the served page (headless Chromium);
- a run killed before its completion marker is listed as incomplete and never taken as the newest run; on this host
  a run whose writer's process is gone is "killed", marked in every view that names it, left out of means over runs
  and not opened by default (a run written on another host is never judged by its pid);
- the served page answers its own pages only: another site's ``Origin`` (or, on loopback, another ``Host``: DNS
  rebinding) gets 403 for the page and the websocket, on 127.0.0.1 and on ::1;
- the static export is one self-contained file; a folder is refused before anything is built or written;
- a file that does not read spoils only its own run: the sections leave that run out and say so, the runs table
  names the file, and the static export exits non-zero only when a whole section could not be built;
- a folder name with path separators is its own run id, a symlinked run outside the root is named as such, and a
  ``config.json`` that is a JSON list is an error cell, not an exception.
"""

from __future__ import annotations

import http.client
import json
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS, EX_A, _eval_run, _free_port
from widgets.figures import PLOTLY_JS
from workbench.apps import cli
from workbench.dashboard import app as dash
from workbench.dashboard import failures as fq
from workbench.dashboard import queries as q
from workbench.data.example import Example
from workbench.storage.runs import STATUS, Run, list_runs, newest_run, open_run, run_status

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


def _kill(run: Run) -> None:
    """Leave ``run`` as a killed writer leaves it: the running marker written by a process that has exited since."""
    subprocess.run([sys.executable, "-c", "import sys; from workbench.storage.runs import Run; Run(sys.argv[1]).mark_running()",
                    str(run.path)], check=True, timeout=120)


@pytest.fixture()
def killed_root(tmp_path, tokenizer) -> Path:
    """GOOD: a finished eval. KILLED (newer): an eval killed after metrics.json, before features.parquet."""
    root = tmp_path / "runs"
    _eval_run(root, GOOD, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    killed = _eval_run(root, KILLED, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    (killed.path / "features.parquet").unlink()
    _kill(killed)
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


def test_a_killed_run_is_marked_everywhere_and_never_picked(tmp_path, tokenizer):
    """KILLED is newer than GOOD and its writer's process is gone: every view marks it, no mean over runs holds it,
    and the Question-by-question tab opens on GOOD."""
    from workbench.dashboard import compare_tab as ct

    root = tmp_path / "runs"
    _eval_run(root, GOOD, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"],
                                            "search_r1": ["<answer> Ada Quist </answer>"]}, "world")
    killed = _eval_run(root, KILLED, tokenizer, EX_A, {"direct": ["<answer> nobody </answer>"],
                                                        "search_r1": ["<answer> nobody </answer>"]}, "world")
    _kill(killed)
    status = run_status(killed.path)
    assert status.state == "killed" and not status.complete and "is gone" in status.note
    assert run_status(root / GOOD).state == "complete"
    assert q.runs_table(root).set_index("run_id").loc[KILLED, "status"].startswith("incomplete (killed: ")

    m = q.method_metrics(root)
    assert dict(zip(m["run_id"], m["status"])) == {GOOD: "complete", KILLED: "killed"}
    assert ct.default_pair(ct.source_options(m), ct.unfinished_runs(m)) == ((GOOD, "direct"), (GOOD, "search_r1"))
    by_run = dash.compare_figure(m, ["f1"])
    assert {x for t in by_run.data for x in t.x} == {GOOD, f"{KILLED} (killed)"}
    by_dataset = dash.compare_figure(m, ["f1"], by="dataset")  # GOOD's means alone (KILLED scored 0)
    assert [list(t.y) for t in by_dataset.data] == [[0.5], [0.5]]
    assert "1 other or unfinished left out" in by_dataset.layout.title.text

    page = dash.build_app(root)
    text = " ".join(str(getattr(o, "object", "")) for o in page.select())
    assert f"{KILLED} (killed)" in text  # the Compare tab's note
    import panel as pn

    pickers = {w.label: w for w in page.select(pn.widgets.Select)}
    assert pickers["left"].value == f"{GOOD} · direct" and f"{KILLED} (killed) · direct" in pickers["left"].options
    assert pickers["run"].value == GOOD and pickers["run"].labels == [GOOD, f"{KILLED} (killed)"]
    assert f"{KILLED}" not in ct.static_compare_html(root, m).split("</p>")[0]  # the static page's pick


def test_a_run_is_judged_by_its_process_on_its_own_host_only(killed_root):
    marker = killed_root / KILLED / STATUS
    Run(killed_root / KILLED).mark_running()  # this process: alive
    assert run_status(killed_root / KILLED).state == "running"
    written = json.loads(marker.read_text())
    marker.write_text(json.dumps({**written, "host": "elsewhere", "pid": 2**22 + 7}))  # no such pid here
    status = run_status(killed_root / KILLED)
    assert status.state == "incomplete" and "on elsewhere, or killed" in status.note
    marker.write_text(json.dumps({k: v for k, v in written.items() if k != "host"}))  # a marker naming no host
    assert run_status(killed_root / KILLED).state == "incomplete"
    marker.write_text(json.dumps({**written, "pid": 0}))  # never signals a process group
    assert run_status(killed_root / KILLED).state == "incomplete"
    marker.write_text(json.dumps({**written, "pid_start": "1"}))  # this pid, but a later process than the writer
    assert run_status(killed_root / KILLED).state == "killed"


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


def test_the_static_export_is_one_file_and_refuses_a_folder(killed_root, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    theirs = out / PLOTLY_JS
    theirs.write_text("// another plotly.min.js", encoding="utf-8")

    def no_build(*a, **k):
        raise AssertionError("built a page for a path it must refuse")

    monkeypatch.setattr(dash, "build_app", no_build)
    for bad, why in ((out, "is a folder"), (f"{out}/", "is a folder"), (tmp_path / "missing" / "d.html", "does not exist")):
        with pytest.raises(ValueError, match=why) as e:
            dash.save_static(bad, killed_root)
        assert str(bad).rstrip("/") in str(e.value) and "dashboard.html" in str(e.value)
    assert cli.main(["dashboard", "--runs", str(killed_root), "--static", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"give a file name such as {out / 'dashboard.html'}" in err
    assert not list(tmp_path.glob(PLOTLY_JS)) and not (tmp_path / "missing").exists()
    monkeypatch.undo()

    page = dash.save_static(out / "dash.html", killed_root)
    assert sorted(p.name for p in out.iterdir()) == ["dash.html", PLOTLY_JS]  # nothing else written
    assert theirs.read_text(encoding="utf-8") == "// another plotly.min.js"  # and theirs untouched
    text = page.read_text(encoding="utf-8")
    assert text.count("* plotly.js v") == 1 and f'src="{PLOTLY_JS}"' not in text  # plotly.js inlined, once
    # the opt-in (the demo's run page) loads a shared plotly.min.js only where it is the installed plotly's
    assert dash._share_plotlyjs(text, out / "dash.html") == text
    mine = tmp_path / "mine"
    mine.mkdir()
    shared = dash._share_plotlyjs(text, mine / "dash.html")
    assert "* plotly.js v" not in shared and f'src="{PLOTLY_JS}"' in shared and (mine / PLOTLY_JS).is_file()


# --------------------------------------------------------------------------- served to this machine's pages only


def _serve(host: str, root: Path):
    """The dashboard over ``root`` served on ``host`` (a free port), once it answers; skips without that loopback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip(f"no {host} loopback here")
    server = dash.serve_dashboard(root, port=port, host=host, threaded=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, port), timeout=5).close()
            return server, port
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.2)


def _get(host: str, port: int, headers: dict[str, str], path: str = "/") -> int:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _websocket(host: str, port: int, origin: str) -> str:
    """The status line of a websocket handshake to the page's session, with a session token made up by the client."""
    from bokeh.util.token import generate_jwt_token, generate_session_id

    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    token = generate_jwt_token(generate_session_id())
    with socket.create_connection((host, port), timeout=60) as s:
        s.sendall((f"GET /ws HTTP/1.1\r\nHost: {netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   f"Sec-WebSocket-Protocol: bokeh, {token}\r\nOrigin: {origin}\r\n\r\n").encode())
        return s.recv(4096).split(b"\r\n")[0].decode()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_served_dashboard_answers_its_own_pages_only(host, tmp_path):
    server, port = _serve(host, tmp_path)
    own = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    try:
        assert _get(host, port, {"Origin": "http://evil.example"}) == 403
        assert _get(host, port, {"Origin": f"http://evil.example:{port}"}) == 403
        assert _get(host, port, {"Host": f"evil.example:{port}"}) == 403  # DNS rebinding: same-origin, no Origin sent
        assert _websocket(host, port, "http://evil.example").split()[1] == "403"
        assert _websocket(host, port, "null").split()[1] == "403"
        assert _get(host, port, {"Origin": own}) == 200
        assert _get(host, port, {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}) == 200
        for name in ("[::1]", "[0:0::1]", "127.0.0.1"):  # loopback names in any form on either bind (IPv6 was a 500)
            assert _get(host, port, {"Host": f"{name}:{port}"}) == 200, name
        assert _websocket(host, port, own).split()[1] == "101"
        # Panel imports the module a component-resource URL names: one that is not loaded is a 404 (was a 500)
        for path in ("/components/..%2f..", "/components/..%2f..%2fetc%2fpasswd/x/y", "/components/antigravity/a/b"):
            assert _get(host, port, {}, path) == 404, path
    finally:
        server.stop()


def test_origins_of_a_remote_bind():
    """--allow-remote: the bound address and this machine's name on the served port, and the origins added."""
    from tornado.httputil import HTTPHeaders, HTTPServerRequest, RequestStartLine

    from workbench.dashboard.origins import ForeignRequest

    def refused(matcher, **headers):
        request = HTTPServerRequest(start_line=RequestStartLine("GET", "/", "HTTP/1.1"),
                                    headers=HTTPHeaders({"Host": "dash.lan:5006", **headers}))
        return matcher.match(request) is not None

    lan = ForeignRequest("192.168.1.5", 5006, ["https://dash.example.org"])
    assert not refused(lan, Origin="http://192.168.1.5:5006") and not refused(lan, Host="anything:5006")
    assert not refused(lan, Origin=f"http://{socket.gethostname()}:5006") and not refused(lan, Origin="https://dash.example.org")
    assert refused(lan, Origin="http://192.168.1.5:5007") and refused(lan, Origin="http://evil.example:5006")
    everywhere = ForeignRequest("::", 5006)
    assert not refused(everywhere, Origin="http://[::1]:5006") and refused(everywhere, Origin="http://evil.example:5006")
    with pytest.raises(ValueError, match="not an origin"):
        ForeignRequest("127.0.0.1", 5006, ["http://a:b"])


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


def _hostile_runs(root: Path, tokenizer) -> dict[str, str]:
    """A good eval run beside runs whose files are not what they say: metrics.json a symlink to /dev/zero (the
    static export was killed at 18.8 GB), metrics.json nested 100,000 deep (a RecursionError traceback replaced the
    page), a 300 MiB sparse metrics.jsonl, and health.jsonl a FIFO. Returns run id -> the file that is bad."""
    import os

    _eval_run(root, GOOD, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    bad = {}
    for name, what in (("20261123-120000-eval-zero", "metrics.json"), ("20261123-120100-eval-deep", "metrics.json"),
                       ("20261123-120200-train-sparse", "metrics.jsonl"), ("20261123-120300-train-fifo", "health.jsonl")):
        kind = "train" if "train" in name else "eval"
        run = Run.create(root, kind=kind, run_id=name, config={"model": "m", "kind": kind})
        target = run.path / what
        if "zero" in name:
            target.symlink_to("/dev/zero")
        elif "deep" in name:
            target.write_text('{"methods": ' + "[" * 100_000 + "]" * 100_000 + "}")
        elif "sparse" in name:
            with open(target, "wb") as f:
                f.truncate(300 << 20)
        else:
            (run.path / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
            os.mkfifo(target)
        run.mark_complete()
        bad[name] = what
    return bad


def test_hostile_run_files_cost_only_their_own_runs(tmp_path, tokenizer):
    """Every bad file is refused without being read (a device or FIFO is not a regular file, a 300 MiB file is over
    a run file's cap, a 100,000-deep nesting is too deep) and named in its run's row; the static export draws the
    good run, exits 2 with one line, and stays under 1 GB."""
    import importlib.util

    root = tmp_path / "runs"
    bad = _hostile_runs(root, tokenizer)
    runs = q.runs_table(root).set_index("run_id")
    assert runs.loc[GOOD, "error"] == "" and runs.loc[GOOD, "n_trajectories"] == 2
    assert "a device, not a run file" in runs.loc["20261123-120000-eval-zero", "error"]
    assert "nested too deep" in runs.loc["20261123-120100-eval-deep", "error"]
    assert "300 MiB, more than a JSON-lines file may hold" in runs.loc["20261123-120200-train-sparse", "error"]
    assert q.health_alarms(root).empty  # the FIFO is refused, not waited on
    spec = importlib.util.spec_from_file_location("bench_cli", Path(__file__).resolve().parents[1] / "bench" / "bench_cli.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = bench.run_child(["dashboard", "--static", str(tmp_path / "dash.html"), "--runs", str(root)])
    assert got["rc"] in (0, 2) and "Traceback" not in got["out"] and got["mb"] < 1024, (got["rc"], got["out"][-1500:])
    page = (tmp_path / "dash.html").read_text(encoding="utf-8")
    assert GOOD in page and all(name in page for name in bad)  # each bad run is listed, its file named
