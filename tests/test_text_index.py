"""The word index for full-text search (``workbench.storage.text_index``): the same rows as a scan for every kind of query,
rebuilt when its file changes, a scan where it cannot help or cannot be written, and actually used."""

from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workbench.storage import text_index as ti
from workbench.storage import trajectory_store as store

TEXTS = [
    ("Who directed Glass Orchard?", "<search> Glass Orchard director </search>", "Maren Ostvik"),
    ("Where was Maren born?", "<think> Maren Ostvik was born in Hallervik. </think>", "Hallervik"),
    ("Which prize?", "search failed: tool timed out after 10 s", None),
    ("Zürich or Genève?", "<answer> Zürich </answer>", "Zürich"),
    ("What is (1-17)?", "Doc 1(Title: Vikfir (0-0)) the spouse of Olsby", "the spouse"),
    ("Empty", "", ""),
    ("SHOUTING HALLERVIK", "hallerviks and prehallervik", "x"),
]
QUERIES = ["hallervik", "Hallervik", "HALLERVIK", "allervi", "Glass Orch", "lass Orchard director", "Maren Ostvik",
           "ostvik was", "</search>", "<search>", "timed out", "(1-17)?", "Vikfir (0-0)", "Zürich", "rich", "Genève",
           "the spouse of", "the spouse", "e", "zz", "no such words anywhere", "10 s", ". </think>", "Title:"]


def _write(path, rows, row_group_size=3):
    table = pa.table({"question": [r[0] for r in rows], "response_text": [r[1] for r in rows],
                      "answer": pa.array([r[2] for r in rows], pa.string())})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _files(tmp_path, n=3):
    rng = random.Random(0)
    out = []
    for k in range(n):
        rows = [TEXTS[rng.randrange(len(TEXTS))] for _ in range(40)]
        d = tmp_path / f"run{k}"
        d.mkdir()
        out.append(_write(d / "trajectories.parquet", rows))
    return out


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_index_gives_the_scans_rows_for_every_query(tmp_path):
    files = _files(tmp_path)
    assert store.search_rows(files, "hallervik")  # no index yet: scanned, and the indexes are built behind it
    ti.wait_for_builds()
    for q in QUERIES:
        for limit, hits in ((None, None), (25, None), (None, 7), (None, 1)):
            want = store._scan_rows(files, q, limit, store.SEARCH_COLUMNS, hits)
            assert _same(store.search_rows(files, q, limit=limit, max_hits=hits), want), (q, limit, hits)
    assert all(ti.fresh_index(f) is not None for f in files)


def test_dense_and_rare_words_and_too_many_candidates(tmp_path, monkeypatch):
    files = _files(tmp_path)
    for f in files:
        ti.ensure_index(f)
    monkeypatch.setattr(ti, "SCAN_SHARE", 0.0)  # every file with candidates is "too many": scanned
    monkeypatch.setattr(ti, "too_many", lambda c, n: c > 0 and c > ti.SCAN_SHARE * n)
    for q in ("the spouse of", "hallervik", "Maren Ostvik"):
        assert _same(store.search_rows(files, q), store._scan_rows(files, q, None, store.SEARCH_COLUMNS, None)), q
    monkeypatch.undo()
    monkeypatch.setattr(store, "VERIFY_ROWS", 0)  # every phrase's candidates are too many to check: scanned
    scans = []
    real = store._scan_rows
    monkeypatch.setattr(store, "_scan_rows", lambda *a: scans.append(a[1]) or real(*a))
    for q in ("Maren Ostvik", "hallervik"):
        assert _same(store.search_rows(files, q), real(files, q, None, store.SEARCH_COLUMNS, None)), q
    assert scans == ["Maren Ostvik"]  # the one-word query is still answered from the index


def test_query_words_say_where_each_word_sits():
    assert ti.query_words("hallervik") == [("hallervik", "inside")]
    assert ti.query_words("a b c") == [("a", "suffix"), ("b", "exact"), ("c", "prefix")]
    assert ti.query_words(" x.") == [("x", "exact")]
    assert ti.query_words("</search>") == [("search", "exact")] and ti.query_words("?!") == []
    assert ti.answers_alone("Hallervik") and not ti.answers_alone("Hallervik ") and not ti.answers_alone("Zürich")


def test_a_changed_file_gets_a_new_index(tmp_path):
    (f,) = _files(tmp_path, 1)
    idx = ti.ensure_index(f)
    assert store.search_rows([f], "kestrel") == {}
    _write(f, [("q", "a kestrel flew", None)] * 5)
    os.utime(f, ns=(1, 1))  # a new mtime even on a coarse clock
    assert ti.fresh_index(f) is None  # stale: the stamp names the old file
    assert store.search_rows([f], "kestrel")[0].tolist() == [0, 1, 2, 3, 4]  # scanned while it is rebuilt
    ti.wait_for_builds()
    assert ti.fresh_index(f) == idx
    assert store.search_rows([f], "kestrel")[0].tolist() == [0, 1, 2, 3, 4]  # from the new index


def test_no_index_means_a_scan_and_the_search_still_answers(tmp_path, monkeypatch):
    files = _files(tmp_path)

    def refuse(path):
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(ti, "build_index", refuse)
    want = store._scan_rows(files, "Maren Ostvik", None, store.SEARCH_COLUMNS, None)
    for _ in range(2):
        assert _same(store.search_rows(files, "Maren Ostvik"), want) and want
        ti.wait_for_builds()  # the background build failed quietly; the next search scans again
    assert not any(ti.index_path(f).exists() for f in files)


def test_a_rare_word_reads_no_text(tmp_path, monkeypatch):
    files = _files(tmp_path)
    for f in files:
        ti.ensure_index(f)
    calls = []
    monkeypatch.setattr(store, "_scan_rows", lambda *a, **k: calls.append(a) or {})
    monkeypatch.setattr(store, "verify_rows", lambda *a, **k: calls.append(a) or np.array([], dtype=np.int64))
    hits = store.search_rows(files, "Hallervik")
    assert hits and calls == []  # answered from the index alone
    store.search_rows(files, "Glass Orchard")
    assert calls and all(c[0] != files for c in calls)  # checked candidates, no scan of every file


def test_run_write_trajectories_writes_the_index(tmp_path):
    from workbench.core.trajectory import Trajectory
    from workbench.storage.runs import Run

    run = Run.create(tmp_path, kind="eval", name="t")
    traj = Trajectory(id="t0", example_id="e0", question="Who wrote Hallervik Tales?", protocol="direct", prompt_ids=[1, 2])
    path = run.write_trajectories([traj])
    assert ti.fresh_index(path) is not None
    assert store.search_rows([path], "hallervik") == {0: np.array([0])}


def test_vocabularies_of_recent_run_sets_are_kept(tmp_path, monkeypatch):
    files = _files(tmp_path)
    for f in files:
        ti.ensure_index(f)
    monkeypatch.setattr(ti, "_VOCAB", ti.OrderedDict())
    reads = []
    for fs in (files, files[:1], files, files[1:2], files[2:], files[:2], files):
        store.search_rows(fs, "hallervik")
        reads.append(len(ti._VOCAB))
    # all, one, all again (kept), another, another (4 sets), a fifth set evicts the oldest (the first single file)
    assert reads == [1, 2, 2, 3, 4, 4, 4]
    assert tuple(str(f) for f in (ti.index_path(x) for x in files)) in {tuple(p for p, _ in k) for k in ti._VOCAB}
