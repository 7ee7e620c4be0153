"""Where the workbench keeps caches and runs. Read from the environment at call time."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Cache root: ``$WORKBENCH_CACHE`` or ``~/.cache/workbench`` (created on demand)."""
    root = Path(os.environ.get("WORKBENCH_CACHE") or "~/.cache/workbench").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def runs_dir() -> Path:
    """Default runs root: ``$WORKBENCH_RUNS``, else ``runs/`` in the source checkout, else ``./runs``."""
    env = os.environ.get("WORKBENCH_RUNS")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    return root / "runs" if (root / "pyproject.toml").exists() else Path("runs")


def repo_root() -> Path:
    """The source checkout (parent of the ``workbench`` package)."""
    return Path(__file__).resolve().parents[2]  # workbench/util/paths.py


def samples_dir() -> Path:
    """``data/samples`` in the checkout: small samples of public benchmark files in their published layouts."""
    return repo_root() / "data" / "samples"
