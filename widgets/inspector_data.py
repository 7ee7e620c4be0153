"""The trajectory inspector's data: one table row per trajectory, read lazily.

The table is built from the scalar columns of each run's ``trajectories.parquet`` (DuckDB reads only
those: never the prompt, turns, token ids or logprobs), the run's ``features.parquet`` and
``examples.jsonl``. A :class:`~workbench.core.trajectory.Trajectory` is read from disk when the inspector
opens it (:class:`~workbench.storage.trajectory_store.LazyTrajectories`), and full-text search runs in DuckDB
over the files (:meth:`InspectorData.search`). Two cases read more: a run without ``features.parquet``
(its features are computed in memory from every trajectory: small runs only) and a run whose failure
columns are missing (the rows that may hold a failed call are read to say what failed). Counts
(``n_turns``, ``n_searches``...) are the file's stored columns, as the dashboard shows them: a file written
before a count's definition changed keeps its old value (the demo run counts 2 searches cut off by the turn
limit that ``Trajectory.n_searches`` no longer counts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.core.trajectory import META_COLUMNS
from workbench.data.example import Example
from workbench.eval.filters import failure_kinds
from workbench.storage.runs import EXAMPLES, TRAJECTORIES, Run, open_run
from workbench.storage.trajectory_store import (
    LazyTrajectories,
    failure_candidates,
    file_columns,
    read_columns,
    search_rows,
)

#: Columns of the inspector table (one row per trajectory), in order.
TABLE_COLUMNS = (
    "run", "row", "source", "id", "example_id", "group_id", "sample_idx", "method", "protocol", "dataset", "hops",
    "question", "answer", "gold", "finish_reason", "failed", "failure", "n_turns", "n_searches", "n_invalid", "n_policy_tokens",
    "em", "cem", "f1", "format_ok", "reward", "advantage", "step",
)
#: Features sources: ``auto`` = ``features.parquet``, else computed in memory without embeddings.
FEATURE_MODES = ("auto", "file", "none")
#: Scalar columns of ``trajectories.parquet`` the table reads (where the file has them); nothing else is read.
SCALAR_COLUMNS = ("id", "example_id", "group_id", "sample_idx", "protocol", "question", "answer", "finish_reason",
                  "n_turns", "n_searches", "n_invalid", "n_policy_tokens", "em", "cem", "f1", "format_ok", "reward",
                  "advantage", "step", *META_COLUMNS)
_FAILURE_COUNTS = ("backend_error", "failed_tool", "failed_judge", "failed_evidence")


@dataclass
class InspectorData:
    """The trajectories of some runs as one table plus what the views need.

    ``frame`` has one row per trajectory (``TABLE_COLUMNS``, a RangeIndex); ``trajectories[i]``
    is row ``i``'s :class:`Trajectory` (read from disk when indexed); ``features`` (or None) is
    aligned with the rows (all-NaN rows for a run without features); ``reward_stored`` says whether
    ``frame["reward"]`` came from the runs (a training run) rather than from a preset; ``notes`` say
    where features came from; ``files[k]`` is the trajectories file of ``runs[k]`` and ``offsets[k]``
    the table position of its first row.
    """

    frame: pd.DataFrame
    trajectories: Any
    features: pd.DataFrame | None
    reward_stored: bool
    runs: list[Run]
    notes: list[str] = field(default_factory=list)
    text: pd.Series | None = None
    """A full-text corpus per row (lower-cased), if a caller built one; None: :meth:`search` asks DuckDB."""
    files: list[Path] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    limits: list[int | None] = field(default_factory=list)
    _examples: dict[int, dict[str, Example]] = field(default_factory=dict, repr=False)

    def example(self, i: int) -> Example | None:
        """Row ``i``'s :class:`Example` (gold answers and passages), or None when its run has none for it; a run's
        ``examples.jsonl`` is read when one of its rows is first asked for."""
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1 if self.offsets else -1
        if not 0 <= k < len(self.runs):
            return None
        if k not in self._examples:
            run = self.runs[k]
            self._examples[k] = {e.id: e for e in run.examples()} if run.exists(EXAMPLES) else {}
        return self._examples[k].get(self.frame.at[i, "example_id"])

    def search(self, text: str, runs: Any = None, max_hits: int | None = None) -> np.ndarray:
        """Table positions (sorted) of the rows whose question, turns or answer contain ``text`` (any case);
        ``runs`` (run ids): only those runs' files are scanned (their rows are all that can match);
        ``max_hits``: only the first ``max_hits`` matches in table order (DuckDB stops reading there)."""
        if self.text is not None:
            hits = np.flatnonzero(self.text.str.contains(text.lower(), regex=False).to_numpy())
            return hits[:max_hits]
        want = None if runs is None else {runs} if isinstance(runs, str) else set(runs)
        out = []
        groups: dict[int | None, list[int]] = {}
        for k, lim in enumerate(self.limits):
            if want is None or self.runs[k].id in want:
                groups.setdefault(lim, []).append(k)
        for lim, ks in groups.items():  # each group's first max_hits: together they hold the first max_hits
            for j, rows in search_rows([self.files[k] for k in ks], text, limit=lim, max_hits=max_hits).items():
                out.append(self.offsets[ks[j]] + rows)
        return np.sort(np.concatenate(out))[:max_hits] if out else np.array([], dtype=np.int64)


def _as_runs(runs: Any) -> list[Run]:
    if isinstance(runs, (Run, str)) or hasattr(runs, "__fspath__"):
        return [open_run(runs)]
    out = [open_run(r) for r in runs]
    if not out:
        raise ValueError("trajectory_inspector needs at least one run")
    return out


def _example_fields(run: Run) -> dict[str, tuple[str, int | None, list[str]]]:
    """``{id: (dataset, hops, answers)}`` of the run's ``examples.jsonl`` (as :class:`Example` reads them, without
    building the objects: a 100k-trajectory run has ~12k examples)."""
    if not run.exists(EXAMPLES):
        return {}
    defaults = {f.name: f.default for f in fields(Example)}
    out = {}
    for line in run.file(EXAMPLES).read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            answers = d.get("answers") or []
            answers = [answers] if isinstance(answers, str) else [str(a) for a in answers]
            out[d["id"]] = (d.get("dataset", defaults["dataset"]), d.get("hops"), answers)
    return out


def _run_features(run: Run, df: pd.DataFrame, n_all: int, trajs: Any, examples: dict[str, Any],
                  mode: str) -> tuple[pd.DataFrame | None, str]:
    """The features rows of ``df``'s trajectories (aligned) and a note on where they came from.
    ``trajs()`` reads the trajectories (only when the features must be computed here)."""
    from workbench.rewards import compute_features, load_features

    if mode == "none":
        return None, f"{run.id}: features off"
    try:
        feats, note = load_features(run), f"{run.id}: features from features.parquet"
    except FileNotFoundError:
        if mode == "file":
            return None, f"{run.id}: no features.parquet"
        missing = set(df["example_id"]) - set(examples)
        if missing:
            return None, f"{run.id}: no features.parquet, and {len(missing)} trajectories have no example to score against"
        feats = compute_features(trajs(), run.examples(), encoder=False, cache=False)
        return feats, (f"{run.id}: no features.parquet; features computed here without embeddings "
                       "(recall by title, query similarity NaN)")
    ids = df["id"].to_numpy()
    if len(feats) == n_all and "id" in feats and (feats["id"].to_numpy()[: len(df)] == ids).all():
        return feats.iloc[: len(df)].reset_index(drop=True), note
    if "id" in feats and feats["id"].is_unique and set(ids) <= set(feats["id"]):
        return feats.set_index("id", drop=False).loc[ids].reset_index(drop=True), note
    return None, f"{run.id}: features.parquet does not match the trajectories (ignored)"


def _num(df: pd.DataFrame | None, name: str, n: int) -> np.ndarray:
    if df is None or name not in df.columns:
        return np.full(n, np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(np.float64)


def _meta_values(path: Path, have: set[str], df: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """``dataset``, ``hops``, ``method`` and ``format_ok`` as the trajectory would give them: the typed columns,
    else the keys inside ``meta_json`` / ``flags_json`` (older files; those small JSON columns only)."""
    need = [c for c in ("meta_json", "flags_json") if c in have and (
        (c == "meta_json" and not {"dataset", "hops", "method"} <= have) or (c == "flags_json" and "format_ok" not in have))]
    if not need:
        return df
    js = read_columns(path, need, limit)
    if "meta_json" in need:
        meta = [json.loads(x or "{}") for x in js["meta_json"]]
        for k in ("dataset", "hops", "method"):  # as Trajectory.meta: the JSON wins, but a method column wins over it
            typed = df[k].tolist() if k in df.columns else [None] * len(df)
            df[k] = [t if k == "method" and _given(t) else m.get(k) if m.get(k) is not None else t
                     for m, t in zip(meta, typed)]
    if "flags_json" in need:
        flags = [json.loads(x or "{}") for x in js["flags_json"]]
        df["format_ok"] = [float(bool(f["format_ok"])) if "format_ok" in f else np.nan for f in flags]
    return df


def _failures(run_path: Path, feats: pd.DataFrame | None, n: int, limit: int | None,
              trajs: LazyTrajectories) -> tuple[np.ndarray, np.ndarray]:
    """The ``failed`` kinds and ``failure`` lines per row: from the features' failure columns; the rows those
    do not cover are read from disk only if they may hold a failed call (:func:`failure_candidates`)."""
    from workbench.rewards.features import failed_tool_calls, trajectory_failures

    counts = {k: _num(feats, k, n) for k in _FAILURE_COUNTS}
    text = np.array(feats["failure"].tolist() if feats is not None and "failure" in feats.columns else [None] * n,
                    dtype=object)
    uncovered = np.isnan(counts["backend_error"]) | np.isnan(counts["failed_tool"])
    check = [r for r in failure_candidates(run_path, limit) if r < n and uncovered[r]] if uncovered.any() else []
    for r, t in zip(check, trajs.load(check)):
        if np.isnan(counts["backend_error"][r]):
            counts["backend_error"][r] = float(t.finish_reason == "backend_error")
        if np.isnan(counts["failed_tool"][r]):
            counts["failed_tool"][r] = float(len(failed_tool_calls(t)))
        if not isinstance(text[r], str):
            text[r] = "\n".join(trajectory_failures(t)) or None
    code = sum((np.nan_to_num(counts[k]) > 0).astype(np.int64) << b for b, k in enumerate(_FAILURE_COUNTS))
    names = np.array([failure_kinds(*((c >> b) & 1 for b in range(4))) for c in range(16)], dtype=object)
    text[[not isinstance(x, str) for x in text]] = None
    return names[code], text


def load_inspector_data(runs: Any, max_items: int | None = 500, features: str = "auto") -> InspectorData:
    """Read ``runs`` (a Run, a directory, or a list of them) into an :class:`InspectorData`.

    Args:
        max_items: trajectories read per run (the first ones of its table); None = all.
        features: ``auto`` (``features.parquet``, else computed in memory without embeddings and
            not saved), ``file`` (only ``features.parquet``) or ``none``.
    """
    from workbench.rewards import answer_metrics

    if features not in FEATURE_MODES:
        raise ValueError(f"features={features!r}; valid: {', '.join(FEATURE_MODES)}")
    if max_items is not None and max_items < 0:
        raise ValueError(f"max_items={max_items}; give a number >= 0, or None for all")
    run_list = _as_runs(runs)
    many = len(run_list) > 1
    frames, feats_all, notes, locations, files, offsets, limits = [], [], [], [], [], [], []
    any_feats, stored, offset = False, False, 0
    for run in run_list:
        path = run.file(TRAJECTORIES)
        have = set(file_columns(path))
        df = read_columns(path, [c for c in SCALAR_COLUMNS if c in have], max_items)
        n, n_all = len(df), _n_rows(path)
        trajs = LazyTrajectories([(path, r) for r in range(n)])
        ex = _example_fields(run)  # id -> (dataset, hops, answers): the Example objects only if features are computed
        feats, note = _run_features(run, df, n_all, lambda t=trajs: t.load(range(len(t))), ex, features)
        notes.append(note)
        df = _meta_values(path, have, df, max_items)
        exs = [ex.get(e) for e in df["example_id"]]
        part = pd.DataFrame({"run": run.id, "row": np.arange(n)})
        method = df["method"] if "method" in df.columns else pd.Series([None] * n)
        method = method.where(method.notna() & (method != ""), df["protocol"]).astype(str)
        part["source"] = (run.id + " · " + method) if many else method
        for c in ("id", "example_id", "group_id", "sample_idx"):
            part[c] = df[c].to_numpy()
        part["method"], part["protocol"] = method.to_numpy(), df["protocol"].to_numpy()
        ds_meta = df["dataset"] if "dataset" in df.columns else pd.Series([None] * n)
        part["dataset"] = [e[0] if e is not None else (d if d is not None and d == d else run.config.get("dataset"))
                           for e, d in zip(exs, ds_meta.tolist())]
        hops_meta = df["hops"].tolist() if "hops" in df.columns else [None] * n
        part["hops"] = [e[1] if e is not None and e[1] is not None else h for e, h in zip(exs, hops_meta)]
        for c in ("question", "answer", "finish_reason"):
            part[c] = df[c].to_numpy()
        part["gold"] = [e[2] if e is not None else None for e in exs]  # the example's alias list (shared, not copied)
        part["failed"], part["failure"] = _failures(path, feats, n, max_items, trajs)
        for c in ("n_turns", "n_searches", "n_invalid", "n_policy_tokens"):
            part[c] = df[c].to_numpy()
        own = [m for m in ("em", "cem", "f1") if m in df.columns]  # the run's own scores win (eval runs store them)
        if len(own) < 3:
            scores = [answer_metrics(a, e[2]) if e is not None and e[2] else {}
                      for a, e in zip(df["answer"].tolist(), exs)]
            for m in ("em", "cem", "f1"):
                part[m] = np.array([s.get(m, np.nan) for s in scores], dtype=np.float64)
        for m in (*own, "format_ok"):
            part[m] = _num(df, m, n)
        for col in ("reward", "advantage", "step"):
            part[col] = _num(df, col, n) if col in df.columns else _num(feats, col, n)
        stored |= bool(part["reward"].notna().any())
        frames.append(part[list(TABLE_COLUMNS)])
        locations += trajs.locations
        files.append(path)
        offsets.append(offset)
        limits.append(max_items)
        offset += n
        any_feats |= feats is not None
        feats_all.append(feats if feats is not None else pd.DataFrame(index=range(n)))
    frame = pd.concat(frames, ignore_index=True)
    frame["hops"] = pd.to_numeric(frame["hops"], errors="coerce")
    feats_df = pd.concat(feats_all, ignore_index=True) if any_feats else None
    return InspectorData(frame, LazyTrajectories(locations), feats_df, stored, run_list, notes, None, files, offsets,
                         limits)


def _given(v: Any) -> bool:
    return v is not None and v == v and v != ""


def _n_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows
