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


#: The most a run's own JSON / JSON-lines file (config, metrics, status, health, steps) may hold before a reader
#: refuses it: far above what a run writes (a 10,000-step metrics.jsonl is a few MB), far below what exhausts memory.
RUN_FILE_BYTES = 256 << 20


class UnreadableFile(ValueError):
    """A file a reader refuses: not a regular file, over its size cap, or JSON nested past what can be read."""


def regular_file(path: str | os.PathLike, what: str = "run file") -> os.stat_result:
    """``path``'s ``os.stat`` (a symlink followed), if it is a regular file; else an ``UnreadableFile`` naming it and
    what it is (a directory, a device, a FIFO), without opening it: opening a FIFO waits for a writer forever."""
    import stat

    st = Path(path).stat()
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
                stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
        raise UnreadableFile(f"{path}: {kind}, not a {what}; replace it with the file itself")
    return st


def read_text_bounded(path: str | os.PathLike, max_bytes: int = RUN_FILE_BYTES, what: str = "run file") -> str:
    """The text of ``path`` (bytes that are not UTF-8 replaced), read only if it is a regular file of at most
    ``max_bytes``: a symlink to ``/dev/zero``, a FIFO, a directory or a 2 GB sparse file is refused at once with an
    ``UnreadableFile`` naming the file and the cap, instead of being read into memory."""
    p = Path(path)
    st = regular_file(p, what)
    if st.st_size > max_bytes:
        raise UnreadableFile(f"{p}: {st.st_size / 2**20:,.0f} MiB, more than a {what} may hold ({max_bytes >> 20} "
                             "MiB): it is not one this workbench wrote; move it away")
    with open(p, "rb") as f:
        data = f.read(max_bytes + 1)  # a file that grows while it is read is still bounded
    if len(data) > max_bytes:
        raise UnreadableFile(f"{p}: grew past {max_bytes >> 20} MiB while it was read")
    return data.decode("utf-8", errors="replace")


def loads_json(text: str, where: str | os.PathLike) -> Any:
    """``json.loads`` whose every failure is a ``ValueError`` naming ``where``: invalid JSON, and JSON nested deeper
    than Python's reader goes (a ``RecursionError`` that took the dashboard down, with a traceback)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{where}: JSON nested too deep to read; it is not a file this workbench wrote") from None
    except json.JSONDecodeError as e:
        raise UnreadableFile(f"{where}: not valid JSON ({e})") from None


def loads_yaml(text: str, where: str | os.PathLike, fix: str = "fix the file") -> Any:
    """``yaml.safe_load`` whose every failure is a ``ValueError`` naming ``where`` and, for a syntax error, the line and
    column, then ``fix``: bad YAML, a tag that would build a Python object (``!!python/object``: refused by the safe
    loader), and YAML nested deeper than Python's recursion goes."""
    import yaml

    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise UnreadableFile(f"{where}: YAML nested too deep to read; {fix}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UnreadableFile(f"{where}: YAML error{at}: {what}; {fix}") from None


def read_json(path: str | os.PathLike, max_bytes: int = RUN_FILE_BYTES, what: str = "run file") -> Any:
    """A JSON file through :func:`read_text_bounded` and :func:`loads_json`: every way it can be bad is one
    ``UnreadableFile`` (a ``ValueError``) naming it."""
    return loads_json(read_text_bounded(path, max_bytes, what), path)


def read_jsonl(path: str | os.PathLike, keep: Callable[[Any], bool] = lambda row: isinstance(row, dict),
               max_bytes: int = RUN_FILE_BYTES) -> tuple[list[Any], int]:
    """The rows of a JSON-lines file that ``keep`` accepts, and how many lines were unreadable or refused.

    Blank lines are skipped; bytes that are not UTF-8 are replaced (a user's file never raises here for its lines);
    a file that is not a regular one or is over ``max_bytes`` raises :class:`UnreadableFile` (:func:`read_text_bounded`)."""
    rows, bad = [], 0
    for line in read_text_bounded(path, max_bytes, "JSON-lines file").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            bad += 1
            continue
        if keep(row):
            rows.append(row)
        else:
            bad += 1
    return rows, bad
