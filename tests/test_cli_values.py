"""Every command's flag values are checked before its work starts: a bad port, a number that is nan or infinite, a
count below 1, an ``--out`` that is a file or cannot be written, a port another server holds. Each is one error
line naming the flag and the value, exit 2, and no traceback; the work (a model, a corpus, a server) never starts."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys

import pytest

from workbench.apps.cli import main


@pytest.fixture(autouse=True)
def no_work(monkeypatch, tmp_path):
    """Each command's work fails the test if it starts: the flags must have been refused before it."""
    import workbench.apps.cli
    import workbench.apps.demo
    import workbench.data.world
    import workbench.eval.ask
    import workbench.eval.runner
    import workbench.integrations.retrieval_server
    import workbench.integrations.verl.export
    import workbench.integrations.verl.importer
    import workbench.methods
    import workbench.regress
    from workbench.dashboard import app

    def stub(work):
        @functools.wraps(work)  # the same signature: `demo` reads its defaults from run_demo's
        def never(*args, **kwargs):
            raise AssertionError("the command started its work before its flags were checked")

        return never

    for module, name in ((app, "serve_dashboard"), (workbench.integrations.retrieval_server, "load_service"),
                         (workbench.eval.runner, "run_eval"), (workbench.eval.ask.Asker, "ask"),
                         (workbench.methods, "trainer"), (workbench.apps.demo, "run_demo"), (workbench.regress, "run_regress"),
                         (workbench.integrations.verl.export, "export_verl"),
                         (workbench.integrations.verl.importer, "import_verl"), (workbench.apps.cli, "_run_until_stopped"),
                         (workbench.data.world, "load_world")):  # load_world: expert's first step
        monkeypatch.setattr(module, name, stub(getattr(module, name)))
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("WORKBENCH_RETRIEVAL_API_KEY", raising=False)


def _refused(capsys, argv: list[str]) -> str:
    """Run the CLI on ``argv``; assert exit 2 with one error line, and return that line."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "results.txt"
    f.write_text("keep me\n")
    return f


@pytest.mark.parametrize("argv, value", [
    (["dashboard", "--port", "70000"], "70000"),
    (["dashboard", "--port", "65536"], "65536"),
    (["dashboard", "--port", "-1"], "-1"),
    (["dashboard", "--port", "http"], "http"),
    (["lab", "--port", "0"], "0"),  # Jupyter's URL is printed before it starts: a real port only
    (["lab", "--port", "65536"], "65536"),
    (["serve-retrieval", "--port", "65536"], "65536"),
    (["serve-retrieval", "--max-response-mb", "inf"], "inf"),
    (["serve-retrieval", "--idle-timeout", "inf"], "inf"),
    (["serve-retrieval", "--read-timeout", "nan"], "nan"),
    (["serve-retrieval", "--max-response-mb", "1e308"], "1e+308"),  # finite, but not as a count of bytes
    (["eval", "--method", "direct", "--temperature", "nan"], "nan"),
    (["eval", "--method", "direct", "--temperature", "inf"], "inf"),
    (["eval", "--method", "direct", "--temperature=-inf"], "-inf"),
    (["ask", "who?", "--temperature", "nan"], "nan"),
    (["demo", "--temperature", "inf"], "inf"),
    (["demo", "--limit", "0"], "0"),
    (["train", "--lr", "nan"], "nan"),
    (["train", "--reward-weights", '{"r_acc": NaN}'], "NaN"),
    (["sft", "--grad-clip", "inf"], "inf"),
    (["expert", "--method", "search_r1", "--limit", "0"], "0"),
    (["expert", "--method", "search_r1", "--max-total-tokens", "-5"], "-5"),
    (["regress", "--jobs", "0"], "0"),
    (["regress", "--cell-timeout", "-1"], "-1"),
    (["export", "verl", "--method", "search_r1", "--out", "x", "--limit", "0"], "0"),
])
def test_a_bad_value_is_one_line_naming_the_flag(capsys, argv, value):
    flag = argv[-1].split("=")[0] if argv[-1].startswith("--") else argv[-2]  # each case's bad value comes last
    line = _refused(capsys, argv)
    assert flag in line and value in line, line


@pytest.mark.parametrize("argv", [
    ["eval", "--method", "direct", "--limit", "1"],
    ["ask", "who?"],
    ["train"],
    ["sft"],
    ["expert", "--method", "search_r1"],
    ["demo"],
    ["regress"],
    ["export", "verl", "--method", "search_r1"],
    ["import", "verl", ".", "--method", "search_r1"],
])
@pytest.mark.parametrize("where", ["file", "under a file"])
def test_an_out_that_is_a_file_is_refused_before_the_work(capsys, a_file, tmp_path, argv, where):
    out = a_file if where == "file" else a_file / "runs"
    line = _refused(capsys, [*argv, "--out", str(out)])
    assert "--out" in line and str(out) in line and "not a directory" in line, line
    assert a_file.read_text() == "keep me\n" and not (tmp_path / "runs").exists()  # nothing written


def test_world_save_is_checked_like_out(capsys, a_file):
    line = _refused(capsys, ["world", "--save", str(a_file)])
    assert "--save" in line and "not a directory" in line


def test_eval_out_etc_passwd_fails_before_the_evaluation(capsys):
    line = _refused(capsys, ["eval", "--method", "direct", "--limit", "1", "--out", "/etc/passwd"])
    assert "--out" in line and "/etc/passwd" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write in any folder")
def test_an_out_that_cannot_be_written_is_refused(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = _refused(capsys, ["eval", "--method", "direct", "--out", str(locked / "runs")])
    assert "--out" in line and str(locked) in line


def test_good_values_pass(tmp_path):
    """The checks refuse only bad values: these reach the work (here the stub that fails the test on purpose)."""
    for argv in (["eval", "--method", "direct", "--temperature", "0.7", "--out", str(tmp_path / "new" / "runs")],
                 ["dashboard", "--port", "0"]):
        with pytest.raises(AssertionError, match="before its flags were checked"):
            main(argv)


@pytest.fixture
def taken():
    """A port another server listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


@pytest.mark.parametrize("command", [["dashboard"], ["serve-retrieval"], ["lab"]])
def test_a_port_in_use_is_named_before_anything_loads(capsys, taken, command):
    line = _refused(capsys, [*command, "--port", str(taken)])
    assert f"127.0.0.1:{taken}" in line and "--port" in line, line


@pytest.mark.parametrize("argv, flag", [
    (["eval", "--method", "direct", "--limit", "1", "--out", "/etc/passwd"], "--out"),
    (["eval", "--method", "direct", "--limit", "1", "--temperature", "nan"], "--temperature"),
    (["dashboard", "--port", "70000"], "--port"),
    (["serve-retrieval", "--idle-timeout", "inf"], "--idle-timeout"),
])
def test_the_command_line_prints_no_traceback(tmp_path, argv, flag):
    """The real entry point, in a process of its own: exit 2, one error line, no run written (the timeout is only a
    guard against a command that went on to its work)."""
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and flag in errors[0], r.stderr
    assert not (tmp_path / "runs").exists()


def test_allow_origin_reaches_the_dashboards_origin_check(capsys, monkeypatch):
    """``--allow-origin`` is handed to the served dashboard's origin check; a malformed one is refused first."""
    from workbench.dashboard import app

    line = _refused(capsys, ["dashboard", "--port", "0", "--allow-origin", "http://a:b"])
    assert "not an origin" in line and "http://a:b" in line, line
    seen = {}
    monkeypatch.setattr(app, "serve_dashboard", lambda *a, **kw: seen.update(kw))
    assert main(["dashboard", "--port", "0", "--allow-origin", "https://dash.example.org", "--allow-origin",
                 "http://box:8080"]) == 0
    assert seen["allowed_origins"] == ["https://dash.example.org", "http://box:8080"]
