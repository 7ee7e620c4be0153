"""A passage corpus read from its JSONL file on demand: row ``i`` is the file's ``i``-th non-blank line.

A dense index is a matrix whose row ``i`` embeds passage ``i`` of its corpus (Search-R1's ``e5_Flat.index`` and
``wiki-18.jsonl``: 21M rows, 14 GB of text). :class:`JsonlCorpus` finds where each line starts once (one streaming
pass, the byte offsets cached under ``cache_dir()/corpus-offsets/`` keyed by the file's path, size and modification
time) and reads a passage when it is asked for, so a searcher over the whole corpus holds 8 bytes per passage, not
its text. Lines are FlashRAG records (``{"id", "contents": '"Title"\\ntext'}``) or ``{"id", "title", "text"}``.

    >>> corpus = JsonlCorpus("wiki-18.jsonl")       # doctest: +SKIP
    >>> len(corpus), corpus[0].title                 # doctest: +SKIP
    (21015324, 'Aaron')
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from workbench.core.types import Passage
from workbench.data.corpora import loads_line, parse_flashrag_contents

_CHUNK = 64 << 20


def line_offsets(path: str | os.PathLike) -> np.ndarray:
    """``int64 [n + 1]``: where each non-blank line of ``path`` starts, then the end of the last one."""
    ends, pos = [], 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + pos
            ends.append(nl)
            pos += len(chunk)
    ends_all = np.concatenate(ends + [np.array([pos], dtype=np.int64)]).astype(np.int64)
    starts_all = np.concatenate(([0], ends_all[:-1] + 1)).astype(np.int64)
    keep = ends_all - starts_all > 0
    short = np.flatnonzero(keep & (ends_all - starts_all < 4))  # a line of only "\r" or spaces is blank too
    if len(short):
        with open(path, "rb") as f:
            for i in short:
                f.seek(int(starts_all[i]))
                keep[i] = bool(f.read(int(ends_all[i] - starts_all[i])).strip())
    starts_all, ends_all = starts_all[keep], ends_all[keep]
    return np.append(starts_all, ends_all[-1] if len(ends_all) else 0)


def offsets_path(path: str | os.PathLike) -> Path:
    """Where the line offsets of the corpus file ``path`` are cached (keyed by its path, size and modification time)."""
    from workbench.util.io import stable_hash
    from workbench.util.paths import cache_dir

    path = Path(path)
    st = path.stat()
    return cache_dir() / "corpus-offsets" / f"{stable_hash([str(path.resolve()), st.st_size, st.st_mtime_ns])}.npy"


def _cached_offsets(path: Path) -> np.ndarray:
    from workbench.util.io import atomic_path

    cache = offsets_path(path)
    if cache.exists():
        return np.load(cache, mmap_mode="r")
    with atomic_path(cache) as tmp, open(tmp, "wb") as f:
        np.save(f, line_offsets(path))
    return np.load(cache, mmap_mode="r")


class JsonlCorpus(Sequence[Passage]):
    """The passages of a JSONL corpus file, read when indexed (see the module docstring); thread-safe."""

    def __init__(self, path: str | os.PathLike, source: str = "wiki"):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"corpus file not found: {self.path}")
        self.source = source
        self._offsets = _cached_offsets(self.path)
        self._fd = os.open(self.path, os.O_RDONLY)

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __repr__(self) -> str:
        return f"JsonlCorpus({str(self.path)!r}, {len(self)} passages)"

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        i = int(i)
        if not -n <= i < n:
            raise IndexError(f"passage {i} of a corpus of {n}")
        i %= n
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        line = os.pread(self._fd, b - a, a)
        return self._passage(line, i)

    def __iter__(self) -> Iterator[Passage]:
        for i in range(len(self)):
            yield self[i]

    def _passage(self, line: bytes, i: int) -> Passage:
        try:
            rec = loads_line(line.decode("utf-8-sig"))
            if not isinstance(rec, dict):
                raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
            if isinstance(rec.get("contents"), str):
                title, text = parse_flashrag_contents(rec["contents"])
            elif isinstance(rec.get("text"), str):
                title, text = str(rec.get("title") or ""), rec["text"].strip()
            else:
                raise ValueError(f"no 'contents' or 'text' field (keys: {', '.join(sorted(rec)) or 'none'})")
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ValueError(f"{self.path}: passage {i} (line {i + 1} of the non-blank lines) is not a corpus record: "
                             f"{e}") from None
        pid = rec.get("id", rec.get("_id"))
        return Passage(id=str(pid) if pid is not None else str(i), title=title, text=text,
                       source=str(rec.get("source") or self.source))


def open_corpus(path: str | os.PathLike) -> Sequence[Passage]:
    """A corpus file as passages by row: a JSONL file read on demand (:class:`JsonlCorpus`), any other layout
    :func:`~workbench.data.corpora.load_corpus` reads loaded whole."""
    p = Path(path)
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        corpus = JsonlCorpus(p)
        if len(corpus):
            corpus[0]  # a file in another layout fails here, naming the line  # noqa: B018
        return corpus
    from workbench.data.corpora import load_corpus

    return load_corpus(p)
