"""A word index beside each ``trajectories.parquet``, so full-text search does not scan every text.

Full-text search (the inspector's text box, :func:`workbench.storage.trajectory_store.search_rows`) is a case-insensitive
substring match over a trajectory's question, turns and answer. Over a million trajectories a scan decodes
gigabytes of text per keystroke. The index maps each lower-cased word (RE2's ``[0-9a-z_]+`` after DuckDB's
``lower``) to the rows that hold it, in ``<stem>.words.parquet`` beside the file (a few % of its size), stamped
with the size and mtime of the file it indexes (columns ``token``, ``n``: how many rows hold it, ``rows``). A run
writes it with its trajectories (one DuckDB query, ~0.1 s per 1,000 trajectories); a search that finds it missing or
stale scans that file as before and rebuilds the index in a background thread for the next search (where the
directory is read-only, searches keep scanning).

A query's words narrow the rows exactly (:func:`candidate_rows`): a word with a non-word character on both sides
in the query must be a whole word of the text, one with such a character only before it must start a word,
only after it must end one, and a lone word may sit anywhere inside one. A query that is a single ASCII word is
answered from the index alone (every row holding a word that contains it contains it); any other query checks
the candidates' text with the same case-insensitive match as the scan (:func:`verify_rows`). A query with no
word (``"</search>"``) has nothing to narrow with and scans.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.storage.parquet_sql import cursor, file_columns, sql_literal
from workbench.util.io import atomic_path

#: The columns the index covers (full-text search's columns, ``trajectory_store.SEARCH_COLUMNS``).
INDEX_COLUMNS = ("question", "response_text", "answer")
#: A word, as the index splits lower-cased text (RE2's and Python's ASCII classes agree on it).
WORD = "[0-9a-z_]+"
_WORD_RE = re.compile(WORD)
_STAMP = b"workbench.words.v2.source"  # the format's version: an index of another format is stale
#: Words per row group of an index (sorted, so a read of some words skips the other groups by their min/max).
INDEX_GROUP_ROWS = 1024
#: A query whose candidates exceed this share of its rows is scanned instead (checking most rows in Python is
#: slower than DuckDB's scan, which stops at the view's hit limit).
SCAN_SHARE = 0.25
#: A query that is not a single word has its candidates' text checked (:func:`verify_rows`, which reads their row
#: groups) when there are at most this many over all files; more are scanned.
VERIFY_ROWS = 5000


def index_path(path: str | os.PathLike) -> Path:
    """``runs/x/trajectories.parquet`` -> ``runs/x/trajectories.words.parquet``."""
    p = Path(path)
    return p.with_name(p.stem + ".words.parquet")


def _stamp(path: Path) -> bytes:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}".encode()


def fresh_index(path: str | os.PathLike) -> Path | None:
    """The file's index when it exists and was built from the file as it is now, else None."""
    import pyarrow.parquet as pq

    p, idx = Path(path), index_path(path)
    try:
        key = (str(p), _stamp(p))
        if key in _FRESH:
            return idx if _FRESH[key] == _stamp(idx) else None
        meta = pq.read_schema(idx).metadata or {}
        if meta.get(_STAMP) != key[1]:
            return None
        _FRESH[key] = _stamp(idx)
        return idx
    except (OSError, ValueError):
        return None


#: (file, its stamp) -> the stamp of its index when last found fresh: a search stats the files, reads no footer
_FRESH: dict[tuple[str, bytes], bytes] = {}


def build_index(path: str | os.PathLike) -> Path:
    """Write the word index of ``path`` (atomically; replaces a stale one). Raises ``OSError`` if it cannot be written."""
    import pyarrow.parquet as pq

    p = Path(path)
    stamp = _stamp(p)
    have = set(file_columns(p))
    text = ", ".join(f'COALESCE(CAST("{c}" AS VARCHAR), \'\')' for c in INDEX_COLUMNS if c in have) or "''"
    sql = (f"SELECT token, len(rows) AS n, rows FROM (SELECT w AS token, list(DISTINCT r ORDER BY r)::INTEGER[] AS rows FROM ("
           f"SELECT file_row_number AS r, unnest(regexp_extract_all(lower(concat_ws(' ', {text})), '{WORD}')) AS w "
           f"FROM read_parquet({sql_literal(p)}, file_row_number=true)) GROUP BY w) ORDER BY token")
    table = cursor().sql(sql).to_arrow_table()
    table = table.replace_schema_metadata({_STAMP: stamp})
    idx = index_path(p)
    with atomic_path(idx) as tmp:  # sorted by token in small row groups: a word's rows are read from one or two
        pq.write_table(table, tmp, compression="zstd", row_group_size=INDEX_GROUP_ROWS)
    return idx


def ensure_index(path: str | os.PathLike, wait: bool = True) -> Path | None:
    """A fresh index of ``path``, built if needed; None when it cannot be written (a read-only runs directory).

    ``wait=False`` (a search): when there is none, return None at once (the caller scans) and build it in the
    background for the next search, so opening old runs never waits for their indexes."""
    idx = fresh_index(path)
    if idx is not None:
        return idx
    if not wait:
        _schedule(Path(path))
        return None
    try:
        return build_index(path)
    except Exception:  # noqa: BLE001 - read-only directory, unreadable file: the search scans instead
        return None


_PENDING: dict[str, Any] = {}
_LOCK = threading.Lock()
_POOL: Any = None


def _schedule(path: Path) -> None:
    global _POOL
    from concurrent.futures import ThreadPoolExecutor

    with _LOCK:
        if str(path) in _PENDING and not _PENDING[str(path)].done():
            return
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="word-index")
        _PENDING[str(path)] = _POOL.submit(ensure_index, path)


def wait_for_builds() -> None:
    """Block until the indexes scheduled by searches are written (tests, benchmarks)."""
    with _LOCK:
        futures = list(_PENDING.values())
    for f in futures:
        f.result()


def query_words(text: str) -> list[tuple[str, str]]:
    """The query's words with how each must sit in a word of the text: ``exact``, ``prefix``, ``suffix`` or ``inside``.

    >>> query_words("Glass Orch")
    [('glass', 'suffix'), ('orch', 'prefix')]
    >>> query_words("of the")
    [('of', 'suffix'), ('the', 'prefix')]
    >>> query_words("<search> x")
    [('search', 'exact'), ('x', 'prefix')]
    """
    low = text.lower()
    out = []
    for m in _WORD_RE.finditer(low):
        before = m.start() > 0
        after = m.end() < len(low)
        out.append((m.group(), {(True, True): "exact", (True, False): "prefix", (False, True): "suffix",
                                (False, False): "inside"}[(before, after)]))
    return out


def candidate_rows(indexes: Sequence[Path], words: Sequence[tuple[str, str]],
                   sizes: Sequence[int]) -> list[np.ndarray | None]:
    """Per index, the rows of its file (``sizes``: its rows) that may hold the query (sorted), or None where the
    query's words are in so many rows that a scan is cheaper (:func:`too_many`). ``words`` from :func:`query_words`.

    The words are matched against the indexes' vocabulary in memory (:func:`vocabulary`): a word no text holds
    answers at once, without reading any file. Then the rows of the rarest word are read (only the index row groups
    whose token range holds its matching words), intersected with each other word rare enough to narrow them; a
    common word is left to :func:`verify_rows`."""
    if not indexes:
        return []
    tokens, totals = vocabulary(indexes)
    matched = sorted(((toks, int(totals[toks].sum())) for toks in (_matching(tokens, w, where) for w, where in
                                                                    set(words))), key=lambda m: m[1])
    empty = np.array([], dtype=np.int64)
    if matched[0][1] == 0:
        return [empty for _ in indexes]
    if too_many(matched[0][1], sum(sizes)):
        return [None for _ in indexes]
    pos = {str(p): i for i, p in enumerate(indexes)}
    rows: list[np.ndarray | None] = [None] * len(indexes)
    for k, (toks, total) in enumerate(matched):
        if k and too_many(total, sum(sizes)):
            break
        got = [empty] * len(indexes)
        out = cursor().execute(f"SELECT filename, flatten(list(rows)) FROM {_source(indexes)} "
                               "WHERE token IN (SELECT unnest($t)) GROUP BY filename",
                               {"t": [tokens[i] for i in toks]}).fetchall()
        for name, r in out:
            got[pos[str(Path(name))]] = np.unique(np.asarray(r, dtype=np.int64))
        rows = [g if old is None else np.intersect1d(old, g, assume_unique=True) for old, g in zip(rows, got)]
    return [r if r is not None else empty for r in rows]


def _matching(tokens: list[str], word: str, where: str) -> np.ndarray:
    """Positions of the vocabulary's tokens (sorted) that hold ``word`` as ``where`` says."""
    import bisect

    if where in ("exact", "prefix"):
        lo = bisect.bisect_left(tokens, word)
        hi = lo + int(tokens[lo:lo + 1] == [word]) if where == "exact" else bisect.bisect_left(tokens, word + "\U0010ffff")
        return np.arange(lo, hi, dtype=np.int64)
    test = str.endswith if where == "suffix" else str.__contains__
    return np.fromiter((i for i, t in enumerate(tokens) if test(t, word)), dtype=np.int64)


def vocabulary(indexes: Sequence[Path]) -> tuple[list[str], np.ndarray]:
    """The distinct words of these indexes (sorted) and how many rows hold each, over all of them; one query, then
    kept in memory for the same set of index files (a view's searches share it; :data:`VOCAB_SETS` sets at most)."""
    key = tuple((str(p), _stamp(Path(p))) for p in indexes)
    if key in _VOCAB:
        _VOCAB.move_to_end(key)
    else:
        out = cursor().execute(f"SELECT token, sum(n) AS n FROM {_source(indexes)} GROUP BY token ORDER BY token"
                               ).fetchnumpy()
        _VOCAB[key] = (list(out["token"]), np.asarray(out["n"], dtype=np.int64))
        while len(_VOCAB) > VOCAB_SETS:  # the least recently searched set of runs goes first
            _VOCAB.popitem(last=False)
    return _VOCAB[key]


#: Sets of index files whose vocabulary is kept (a view searching all its runs, then one run, then all again
#: reads each set's vocabulary once).
VOCAB_SETS = 4
_VOCAB: OrderedDict[tuple, tuple[list[str], np.ndarray]] = OrderedDict()


def _source(indexes: Sequence[Path]) -> str:
    return f"read_parquet([{', '.join(sql_literal(p) for p in indexes)}], filename=true)"


def verify_rows(path: str | os.PathLike, rows: np.ndarray, text: str, columns: Sequence[str] = INDEX_COLUMNS,
                max_hits: int | None = None) -> np.ndarray:
    """The rows among ``rows`` (sorted) whose ``columns`` contain ``text`` case-insensitively; reads only the row
    groups that hold them, in order, and stops after ``max_hits``."""
    import pyarrow.parquet as pq

    if not len(rows):
        return rows
    pat = re.compile(re.escape(text), re.IGNORECASE)
    pf = pq.ParquetFile(path)
    starts = np.cumsum([0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
    groups = np.searchsorted(starts, rows, side="right") - 1
    have = [c for c in columns if c in pf.schema_arrow.names]
    hits: list[int] = []
    for g in dict.fromkeys(groups.tolist()):
        local = rows[groups == g] - starts[g]
        tab = pf.read_row_group(g, columns=have).take(local)
        cols = [tab.column(c).to_pylist() for c in have]
        for j, r in enumerate(local):
            if any(isinstance(col[j], str) and pat.search(col[j]) for col in cols):
                hits.append(int(r + starts[g]))
                if max_hits is not None and len(hits) >= max_hits:
                    return np.asarray(hits, dtype=np.int64)
    return np.asarray(hits, dtype=np.int64)


def answers_alone(text: str) -> bool:
    """True when the index's candidates are the answer: the query is one ASCII word and nothing else."""
    words = query_words(text)
    return len(words) == 1 and words[0][0] == text.lower() and text.isascii()


def too_many(candidates: int, rows: int) -> bool:
    """Scan rather than check ``candidates`` rows' text in Python (see :data:`SCAN_SHARE`)."""
    return candidates > 2000 and candidates > SCAN_SHARE * rows


def num_rows(path: str | os.PathLike) -> int:
    """Rows of a Parquet file (its footer, read once per file version)."""
    import pyarrow.parquet as pq

    key = (str(path), _stamp(Path(path)))
    if key not in _ROWS:
        _ROWS[key] = pq.ParquetFile(path).metadata.num_rows
    return _ROWS[key]


_ROWS: dict[tuple[str, bytes], int] = {}
