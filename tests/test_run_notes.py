"""Runs a researcher can organise: tags and a note stored in the run (``workbench.storage.notes``), the runs table's
tags column and tag filter, and two runs' settings where they differ (``workbench.dashboard.organise``); the page in
headless Chromium."""

from __future__ import annotations

import json

import pytest

from tests.test_dashboard import _served_page
from workbench.dashboard import queries as q
from workbench.dashboard.organise import config_diff, flatten
from workbench.storage.notes import MAX_TAGS, NOTES_FILE, parse_tags, read_notes, write_notes
from workbench.storage.runs import Run

A, B, C = "20261204-100000-eval-a", "20261204-110000-eval-b", "20261204-120000-train-c"


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "runs"
    Run.create(r, kind="eval", run_id=A, config={"model": "m", "dataset": "world", "eval": {"max_turns": 4, "top_k": 3}})
    Run.create(r, kind="eval", run_id=B, config={"model": "m", "dataset": "world", "eval": {"max_turns": 2}})
    Run.create(r, kind="train", run_id=C, config={"model": "m", "dataset": "world"})
    return r


def test_tags_are_checked_and_kept_once_in_order():
    assert parse_tags("baseline, lr-sweep  lr-sweep,seed:0") == ["baseline", "lr-sweep", "seed:0"]
    assert parse_tags(["a/b", " c+d "]) == ["a/b", "c+d"] and parse_tags("") == []
    with pytest.raises(ValueError, match=r"tag '<b>x</b>': 1-40 letters"):
        parse_tags("ok, <b>x</b>")
    with pytest.raises(ValueError, match=f"at most {MAX_TAGS}"):
        parse_tags([f"t{i}" for i in range(MAX_TAGS + 1)])


def test_notes_round_trip_and_a_hostile_file_reads_as_none_with_its_reason(root):
    saved = write_notes(root / A, "baseline, ablation", "the run before the fix")
    assert read_notes(root / A).tags == ["baseline", "ablation"] and read_notes(root / A).note == "the run before the fix"
    assert saved.updated and json.loads((root / A / NOTES_FILE).read_text())["tags"] == ["baseline", "ablation"]
    with pytest.raises(ValueError, match="tag"):
        write_notes(root / A, "fine, not fine!", "x")
    assert read_notes(root / A).tags == ["baseline", "ablation"]  # nothing written for a bad tag
    with pytest.raises(ValueError, match="not a run"):
        write_notes(root, "x", "")
    for text in ("{not json", '["a list"]', '{"tags": ["<script>"]}', '{"tags": [], "note": 5}', "x" * 50_000):
        (root / B / NOTES_FILE).write_text(text)
        n = read_notes(root / B)
        assert n.tags == [] and n.note == "" and n.error and str(root / B / NOTES_FILE) in n.error, text[:20]


def test_the_runs_table_has_each_runs_tags_and_names_a_notes_file_that_does_not_read(root):
    write_notes(root / A, "baseline", "")
    (root / B / NOTES_FILE).write_text("{oops")
    runs = q.runs_table(root).set_index("run_id")
    assert runs.loc[A, "tags"] == "baseline" and runs.loc[C, "tags"] == ""
    assert NOTES_FILE in runs.loc[B, "error"] and runs.loc[B, "tags"] == ""


def test_two_runs_settings_where_they_differ(root):
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": '"x"'}
    df = config_diff(root, A, B)
    assert df.columns.tolist() == ["setting", A, B]
    rows = {r[0]: (r[1], r[2]) for r in df.itertuples(index=False)}
    assert rows == {"eval.max_turns": ("4", "2"), "eval.top_k": ("3", "–")}  # created differs too: not a setting
    assert config_diff(root, A, A).empty
    (root / C / "config.json").write_text("[]")
    with pytest.raises(ValueError, match=f"{C}: its config.json is not a JSON object"):
        config_diff(root, A, C)


def test_the_tag_filter_narrows_the_runs_table_and_the_switch_groups_it(root):
    """The runs table as the served page builds it: choosing a tag keeps the runs that carry it (any of them when
    several are chosen), none chosen shows all; the group switch groups the table by its tags column."""
    import panel as pn

    from workbench.dashboard.organise import organise_part

    write_notes(root / A, "baseline, sweep:lr", "")
    write_notes(root / C, "sweep:lr", "")
    runs = q.runs_table(root)
    table = pn.widgets.Tabulator(runs)
    card = organise_part(root, runs, table)
    (only,) = [w for w in card.select(pn.widgets.MultiChoice) if w.label == "show runs tagged"]
    (group,) = card.select(pn.widgets.Checkbox)
    assert sorted(only.options) == ["baseline", "sweep:lr"]
    assert sorted(table.current_view["run_id"]) == sorted([A, B, C])
    only.value = ["baseline"]
    assert table.current_view["run_id"].tolist() == [A]
    only.value = ["baseline", "sweep:lr"]
    assert sorted(table.current_view["run_id"]) == sorted([A, C])
    only.value = []
    assert len(table.current_view) == 3
    group.value = True
    assert table.groupby == ["tags"]
    group.value = False
    assert table.groupby == []


def test_the_runs_shown_export_as_csv_and_parquet(root):
    """The served page's runs export: the rows the table shows after a tag filter, as CSV and as Parquet."""
    import io

    import pandas as pd
    import panel as pn

    from workbench.dashboard import app as dash

    write_notes(root / B, "baseline", "")
    page = dash.build_app(root)
    (only,) = [w for w in page.select(pn.widgets.MultiChoice) if w.label == "show runs tagged"]
    downloads = {d.filename: d for d in page.select(pn.widgets.FileDownload) if d.filename.startswith("runs.")}
    assert sorted(downloads) == ["runs.csv", "runs.parquet"]
    assert len(pd.read_csv(downloads["runs.csv"].callback())) == 3
    only.value = ["baseline"]
    csv = pd.read_csv(downloads["runs.csv"].callback())
    parquet = pd.read_parquet(io.BytesIO(downloads["runs.parquet"].callback().read()))
    assert csv["run_id"].tolist() == parquet["run_id"].tolist() == [B]
    assert parquet.loc[0, "tags"] == "baseline"


def test_tags_saved_in_the_page_filter_the_runs_table_in_chromium(root):
    """As a reader would: pick a run, type tags and a note, save; the runs table shows the tags, the settings two
    runs differ in are listed, and a bad tag is refused with nothing written (the tag filter and the grouping over
    the same table: the test above)."""
    with _served_page(root) as page:
        page.wait_for_selector(".tabulator-row", timeout=60_000)
        runs_rows = page.locator(".tabulator-row", has_text="20261204-")
        assert runs_rows.count() >= 3
        page.get_by_placeholder("e.g. baseline, lr-sweep").fill("baseline, sweep:lr")
        page.get_by_placeholder("what this run is for, what it showed").fill("the one to beat")
        page.get_by_role("button", name="save tags and note").click()
        page.locator(".wb-notes-status", has_text="saved").wait_for(timeout=30_000)
        page.locator(".tabulator-cell", has_text="baseline, sweep:lr").first.wait_for(timeout=30_000)
        assert read_notes(root / C).tags == ["baseline", "sweep:lr"]  # the picker opens on the newest run
        diff = page.locator(".wb-config-diff").first
        diff.wait_for(timeout=30_000)
        assert diff.inner_text().split()[0].isdigit()  # "N setting(s) differ"
        page.get_by_placeholder("e.g. baseline, lr-sweep").fill("bad tag!")
        page.get_by_role("button", name="save tags and note").click()
        page.locator(".wb-notes-status", has_text="not saved").wait_for(timeout=30_000)
    assert read_notes(root / C).tags == ["baseline", "sweep:lr"]
