"""``.venv-verl`` for the tests that run verl's own classes (``make verl-env``; verl pins ``transformers<5.11``,
older than the main environment's, so it lives in its own venv). ``make test`` builds it first; run by hand
without it, these tests skip, saying how to build it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERL_VENV = Path(os.environ.get("WORKBENCH_VERL_VENV", ROOT / ".venv-verl"))
VERL_PYTHON = VERL_VENV / "bin" / "python"
STAMP = VERL_VENV / ".workbench-verl-setup"

requires_verl_env = pytest.mark.skipif(
    not (VERL_PYTHON.exists() and STAMP.exists()),
    reason=f"needs verl's own environment {VERL_VENV} (build it with `make verl-env`: verl pins transformers<5.11)",
)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONWARNINGS": "ignore", **extra}


def run_in_env(python: Path, args: list[str], timeout: float, **extra_env: str) -> subprocess.CompletedProcess:
    """Run ``PYTHON ARGS`` (another environment's interpreter) at the repository root, one thread, offline;
    output captured."""
    return subprocess.run([str(python), *args], cwd=ROOT, env=_env(**extra_env), capture_output=True, text=True,
                          timeout=timeout)


def start_in_env(python: Path, args: list[str], log: Path, **extra_env: str) -> subprocess.Popen:
    """:func:`run_in_env` without waiting, its output to the file ``log`` (a pipe nobody reads would fill and stall
    it): the caller works beside it, then ``wait(timeout=...)``."""
    with open(log, "w", encoding="utf-8") as f:
        return subprocess.Popen([str(python), *args], cwd=ROOT, env=_env(**extra_env), stdout=f,
                                stderr=subprocess.STDOUT, text=True)


def run_in_verl(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``.venv-verl/bin/python ARGS`` (:func:`run_in_env`)."""
    return run_in_env(VERL_PYTHON, args, timeout)
