"""Lazy reads of ``trajectories.parquet`` files with DuckDB, for views over runs of any size.

A run's file holds token ids, logprobs and every turn's text (~15 kB a trajectory): a view must not
read that to draw a table. Here a table reads only the columns it names (:func:`read_columns`), a
trajectory is read whole only when it is opened (:func:`read_rows`, :class:`LazyTrajectories`:
DuckDB skips the other row groups, see ``workbench.core.trajectory.ROW_GROUP_ROWS``), and full-text
search runs inside DuckDB over the text columns (:func:`search_rows`), returning positions only.

    >>> files = [Path("runs/a/trajectories.parquet")]                       # doctest: +SKIP
    >>> read_columns(files[0], ["id", "f1"], limit=100)                      # doctest: +SKIP
    >>> search_rows(files, "hallervik", limit=None)                          # doctest: +SKIP
    {0: array([ 12, 873])}
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.storage.parquet_sql import cursor, file_columns, sql_literal
from workbench.storage.text_index import (
    VERIFY_ROWS,
    answers_alone,
    candidate_rows,
    ensure_index,
    num_rows,
    query_words,
    verify_rows,
)

#: The columns full-text search looks in (a trajectory's question, every turn's text, its answer).
SEARCH_COLUMNS = ("question", "response_text", "answer")


_connect = cursor


def read_columns(path: str | os.PathLike, columns: Sequence[str], limit: int | None = None) -> pd.DataFrame:
    """The named columns of one file (the first ``limit`` rows), plus ``row``: the position in the file.

    Only these columns are decoded; a name the file lacks raises ``KeyError`` naming the file.
    """
    have = set(file_columns(path))
    missing = [c for c in columns if c not in have]
    if missing:
        raise KeyError(f"{path} has no column(s) {missing}")
    cols = ", ".join(f'"{c}"' for c in columns)
    sql = f'SELECT file_row_number AS "row"{", " + cols if cols else ""} FROM read_parquet({sql_literal(path)}, ' \
          "file_row_number=true)"
    if limit is not None:
        sql += f" WHERE file_row_number < {int(limit)}"
    return _connect().execute(sql + ' ORDER BY "row"').df()


def read_rows(path: str | os.PathLike, rows: Sequence[int]) -> list[dict[str, Any]]:
    """Whole rows (every column) of one file by position, in the order asked; a missing row raises ``KeyError``."""
    if not rows:
        return []
    wanted = sorted({int(r) for r in rows})
    sql = (f"SELECT * FROM read_parquet({sql_literal(path)}, file_row_number=true) "
           f"WHERE file_row_number IN ({', '.join(map(str, wanted))})")
    # Arrow to Python as ``load_trajectories`` reads (a null answer stays None; token lists stay lists)
    records = _connect().sql(sql).to_arrow_table().to_pylist()
    by_row = {int(r["file_row_number"]): r for r in records}
    out = []
    for r in rows:
        if int(r) not in by_row:
            raise KeyError(f"no trajectory at row {r} of {path}")
        rec = dict(by_row[int(r)])
        rec.pop("file_row_number")
        out.append(rec)
    return out


def search_rows(files: Sequence[str | os.PathLike], text: str, limit: int | None = None,
                columns: Sequence[str] = SEARCH_COLUMNS, max_hits: int | None = None) -> dict[int, np.ndarray]:
    """Rows whose ``columns`` contain ``text`` (case-insensitive substring), by file index: ``{i: rows}`` (sorted).

    ``limit``: only the first ``limit`` rows of each file are searched. ``max_hits``: only the first ``max_hits``
    matches in file order (then DuckDB stops reading: a common word answers at once; a total of ``max_hits`` means
    there may be more). Nothing but the positions leaves DuckDB. The match is RE2's case-insensitive literal
    (``(?i)`` and the text escaped), which scans without lower-casing a copy of every text.
    """
    if not files or not text:
        return {}
    if tuple(columns) == SEARCH_COLUMNS and query_words(text):
        return _indexed_search(files, text, limit, max_hits)
    return _scan_rows(files, text, limit, columns, max_hits)


def _indexed_search(files: Sequence[str | os.PathLike], text: str, limit: int | None,
                    max_hits: int | None) -> dict[int, np.ndarray]:
    """:func:`search_rows` through each file's word index (``workbench.storage.text_index``); a file without one (and a
    read-only directory) or with too many candidates to check is scanned."""
    indexes = [ensure_index(f, wait=False) for f in files]  # a missing one: scanned now, built for next time
    have = [i for i, x in enumerate(indexes) if x is not None]
    sizes = [num_rows(files[i]) for i in have]
    cands = dict(zip(have, candidate_rows([indexes[i] for i in have], query_words(text), sizes)))
    alone, out, left = answers_alone(text), {}, max_hits
    if not alone and sum(len(c) for c in cands.values() if c is not None) > VERIFY_ROWS:
        cands = {}  # too many candidates to read one by one: DuckDB's scan is faster (and stops at max_hits)
    i = 0
    while i < len(files) and (left is None or left > 0):
        if cands.get(i) is None:  # no index, or too many candidates: DuckDB scans (consecutive files at once)
            j = i
            while j < len(files) and cands.get(j) is None:
                j += 1
            for k, rows in _scan_rows(files[i:j], text, limit, SEARCH_COLUMNS, left).items():
                out[i + k] = rows
                left = None if left is None else left - len(rows)
            i = j
            continue
        rows = cands[i]
        rows = rows[rows < int(limit)] if limit is not None else rows
        rows = (rows[:left] if left is not None else rows) if alone else \
            verify_rows(files[i], rows, text, SEARCH_COLUMNS, max_hits=left)
        if len(rows):
            out[i] = rows
        left = None if left is None else left - len(rows)
        i += 1
    return out


def _scan_rows(files: Sequence[str | os.PathLike], text: str, limit: int | None, columns: Sequence[str],
               max_hits: int | None) -> dict[int, np.ndarray]:
    """:func:`search_rows` by scanning the text columns in DuckDB."""
    idx = {str(Path(f)): i for i, f in enumerate(files)}
    paths = ", ".join(sql_literal(Path(f)) for f in files)
    pattern = "(?i)" + "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)
    where = " OR ".join(f'regexp_matches(COALESCE("{c}", \'\'), $pattern)' for c in columns)
    limit_sql = f" AND file_row_number < {int(limit)}" if limit is not None else ""
    source = f"read_parquet([{paths}], filename=true, file_row_number=true, union_by_name=true)"
    if max_hits is not None:  # scan order is file order (DuckDB preserves insertion order), so LIMIT stops early
        out = cursor().execute(f"SELECT filename, file_row_number FROM {source} WHERE ({where}){limit_sql} "
                               f"LIMIT {int(max_hits)}", {"pattern": pattern}).fetchnumpy()
        names, rows = out["filename"], np.asarray(out["file_row_number"], dtype=np.int64)
        return {idx[str(Path(n))]: np.sort(rows[names == n]) for n in dict.fromkeys(names.tolist())}
    sql = (f"SELECT filename, list(file_row_number ORDER BY file_row_number) AS rows FROM {source} "
           f"WHERE ({where}){limit_sql} GROUP BY filename")
    out = cursor().execute(sql, {"pattern": pattern}).fetchnumpy()
    return {idx[str(Path(name))]: np.asarray(rows, dtype=np.int64) for name, rows in zip(out["filename"], out["rows"])}


_RE2_SPECIAL = set("\\.^$|?*+()[]{}")


def failure_candidates(path: str | os.PathLike, limit: int | None = None) -> list[int]:
    """Rows that may record a failure (a tool call with an error, or ``finish_reason = 'backend_error'``).

    A superset: the caller reads these rows and decides exactly (``workbench.rewards.features``). JSON
    keys cannot appear unescaped inside JSON strings, so ``"error": "`` marks a non-null error.
    """
    have = set(file_columns(path))
    conds = []
    if "turns_json" in have:
        conds.append("""contains(turns_json, '"error": "')""")
    if "finish_reason" in have:
        conds.append("finish_reason = 'backend_error'")
    if not conds:
        return []
    sql = f"SELECT file_row_number FROM read_parquet({sql_literal(path)}, file_row_number=true) WHERE ({' OR '.join(conds)})"
    if limit is not None:
        sql += f" AND file_row_number < {int(limit)}"
    return sorted(int(r) for (r,) in _connect().execute(sql).fetchall())


class LazyTrajectories(Sequence):
    """A read-only list of trajectories that reads one from disk when it is indexed (a few are cached).

    ``locations[i] = (path, row)``: where item ``i`` lives.
    """

    def __init__(self, locations: Sequence[tuple[Path, int]], cache_size: int = 32):
        self.locations = list(locations)
        self.cache_size = cache_size
        self._cache: OrderedDict[int, Trajectory] = OrderedDict()

    def __len__(self) -> int:
        return len(self.locations)

    def __getitem__(self, i: int) -> Trajectory:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]  # type: ignore[return-value]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"trajectory {i} of {len(self)}")
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        path, row = self.locations[i]
        t = Trajectory.from_row(read_rows(path, [row])[0])
        self._cache[i] = t
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return t

    def __iter__(self) -> Iterator[Trajectory]:
        for i in range(len(self)):
            yield self[i]

    def load(self, idx: Sequence[int]) -> list[Trajectory]:
        """Items ``idx`` read together (one query per file): for the few rows a caller needs at once."""
        by_file: dict[Path, list[int]] = {}
        for i in idx:
            by_file.setdefault(self.locations[i][0], []).append(self.locations[i][1])
        read = {(p, r): rec for p, rows in by_file.items() for r, rec in zip(rows, read_rows(p, rows))}
        return [Trajectory.from_row(read[self.locations[i]]) for i in idx]
