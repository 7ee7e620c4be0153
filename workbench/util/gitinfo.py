"""Which code made a file: the git commit of the checkout and whether its tree had uncommitted changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def code_version(repo: str | os.PathLike | None = None) -> dict[str, str | bool | None]:
    """``{"commit", "dirty"}`` of ``repo`` (default: this package's checkout); both None outside a git checkout."""
    cwd = Path(repo) if repo else Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "--short=12", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
