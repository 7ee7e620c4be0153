"""Queries over a runs root (``runs/<run_id>/``) for the dashboard; each returns a DataFrame.

Small JSON files (``config.json``, ``metrics.json``, ``metrics.jsonl``) are read with Python;
trajectories are read with DuckDB, all runs at once::

    read_parquet([...every runs/*/trajectories.parquet...], filename=true, union_by_name=true)

The file list is the glob ``runs/*/trajectories.parquet`` minus files whose Parquet footer
does not read: one broken file must not take the whole table down. A file whose footer reads but
whose data does not (corrupt pages) fails a query over all files; the query is then run file by
file, the files that fail are left out (and remembered while unchanged), and the query runs again
without them. Each query's frame says which runs it left out and why in ``df.attrs["errors"]``
(``{run_id: text}``). Broken and missing files become text in the ``error`` column of
:func:`runs_table`; no function here raises for them. Each row's run id is its folder's name, looked
up by file (never parsed back out of the path). :func:`runs_table`'s ``status`` says whether each run
is complete (``workbench.storage.runs.run_status``) and names symlinks; the per-run frames (:func:`method_metrics`,
:func:`hop_breakdown`, :func:`training_curves`) carry each run's state in ``status`` (:func:`run_states`), so a
view can mark a killed or running run and leave it out of means over runs.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.data.example import Example, as_answers, load_examples
from workbench.eval.filters import CORRECT_METRICS, describe_filters
from workbench.rewards.feature_io import FEATURES_FILE
from workbench.rewards.gold_evidence import EVIDENCE_KINDS
from workbench.storage.notes import read_notes
from workbench.storage.parquet_sql import file_columns
from workbench.storage.runs import CONFIG, EXAMPLES, INCOMPLETE, METRICS, STEP_METRICS, TRAJECTORIES, run_status
from workbench.util.io import read_jsonl

#: Answer metrics of eval runs (trajectory columns written by ``write_eval_run``).
ANSWER_METRICS = ("em", "cem", "f1", "format_ok")
#: Summary keys shown per method, from ``metrics.json`` (``{"methods": {method: summary}}``).
SUMMARY_METRICS = ("n", "em", "cem", "f1", "n_searches", "tokens", "latency_s", "wall_s_per_answer", "valid_actions",
                   "answered", "format_ok")
#: ``summary_metrics`` columns read from another key of a method's summary: an answer's own time is its latency (answers
#: generated together overlap), the method's wall time over its answers is what an answer costs (the CLI's s/answer).
_SUMMARY_KEYS = {"latency_s": "seconds", "wall_s_per_answer": "wall_seconds_per_answer"}
#: Files a run of each kind is expected to have (a missing one is reported in ``error``).
EXPECTED_FILES = {"eval": (TRAJECTORIES, METRICS), "train": (STEP_METRICS,)}

RUNS_COLUMNS = [
    "run_id", "kind", "tags", "status", "error", "created", "model", "dataset", "corpus_setting", "methods", "n_trajectories",
    "best_method", "em", "cem", "f1", "n_searches", "steps", "reward_mean",
]


def _root(runs_dir: str | os.PathLike) -> Path:
    return Path(runs_dir).expanduser()


def run_dirs(runs_dir: str | os.PathLike) -> list[Path]:
    """Run directories (those with a ``config.json``), newest id first."""
    root = _root(runs_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if (p / CONFIG).is_file()), key=lambda p: p.name, reverse=True)


def run_states(runs_dir: str | os.PathLike) -> dict[str, str]:
    """Each run's state by run id (``workbench.storage.runs.RunStatus.state``): complete, running, killed, failed or
    incomplete."""
    return {d.name: run_status(d).state for d in run_dirs(runs_dir)}


def run_kinds(runs_dir: str | os.PathLike) -> dict[str, str]:
    """Each run's kind by run id (``eval``, ``train``, ``ask``, ``sft``...; from its ``config.json``, "" when unreadable)."""
    out = {}
    for d in run_dirs(runs_dir):
        try:
            cfg = _read_json(d / CONFIG)
        except (OSError, ValueError):
            cfg = {}
        out[d.name] = str(cfg.get("kind") or "") if isinstance(cfg, dict) else ""
    return out


def _with_status(df: pd.DataFrame, runs_dir: str | os.PathLike) -> pd.DataFrame:
    """``df`` with ``status`` (the state of each row's run, :func:`run_states`) and ``kind`` (:func:`run_kinds`)
    columns: an aggregate over runs takes complete evaluations only, not training batches or single questions."""
    states, kinds = run_states(runs_dir), run_kinds(runs_dir)
    df["status"] = [states.get(r, INCOMPLETE) for r in df["run_id"]]
    df["kind"] = [kinds.get(r, "") for r in df["run_id"]]
    return df


# --------------------------------------------------------------------------- trajectories (DuckDB)


@dataclass
class TrajectorySources:
    """Readable trajectory files by run id, and the error text of the unreadable ones."""

    files: dict[str, Path] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    columns: set[str] = field(default_factory=set)
    """The union of the readable files' column names (from their footers)."""


#: ``(path, mtime_ns, size) -> (error or None, column names)``: a footer is read once while its file is unchanged
#: (the runs table asks for 100 footers on every refresh otherwise).
_FOOTERS: dict[tuple[str, int, int], tuple[str | None, tuple[str, ...]]] = {}


#: ``(path, mtime_ns, size) -> error`` of files whose footer reads but whose data does not (found by a query).
_BAD_DATA: dict[tuple[str, int, int], str] = {}


def _key(p: Path) -> tuple[str, int, int]:
    st = p.stat()
    return (str(p), st.st_mtime_ns, st.st_size)


def _error_text(e: BaseException, name: str = TRAJECTORIES) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{name}: {type(e).__name__}: {first[:300]}"


def _footer(p: Path) -> tuple[str | None, tuple[str, ...]]:
    import pyarrow.parquet as pq

    key = _key(p)
    if key in _BAD_DATA:
        return _BAD_DATA[key], ()
    if key not in _FOOTERS:
        try:
            names = tuple(pq.read_metadata(p).schema.to_arrow_schema().names)
        except Exception as e:  # noqa: BLE001 - any unreadable file is reported, not raised
            _FOOTERS[key] = (_error_text(e), ())
        else:
            _FOOTERS[key] = (None, names)
    return _FOOTERS[key]


def trajectory_sources(runs_dir: str | os.PathLike) -> TrajectorySources:
    """``runs/*/trajectories.parquet`` of run directories, split into readable files and errors."""
    src = TrajectorySources()
    for d in run_dirs(runs_dir):
        p = d / TRAJECTORIES
        if not p.exists():
            continue
        error, names = _footer(p)
        if error:
            src.errors[d.name] = error
        else:
            src.files[d.name] = p
            src.columns.update(names)
    return src


def _sql_str(x: str) -> str:
    return "'" + str(x).replace("'", "''") + "'"


class _Trajectories:
    """A DuckDB cursor and ``view``, the SQL of ``t`` in every query: one row per trajectory of every readable run.

    Columns: run_id, row (position in its file), method, protocol, dataset, hops, id, example_id, sample_idx, question,
    answer, finish_reason,
    n_searches, n_invalid, n_policy_tokens, latency_s, em, cem, f1, format_ok, response_text (NULL where a
    run has no such column; a query reads only the columns it names). ``files``: ``{run_id: path}``; a row's run id is
    looked up by its file.
    """

    def __init__(self, files: dict[str, Path], columns: set[str] | None = None):
        from workbench.storage.trajectory_store import cursor

        self.con = cursor()  # the shared connection: footers stay cached between queries
        self.empty = not files
        if self.empty:
            return
        paths = ", ".join(_sql_str(p) for p in files.values())
        source = f"read_parquet([{paths}], filename=true, union_by_name=true, file_row_number=true)"
        cols = columns if columns is not None else {
            r[0] for r in self.con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}

        def col(name: str, sql_type: str = "DOUBLE") -> str:
            return f"CAST({name} AS {sql_type}) AS {name}" if name in cols else f"CAST(NULL AS {sql_type}) AS {name}"

        def meta(key: str, sql_type: str = "VARCHAR") -> str:
            # the typed column (trajectory files since it exists), else the key inside meta_json (older files)
            js = f"TRY_CAST(json_extract_string(meta_json, '$.{key}') AS {sql_type})" if "meta_json" in cols else None
            typed = f"CAST({key} AS {sql_type})" if key in cols else None
            parts = [x for x in (typed, js) if x]
            return f"COALESCE({', '.join(parts)})" if len(parts) > 1 else parts[0] if parts else f"CAST(NULL AS {sql_type})"

        if len(files) == 1:
            run_id, join = _sql_str(next(iter(files))), ""
        else:  # the run id of each file, joined on the file name DuckDB reports
            ids = ", ".join(f"({_sql_str(p)}, {_sql_str(r)})" for r, p in files.items())
            run_id, join = "_ids._run_id", f" JOIN (VALUES {ids}) AS _ids(_file, _run_id) ON filename = _ids._file"
        method = "COALESCE(method, protocol)" if "method" in cols else "protocol"
        self.view = (  # ``t`` of each query (a CTE: cursors of the shared connection share one catalog)
            f"""
            SELECT
                {run_id} AS run_id,
                file_row_number AS "row",
                {method} AS method,
                protocol,
                {meta("dataset")} AS dataset,
                {meta("hops", "INTEGER")} AS hops,
                id, {col("example_id", "VARCHAR")}, {col("sample_idx", "INTEGER")}, question, answer, finish_reason,
                {col("n_searches", "INTEGER")}, {col("n_invalid", "INTEGER")}, {col("n_policy_tokens", "INTEGER")}, {col("latency_s")},
                {", ".join(col(m) for m in ANSWER_METRICS)}, {col("response_text", "VARCHAR")}
            FROM {source}{join}
            """
        )

    def df(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        return self.con.execute(f"WITH t AS ({self.view}) {sql}", params or []).df()


def _query(runs_dir: str | os.PathLike, sql: str, columns: list[str], params: list[Any] | None = None) -> pd.DataFrame:
    """Run ``sql`` over the view ``t`` of all readable runs; an empty frame with ``columns`` if none.

    If it fails, it is run over each file alone and the files that fail are left out (see the module
    docstring); ``attrs["errors"]``: ``{run_id: why}`` of every run left out."""
    src = trajectory_sources(runs_dir)
    try:
        df = _Trajectories(src.files, src.columns).df(sql, params) if src.files else pd.DataFrame(columns=columns)
    except Exception:  # noqa: BLE001 - a file whose data does not read: find it, leave it out, run again
        for rid, p in list(src.files.items()):
            try:
                _Trajectories({rid: p}).df(sql, params)
            except Exception as e:  # noqa: BLE001
                src.errors[rid] = _BAD_DATA[_key(p)] = _error_text(e)
                del src.files[rid]
        df = _Trajectories(src.files).df(sql, params) if src.files else pd.DataFrame(columns=columns)
    df.attrs["errors"] = dict(src.errors)
    return df


_COUNT_COLUMNS = ["run_id", "n_trajectories", "n_methods", "methods", "n_searches", "answered", "f1"]


def trajectory_counts(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Per run: number of trajectories and methods, mean searches, share answered, mean F1."""
    return _query(
        runs_dir,
        """
        SELECT run_id, count(*) AS n_trajectories, count(DISTINCT method) AS n_methods,
               string_agg(DISTINCT method, ', ' ORDER BY method) AS methods,
               avg(n_searches) AS n_searches, avg(CAST(answer IS NOT NULL AS DOUBLE)) AS answered, avg(f1) AS f1
        FROM t GROUP BY run_id ORDER BY run_id DESC
        """,
        _COUNT_COLUMNS,
    )


_METHOD_COLUMNS = ["run_id", "dataset", "method", "n", "em", "cem", "f1", "format_ok", "n_searches", "tokens", "answered"]


def method_metrics(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Per run, dataset and method: n and mean answer metrics, searches, policy tokens, share answered; the run's
    ``status``."""
    return _with_status(_query(
        runs_dir,
        """
        SELECT run_id, COALESCE(dataset, '?') AS dataset, method, count(*) AS n,
               avg(em) AS em, avg(cem) AS cem, avg(f1) AS f1, avg(format_ok) AS format_ok,
               avg(n_searches) AS n_searches, avg(n_policy_tokens) AS tokens,
               avg(CAST(answer IS NOT NULL AS DOUBLE)) AS answered
        FROM t GROUP BY ALL ORDER BY run_id DESC, dataset, method
        """,
        _METHOD_COLUMNS,
    ), runs_dir)


_HOP_COLUMNS = ["run_id", "method", "hops", "n", "em", "cem", "f1", "n_searches"]


def hop_breakdown(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Per run, method and hop count (trajectories with a known hop count): n, answer metrics, searches; the run's
    ``status``."""
    return _with_status(_query(
        runs_dir,
        """
        SELECT run_id, method, hops, count(*) AS n, avg(em) AS em, avg(cem) AS cem, avg(f1) AS f1,
               avg(n_searches) AS n_searches
        FROM t WHERE hops IS NOT NULL GROUP BY ALL ORDER BY run_id DESC, method, hops
        """,
        _HOP_COLUMNS,
    ), runs_dir)


_QUESTION_COLUMNS = ["run_id", "dataset", "method", "question", "hops", "n", "em", "cem", "f1", "format_ok", "n_searches",
                     "tokens", "answered"]


def question_metrics(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Per run, dataset, method and question (its ``example_id``; a trajectory without one counts as its own
    question): its hop count, how many samples were drawn (``n``) and each metric's mean over them; the run's
    ``status``. What the intervals of :func:`method_metrics`' and :func:`hop_breakdown`'s figures are computed over
    (``workbench.dashboard.intervals``): a question sampled three times counts once."""
    return _with_status(_query(
        runs_dir,
        """
        SELECT run_id, COALESCE(dataset, '?') AS dataset, method, COALESCE(example_id, id) AS question,
               min(hops) AS hops, count(*) AS n, avg(em) AS em, avg(cem) AS cem, avg(f1) AS f1,
               avg(format_ok) AS format_ok, avg(n_searches) AS n_searches, avg(n_policy_tokens) AS tokens,
               avg(CAST(answer IS NOT NULL AS DOUBLE)) AS answered
        FROM t GROUP BY ALL ORDER BY run_id DESC, dataset, method, question
        """,
        _QUESTION_COLUMNS,
    ), runs_dir)


_PROTOCOL_COLUMNS = ["protocol", "method", "runs", "n", "em", "f1", "format_ok", "n_searches", "invalid", "answered",
                     "finished_by_answer"]
_PROTOCOL_SUMS = ["em", "f1", "format_ok", "n_searches", "invalid", "answered", "finished_by_answer"]


def protocol_breakdown(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Per protocol and method, pooled over the complete evaluation runs (each trajectory counts once, so a big run
    weighs more than a small one): runs, n, answer metrics, searches, invalid actions, how rollouts ended. The
    untrained agent and the one with an adapter are separate rows (their methods differ: ``search_r1`` and
    ``search_r1+lora``); a training run's sampled batches, an ``ask`` run and an unfinished run are left out,
    and ``attrs["left_out"]`` counts them."""
    per_run = _query(
        runs_dir,
        """
        SELECT run_id, protocol, method, count(*) AS n, count(em) AS n_em, sum(em) AS em, count(f1) AS n_f1,
               sum(f1) AS f1, count(format_ok) AS n_format_ok, sum(format_ok) AS format_ok,
               count(n_searches) AS n_n_searches, sum(n_searches) AS n_searches, count(n_invalid) AS n_invalid,
               sum(n_invalid) AS invalid, count(*) AS n_answered, sum(CAST(answer IS NOT NULL AS DOUBLE)) AS answered,
               count(finish_reason) AS n_finished_by_answer,
               sum(CAST(finish_reason = 'answer' AS DOUBLE)) AS finished_by_answer
        FROM t GROUP BY ALL
        """,
        ["run_id", "protocol", "method", "n"],
    )
    errors = per_run.attrs.get("errors", {})
    if per_run.empty:
        out = pd.DataFrame(columns=_PROTOCOL_COLUMNS)
        out.attrs.update(errors=errors, left_out=0)
        return out
    per_run = _with_status(per_run, runs_dir)
    keep = (per_run["status"] == "complete") & per_run["kind"].isin(["eval", ""])
    left_out = int(per_run.loc[~keep, "run_id"].nunique())
    kept = per_run[keep]
    sums = kept.groupby(["protocol", "method"], as_index=False).agg(
        runs=("run_id", "nunique"), n=("n", "sum"), **{c: (c, "sum") for c in _PROTOCOL_SUMS},
        **{f"n_{c}": (f"n_{c}", "sum") for c in _PROTOCOL_SUMS})
    for c in _PROTOCOL_SUMS:  # a mean over the trajectories that have the value
        sums[c] = sums[c] / sums[f"n_{c}"].where(sums[f"n_{c}"] > 0)
    out = sums[_PROTOCOL_COLUMNS].sort_values(["protocol", "method"]).reset_index(drop=True)
    out.attrs.update(errors=errors, left_out=left_out)
    return out


TRAJECTORY_COLUMNS = ["row", "id", "method", "question", "answer", "gold", "cem", "f1", "n_searches", "finish_reason"]


def _cached_file(cache: dict, size: int, p: Path, read: Callable[[Path], Any]) -> Any:
    """``read(p)``, kept in ``cache`` (at most ``size`` files, the oldest dropped) while ``p`` is unchanged;
    ``{}`` when ``p`` is missing."""
    try:
        key = _key(p)
    except OSError:
        return {}
    if key not in cache:
        while len(cache) >= size:
            cache.pop(next(iter(cache)))
        cache[key] = read(p)
    return cache[key]


def run_examples(runs_dir: str | os.PathLike, run_id: str) -> dict[str, Example]:
    """The run's examples by id (gold answers and passages; read once while ``examples.jsonl`` is unchanged)."""
    # a few runs' at a time: the drill-down and the comparison read one or two
    return _cached_file(_EXAMPLES, 8, _root(runs_dir) / run_id / EXAMPLES, lambda p: {e.id: e for e in load_examples(p)})


#: ``(path, mtime_ns, size) -> {id: Example}`` of the runs' examples files last read.
_EXAMPLES: dict[tuple[str, int, int], dict[str, Example]] = {}


def run_gold(runs_dir: str | os.PathLike, run_id: str) -> dict[str, str]:
    """Each example id's gold aliases joined by " | ", from the run's ``examples.jsonl`` (only ``id`` and ``answers``
    are kept, so many runs' stay cached: the drill-down of a 1M-trajectory root moves between runs)."""

    def read(p: Path) -> dict[str, str]:
        gold = {}
        with p.open(encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    gold[str(d["id"])] = " | ".join(as_answers(d.get("answers")))
                except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as e:
                    raise ValueError(f"{p}:{i}: not a valid example line ({e!r})") from e
        return gold

    return _cached_file(_GOLD, 256, _root(runs_dir) / run_id / EXAMPLES, read)


#: ``(path, mtime_ns, size) -> {id: "alias | alias"}`` of the runs' examples files last read.
_GOLD: dict[tuple[str, int, int], dict[str, str]] = {}


def gold_answers(runs_dir: str | os.PathLike, run_id: str, example_ids: Any) -> list[str | None]:
    """The gold aliases of each example id, joined by " | " (None where the run has no such example)."""
    gold = run_gold(runs_dir, run_id)
    ids = example_ids.tolist() if hasattr(example_ids, "tolist") else list(example_ids)
    return [gold.get(e) or None if isinstance(e, str) else None for e in ids]


@dataclass(frozen=True)
class TrajectoryFilter:
    """Which of a run's trajectories :func:`run_trajectories` lists, with the semantics of the inspector's filters
    (``workbench.eval.filters.filter_trajectories``); each field's default is no filter."""

    correct: bool | None = None
    """True: right answers only, False: wrong ones only (cover-EM = 1, or F1 >= ``f1_threshold`` with
    ``correct_metric="f1"``); a trajectory without a score passes neither."""
    correct_metric: str = "cem"
    f1_threshold: float = 0.5
    methods: tuple[str, ...] = ()
    """Methods allowed (none given: all)."""
    hops: tuple[int, ...] = ()
    """Hop counts allowed (none given: all; a trajectory of unknown hop count passes only then)."""
    score: tuple[float, float] | None = None
    """An inclusive ``(low, high)`` range of ``score_metric``; a missing score is outside every range."""
    score_metric: str = "f1"
    text: str = ""
    """A case-insensitive substring, taken literally, of the question, the answer, the gold aliases or the transcript
    (every turn's text)."""
    evidence: str | None = None
    """How many of the question's gold passages the searches returned (``workbench.rewards.gold_evidence``:
    ``all``, ``some``, ``none``, or ``no-gold`` for a question without supporting facts), read from the run's
    ``features.parquet`` (``n_gold_passages`` and the exact recall, ``recall_id`` else ``recall_title``, which count
    :func:`~workbench.rewards.gold_evidence.gold_retrievals`); a trajectory whose recall is unknown (a failed one, a
    run without features) passes none of them."""

    def __post_init__(self):
        # lists and numpy values as given by widgets, held as tuples of plain values: filters compare by value
        object.__setattr__(self, "methods", tuple(str(m) for m in self.methods))
        object.__setattr__(self, "hops", tuple(int(h) for h in self.hops))
        if self.score is not None:
            object.__setattr__(self, "score", (float(self.score[0]), float(self.score[1])))
        if self.correct_metric not in CORRECT_METRICS:
            raise ValueError(f"correct_metric {self.correct_metric!r}; valid: {', '.join(CORRECT_METRICS)}")
        if self.score_metric not in ANSWER_METRICS:
            raise ValueError(f"score_metric {self.score_metric!r}; valid: {', '.join(ANSWER_METRICS)}")
        if self.evidence is not None and self.evidence not in EVIDENCE_KINDS:
            raise ValueError(f"evidence {self.evidence!r}; valid: {', '.join(EVIDENCE_KINDS)}")

    def __bool__(self) -> bool:
        return self != TrajectoryFilter()

    def describe(self) -> list[str]:
        """The active filters as short phrases, as the inspector names them ([] when none is set).

        >>> TrajectoryFilter(correct=False, hops=(3, 4), text="Ostrevia").describe()
        ['hops 3, 4', 'answer wrong (cover-EM)', 'text “Ostrevia”']
        """
        out = describe_filters(method=list(self.methods) or None, hops=list(self.hops) or None, correct=self.correct,
                               correct_metric=self.correct_metric, f1_threshold=self.f1_threshold)
        if self.score is not None:
            out.append(f"{self.score_metric} {self.score[0]:g}–{self.score[1]:g}")
        if self.evidence is not None:
            out.append(EVIDENCE_KINDS[self.evidence])
        return out + describe_filters(text=self.text)

    def where(self, gold: dict[str, str], evidence: Path | None = None) -> tuple[str, list[Any]]:
        """``(sql, params)``: this filter as a WHERE condition over ``t`` ("TRUE" when none is set). Every value is a
        parameter, never a piece of the SQL text (the text is typed by whoever opens the page). ``gold``: each example
        id's aliases (:func:`run_gold`), searched here in Python: they live in ``examples.jsonl``. ``evidence``: the
        run's features table (:func:`run_evidence`), which the ``evidence`` filter reads (None: no row passes it)."""
        conds, params = [], []
        if self.methods:
            conds.append("list_contains(?::VARCHAR[], method)")
            params.append([str(m) for m in self.methods])
        if self.hops:
            conds.append("list_contains(?::INTEGER[], hops)")
            params.append([int(h) for h in self.hops])
        if self.correct is not None:  # a NULL score compares as neither
            cut = 0.5 if self.correct_metric == "cem" else float(self.f1_threshold)  # cover-EM is 0 or 1
            conds.append(f"{self.correct_metric} {'>=' if self.correct else '<'} ?")
            params.append(cut)
        if self.score is not None:
            conds.append(f"{self.score_metric} BETWEEN ? AND ?")
            params += list(self.score)
        if self.text:
            needle = self.text.lower()
            in_gold = [e for e, aliases in gold.items() if needle in aliases.lower()]
            conds.append("(" + " OR ".join(f"contains(lower(COALESCE({c}, '')), ?)" for c in
                                          ("question", "answer", "response_text"))
                         + " OR list_contains(?::VARCHAR[], example_id))")
            params += [needle, needle, needle, in_gold]
        if self.evidence is not None:
            conds.append(_evidence_sql(self.evidence, evidence))
            params += [str(evidence)] if evidence is not None else []
        return " AND ".join(conds) or "TRUE", params


def _evidence_sql(kind: str, path: Path | None) -> str:
    """The ``evidence`` filter over ``t``: the row's features (matched on position and id, as ``failures.py`` matches
    them) have ``kind``'s gold passage counts; the one parameter is the features file."""
    if path is None:
        return "FALSE"
    cols = set(file_columns(path))

    def num(c: str) -> str:  # NaN (an older file's missing value; above every number in DuckDB) read as NULL
        return f"NULLIF(CAST(g.{c} AS DOUBLE), 'NaN'::DOUBLE)" if c in cols else "CAST(NULL AS DOUBLE)"

    n, r = num("n_gold_passages"), f"COALESCE({num('recall_id')}, {num('recall_title')})"
    cond = {"no-gold": f"{n} = 0", "all": f"{n} > 0 AND {r} >= 1", "some": f"{n} > 0 AND {r} > 0 AND {r} < 1",
            "none": f"{n} > 0 AND {r} = 0"}[kind]
    return (f'EXISTS (SELECT 1 FROM read_parquet(?, file_row_number=true) AS g WHERE g.file_row_number = t."row" '
            f"AND g.id = t.id AND {cond})")


def run_evidence(runs_dir: str | os.PathLike, run_id: str) -> Path | None:
    """The run's ``features.parquet`` when it tells how much gold evidence each trajectory retrieved (its
    ``n_gold_passages`` and an exact recall column); None otherwise (no table, an older one, or one that does not
    read), when the drill-down offers no evidence filter."""
    p = _root(runs_dir) / run_id / FEATURES_FILE
    try:
        cols = set(file_columns(p))
    except Exception:  # noqa: BLE001 - a missing or unreadable table: no evidence to filter by
        return None
    return p if {"id", "n_gold_passages"} <= cols and cols & {"recall_id", "recall_title"} else None


def run_trajectories(runs_dir: str | os.PathLike, run_id: str, limit: int | None = None,
                     offset: int = 0, filters: TrajectoryFilter | None = None) -> pd.DataFrame:
    """The trajectories of one run: row, id, method, question, answer, gold (the example's aliases, from
    ``examples.jsonl``), cem, f1, n_searches, finish_reason.

    ``row`` (position in the file) identifies a trajectory: ids repeat across methods. Only these
    columns are read (never the turns, unless a text filter searches them); ``limit`` / ``offset`` page through a big
    run: rows ``offset .. offset + limit - 1`` of those that pass ``filters``, in file order (how many pass:
    :func:`count_trajectories`).
    """
    src = trajectory_sources(runs_dir)
    if run_id not in src.files:
        return pd.DataFrame(columns=TRAJECTORY_COLUMNS)
    t = _Trajectories({run_id: src.files[run_id]})
    columns = ", ".join(f'"{c}"' for c in TRAJECTORY_COLUMNS if c != "gold")
    if filters:
        where, params = filters.where(run_gold(runs_dir, run_id), run_evidence(runs_dir, run_id))
        page = " LIMIT ? OFFSET ?" if limit is not None else " OFFSET ?"
        params += [int(limit), int(offset)] if limit is not None else [int(offset)]
        df = t.df(f'SELECT {columns}, example_id FROM t WHERE {where} ORDER BY "row"{page}', params)
    else:  # a range of positions, not LIMIT/OFFSET after a sort: DuckDB skips the row groups outside it
        end = f' AND "row" < {int(offset) + int(limit)}' if limit is not None else ""
        df = t.df(f'SELECT {columns}, example_id FROM t WHERE "row" >= {int(offset)}{end} ORDER BY "row"')
    df.insert(TRAJECTORY_COLUMNS.index("gold"), "gold", gold_answers(runs_dir, run_id, df.pop("example_id")))
    return df


def count_trajectories(runs_dir: str | os.PathLike, run_id: str, filters: TrajectoryFilter | None = None) -> int:
    """How many of a run's trajectories pass ``filters`` (without filters: the file's size, from its footer)."""
    if not filters:
        return run_size(runs_dir, run_id)
    src = trajectory_sources(runs_dir)
    if run_id not in src.files:
        return 0
    where, params = filters.where(run_gold(runs_dir, run_id), run_evidence(runs_dir, run_id))
    n = _Trajectories({run_id: src.files[run_id]}).df(f"SELECT count(*) AS n FROM t WHERE {where}", params)["n"][0]
    return int(n)


def run_facets(runs_dir: str | os.PathLike, run_id: str) -> tuple[list[str], list[int]]:
    """The methods and the known hop counts of a run's trajectories (sorted): what its filters offer."""
    src = trajectory_sources(runs_dir)
    if run_id not in src.files:
        return [], []
    df = _Trajectories({run_id: src.files[run_id]}).df("SELECT DISTINCT method, hops FROM t")
    return (sorted({str(m) for m in df["method"].dropna()}),
            sorted({int(h) for h in df["hops"].dropna()}))


SOURCE_COLUMNS = ["row", "example_id", "sample_idx", "question", "answer", "em", "cem", "f1", "n_searches",
                  "n_policy_tokens", "finish_reason"]


def source_rows(runs_dir: str | os.PathLike, run_id: str, method: str) -> pd.DataFrame:
    """One method's trajectories of one run, for comparing it with another (``workbench.eval.compare.pair_table``):
    row, example_id, sample_idx, question, answer, em, cem, f1, n_searches, n_policy_tokens, finish_reason, and
    ``gold`` (the aliases, a list)."""
    src = trajectory_sources(runs_dir)
    if run_id not in src.files:
        return pd.DataFrame(columns=[*SOURCE_COLUMNS, "gold"])
    t = _Trajectories({run_id: src.files[run_id]}, src.columns)
    columns = ", ".join(f'"{c}"' for c in SOURCE_COLUMNS)
    df = t.df(f'SELECT {columns} FROM t WHERE method = ? ORDER BY "row"', [method])
    ex = run_examples(runs_dir, run_id)
    df["gold"] = [ex[e].answers if e in ex else None for e in df["example_id"]]
    return df


def run_size(runs_dir: str | os.PathLike, run_id: str) -> int:
    """How many trajectories a run's file holds (from its Parquet footer; 0 if unreadable or missing)."""
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(_root(runs_dir) / run_id / TRAJECTORIES).num_rows)
    except Exception:  # noqa: BLE001 - the runs table reports unreadable files
        return 0


def load_trajectory(runs_dir: str | os.PathLike, run_id: str, row: int) -> Trajectory:
    """One full trajectory (turns included) of a run, by its ``row`` in :func:`run_trajectories`
    (only the Parquet row group that holds it is read)."""
    from workbench.storage.trajectory_store import read_rows

    return Trajectory.from_row(read_rows(_root(runs_dir) / run_id / TRAJECTORIES, [int(row)])[0])


# --------------------------------------------------------------------------- JSON files (Python)


def _read_json(path: Path) -> Any:
    """A run's JSON file, bounded (``workbench.util.io.read_json``: a device, a giant or too deep a nesting is one
    ``ValueError`` naming the file, which the caller records in the run's ``error`` column)."""
    from workbench.util.io import read_json

    return read_json(path)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def read_step_metrics(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Rows of a ``metrics.jsonl`` and an error text (bad lines are skipped and counted)."""
    rows, bad = read_jsonl(path)
    return rows, (f"{STEP_METRICS}: {bad} unreadable line(s)" if bad else None)


CURVE_COLUMNS = ["run_id", "step", "metric", "value"]


def training_curves(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Every numeric column of every run's ``metrics.jsonl``, long format: run_id, step, metric, value, and the run's
    ``status``.

    ``step`` is the row's ``step`` field (its line number when absent).
    """
    out = []
    for d in run_dirs(runs_dir):
        p = d / STEP_METRICS
        if not p.exists():
            continue
        try:
            rows, _ = read_step_metrics(p)
        except (OSError, ValueError):  # an unreadable file leaves its run out of the curves
            continue
        for i, row in enumerate(rows):
            step = _number(row.get("step"))
            step = i if step is None else step
            for k, v in row.items():
                x = _number(v)
                if k != "step" and x is not None:
                    out.append((d.name, step, k, x))
    return _with_status(pd.DataFrame(out, columns=CURVE_COLUMNS), runs_dir)


HEALTH_COLUMNS = ["run_id", "step", "alarm", "what happened", "what it may mean"]


def health_alarms(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """Every health alarm of every training run (``health.jsonl``: ``workbench.rl.health``), newest run first:
    run_id, step, alarm, what happened (the numbers), what it may mean; and the run's ``status``."""
    from workbench.rl.health import read_health

    out = []
    for d in run_dirs(runs_dir):
        try:
            rows = read_health(d)
        except (OSError, ValueError):  # a health file that is not one: that run's alarms are left out
            continue
        for row in rows:
            for a in row.get("fired", []):
                if isinstance(a, dict):
                    out.append((d.name, row["step"], str(a.get("name", "")), str(a.get("text", "")),
                                str(a.get("says", ""))))
    return _with_status(pd.DataFrame(out, columns=HEALTH_COLUMNS), runs_dir)


def curve_metrics(curves: pd.DataFrame) -> list[str]:
    """Metric names present in a :func:`training_curves` frame, ``reward_mean`` first when present."""
    names = sorted(curves["metric"].unique()) if len(curves) else []
    return sorted(names, key=lambda m: (m != "reward_mean", m))


def _summary_value(summary: dict[str, Any], key: str) -> Any:
    """``summary[key]`` (under its summary name, :data:`_SUMMARY_KEYS`); an eval run written before ``n_searches`` had
    its one name calls it ``searches``."""
    if key == "n_searches":
        return summary.get(key, summary.get("searches"))
    return summary.get(_SUMMARY_KEYS.get(key, key))


def summary_metrics(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """The per-method summaries of eval runs' ``metrics.json``: run_id, dataset, method, n, em, cem, f1, ..."""
    rows = []
    for d in run_dirs(runs_dir):
        try:
            cfg, metrics = _read_json(d / CONFIG), _read_json(d / METRICS)
            methods = metrics.get("methods") or {}
            if not isinstance(cfg, dict) or not isinstance(methods, dict):
                continue  # runs_table names the file that is not a JSON object
        except (OSError, ValueError, AttributeError):
            continue
        for method, s in methods.items():
            if isinstance(s, dict):
                rows.append({"run_id": d.name, "dataset": cfg.get("dataset", "?"), "method": method,
                             **{k: _number(_summary_value(s, k)) for k in SUMMARY_METRICS}})
    return pd.DataFrame(rows, columns=["run_id", "dataset", "method", *SUMMARY_METRICS])


def runs_table(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per run: kind, created, model, dataset, methods, trajectory count, main metrics, error.

    Main metrics: for eval runs, em/cem/f1/n_searches of the method with the best F1 in
    ``metrics.json`` (``best_method``); for training runs, steps and the last ``reward_mean``
    of ``metrics.jsonl``. ``error`` lists unreadable or missing files ("" when none).
    """
    root = _root(runs_dir)
    counts = trajectory_counts(runs_dir).set_index("run_id")
    src = trajectory_sources(runs_dir)  # after the counts: files whose data failed them are errors now
    rows = []
    for d in run_dirs(runs_dir):
        rows.append(_run_row(d, counts, src.errors.get(d.name), root))
    df = pd.DataFrame(rows, columns=RUNS_COLUMNS)
    for c in ("n_trajectories", "steps"):
        df[c] = df[c].astype("Int64")
    for c in ("em", "cem", "f1", "n_searches", "reward_mean"):
        df[c] = df[c].astype("float64")
    return df


def run_state(d: Path, root: Path | None = None) -> str:
    """The ``status`` cell of a run directory: complete or incomplete (with the note of
    ``workbench.storage.runs.run_status``), and where a symlinked run points."""
    text = str(run_status(d))
    if d.is_symlink():
        target = d.resolve()
        outside = root is not None and not target.is_relative_to(root.resolve())
        text += f"; symlink to {target}" + (" (outside the runs root)" if outside else "")
    return text


def _run_row(d: Path, counts: pd.DataFrame, traj_error: str | None, root: Path | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in RUNS_COLUMNS}
    row["run_id"] = d.name
    row["status"] = run_state(d, root)
    errors = [traj_error] if traj_error else []
    try:
        cfg = _read_json(d / CONFIG)
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        errors.append(f"{CONFIG}: {type(e).__name__}: {e}")
        cfg = {}
    kind = str(cfg.get("kind", "?"))
    notes = read_notes(d)  # the user's tags (workbench.storage.notes); an unreadable notes.json is an error here
    row["tags"] = ", ".join(notes.tags)
    if notes.error:
        errors.append(notes.error)
    row.update(kind=kind, created=cfg.get("created"), model=cfg.get("model"), dataset=cfg.get("dataset"),
               corpus_setting=cfg.get("corpus_setting"))
    for name in EXPECTED_FILES.get(kind, ()):
        if not (d / name).exists():
            errors.append(f"{name}: missing")
    if d.name in counts.index:
        c = counts.loc[d.name]
        row["n_trajectories"] = int(c["n_trajectories"])
        row["methods"] = c.get("methods")
    if (d / METRICS).exists():
        try:
            methods = _read_json(d / METRICS).get("methods") or {}
            if not isinstance(methods, dict):
                raise ValueError(f"'methods' is a {type(methods).__name__}, not an object")
            summaries = {m: s for m, s in methods.items() if isinstance(s, dict)}
            if summaries:
                best = max(summaries, key=lambda m: _number(summaries[m].get("f1")) or 0.0)
                row["best_method"] = best
                row["methods"] = ", ".join(summaries)
                for k in ("em", "cem", "f1", "n_searches"):
                    row[k] = _number(_summary_value(summaries[best], k))
        except (OSError, ValueError, AttributeError) as e:
            errors.append(f"{METRICS}: {type(e).__name__}: {e}")
    if (d / STEP_METRICS).exists():
        try:
            steps, err = read_step_metrics(d / STEP_METRICS)
            if err:
                errors.append(err)
            # training steps only: a row of held-out (eval_*) or validation (val_*) values alone shares its step
            # number; an imported verl run's step row carries both
            row["steps"] = len({s.get("step", i) for i, s in enumerate(steps)
                                if any(k != "step" and not str(k).startswith(("eval_", "val_")) for k in s)})
            rewards = [_number(s.get("reward_mean")) for s in steps]
            rewards = [r for r in rewards if r is not None]
            row["reward_mean"] = rewards[-1] if rewards else None
        except (OSError, ValueError) as e:
            errors.append(f"{STEP_METRICS}: {type(e).__name__}: {e}")
    row["error"] = "; ".join(errors)
    return row


def comparison_table(*roots: str | os.PathLike) -> pd.DataFrame:
    """Every paired comparison (``comparison.json``, ``workbench.eval.paired``) under the given folders: one row
    per comparison and hop level (``all`` last) with both sides' means, the difference B − A and their 95%
    intervals; ``attrs["errors"]`` names unreadable files (``{path: text}``)."""
    from workbench.eval.paired import find_comparisons

    frames, errors, seen = [], {}, set()
    for path, c in find_comparisons(*roots):
        if path.resolve() in seen:  # one file under two of the roots (a root inside another) is one comparison
            continue
        seen.add(path.resolve())
        if isinstance(c, str):
            errors[str(path)] = c
            continue
        try:
            rows = _comparison_rows(path, c)
        except ValueError as e:  # sides that no longer pair (an edited file)
            errors[str(path)] = f"{path}: {e}"
            continue
        frames.append(rows.assign(comparison=c.name, a_label=c.a.label, b_label=c.b.label, metric=c.metric,
                                  seeds_a=len(c.a.seeds), seeds_b=len(c.b.seeds), file=str(path)))
    cols = ["comparison", "hops", "n", "a_label", "a", "a_lo", "a_hi", "b_label", "b", "b_lo", "b_hi", "diff",
            "diff_lo", "diff_hi", "searches_a", "searches_b", "seeds_a", "seeds_b", "metric", "file"]
    df = pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)
    df["comparison"] = unique_labels(df["comparison"].tolist(), df["file"].tolist())
    df.attrs["errors"] = errors
    return df


#: ``(path, mtime_ns, size) -> Comparison.rows()`` of the comparison files last read: their intervals are bootstraps,
#: and every page the dashboard builds shows them.
_COMPARISON_ROWS: dict[tuple[str, int, int], pd.DataFrame] = {}


def _comparison_rows(path: Path, c: Any) -> pd.DataFrame:
    """``c.rows()`` of the comparison read from ``path``, computed once while the file is unchanged."""
    rows = _cached_file(_COMPARISON_ROWS, 256, path, lambda p: _stored_rows(p, c))
    return rows.copy() if isinstance(rows, pd.DataFrame) else c.rows()  # {}: the file went away since it was read


@functools.cache
def _rows_code() -> bytes:
    """What ``Comparison.rows`` depends on besides the file: the code of its intervals and scipy's version."""
    import scipy

    from workbench.eval import paired

    return Path(paired.__file__).read_bytes() + scipy.__version__.encode()


def _stored_rows(path: Path, c: Any) -> pd.DataFrame:
    """``c.rows()``, kept on disk under the cache root by the file's bytes and the code that computes them: the
    intervals are bootstraps (a few seconds over the shipped comparisons), and every dashboard a process builds
    shows them. A cache entry that does not read back as rows is computed again."""
    import hashlib

    from workbench.util.io import atomic_write_text
    from workbench.util.paths import cache_dir

    try:
        key = hashlib.sha256(path.read_bytes() + _rows_code()).hexdigest()
    except OSError:
        return c.rows()
    stored = cache_dir() / "comparison_rows" / f"{key}.json"
    try:
        records = json.loads(stored.read_text(encoding="utf-8"))
        if isinstance(records, list) and records and all(isinstance(r, dict) and "hops" in r for r in records):
            return pd.DataFrame(records)
    except (OSError, ValueError):
        pass
    rows = c.rows()
    try:
        stored.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stored, json.dumps(rows.to_dict("records")))
    except (OSError, TypeError, ValueError):  # a read-only cache, or a value JSON cannot hold: computed each time
        pass
    return rows


def unique_labels(labels: list[str], files: list[str]) -> list[str]:
    """Each comparison's label, unique by construction: where files that are not the same carry one label, each
    gets the folders that tell them apart (``deep recipe: SFT vs RL (deep_outline/sft_vs_rl)``), so two comparisons
    never share a row of a table or of the forest plot."""
    by_label: dict[str, set[str]] = {}
    for label, f in zip(labels, files):
        by_label.setdefault(label, set()).add(f)
    out = []
    for label, f in zip(labels, files):
        clash = sorted(by_label[label])
        if len(clash) < 2:
            out.append(label)
            continue
        parts = [Path(x).parent.parts for x in clash]  # the folders holding each comparison.json
        depth = 1
        while depth < max(map(len, parts)) and len({p[-depth:] for p in parts}) < len(parts):
            depth += 1
        out.append(f"{label} ({'/'.join(Path(f).parent.parts[-depth:])})")
    return out
