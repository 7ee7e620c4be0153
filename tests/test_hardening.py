"""Runs are never lost, nothing unsafe is loaded, bad input is one clear line."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from workbench.apps.cli import main
from workbench.core.models import ModelNotFound, load_policy, resolve_device, resolve_model_path
from workbench.storage.runs import Run, open_run
from workbench.util.io import atomic_path, atomic_write_text


def test_atomic_files_get_the_usual_mode(tmp_path):
    old = os.umask(0o022)
    try:
        p = atomic_write_text(tmp_path / "a.json", "{}")
        with atomic_path(tmp_path / "b.parquet") as tmp:
            tmp.write_bytes(b"x")
    finally:
        os.umask(old)
    for f in (p, tmp_path / "b.parquet"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644


def test_a_failed_atomic_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "c.parquet") as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_leftover_temp_files_are_removed_on_open(tmp_path):
    run = Run.create(tmp_path, kind="eval", name="x")
    stale = run.path / ".trajectories.parquet.abc123.tmp"
    fresh = run.path / ".metrics.json.def456.tmp"
    stale.write_bytes(b"PAR1 half")
    fresh.write_bytes(b"{")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    open_run(run.path)
    assert not stale.exists()
    assert fresh.exists()  # maybe a write in progress: never touched


def test_run_ids_are_unique_under_concurrency(tmp_path):
    made, errors = [], []

    def worker():
        try:
            for _ in range(150):
                made.append(Run.create(tmp_path, kind="eval", name="same").path)
        except Exception as e:  # pragma: no cover - the failure this test would catch
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(made)) == len(made) == 1200


def test_model_paths_and_devices_fail_in_one_line(tmp_path):
    with pytest.raises(ModelNotFound, match="no such file or directory"):
        resolve_model_path("/nonexistent/dir")
    with pytest.raises(ModelNotFound, match="not on this machine") as e:
        load_policy("SomeOrg/not-cached-model-xyz")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no CUDA device"):
        if __import__("torch").cuda.is_available():
            pytest.skip("this machine has CUDA")
        resolve_device("cuda")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_pickle_weights_are_refused_unless_opted_in(tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.core.models import load_tokenizer

    cfg = LlamaConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    d = tmp_path / "bin-only"
    d.mkdir()
    cfg.save_pretrained(d)
    torch.save(LlamaForCausalLM(cfg).state_dict(), d / "pytorch_model.bin")  # the legacy pickle layout
    load_tokenizer("smollm2-135m").save_pretrained(d)
    assert (d / "pytorch_model.bin").exists() and not list(d.glob("*.safetensors"))
    with pytest.raises(ModelNotFound, match="pickle weights"):
        load_policy(str(d), device="cpu")
    model, _ = load_policy(str(d), device="cpu", allow_pickle=True)
    assert isinstance(model, torch.nn.Module)


@pytest.mark.parametrize("argv, says", [
    (["eval", "--method", "direct", "--limit", "1", "--model", "/nonexistent/dir"], "no such file or directory"),
    (["eval", "--method", "direct", "--limit", "1", "--model", "Qwen/Qwen2.5-0.5B-Instruct"], "not on this machine"),
    (["dashboard", "--runs", "/nonexistent", "--static", "x.html"], "no such folder"),
    (["train", "--config", os.path.dirname(__file__)], "is a directory, not a file"),
])
def test_cli_errors_are_one_line_with_exit_2(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_dashboard_accepts_ipv6_loopback():
    import socket
    import urllib.request

    from workbench.dashboard.app import check_host, serve_dashboard

    check_host("::1", allow_remote=False)
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError as e:  # pragma: no cover - a machine without IPv6
        pytest.skip(f"no IPv6 loopback here: {e}")
    server = serve_dashboard(None, port=port, host="::1", threaded=True)
    try:
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://[::1]:{port}/", timeout=30) as r:
                    assert r.status == 200
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the dashboard on [::1] never answered")
    finally:
        server.stop()


def test_read_jsonl_skips_and_counts_bad_lines_and_never_raises(tmp_path):
    from workbench.dashboard.queries import read_step_metrics
    from workbench.util.io import read_jsonl

    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"step": 1, "loss": 0.5}\n\nnot json\n[1, 2]\n{"step": 2, "note": "\xff\xfe"}\n')
    rows, bad = read_jsonl(p)
    assert [r["step"] for r in rows] == [1, 2] and bad == 2 and rows[1]["note"] == "\ufffd\ufffd"
    assert read_jsonl(p, keep=lambda r: isinstance(r, dict) and "loss" in r) == ([{"step": 1, "loss": 0.5}], 3)
    assert read_step_metrics(p) == (rows, "metrics.jsonl: 2 unreadable line(s)")


def test_file_lock_makes_another_process_wait(tmp_path):
    import subprocess
    import sys
    import time

    from workbench.util.io import file_lock

    lock = tmp_path / "cache" / ".entry.lock"  # its folder is made
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom workbench.util.io import file_lock\n"
                               f"with file_lock({str(lock)!r}):\n    print('held', flush=True)\n    time.sleep(1.5)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.perf_counter()
    with file_lock(lock):
        waited = time.perf_counter() - t0
    holder.wait(timeout=30)
    assert waited > 0.5  # the holder had it for 1.5 s
    with file_lock(lock), file_lock(tmp_path / "other.lock"):  # another path: no wait
        pass
