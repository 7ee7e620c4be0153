"""The feature cache: expensive features (embeddings, judge replies, evidence answers) keyed by a
hash of their inputs (model id + text or prompt), so recomputing a table only pays for what changed."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias


def cache_key(*parts: Any) -> str:
    """sha256 of the JSON form of ``parts`` (model id, kind, text or prompt...)."""
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


class FeatureCache:
    """A small key → bytes store: sqlite on disk, or in memory (``path=":memory:"``).

    Keys are :func:`cache_key` hashes of the inputs, so an entry is reused exactly when its
    inputs (model id + text/prompt) are unchanged. Safe to share between threads; several
    processes may use one file (sqlite locking, WAL journal).
    """

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from workbench.util.paths import cache_dir

            path = cache_dir() / "features" / "cache.sqlite"
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            self._conn.commit()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"FeatureCache({self.path!r})"

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        uniq = list(dict.fromkeys(keys))
        with self._lock:
            for i in range(0, len(uniq), 500):
                chunk = uniq[i : i + 500]
                q = f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(chunk))})"
                out.update({k: bytes(v) for k, v in self._conn.execute(q, chunk)})
        self.hits += len(out)
        self.misses += len(uniq) - len(out)
        return out

    def put_many(self, items: Mapping[str, bytes]) -> None:
        if not items:
            return
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", list(items.items()))
            self._conn.commit()

    def get_text(self, key: str) -> str | None:
        got = self.get_many([key]).get(key)
        return None if got is None else got.decode("utf-8")

    def put_text(self, key: str, text: str) -> None:
        self.put_many({key: text.encode("utf-8")})

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])


CacheLike: TypeAlias = bool | str | os.PathLike | FeatureCache | None
"""What :func:`as_cache` makes a cache of: ``True`` (the shared on-disk one), ``False`` / ``None`` (a fresh in-memory
one), a path, or a :class:`FeatureCache`."""

_DEFAULT_CACHES: dict[tuple[str, int], FeatureCache] = {}


def as_cache(cache: CacheLike) -> FeatureCache:
    """``True``: the shared on-disk cache; ``False``/``None``: a fresh in-memory one; a path; or a FeatureCache."""
    if isinstance(cache, FeatureCache):
        return cache
    if cache is True:
        from workbench.util.paths import cache_dir

        key = (str(cache_dir() / "features" / "cache.sqlite"), os.getpid())  # one connection per process
        if key not in _DEFAULT_CACHES:
            _DEFAULT_CACHES[key] = FeatureCache(key[0])
        return _DEFAULT_CACHES[key]
    if cache is False or cache is None:
        return FeatureCache(":memory:")
    return FeatureCache(cache)
