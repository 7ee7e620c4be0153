"""Run directories: ``runs/<run_id>/`` with ``config.json``, ``trajectories.parquet``,
``metrics.json`` (and ``examples.jsonl``, ``metrics.jsonl``, ``figures/`` where used).

Every file is written atomically (temp file + rename), so a crash never leaves a half
file that the notebooks or the dashboard would read. A run is complete only when its writer
finished: ``status.json`` says ``{"state": "running", ...}`` from :meth:`Run.create` on and is
replaced (atomically, last) by ``{"state": "complete", "kind", "finished"}`` by
:meth:`Run.mark_complete` (as Inspect marks a log complete only when it is closed). A run killed
half-way keeps ``running``; one whose writer raised says ``failed`` with the error and the step
(:meth:`Run.mark_failed`); :attr:`Run.status` says so, and :func:`list_runs` puts complete runs
first, so ``list_runs()[0]`` is the newest complete run. The ``running`` marker names its writer (pid, host
and, on Linux, the process's start time), so a reader on the same host tells a run still being written
(state ``running``) from one whose writer is gone (``killed``); a run written on another host stays
"still running, or killed". Runs written before the marker existed have no ``status.json``: they count
as complete when they hold their kind's files (``LEGACY_FILES``), and the note says the marker is missing.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.trajectory import Trajectory, load_trajectories, save_trajectories
from workbench.data.example import Example, load_examples, save_examples
from workbench.util.io import (
    atomic_write_json,
    atomic_write_text,
    read_json,
    read_jsonl,
    read_text_bounded,
    remove_stale_temp_files,
)
from workbench.util.paths import runs_dir

CONFIG, TRAJECTORIES, METRICS, EXAMPLES, STEP_METRICS, STATUS = (
    "config.json",
    "trajectories.parquet",
    "metrics.json",
    "examples.jsonl",
    "metrics.jsonl",
    "status.json",
)
RUNNING, COMPLETE, KILLED, INCOMPLETE, FAILED = "running", "complete", "killed", "incomplete", "failed"
#: Files a run from before ``status.json`` must hold to count as complete, by kind (other kinds: none).
LEGACY_FILES = {"eval": (TRAJECTORIES, METRICS), "expert": (TRAJECTORIES, METRICS), "train": (METRICS,),
                "sft": (METRICS,)}


@dataclass(frozen=True)
class RunStatus:
    """Whether a run's writer finished, and a note saying why not (or that the marker is missing)."""

    complete: bool
    note: str = ""
    """"" for a run with a completion marker; else one line for the dashboard and error messages."""
    state: str = ""
    """``complete``; ``running`` (its writer's process is alive on this host); ``killed`` (its writer's process on
    this host is gone and the run unfinished); or ``incomplete`` (unfinished, and whether its writer lives cannot be
    told: another host, no process recorded, a damaged marker). Left empty: ``complete`` or ``incomplete``."""

    def __post_init__(self) -> None:
        if not self.state:
            object.__setattr__(self, "state", COMPLETE if self.complete else INCOMPLETE)

    def __str__(self) -> str:
        return ("complete" if self.complete else "incomplete") + (f" ({self.note})" if self.note else "")


#: The longest label a run id carries: the id (``<stamp>-<label>-<8 hex>``) is a folder name, which most file systems
#: cap at 255 bytes.
MAX_RUN_LABEL = 200


def run_label(name: str) -> str:
    """The label a run named ``name`` gets in its id (characters a folder name keeps, ``-`` for the others), or a
    ``ValueError`` naming it when it is longer than :data:`MAX_RUN_LABEL`: the folder could not be made, and an eval
    makes it after its work."""
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    if len(label) > MAX_RUN_LABEL:
        raise ValueError(f"run name {name[:40]!r}... is {len(label)} characters; a run id's label holds at most "
                         f"{MAX_RUN_LABEL}: give a shorter --name")
    return label


def new_run_id(kind: str = "run", name: str | None = None) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{run_label(name or kind)}-{secrets.token_hex(4)}"


WRITER_LOCK = ".writer.lock"
"""A run's writer lock file (:meth:`Run.take_writer_lock`); empty, and never a run file readers open."""


class RunBusyError(ValueError):
    """Another live process is writing this run."""


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
        run.mark_running()
        run.write_config({"kind": kind, "created": _dt.datetime.now().isoformat(timespec="seconds"), **(config or {})})
        return run

    # ------------------------------------------------------------------ completion
    def take_writer_lock(self) -> None:
        """Hold the run's writer lock (``.writer.lock``, an exclusive ``flock``) for as long as this ``Run`` lives, or
        raise ``RunBusyError`` naming the process that holds it. The system drops the lock when its holder exits, a
        killed one included, so a stale lock cannot outlive its writer. A trainer takes it before it writes, so a
        second ``train --resume`` of a run that is still training is refused instead of logging its steps twice."""
        if getattr(self, "_writer_lock", None) is not None:
            return
        import fcntl

        fd = os.open(self.path / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            status = _read_json(self.path / STATUS) if (self.path / STATUS).exists() else {}
            who = (f"process {status.get('pid')} on {status.get('host')}, started {status.get('started')}"
                   if status.get("pid") else "another process")
            raise RunBusyError(f"{self.path} is being written by {who}: wait for it to finish or stop it (a second "
                               "writer would log its steps twice and overwrite its checkpoints)") from None
        self._writer_lock = fd

    def release_writer_lock(self) -> None:
        fd = getattr(self, "_writer_lock", None)
        if fd is not None:
            self._writer_lock = None
            os.close(fd)  # closing the descriptor drops the flock

    def mark_running(self) -> Path:
        """Say the run is being written (by :meth:`create`, and by a trainer that resumes it)."""
        pid = os.getpid()
        writer = {"pid": pid, "host": socket.gethostname(), "pid_start": _process_start(pid)}
        return atomic_write_json(self.path / STATUS, {"state": RUNNING, "started": _now(),
                                                      **{k: v for k, v in writer.items() if v is not None}})

    def mark_complete(self, **info: Any) -> Path:
        """Say the run is complete: call it last, after every other file of the run is written."""
        kind = _read_json(self.path / CONFIG).get("kind") if (self.path / CONFIG).exists() else None
        return atomic_write_json(self.path / STATUS, {"state": COMPLETE, "kind": kind, "finished": _now(), **info})

    def mark_failed(self, error: BaseException | str, **info: Any) -> Path:
        """Say the run's writer stopped on ``error`` (an exception, or Ctrl-C): the run is unfinished, and the views say
        why instead of "killed" or "still running". A resume marks it running again."""
        if isinstance(error, KeyboardInterrupt):
            why = "interrupted (Ctrl-C)"
        elif isinstance(error, BaseException):
            why = f"{type(error).__name__}: {error}"
        else:
            why = str(error)
        return atomic_write_json(self.path / STATUS, {"state": FAILED, "error": why.splitlines()[0][:300] if why else "",
                                                      "failed": _now(), **info})

    @property
    def status(self) -> RunStatus:
        return run_status(self.path)

    @property
    def complete(self) -> bool:
        return self.status.complete

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
        """Write the trajectories, then their word index for full-text search (``workbench.storage.text_index``)."""
        from workbench.storage.text_index import ensure_index

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
        self.append_line(STEP_METRICS, row)

    def append_line(self, name: str, row: dict[str, Any]) -> None:
        """Append one JSON line to the run's file ``name`` (``metrics.jsonl``, ``health.jsonl``; rewritten
        atomically, so a kill never leaves half a line)."""
        p = self.path / name
        old = read_text_bounded(p) if p.exists() else ""
        atomic_write_text(p, old + json.dumps(row, ensure_ascii=False, default=float) + "\n")

    def step_metrics(self) -> list[dict[str, Any]]:
        """The rows of ``metrics.jsonl`` (a line that does not read is skipped; a file that is not one this
        workbench wrote, e.g. a symlink to a device or a sparse giant, raises a ``ValueError`` naming it)."""
        p = self.path / STEP_METRICS
        if not p.exists():
            return []
        return read_jsonl(p)[0]


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


def run_status(path: str | os.PathLike) -> RunStatus:
    """The :class:`RunStatus` of the run directory ``path`` (never raises for a bad ``status.json``)."""
    p = Path(path)
    try:
        status = read_json(p / STATUS)
    except FileNotFoundError:
        status = None
    except (OSError, ValueError) as e:
        return RunStatus(False, f"{STATUS} unreadable ({type(e).__name__})")
    if status is None:  # a run from before the marker: judged by its files
        try:
            kind = read_json(p / CONFIG).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        missing = [f for f in LEGACY_FILES.get(str(kind), ()) if not (p / f).exists()]
        if missing:
            return RunStatus(False, f"no completion marker and no {', '.join(missing)}")
        return RunStatus(True, f"no completion marker ({STATUS}): written before markers; it has its files")
    if not isinstance(status, dict):
        return RunStatus(False, f"{STATUS} is not a JSON object")
    if status.get("state") == COMPLETE:
        return RunStatus(True)
    if status.get("state") == FAILED:
        step = status.get("step")
        at = f" at step {step}" if isinstance(step, int) and not isinstance(step, bool) else ""
        return RunStatus(False, f"failed{at}: {str(status.get('error') or 'no error recorded')[:300]}", FAILED)
    started = status.get("started")
    if not started:
        return RunStatus(False, f"{STATUS} says {str(status.get('state'))[:40]!r}")
    pid, host, here = status.get("pid"), str(status.get("host") or "")[:80], socket.gethostname()
    since = f"started {started} and never marked complete"
    if status.get("state") == RUNNING and host == here:  # a pid names a process on its own host only
        alive = process_alive(pid, status.get("pid_start"))
        if alive is True:
            return RunStatus(False, f"running: its process {pid} is alive; {since} yet", RUNNING)
        if alive is False:
            return RunStatus(False, f"killed: its process {pid} is gone; {since}", KILLED)
    where = f" on {host}" if host and host != here else ""
    return RunStatus(False, f"{since}: still running{where}, or killed")


def _process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (its state first); None without such an entry (the
    process is gone, or the system has no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # the name, in parentheses, may hold spaces and parentheses


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot; None without ``/proc``): with its pid it names one
    process, not a later one given the same pid."""
    fields = _process_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def process_alive(pid: Any, start: Any = None) -> bool | None:
    """Whether process ``pid`` of this host, started at ``start`` (as :meth:`Run.mark_running` records it), still
    runs: False once it exited (a zombie included) or its pid went to a later process; None where this cannot be
    told (not a positive pid, or not a POSIX system)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or os.name != "posix":
        return None
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass  # it exists, as another user's process
    fields = _process_stat(pid)
    if fields is None:  # no /proc: the signal's answer is all there is
        return True
    return fields[0] != "Z" and (start is None or len(fields) <= 19 or fields[19] == str(start))


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (is {path.parent} a run directory?)")
    return read_json(path)


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
    """Run directories under ``root`` (those with a config.json): complete runs newest first, then incomplete
    ones (killed, or still being written; :attr:`Run.status` says which) newest first. So ``list_runs()[0]``,
    what notebooks open when no run is named, is the newest complete run whenever there is one."""
    root = Path(root if root is not None else runs_dir())
    if not root.exists():
        return []
    runs = sorted((Run(p) for p in root.iterdir() if (p / CONFIG).exists()), key=lambda r: r.path.name, reverse=True)
    done = {r.path: r.complete for r in runs}
    return [r for r in runs if done[r.path]] + [r for r in runs if not done[r.path]]


def newest_run(root: str | os.PathLike | None = None) -> Run:
    """The newest complete run under ``root`` (default ``runs/``); FileNotFoundError naming the incomplete ones."""
    runs = list_runs(root)
    if runs and runs[0].complete:
        return runs[0]
    where = Path(root if root is not None else runs_dir())
    extra = f" ({len(runs)} incomplete: {', '.join(r.id for r in runs[:3])}{'...' if len(runs) > 3 else ''})" if runs else ""
    raise FileNotFoundError(f"no complete run under {where}{extra}: make one with `workbench demo` or `workbench eval`, "
                            "or name a run directory")
