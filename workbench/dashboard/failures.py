"""Failed trajectories, from each run's ``features.parquet``, for the dashboard.

A trajectory whose reward depends on a failed component (a tool that raised or timed out, a generation
backend error, a judge or evidence-model call that failed) has NaN rewards and says so in its features:
the counts ``failed_tool`` / ``failed_judge``, the flags ``backend_error`` / ``failed_evidence`` and the
text ``failure``. :func:`failure_counts` gives the runs table its ``failed`` column;
:func:`run_failures` gives the drill-down which flag each failed row has and the failure text.

Runs without a features table, or with one from before the failure columns, have no count (NULL):
unknown, not zero. An unreadable table has no count either, and its error goes into the runs table's
``error`` column (:func:`runs_with_failures`); its run's drill-down lists the trajectories without flags
and says why (``run_trajectory_table``'s ``attrs["error"]``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from workbench.dashboard import queries as q
from workbench.dashboard.queries import run_dirs
from workbench.rewards.feature_io import FEATURES_FILE
from workbench.storage.parquet_sql import sql_literal as _quote
from workbench.storage.trajectory_store import cursor

#: The failure columns of a features table (``workbench.rewards.features.FAILURE_COLUMNS``).
FLAGS = ("failed_tool", "backend_error", "failed_judge", "failed_evidence")
FAILURE_COLUMNS = ["row", "id", "failed", "failure"]


def _flag_sql(cols: set[str]) -> tuple[str, str] | None:
    """SQL for ``failed`` (the names of the flags set, comma-separated; NULL if none) and ``is_failed``."""
    present = [f for f in FLAGS if f in cols]
    if not present:
        return None
    parts = ", ".join(f"CASE WHEN COALESCE(CAST({f} AS DOUBLE), 0) > 0 THEN '{f}' END" for f in present)
    names = f"NULLIF(concat_ws(', ', {parts}), '')"
    text = "failure IS NOT NULL AND failure <> ''" if "failure" in cols else "FALSE"
    return names, f"({names} IS NOT NULL OR {text})"


def _columns(con, path: Path) -> set[str]:
    return {r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()}


#: ``(path, mtime_ns, size) -> count`` (None: no failure columns, or unreadable): a features table is counted once
#: while it is unchanged (the runs table asks for every run's count on each refresh).
_COUNTS: dict[tuple[str, int, int], int | None] = {}
#: The same keys -> the error text of a features table that does not read.
_ERRORS: dict[tuple[str, int, int], str] = {}


def _count_query(con, files: list[Path], where: str) -> dict[Path, int]:
    src = ", ".join(_quote(f) for f in files)
    rows = con.execute(f"SELECT filename, count(*) FILTER (WHERE {where}) FROM read_parquet([{src}], filename=true) "
                       "GROUP BY filename").fetchall()
    out = {f: 0 for f in files}  # an empty table has no row to group
    out.update({Path(name): int(n) for name, n in rows})
    return out


def _count_files(paths: list[Path], errors: dict[Path, str] | None = None) -> dict[Path, int | None]:
    """Failure counts of ``paths``: one DuckDB query per set of failure columns over all those files, projecting
    only the failure columns. A file whose footer does not read is left out; if a group's query fails (a file whose
    data does not read), its files are counted one by one and the unreadable ones left out. ``errors`` gets the
    error text of each file left out."""
    import pyarrow.parquet as pq

    con = cursor()
    groups: dict[tuple[str, ...], list[Path]] = {}
    out: dict[Path, int | None] = {}
    errors = {} if errors is None else errors
    for p in paths:
        try:
            cols = set(pq.read_schema(p).names)
        except Exception as e:  # noqa: BLE001 - an unreadable table is reported, not raised
            errors[p] = q._error_text(e, FEATURES_FILE)
            continue
        present = tuple(c for c in (*FLAGS, "failure") if c in cols)
        if not any(f in present for f in FLAGS):
            out[p] = None  # a table from before the failure columns: unknown, not 0
        else:
            groups.setdefault(present, []).append(p)
    for present, files in groups.items():
        where = _flag_sql(set(present))[1]
        try:
            out.update(_count_query(con, files, where))
        except Exception:  # noqa: BLE001 - a file whose data does not read: count file by file, leave it out
            for f in files:
                try:
                    out.update(_count_query(con, [f], where))
                except Exception as e:  # noqa: BLE001
                    errors[f] = q._error_text(e, FEATURES_FILE)
    return out


def failure_counts(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """``run_id, failed, error``: per run with a features table, how many trajectories have a failure (NULL when
    its table predates the failure columns, or does not read: then ``error`` says why). Tables changed since the
    last call are counted by one DuckDB query."""
    keys = {}
    for d in run_dirs(runs_dir):
        p = d / FEATURES_FILE
        try:
            keys[d.name] = (p, q._key(p))
        except OSError:
            continue
    todo = [p for p, key in keys.values() if key not in _COUNTS and key not in _ERRORS]
    if todo:
        errors: dict[Path, str] = {}
        counted = _count_files(todo, errors)
        for p, key in keys.values():
            if p in counted:
                _COUNTS[key] = counted[p]
            elif p in errors:
                _ERRORS[key] = errors[p]
    rows = [(rid, _COUNTS.get(key), _ERRORS.get(key)) for rid, (_, key) in keys.items()
            if key in _COUNTS or key in _ERRORS]
    df = pd.DataFrame(rows, columns=["run_id", "failed", "error"])
    df["failed"] = df["failed"].astype("Int64")
    return df


def run_failures(runs_dir: str | os.PathLike, run_id: str) -> pd.DataFrame:
    """``row, id, failed, failure`` of one run's failed trajectories (``row``: position in the features table,
    the same as in ``trajectories.parquet`` for the runs the workbench writes; ``failed``: the flags set)."""
    p = Path(runs_dir).expanduser() / run_id / FEATURES_FILE
    if not p.is_file():
        return pd.DataFrame(columns=FAILURE_COLUMNS)
    con = cursor()
    cols = _columns(con, p)
    sql = _flag_sql(cols)
    if sql is None or "id" not in cols:
        return pd.DataFrame(columns=FAILURE_COLUMNS)
    failure = "failure" if "failure" in cols else "CAST(NULL AS VARCHAR)"
    return con.execute(
        f"""SELECT file_row_number AS "row", id, {sql[0]} AS failed, {failure} AS failure
            FROM read_parquet(?, file_row_number=true) WHERE {sql[1]} ORDER BY "row" """,
        [str(p)],
    ).df()


def with_failures(trajectories: pd.DataFrame, failures: pd.DataFrame) -> pd.DataFrame:
    """A run's trajectory table (``queries.run_trajectories``) with ``failed`` and ``failure`` columns ("" when
    the row did not fail). A failure row is matched on both position and id, so a features table that does not
    line up with the trajectories marks nothing."""
    out = trajectories.merge(failures[["row", "id", "failed", "failure"]], on=["row", "id"], how="left")
    for c in ("failed", "failure"):
        out[c] = out[c].astype(object).where(out[c].notna(), "")
    return out


def safe_run_failures(runs_dir: str | os.PathLike, run_id: str) -> tuple[pd.DataFrame, str | None]:
    """:func:`run_failures`, or no rows and the error text when the run's features table does not read."""
    try:
        return run_failures(runs_dir, run_id), None
    except Exception as e:  # noqa: BLE001 - the trajectories still show; the flags are unknown, and said so
        return pd.DataFrame(columns=FAILURE_COLUMNS), q._error_text(e, FEATURES_FILE)


def run_trajectory_table(runs_dir: str | os.PathLike, run_id: str, limit: int | None = None, offset: int = 0,
                         failures: pd.DataFrame | None = None,
                         filters: q.TrajectoryFilter | None = None) -> pd.DataFrame:
    """``queries.run_trajectories`` of one run (a page: ``limit`` rows from ``offset`` of those that pass ``filters``)
    with the ``failed`` flags and ``failure`` text of each row; ``failures``: that run's :func:`run_failures`, if the
    caller has it already. A features table that does not read leaves the flags empty and its error in
    ``attrs["error"]``."""
    error = None
    if failures is None:
        failures, error = safe_run_failures(runs_dir, run_id)
    out = with_failures(q.run_trajectories(runs_dir, run_id, limit=limit, offset=offset, filters=filters), failures)
    out.attrs["error"] = error
    return out


def runs_with_failures(runs: pd.DataFrame, runs_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs table (``queries.runs_table``) with ``failed`` (:func:`failure_counts`) after ``n_trajectories``, and
    the error of each features table that does not read added to the run's ``error``."""
    counts = failure_counts(runs_dir).set_index("run_id")
    out = runs.drop(columns="failed", errors="ignore")
    out.insert(list(out.columns).index("n_trajectories") + 1, "failed",
               out["run_id"].map(counts["failed"]).astype("Int64"))
    bad = counts["error"].dropna()
    if len(bad):
        extra = out["run_id"].map(bad)
        out["error"] = [f"{e}; {x}" if e and isinstance(x, str) else x if isinstance(x, str) else e
                        for e, x in zip(out["error"].fillna(""), extra)]
    return out
