"""What the command line costs before it says anything: CPU-seconds and peak memory of ``workbench --help``, each
command's ``--help`` and some flag errors, each in a fresh process, against the interpreter's own floor (``python -c
"import argparse"``) and, with ``--before REV``, the same commands at another commit (a git worktree of it).

    .venv/bin/python bench/bench_cli.py [--before 92094e5] [--reps 3]

CPU time (user + system, the child's own) is what is compared: on a shared machine wall time says more about the
neighbours than about the command. Peak memory is the child's VmHWM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time, contextlib, io
root, argv = sys.argv[1], json.loads(sys.argv[2])
if root:  # another checkout's workbench, not the editable install's
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, root)
t = time.process_time()
if argv is None:
    import argparse
    rc = 0
else:
    from workbench.apps.cli import main
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code
# VmHWM: this process's own peak (ru_maxrss carries the parent's peak across exec on Linux)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
mb = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rc": rc, "cpu": time.process_time(), "mb": mb, "out": "" if argv is None else out.getvalue(),
                  "heavy": sorted(m for m in json.loads(sys.argv[3]) if m in sys.modules)}))
"""
#: modules no help or flag error should need (tests/test_cli_fast.py names the one that sneaks back)
HEAVY = ("torch", "transformers", "peft", "panel", "bokeh", "pandas", "pyarrow", "duckdb", "chromadb", "bm25s",
         "sentence_transformers", "papermill", "plotly")


def run_child(argv: list[str] | None, root: str = "") -> dict:
    """One command in a fresh process: its exit status, CPU-s, peak MB, output and the heavy modules it loaded."""
    done = subprocess.run([sys.executable, "-c", CHILD, root, json.dumps(argv), json.dumps(HEAVY)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"workbench {argv}: the child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])

COMMANDS = [["--help"], ["methods", "--help"], ["train", "--help"], ["eval", "--help"], ["dashboard", "--port", "70000"],
            ["train", "--steps", "0"], ["eval", "--method", "direct", "--limit", "0"], ["methods"]]


def measure(argv: list[str] | None, root: str, reps: int) -> dict:
    runs = [run_child(argv, root) for _ in range(reps)]
    return {"cpu": statistics.median(r["cpu"] for r in runs), "mb": max(r["mb"] for r in runs),
            "heavy": runs[-1]["heavy"], "rc": runs[-1]["rc"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=None, metavar="REV", help="also measure the CLI at this commit")
    ap.add_argument("--reps", type=int, default=3, help="runs per command; the median CPU time is reported")
    args = ap.parse_args()
    flags = sorted({w for w in Path("/proc/cpuinfo").read_text().split() if w in ("avx2", "avx512f", "avx512_bf16")})
    print(f"{platform.machine()} {' '.join(flags)}, Python {platform.python_version()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    worktree = None
    if args.before:
        worktree = tempfile.mkdtemp(prefix="cli-before-")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", worktree, args.before], cwd=ROOT, check=True)
    try:
        floor = measure(None, "", args.reps)
        print(f"\ninterpreter floor (python -c 'import argparse'): {floor['cpu']:.2f} CPU-s, {floor['mb']:.0f} MB\n")
        print("| command | CPU-s | MB | heavy modules loaded |" + (f" CPU-s at {args.before} | MB at {args.before} |"
                                                                  if worktree else ""))
        print("|---|---:|---:|---|" + ("---:|---:|" if worktree else ""))
        for argv in COMMANDS:
            now = measure(argv, "", args.reps)
            line = (f"| `workbench {' '.join(argv)}` | {now['cpu']:.2f} | {now['mb']:.0f} | "
                    f"{', '.join(now['heavy']) or 'none'} |")
            if worktree:
                old = measure(argv, worktree, args.reps)
                line += f" {old['cpu']:.2f} | {old['mb']:.0f} |"
            print(line, flush=True)
    finally:
        if worktree:
            subprocess.run(["git", "worktree", "remove", "--force", worktree], cwd=ROOT)
            shutil.rmtree(worktree, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
