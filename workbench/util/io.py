"""Small file helpers: atomic writes (temp file + rename) and stable hashing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _usual_mode(fd_or_path: int | str) -> None:
    """Give a ``mkstemp`` file (mode 0600) the mode an ordinary new file gets (0644 under umask 022),
    so a colleague or a web server can read a run."""
    mode = 0o666 & ~_umask()
    if isinstance(fd_or_path, int):
        os.fchmod(fd_or_path, mode)
    else:
        os.chmod(fd_or_path, mode)


TMP_SUFFIX = ".tmp"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder, then rename (file mode as usual)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        _usual_mode(fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=_json_default) + "\n")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it is renamed onto ``path``.

    For writers that want a filename (``pyarrow.parquet.write_table``, ``save_pretrained``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    try:
        yield Path(tmp)
        if Path(tmp).is_file():
            _usual_mode(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def remove_stale_temp_files(folder: str | os.PathLike, older_than_s: float = 600.0) -> int:
    """Delete ``.<name>.*.tmp`` files an atomic write left behind when its process was killed
    (only those older than ``older_than_s``, so a write in progress is never touched); returns how many."""
    import time

    n = 0
    now = time.time()
    for p in Path(folder).rglob(f".*{TMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > older_than_s:
                if p.is_dir():
                    import shutil

                    shutil.rmtree(p)
                else:
                    p.unlink()
                n += 1
    return n


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing; ``filelock.FileLock``: ``flock`` on Unix), held
    for the ``with`` block and waited for without a time limit.

    Used so that two processes building the same cache entry do not both build it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path):
        yield


def stable_hash(obj: Any, n: int = 16) -> str:
    """A short sha256 of the JSON form of ``obj`` (sorted keys), for cache keys."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=_json_default).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:n]


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    try:  # numpy scalars and arrays
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def read_jsonl(path: str | os.PathLike, keep: Callable[[Any], bool] = lambda row: isinstance(row, dict),
               ) -> tuple[list[Any], int]:
    """The rows of a JSON-lines file that ``keep`` accepts, and how many lines were unreadable or refused.

    Blank lines are skipped; bytes that are not UTF-8 are replaced (a user's file never raises here)."""
    rows, bad = [], 0
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if keep(row):
            rows.append(row)
        else:
            bad += 1
    return rows, bad
