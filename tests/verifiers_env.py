"""``.venv-verifiers`` for the tests that run verifiers' own code (``make verifiers-env``; verifiers 0.4.0 wants
openai>=2.54, mcp==2.0.0 and a newer pydantic than the main environment's, so it lives in its own venv).
``make test`` builds it first; run by hand without it, these tests skip, saying how to build it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# absolute: `make test` passes the Makefile's relative `.venv-verifiers`, and the tests run it from other folders
VERIFIERS_VENV = ROOT / os.environ.get("WORKBENCH_VERIFIERS_VENV", ".venv-verifiers")
VERIFIERS_PYTHON = VERIFIERS_VENV / "bin" / "python"
VF_EVAL = VERIFIERS_VENV / "bin" / "vf-eval"
STAMP = VERIFIERS_VENV / ".workbench-verifiers-setup"
KEY_VAR = "WORKBENCH_VF_TEST_KEY"

requires_verifiers_env = pytest.mark.skipif(
    not (VERIFIERS_PYTHON.exists() and STAMP.exists()),
    reason=f"needs verifiers' own environment {VERIFIERS_VENV} (build it with `make verifiers-env`)",
)


def vf_eval(package: str, export_dir: Path, base_url: str, model: str, out: Path, n: int,
            timeout: float = 900, *extra: str) -> subprocess.CompletedProcess:
    """verifiers' own evaluation (``vf-eval``) of the exported ``package`` against ``base_url``, greedy, ``n``
    questions once each, into ``out/<package>/traces.jsonl``; output captured."""
    env = {**os.environ, "PYTHONPATH": str(export_dir), KEY_VAR: "EMPTY", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    cmd = [str(VF_EVAL), package, "--model", model, "--client.base-url", base_url, "--client.api-key-var", KEY_VAR,
           "-n", str(n), "-r", "1", "-c", "2", "--no-push", "--no-rich", "--sampling.temperature", "0",
           "-o", str(out), "--run.name", package, *extra]
    return subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=timeout)


def run_in_verifiers(python: Path, args: list[str], export_dir: Path, timeout: float = 300,
                     also: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """``.venv-verifiers/bin/python ARGS`` in ``export_dir``, with it (and the exports ``also``) on the path; output
    captured."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (export_dir, *also))), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.run([str(python), *args], cwd=export_dir, env=env, capture_output=True, text=True,
                          timeout=timeout)
