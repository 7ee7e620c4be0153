"""The drill-down's filters: SQL over one run's file (``queries.TrajectoryFilter``), the count of what passes, pages of
it, and the served page's filter widgets and count line (headless Chromium).

The run: two methods over four questions whose texts hold SQL's pattern characters (``%``, ``_``) and a quote, so
that a text filter taken as a LIKE pattern, or pasted into the SQL, would match (or break) where a literal one does
not. ``direct`` answers "Ada Quist" (right on f1 and f2); ``search_r1`` searches "Hallervik" and answers "Ostrevia"
(right on f3 and f4). Rows: direct f1-f4 are 0-3, search_r1 f1-f4 are 4-7.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.test_dashboard import _eval_run, _served_page
from workbench.dashboard import app as dash
from workbench.dashboard import queries as q
from workbench.data.example import Example

RUN = "20261124-100000-eval-filters"
EXAMPLES = [Example("f1", "Who founded 100% Mills?", ["Ada Quist"], dataset="world", hops=1),
            Example("f2", "Who founded 100x Mills?", ["Ada Quist"], dataset="world", hops=2),
            Example("f3", "Where is O'Hara_Bay?", ["Ostrevia"], dataset="world", hops=2),
            Example("f4", "Where is O'HaraXBay?", ["Ostrevia"], dataset="world", hops=3)]
F = q.TrajectoryFilter


@pytest.fixture(scope="module")
def filter_root(tmp_path_factory, tokenizer) -> Path:
    root = tmp_path_factory.mktemp("filter-runs")
    _eval_run(root, RUN, tokenizer, EXAMPLES, {
        "direct": ["<answer> Ada Quist </answer>"],
        "search_r1": ["<search> Hallervik </search>", "<answer> Ostrevia </answer>"],
    }, "world")
    return root


def _rows(root: Path, filters: F, **page) -> list[int]:
    return q.run_trajectories(root, RUN, filters=filters, **page)["row"].tolist()


def test_the_run_is_as_the_module_says(filter_root):
    df = q.run_trajectories(filter_root, RUN)
    assert df["row"].tolist() == list(range(8))
    assert df["method"].tolist() == ["direct"] * 4 + ["search_r1"] * 4
    assert df["cem"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert q.run_facets(filter_root, RUN) == (["direct", "search_r1"], [1, 2, 3])


@pytest.mark.parametrize("filters,rows", [
    (F(), list(range(8))),
    (F(correct=True), [0, 1, 6, 7]),
    (F(correct=False), [2, 3, 4, 5]),
    (F(correct=True, correct_metric="f1", f1_threshold=0.9), [0, 1, 6, 7]),
    (F(methods=("search_r1",)), [4, 5, 6, 7]),
    (F(hops=(2, 3)), [1, 2, 3, 5, 6, 7]),
    (F(score=(0.5, 1.0)), [0, 1, 6, 7]),
    (F(score=(0.0, 0.2), score_metric="cem"), [2, 3, 4, 5]),
    (F(correct=False, hops=(2, 3)), [2, 3, 5]),  # filters combine: all must pass
    (F(correct=False, hops=(2, 3), methods=("direct",)), [2, 3]),
    (F(text="HALLERVIK"), [4, 5, 6, 7]),  # the transcript (search_r1's query), any case
    (F(text="ostrevia", methods=("direct",)), [2, 3]),  # direct's gold, not its answer
    (F(evidence="no-gold"), list(range(8))),  # no question here names supporting facts
    (F(evidence="none", methods=("search_r1",)), []),
])
def test_filters_select_and_count_the_same_rows(filter_root, filters, rows):
    assert _rows(filter_root, filters) == rows
    assert q.count_trajectories(filter_root, RUN, filters) == len(rows)


def test_pages_run_over_the_rows_that_pass(filter_root):
    wrong = F(correct=False)  # rows 2, 3, 4, 5
    assert _rows(filter_root, wrong, limit=3, offset=0) == [2, 3, 4]
    assert _rows(filter_root, wrong, limit=3, offset=3) == [5]
    assert _rows(filter_root, wrong, limit=3, offset=6) == []
    assert _rows(filter_root, F(), limit=3, offset=6) == [6, 7]  # without filters: a range of positions, as before


@pytest.mark.parametrize("text,rows", [
    ("100%", [0, 4]),  # as a LIKE pattern it would match "100x" too
    ("_bay", [2, 6]),  # as a LIKE pattern "_" would match the "X" of O'HaraXBay
    ("o'hara", [2, 3, 6, 7]),  # a quote is a character like another
    ("x') OR TRUE --", []),
    ("%", [0, 4]),
    ("_", [2, 6]),
    ("\\", []),
])
def test_the_text_is_literal_and_never_part_of_the_sql(filter_root, text, rows):
    filters = F(text=text)
    assert _rows(filter_root, filters) == rows
    assert q.count_trajectories(filter_root, RUN, filters) == len(rows)
    sql, params = filters.where(q.run_gold(filter_root, RUN))
    assert text.lower() in params and (len(text) == 1 or text.lower() not in sql)  # a parameter, never SQL text


def test_a_filter_checks_its_metrics_and_names_itself():
    assert not F() and F(text="x") and F(methods=["direct"]) == F(methods=("direct",))
    with pytest.raises(ValueError, match="correct_metric"):
        F(correct_metric="reward")
    with pytest.raises(ValueError, match="score_metric"):
        F(score_metric="1; DROP TABLE t")
    assert F(correct=False, hops=[3, 4], text="Ostrevia", score=(0.2, 1), evidence="none").describe() == [
        "hops 3, 4", "answer wrong (cover-EM)", "f1 0.2–1", "no gold retrieved", "text “Ostrevia”"]
    assert dash.count_line(8, 8, F()) == "<b>8</b> trajectories"
    assert dash.count_line(0, 8, F(text="<b>")) == "<b>0</b> of 8 trajectories · text “&lt;b&gt;”"


def test_a_filter_change_counts_again_and_goes_back_to_page_1(filter_root, monkeypatch):
    import panel as pn

    monkeypatch.setattr(dash, "PAGE_ROWS", 3)
    _, section = dash._drilldown_section(filter_root, [RUN])
    body = section[2][0]
    (count,) = [p for p in body.select(pn.pane.HTML) if "wb-drill-count" in p.object]
    page, table = body.select(pn.widgets.IntInput)[0], body.select(pn.widgets.Tabulator)[0]
    (correct,), text = body.select(pn.widgets.RadioButtonGroup), body.select(pn.widgets.TextInput)[0]
    hops = next(w for w in body.select(pn.widgets.MultiChoice) if w.label == "hops")
    assert "<b>8</b> trajectories" in count.object and page.end == 3
    page.value = 3
    assert table.value["row"].tolist() == [6, 7]
    correct.value = "wrong"
    assert page.value == 1 and page.end == 2 and table.value["row"].tolist() == [2, 3, 4]
    assert "<b>4</b> of 8 trajectories · answer wrong (cover-EM)</div>" in count.object
    assert table.selection == [0] and "row 2" in section[1].object  # the first match opens
    hops.value = [2, 3]
    text.value = "Hara_Bay"
    assert table.value["row"].tolist() == [2] and page.end == 1
    assert "<b>1</b> of 8 trajectories · hops 2, 3 · answer wrong (cover-EM) · text “Hara_Bay”</div>" in count.object
    text.value = "nothing like it"
    assert table.value.empty and "No trajectory passes the filters" in section[1].object


def test_filters_in_the_served_page_in_chromium(filter_root, tmp_path):
    """As a reader would: in the Trajectories tab, "wrong" and a text typed (Enter) narrow the table; the count line
    names the filters and says how many pass; the table holds those rows."""
    with _served_page(filter_root) as page:
        page.wait_for_selector(".tabulator-row", timeout=60_000)
        page.locator(".bk-tab", has_text="Trajectories").click()
        count = page.locator(".wb-drill-count")
        rows = page.locator(".wb-trajectories .tabulator-row")
        count.wait_for(timeout=30_000)
        assert count.inner_text().strip() == "8 trajectories" and rows.count() == 8
        page.get_by_role("button", name="wrong", exact=True).click()
        page.get_by_text("4 of 8 trajectories").wait_for(timeout=30_000)
        assert "answer wrong (cover-EM)" in count.inner_text()
        _wait_rows(page, rows, 4)
        page.get_by_placeholder("question, answer, gold or transcript").fill("o'hara_bay")
        page.get_by_placeholder("question, answer, gold or transcript").press("Enter")
        page.get_by_text("1 of 8 trajectories").wait_for(timeout=30_000)
        assert count.inner_text().strip() == "1 of 8 trajectories · answer wrong (cover-EM) · text “o'hara_bay”"
        _wait_rows(page, rows, 1)
        assert "O'Hara_Bay" in rows.first.inner_text()
        page.screenshot(path=str(tmp_path / "filters.png"), full_page=True)


def _trajectories_tab_wrong_only(page) -> None:
    """In the served page: the Trajectories tab opened and its answers filtered to the wrong ones (4 of the 8)."""
    page.wait_for_selector(".tabulator-row", timeout=60_000)
    page.locator(".bk-tab", has_text="Trajectories").click()
    page.locator(".wb-drill-count").wait_for(timeout=30_000)
    page.get_by_role("button", name="wrong", exact=True).click()
    page.get_by_text("4 of 8 trajectories").wait_for(timeout=30_000)


def test_the_filtered_rows_export_and_the_address_reopens_the_view(filter_root, tmp_path):
    """In Chromium, one page: "wrong" set, the export buttons hand over every row that passes (all pages), as CSV and
    as Parquet, which pandas reads back with the same rows; the address then holds the tab, the run and the filter,
    and opened again (a copied link) shows the same tab, run and count."""
    import pandas as pd

    with _served_page(filter_root) as page:
        _trajectories_tab_wrong_only(page)
        got = {}
        for kind in ("csv", "parquet"):
            with page.expect_download(timeout=30_000) as dl:
                page.get_by_text(f"export {kind.upper()}").click()  # the server makes the file, the browser saves it
            path = tmp_path / dl.value.suggested_filename
            dl.value.save_as(path)
            got[kind] = pd.read_csv(path) if kind == "csv" else pd.read_parquet(path)
        for _ in range(100):
            if "correct=wrong" in page.url and "tab=3" in page.url:
                break
            page.wait_for_timeout(100)
        link = page.url
        assert "correct=wrong" in link and "tab=3" in link and f"run={RUN}" in link, link
        page.goto("about:blank")
        page.goto(link, timeout=60_000)
        page.get_by_text("4 of 8 trajectories").wait_for(timeout=60_000)  # the filter, on the run, in its tab
        assert "answer wrong (cover-EM)" in page.locator(".wb-drill-count").inner_text()
        assert page.locator(".bk-tab.bk-active", has_text="Trajectories").count() == 1
    for df in got.values():
        assert sorted(df["row"].tolist()) == [2, 3, 4, 5] and {"question", "answer", "cem"} <= set(df.columns)
    assert got["csv"]["question"].tolist() == got["parquet"]["question"].tolist()
    with pytest.raises(ValueError, match="not one of"):
        dash.export_table(got["csv"], "xlsx")


def _wait_rows(page, rows, n: int) -> None:
    for _ in range(100):
        if rows.count() == n:
            return
        page.wait_for_timeout(100)
    assert rows.count() == n


def test_filters_stay_when_another_run_opens_and_clear_in_one_click(filter_root, tmp_path):
    """Opening another run (the picker, or a click on the Runs table) kept no filter and said nothing: now the
    filters that apply to the new run stay, the count line names them, and "clear filters" resets them all."""
    import shutil

    import panel as pn

    root = tmp_path / "runs"
    root.mkdir()
    other = "20261124-110000-eval-filters-again"
    shutil.copytree(filter_root / RUN, root / RUN)
    shutil.copytree(filter_root / RUN, root / other)
    select, section = dash._drilldown_section(root, [RUN, other])

    def widgets():
        body = section[2][0]
        (count,) = [p for p in body.select(pn.pane.HTML) if "wb-drill-count" in p.object]
        (correct,), text = body.select(pn.widgets.RadioButtonGroup), body.select(pn.widgets.TextInput)[0]
        clear = next(b for b in body.select(pn.widgets.Button) if b.name == "clear filters")
        return count, correct, text, clear, body.select(pn.widgets.Tabulator)[0]

    count, correct, text, _, table = widgets()
    select.value = RUN
    correct.value = "wrong"
    text.value = "Hara_Bay"
    before = (correct, text, table)
    select.value = other
    count, correct, text, clear, table = widgets()
    # the same widgets and table now hold the other run (a rebuilt section costs the browser ~1.9 s a switch)
    assert all(a is b for a, b in zip(before, (correct, text, table)))
    assert f"data-run='{other}'" in count.object
    assert (correct.value, text.value) == ("wrong", "Hara_Bay")
    assert "<b>1</b> of 8 trajectories · answer wrong (cover-EM) · text “Hara_Bay”</div>" in count.object
    assert table.value["row"].tolist() == [2]
    clear.clicks += 1
    assert (correct.value, text.value) == ("all answers", "") and "<b>8</b> trajectories" in count.object
    assert len(table.value) == 8


def test_the_runs_table_highlights_the_run_the_picker_opens(filter_root, tmp_path):
    import shutil

    import panel as pn

    root = tmp_path / "runs"
    root.mkdir()
    other = "20261124-110000-eval-filters-again"
    for r in (RUN, other):
        shutil.copytree(filter_root / RUN, root / r)
    views, sections = dash._run_views(root, static=False, problems=[])
    runs_table = views[0].select(pn.widgets.Tabulator)[0]
    drill = dict(sections)["Trajectories"]
    select = drill.select(pn.widgets.Select)[0]
    ids = runs_table.value["run_id"].tolist()
    select.value = ids[1]
    assert runs_table.selection == [1]
    select.value = ids[0]
    assert runs_table.selection == [0]


def test_an_address_gives_only_well_formed_filters():
    from workbench.dashboard.address import encode, parse_filters

    kinds = list(dash.CORRECTNESS)
    assert parse_filters({"correct": "wrong", "methods": "direct,search_r1", "hops": "2,3", "f1": "0.2,1",
                          "evidence": "no-gold", "text": "o'hara"}, kinds) == {
        "correct": "wrong", "methods": ["direct", "search_r1"], "hops": [2, 3], "score": (0.2, 1.0),
        "evidence": "no-gold", "text": "o'hara"}
    # the address is the user's input: what does not parse is left at its default, never an error
    assert parse_filters({"correct": "maybe", "hops": "two", "f1": "0.9,0.1", "evidence": "most"}, kinds) == {}
    assert parse_filters({"f1": "nan,1"}, kinds) == {} and parse_filters({"text": "x" * 9999}, kinds)["text"] == "x" * 500
    state = {"tab": 3, "run": RUN, "correct": "wrong", "methods": [], "hops": [2], "score": (0.0, 1.0),
             "evidence": "any", "text": ""}
    assert encode(state, dash.DRILL_DEFAULTS) == f"tab=3&run={RUN}&correct=wrong&hops=2"
    assert parse_filters(dict(p.split("=") for p in encode(state, dash.DRILL_DEFAULTS).split("&")), kinds) == {
        "correct": "wrong", "hops": [2]}
    state["evidence"] = "some"  # the gold-evidence filter travels in the address too
    assert encode(state, dash.DRILL_DEFAULTS) == f"tab=3&run={RUN}&correct=wrong&hops=2&evidence=some"
    assert parse_filters(dict(p.split("=") for p in encode(state, dash.DRILL_DEFAULTS).split("&")), kinds) == {
        "correct": "wrong", "hops": [2], "evidence": "some"}


def test_a_click_on_a_runs_row_keeps_the_filters_and_the_highlight_follows_in_chromium(filter_root, tmp_path):
    """In the page, as a reader does it: a filter set in the Trajectories tab, then a click on another run's row in
    the Runs table opens that run with the filter kept (the count line names it), the clicked row stays highlighted,
    and "clear filters" shows every trajectory again."""
    import shutil

    root = tmp_path / "runs"
    root.mkdir()
    other = "20261124-110000-eval-filters-again"
    for r in (RUN, other):
        shutil.copytree(filter_root / RUN, root / r)
    with _served_page(root) as page:
        _trajectories_tab_wrong_only(page)
        drill = page.locator(".wb-drill-run select").first  # the drill-down's run picker
        opened = drill.input_value()
        assert opened in (RUN, other)
        target = RUN if opened == other else other
        row = page.locator(".tabulator-row", has_text=target).first  # the run's row in the Runs table
        # a click that lands while the page is still redrawing the filtered table can be lost on a busy machine (seen
        # once in a full `make test`): clicked again after 10 s, up to three times; one of them must open the run
        for _ in range(3):
            row.locator(".tabulator-cell[tabulator-field='kind']").click()
            deadline = time.time() + 10
            while drill.input_value() != target and time.time() < deadline:
                page.wait_for_timeout(100)
            if drill.input_value() == target:
                break
        assert drill.input_value() == target, "the click did not open the run"
        page.get_by_text("4 of 8 trajectories").wait_for(timeout=30_000)  # the filter kept on the run opened
        assert "answer wrong (cover-EM)" in page.locator(".wb-drill-count").inner_text()
        assert page.locator(".tabulator-row.tabulator-selected", has_text=target).count() == 1
        page.get_by_role("button", name="clear filters").click()
        count = page.locator(".wb-drill-count")
        deadline = time.time() + 30
        while "of 8" in count.inner_text() and time.time() < deadline:
            page.wait_for_timeout(100)
        assert count.inner_text().startswith("8 trajectories"), count.inner_text()
        page.screenshot(path=str(tmp_path / "runs-click.png"), full_page=True)
