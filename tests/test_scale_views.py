"""The views at scale, at small scale: synthetic runs from ``bench/bench_scale.py`` (3 runs × 2,000
trajectories in the real layout). The lazy paths (DuckDB over the Parquet files) must give what a direct pandas
computation over the whole files gives, and opening the views must not read the text columns: a test that fails
if someone makes them eager again (text columns requested, whole files read, every trajectory built)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from widgets import inspector_data
from widgets.inspector import PAGE, load_inspector_data, trajectory_inspector
from workbench.core.trajectory import Trajectory
from workbench.dashboard import queries as q
from workbench.eval.filters import filter_trajectories
from workbench.methods import get_preset
from workbench.storage import trajectory_store as store
from workbench.storage.runs import Run, list_runs

RUNS, PER_RUN = 3, 2000
#: Columns a table must never read: the prompt, the turns, token ids and logprobs.
TEXT_COLUMNS = {"prompt_text", "response_text", "turns_json", "prompt_ids", "response_ids", "response_loss_mask",
                "response_logprobs"}


def _bench():
    path = Path(__file__).resolve().parent.parent / "bench" / "bench_scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_scale", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    _bench().generate(out, RUNS, PER_RUN, quiet=True, variants=1)  # one distinct trajectory per group: fast
    return out


@pytest.fixture(scope="module")
def full(root):
    """Every run's whole trajectories file in pandas (the eager reference), with its run id."""
    parts = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        df = pq.read_table(d / "trajectories.parquet").to_pandas()
        parts.append(df.assign(run_id=d.name, row=np.arange(len(df))))
    return pd.concat(parts, ignore_index=True)


# --------------------------------------------------------------------------- the dashboard's queries


def test_dashboard_aggregates_match_pandas(root, full):
    got = q.method_metrics(root).set_index(["run_id", "method"]).sort_index()
    want = full.groupby(["run_id", "method"]).agg(n=("id", "size"), f1=("f1", "mean"), cem=("cem", "mean"),
                                                    n_searches=("n_searches", "mean")).sort_index()
    assert list(got.index) == list(want.index) and got["n"].tolist() == want["n"].tolist()
    for c in ("f1", "cem", "n_searches"):
        assert got[c].to_numpy() == pytest.approx(want[c].to_numpy())
    hops = q.hop_breakdown(root).set_index(["run_id", "method", "hops"]).sort_index()
    assert hops["n"].tolist() == full.groupby(["run_id", "method", "hops"]).size().sort_index().tolist()
    runs = q.runs_table(root).set_index("run_id")
    assert runs["n_trajectories"].to_dict() == full.groupby("run_id").size().to_dict()


def test_drilldown_pages_and_one_transcript(root, full):
    rid = sorted(full["run_id"].unique())[1]
    one = full[full["run_id"] == rid].reset_index(drop=True)
    page = q.run_trajectories(root, rid, limit=50, offset=1200)
    assert page["row"].tolist() == list(range(1200, 1250))
    assert page["id"].tolist() == one["id"].iloc[1200:1250].tolist()
    assert len(q.run_trajectories(root, rid)) == PER_RUN  # no limit: the whole table, as before
    table = pq.read_table(root / rid / "trajectories.parquet")
    for row in (0, 777, PER_RUN - 1):
        want = Trajectory.from_row(table.slice(row, 1).to_pylist()[0])  # as load_trajectories reads it
        assert q.load_trajectory(root, rid, row).to_dict() == want.to_dict()
    with pytest.raises(KeyError, match=f"no trajectory at row {PER_RUN}"):
        q.load_trajectory(root, rid, PER_RUN)


# --------------------------------------------------------------------------- the inspector


class _Spy:
    """Records the columns the table reads and the rows read whole; whole-file readers raise."""

    def __init__(self, monkeypatch):
        self.columns: set[str] = set()
        self.rows: list[int] = []
        read_columns, read_rows = store.read_columns, store.read_rows

        def columns(path, cols, limit=None):
            self.columns |= set(cols)
            return read_columns(path, cols, limit)

        def rows(path, rws):
            self.rows += list(rws)
            return read_rows(path, rws)

        def eager(*a, **k):
            raise AssertionError("a whole trajectories file was read")

        for mod in (inspector_data, store):
            monkeypatch.setattr(mod, "read_columns", columns)
        monkeypatch.setattr(store, "read_rows", rows)
        monkeypatch.setattr(Run, "trajectories", eager)
        monkeypatch.setattr(Run, "trajectories_frame", eager)


def test_inspector_table_is_lazy_and_matches_pandas(root, full, monkeypatch):
    spy = _Spy(monkeypatch)
    data = load_inspector_data(list_runs(root), max_items=None)
    assert not spy.columns & TEXT_COLUMNS, f"the table read text columns {spy.columns & TEXT_COLUMNS}"
    assert spy.rows == []  # no trajectory built to draw the table (features.parquet covers the failures)
    f = data.frame.set_index(["run", "row"]).sort_index()
    ref = full.set_index(["run_id", "row"]).sort_index()
    assert len(f) == RUNS * PER_RUN and (f["id"] == ref["id"]).all() and (f["method"] == ref["method"]).all()
    assert f["n_searches"].tolist() == ref["n_searches"].tolist() and f["f1"].to_numpy() == pytest.approx(ref["f1"])
    assert f["hops"].tolist() == ref["hops"].astype(float).tolist()
    assert (f["failed"] != "").sum() == ref["turns_json"].str.contains('"error": "', regex=False).sum() > 0

    frame = data.frame
    for kw, mask in (({"method": "dspo"}, frame["method"] == "dspo"),
                     ({"hops": [2, 3]}, frame["hops"].isin([2.0, 3.0])),
                     ({"searches": (2, 3)}, frame["n_searches"].between(2, 3))):
        assert filter_trajectories(frame, **kw) == np.flatnonzero(mask.to_numpy()).tolist()
    corpus = (full["question"] + "\n" + full["response_text"] + "\n" + full["answer"].fillna("")).str.lower()
    order = frame.set_index(["run", "row"]).index.get_indexer(pd.MultiIndex.from_frame(full[["run_id", "row"]]))
    for word in ("Timed Out", "prize", "(1-17)?", "no such words anywhere"):
        want = np.sort(order[corpus.str.contains(word.lower(), regex=False).to_numpy()])
        assert data.search(word).tolist() == want.tolist(), word
    rid = data.runs[1].id  # a run filter scans that run's file only
    assert data.search("prize", runs=rid).tolist() == [i for i in data.search("prize") if frame.at[i, "run"] == rid]


def test_inspector_widget_reads_only_the_shown_trajectory(root, full, monkeypatch):
    spy = _Spy(monkeypatch)
    ins = trajectory_inspector(list_runs(root), max_items=None).inspector
    assert len(spy.rows) == 1 and len(ins.pick.options) == PAGE  # one transcript, one page of the picker
    got = ins.set_filters(method="dynasearcher", hops=2, text="prize")
    f = ins.frame
    want = [i for i in range(len(f)) if f.at[i, "method"] == "dynasearcher" and f.at[i, "hops"] == 2]
    texts = {(r.run_id, r.row): r for r in full.itertuples()}
    want = [i for i in want if "prize" in (texts[(f.at[i, "run"], f.at[i, "row"])].response_text.lower()
                                           + texts[(f.at[i, "run"], f.at[i, "row"])].question.lower())]
    assert got == want and len(got) > PAGE
    for preset in ("dspo", "dynasearcher"):  # the breakdown over the matches: those rows of the table, not re-scored
        ins.preset_w.value = preset
        want_bd = get_preset(preset)(ins.data.features.iloc[ins.matches]).breakdown
        pd.testing.assert_frame_equal(ins._breakdown[2], want_bd)
    ins.set_filters(text="")
    ins.pick.value = ins.matches[PAGE - 1]
    n_read = len(spy.rows)
    nxt = ins.step(+1)  # past the page: the picker moves to the next page
    assert nxt == ins.matches[PAGE] and [v for _, v in ins.pick.options][0] == nxt
    assert len(spy.rows) == n_read + 1 and ins.frame.at[nxt, "id"] in ins.transcript.value


# --------------------------------------------------------------------------- failure counts, search pages, notebook 01


class _CountingCursor:
    """Wraps ``trajectory_store.cursor``: records the SQL of every query."""

    def __init__(self, monkeypatch, module):
        self.sql: list[str] = []
        real = store.cursor

        def cursor():
            con = real()
            spy = self

            class C:
                def execute(self, sql, *a, **k):
                    spy.sql.append(sql)
                    return con.execute(sql, *a, **k)

            return C()

        monkeypatch.setattr(module, "cursor", cursor)


def test_failure_counts_are_one_query_then_cached(root, monkeypatch):
    from workbench.dashboard import failures as fq

    def no_pandas(*a, **k):
        raise AssertionError("failure counts read a features table with pandas")

    monkeypatch.setattr(pd, "read_parquet", no_pandas)
    monkeypatch.setattr(fq, "_COUNTS", {})
    spy = _CountingCursor(monkeypatch, fq)
    got = fq.failure_counts(root).set_index("run_id")["failed"].to_dict()
    assert len(spy.sql) == 1, spy.sql  # every run's table in one query, not one per run
    assert not TEXT_COLUMNS & set(spy.sql[0].replace('"', " ").split())
    want = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        f = pq.read_table(d / "features.parquet").to_pandas()
        flags = (f[["failed_tool", "backend_error", "failed_judge", "failed_evidence"]].fillna(0).astype(float) > 0)
        want[d.name] = int((flags.any(axis=1) | f["failure"].fillna("").ne("")).sum())
    assert got == want and sum(want.values()) > 0
    assert fq.failure_counts(root).set_index("run_id")["failed"].to_dict() == want and len(spy.sql) == 1  # cached
    one = sorted(want)[0]
    feats = root / one / "features.parquet"
    original = pq.read_table(feats)
    pq.write_table(original.slice(0, 100), feats)  # a changed table is counted again, alone
    try:
        again = fq.failure_counts(root).set_index("run_id")["failed"].to_dict()
    finally:
        pq.write_table(original, feats)
    assert len(spy.sql) == 2 and again[one] < want[one] and {k: v for k, v in again.items() if k != one} == {
        k: v for k, v in want.items() if k != one}


def test_text_search_stops_at_max_hits(root):
    data = load_inspector_data(list_runs(root), max_items=None)
    every = data.search("prize")
    assert len(every) > 500
    for n in (1, 37, 500):
        assert data.search("prize", max_hits=n).tolist() == every[:n].tolist()
    assert data.search("no such words anywhere", max_hits=10).tolist() == []


def test_notebook_trajectory_table_reads_no_text(root, full, monkeypatch):
    from workbench.eval import report

    spy = _Spy(monkeypatch)  # whole-file readers raise
    sql = _CountingCursor(monkeypatch, store)
    run = list_runs(root)[0]
    df = report.trajectory_table(run)
    read = set(" ".join(sql.sql).replace('"', " ").replace(",", " ").split())
    assert not TEXT_COLUMNS & read and not TEXT_COLUMNS & set(df.columns) and spy.rows == []
    ref = full[full["run_id"] == run.id].reset_index(drop=True)
    assert df["id"].tolist() == ref["id"].tolist() and df["method"].tolist() == ref["method"].tolist()
    assert df["hops"].tolist() == ref["hops"].tolist() and df["f1"].to_numpy() == pytest.approx(ref["f1"].to_numpy())
    summary = report.method_summary(df)
    assert summary["n"].to_dict() == ref.groupby("method").size().to_dict()
