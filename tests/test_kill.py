"""Runs are never lost (invariant 6): ``kill -9`` an eval and a training run at random (seeded) moments;
every file left in the run directory opens, leftover ``.*.tmp`` files are ignored by readers and removed by
``open_run`` once stale, and ``workbench train --resume`` continues from the newest checkpoint.

Each kill must land while the command runs (the training run's between two checkpoints, before its last).
Bounded: two eval kills, two training kills and one resumed step (under a minute on one thread). The training
run is tiny and cheap on purpose: the random-init model of the default architecture (``tiny_model``: what is
checked is the run's files and the resume, not what it learns), the ``direct`` protocol (short prompts), the
``dspo`` reward (no encoder) and ``kl_coef`` 0 (no reference pass), with more steps than any kill window allows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SEED = 12
CLI = [sys.executable, "-m", "workbench"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
       "HF_HUB_OFFLINE": "1"}
# more work than the kill windows below allow, so every kill lands while the command runs (asserted)
EVAL = ["eval", "--method", "direct", "--limit", "60", "--no-progress"]
TRAIN = ["train", "--steps", "400", "--questions-per-step", "2", "--group-size", "2", "--max-new-tokens", "16",
         "--max-turns", "2", "--save-every", "1", "--protocol", "direct", "--reward", "dspo",
         "--loss-overrides", '{"kl_coef": 0}', "--no-progress"]


def start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(CLI + args, env=ENV, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def kill9(proc: subprocess.Popen, log: Path) -> None:
    """``kill -9`` the command's process and reap it; fails if it had already ended (the kill did not land mid-run)."""
    assert proc.poll() is None, f"the command ended (exit {proc.returncode}) before the kill: " + log.read_text(
        errors="replace")[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def wait_for(cond, proc: subprocess.Popen, timeout_s: float) -> bool:
    """Poll ``cond()`` until it holds, the process ends, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc.poll() is not None:
            return cond()
        time.sleep(0.2)
    return False


def is_temp(p: Path) -> bool:
    """An atomic writer's temp file (``.<name>.*.tmp``) or a checkpoint being written (``step_<n>.tmp/``)."""
    return p.name.endswith(".tmp")


def check_files_open(run_dir: Path) -> list[Path]:
    """Open every file of a run directory by its kind (temp files aside, returned)."""
    import pyarrow.parquet as pq
    from safetensors import safe_open

    temps = []
    for p in sorted(run_dir.rglob("*")):
        if any(is_temp(q) for q in (p, *p.relative_to(run_dir).parents) if q.name):
            temps.append(p)
            continue
        if not p.is_file():
            continue
        if p.suffix == ".json":
            json.loads(p.read_text(encoding="utf-8"))
        elif p.suffix == ".jsonl":
            for line in p.read_text(encoding="utf-8").splitlines():
                json.loads(line)
        elif p.suffix == ".parquet":
            pq.read_table(p)
        elif p.suffix == ".safetensors":
            with safe_open(str(p), framework="pt") as f:
                list(f.keys())
        else:
            p.read_text(encoding="utf-8")
    return temps


def check_run(run_dir: Path) -> None:
    """Every file opens, and the run reads through ``workbench.storage.runs`` (temp files ignored)."""
    from workbench.storage.runs import open_run

    check_files_open(run_dir)
    run = open_run(run_dir)
    for name, read in (("config.json", lambda: run.config), ("metrics.json", run.metrics),
                       ("trajectories.parquet", run.trajectories), ("examples.jsonl", run.examples)):
        if (run_dir / name).exists():
            read()


def runs_in(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def test_killed_eval_leaves_only_readable_files(tmp_path):
    rng = random.Random(SEED)
    for k in range(2):
        root = tmp_path / f"eval{k}"
        log = tmp_path / f"eval{k}.log"
        proc = start([*EVAL, "--out", str(root)], log)
        time.sleep(rng.uniform(2.0, 12.0))  # while the model loads or the eval runs (it writes its files at its end)
        kill9(proc, log)
        for run_dir in runs_in(root):
            check_run(run_dir)


def test_killed_training_resumes_from_its_newest_checkpoint(tmp_path, tiny_model):
    from workbench.rl.checkpoint import latest_checkpoint
    from workbench.storage.runs import open_run

    train = [*TRAIN, "--model", tiny_model]
    rng = random.Random(SEED + 1)
    # a kill at a random early moment (loading, the first steps' rollouts and updates)
    root = tmp_path / "early"
    proc = start([*train, "--out", str(root)], tmp_path / "early.log")
    time.sleep(rng.uniform(2.0, 15.0))
    kill9(proc, tmp_path / "early.log")
    for run_dir in runs_in(root):
        check_run(run_dir)

    # a kill at a random moment after the first checkpoint
    root = tmp_path / "late"
    log = tmp_path / "late.log"
    proc = start([*train, "--out", str(root)], log)
    has_checkpoint = lambda: any(latest_checkpoint(d) is not None for d in runs_in(root))  # noqa: E731
    assert wait_for(has_checkpoint, proc, 240), log.read_text(errors="replace")[-3000:]
    time.sleep(rng.uniform(0.0, 8.0))
    kill9(proc, log)
    (run_dir,) = runs_in(root)
    check_run(run_dir)
    ck = latest_checkpoint(run_dir)
    done = int(ck.name.split("_")[-1])
    assert 1 <= done < int(TRAIN[TRAIN.index("--steps") + 1])  # killed between two checkpoints, before the last

    # leftover temp files of a killed writer: readers ignore them; open_run removes the stale ones
    stale, fresh = run_dir / ".trajectories.parquet.k1ll.tmp", run_dir / ".metrics.json.k2ll.tmp"
    stale.write_bytes(b"PAR1 truncated")
    fresh.write_text('{"half": ', encoding="utf-8")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    run = open_run(run_dir)
    assert not stale.exists() and fresh.exists()
    assert run.config["kind"] == "train" and latest_checkpoint(run_dir) == ck

    # resume: continues at the checkpoint's step and does one more step
    out = subprocess.run([*CLI, "train", "--resume", str(run_dir), "--steps", str(done + 1)],  # progress: says "resumed"
                         env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "resumed " in out.stdout and f"at step {done} from {ck.name}" in out.stdout, out.stdout
    steps = [r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if "reward_mean" in r]
    assert steps == list(range(1, done + 2))  # what the killed run logged past its checkpoint is redone once
    assert latest_checkpoint(run_dir).name == f"step_{done + 1:06d}"
    assert open_run(run_dir).metrics()["steps"] == done + 1
    check_run(run_dir)
