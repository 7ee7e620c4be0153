"""Run directories: ``runs/<run_id>/`` with ``config.json``, ``trajectories.parquet``,
``metrics.json`` (and ``examples.jsonl``, ``metrics.jsonl``, ``figures/`` where used).

Every file is written atomically (temp file + rename), so a crash never leaves a half
file that the notebooks or the dashboard would read.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from workbench.data.example import Example, load_examples, save_examples
from workbench.io import atomic_write_json, atomic_write_text, remove_stale_temp_files
from workbench.paths import runs_dir
from workbench.trajectory import Trajectory, load_trajectories, save_trajectories

CONFIG, TRAJECTORIES, METRICS, EXAMPLES, STEP_METRICS = (
    "config.json",
    "trajectories.parquet",
    "metrics.json",
    "examples.jsonl",
    "metrics.jsonl",
)


def new_run_id(kind: str = "run", name: str | None = None) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", name or kind).strip("-") or "run"
    return f"{stamp}-{label}-{secrets.token_hex(4)}"


class Run:
    """A run directory. Create with :meth:`create`, open with :func:`open_run`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @property
    def id(self) -> str:
        return self.path.name

    @classmethod
    def create(
        cls, root: str | os.PathLike | None = None, kind: str = "run", name: str | None = None,
        config: dict[str, Any] | None = None, run_id: str | None = None,
    ) -> Run:
        root = Path(root) if root is not None else runs_dir()
        root.mkdir(parents=True, exist_ok=True)
        if run_id is not None:
            path = root / run_id
            path.mkdir(parents=True, exist_ok=True)
        else:  # unique under concurrency: mkdir is atomic, so a taken id is retried with a new random part
            for _ in range(100):
                path = root / new_run_id(kind, name)
                try:
                    path.mkdir()
                    break
                except FileExistsError:
                    continue
            else:  # pragma: no cover - 100 collisions of 32 random bits
                raise FileExistsError(f"could not create a new run directory under {root}")
        run = cls(path)
        run.write_config({"kind": kind, "created": _dt.datetime.now().isoformat(timespec="seconds"), **(config or {})})
        return run

    # ------------------------------------------------------------------ files
    def file(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        return (self.path / name).exists()

    @property
    def figures_dir(self) -> Path:
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_config(self, config: dict[str, Any]) -> Path:
        return atomic_write_json(self.path / CONFIG, config)

    def update_config(self, **kv: Any) -> Path:
        return self.write_config({**self.config, **kv})

    @property
    def config(self) -> dict[str, Any]:
        return _read_json(self.path / CONFIG)

    def write_trajectories(self, trajs: list[Trajectory], name: str = TRAJECTORIES, **kw: Any) -> Path:
        """Write the trajectories, then their word index for full-text search (``workbench.text_index``)."""
        from workbench.text_index import ensure_index

        path = save_trajectories(trajs, self.path / name, **kw)
        ensure_index(path)  # None (search scans) when it cannot be written
        return path

    def trajectories(self, name: str = TRAJECTORIES) -> list[Trajectory]:
        return load_trajectories(self.path / name)

    def trajectories_frame(self, name: str = TRAJECTORIES, columns: list[str] | None = None):
        """The trajectories table as a pandas DataFrame (flat columns; cheap for big runs)."""
        import pyarrow.parquet as pq

        return pq.read_table(self.path / name, columns=columns).to_pandas()

    def write_examples(self, examples: list[Example]) -> Path:
        return save_examples(examples, self.path / EXAMPLES)

    def examples(self) -> list[Example]:
        return load_examples(self.path / EXAMPLES)

    def write_metrics(self, metrics: dict[str, Any], name: str = METRICS) -> Path:
        return atomic_write_json(self.path / name, metrics)

    def metrics(self, name: str = METRICS) -> dict[str, Any]:
        return _read_json(self.path / name)

    def append_step_metrics(self, row: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (rewritten atomically)."""
        p = self.path / STEP_METRICS
        old = p.read_text(encoding="utf-8") if p.exists() else ""
        atomic_write_text(p, old + json.dumps(row, ensure_ascii=False, default=float) + "\n")

    def step_metrics(self) -> list[dict[str, Any]]:
        p = self.path / STEP_METRICS
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (is {path.parent} a run directory?)")
    return json.loads(path.read_text(encoding="utf-8"))


def open_run(path_or_id: str | os.PathLike | Run, root: str | os.PathLike | None = None) -> Run:
    """Open a run by path, or by id under ``root`` (default ``runs/``)."""
    if isinstance(path_or_id, Run):
        return path_or_id
    p = Path(path_or_id)
    if not (p / CONFIG).exists():
        p = Path(root if root is not None else runs_dir()) / str(path_or_id)
    if not (p / CONFIG).exists():
        raise FileNotFoundError(f"no run at {path_or_id!r} (looked for {CONFIG} in {p})")
    remove_stale_temp_files(p)  # a killed writer's half files; readers never open them anyway
    return Run(p)


def list_runs(root: str | os.PathLike | None = None) -> list[Run]:
    """Run directories under ``root`` (those with a config.json), newest first."""
    root = Path(root if root is not None else runs_dir())
    if not root.exists():
        return []
    runs = [Run(p) for p in root.iterdir() if (p / CONFIG).exists()]
    return sorted(runs, key=lambda r: r.path.name, reverse=True)
