"""SQL over Parquet files: one shared in-memory DuckDB connection, a path as a SQL string literal, a file's columns.

The run views (:mod:`workbench.storage.trajectory_store`), the word index (:mod:`workbench.storage.text_index`) and the
dashboard's queries all read Parquet through these, so they share one connection and its footer cache.

    >>> sql_literal("runs/it's here/trajectories.parquet")
    "'runs/it''s here/trajectories.parquet'"
"""

from __future__ import annotations

import os
from typing import Any

_CON: Any = None


def cursor() -> Any:
    """A cursor of one shared in-memory DuckDB connection (a cursor per call: safe from a server's threads).
    Parquet footers are cached across queries (DuckDB re-reads a file's footer when the file changes)."""
    global _CON
    if _CON is None:
        import duckdb

        con = duckdb.connect()
        con.execute("SET GLOBAL parquet_metadata_cache = true")
        _CON = con
    return _CON.cursor()


def sql_literal(path: str | os.PathLike) -> str:
    """``path`` as a SQL string literal (quotes doubled), for ``read_parquet(...)``."""
    return "'" + str(path).replace("'", "''") + "'"


def file_columns(path: str | os.PathLike) -> list[str]:
    """Column names of a Parquet file (from its footer; no data is read)."""
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)
