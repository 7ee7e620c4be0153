"""Intervals everywhere the dashboard compares: the Compare tab's bars and the per-hop points with their 95% intervals
over questions, the Question-by-question tab's paired difference, and the forest plot of the paired comparisons
(``comparison.json``) with the numbers notebook 05 shows; then the served page in headless Chromium.

The run: eight questions of hop counts 1-3. ``direct`` answers "Ada Quist" (right on q1-q5), ``search_r1`` searches
and answers "Ostrevia" (right on q6-q8): cover-EM 5/8 against 3/8 on the same questions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_dashboard import _artifact_dir, _eval_run, _served_page
from workbench.dashboard import app as dash
from workbench.dashboard import compare_tab as ct
from workbench.dashboard import queries as q
from workbench.dashboard.intervals import interval, metric_intervals, pair_difference
from workbench.data.example import Example
from workbench.eval import paired

RUN = "20261125-100000-eval-intervals"
HOPS = [1, 1, 2, 2, 3, 1, 2, 3]
EXAMPLES = [Example(f"q{i}", f"Who or where is item {i}?", ["Ada Quist" if i <= 5 else "Ostrevia"], dataset="world",
                    hops=h) for i, h in zip(range(1, 9), HOPS)]
#: A shipped comparison (data/results) whose numbers the forest plot must show as notebook 05 does.
SHIPPED = Path("data/results/transfer_adapter_vs_direct/comparison.json")


def wilson_by_hand(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval written out: (k + z²/2 ± z·sqrt(k(n − k)/n + z²/4)) / (n + z²)."""
    centre, half = k + z * z / 2, z * np.sqrt(k * (n - k) / n + z * z / 4)
    return (centre - half) / (n + z * z), (centre + half) / (n + z * z)


@pytest.fixture(scope="module")
def interval_root(tmp_path_factory, tokenizer) -> Path:
    root = tmp_path_factory.mktemp("interval-runs")
    _eval_run(root, RUN, tokenizer, EXAMPLES, {
        "direct": ["<answer> Ada Quist </answer>"],
        "search_r1": ["<search> Ostrevia </search>", "<answer> Ostrevia </answer>"],
    }, "world")
    return root


def _trace(fig, name: str, visible_only: bool = True):
    (t,) = [t for t in fig.data if t.name == name and (t.visible is not False or not visible_only)]
    return t


def _bounds(t, i: int = 0) -> tuple[float, float]:
    """The interval a bar or point's error bar draws: (value − minus, value + plus)."""
    y = t.y[i] if t.error_y.array is not None else t.x[i]
    e = t.error_y if t.error_y.array is not None else t.error_x
    return y - e.arrayminus[i], y + e.array[i]


# --------------------------------------------------------------------------- the numbers


def test_intervals_by_hand():
    assert interval([1, 1, 1, 0, 0, 0, 0, 0], "cem") == pytest.approx(wilson_by_hand(3, 8), abs=1e-6)
    assert interval([1.0, np.nan, 0.0], "format_ok") == pytest.approx(wilson_by_hand(1, 2), abs=1e-6)  # NaN left out
    # F1 is not a share: the bootstrap of the mean; of three values each resample's mean is one of the ten means of
    # three draws, 1/27 of them all the lowest value (more than 2.5%), 1/27 all the highest
    assert interval([0.2, 0.4, 0.6], "f1") == pytest.approx((0.2, 0.6))
    assert interval([0.5], "f1") == (0.5, 0.5) and np.isnan(interval([], "cem")[0])
    questions = q.pd.DataFrame({"g": ["a"] * 3 + ["b"] * 2, "cem": [1.0, 0.0, 1.0, 1.0, np.nan],
                                "f1": [0.2, 0.4, 0.6, 1.0, 0.5]})
    got = metric_intervals(questions, ["g"], ["cem", "f1"]).set_index("g")
    assert got.loc["a", "cem_n"] == 3 and got.loc["b", "cem_n"] == 1 and got.loc["b", "f1_n"] == 2
    assert (got.loc["a", "cem_lo"], got.loc["a", "cem_hi"]) == pytest.approx(wilson_by_hand(2, 3), abs=1e-6)
    assert (got.loc["a", "f1_lo"], got.loc["a", "f1_hi"]) == pytest.approx((0.2, 0.6))


def test_a_question_counts_once_however_many_samples(interval_root, tmp_path, tokenizer):
    """A question drawn three times is one question: its value is the mean over its samples, and a bar's interval is
    over questions, not trajectories."""
    qm = q.question_metrics(interval_root)
    assert len(qm) == 16 and set(qm["n"]) == {1} and set(qm["status"]) == {"complete"}
    direct = qm[qm["method"] == "direct"].set_index("question")
    assert direct["cem"].tolist() == [1.0] * 5 + [0.0] * 3 and direct["hops"].tolist() == HOPS

    run = _eval_run(tmp_path, RUN, tokenizer, [EXAMPLES[0], EXAMPLES[5]], {"direct": ["<answer> Ada Quist </answer>"]},
                    "world")
    path = run.path / "trajectories.parquet"  # q1 drawn twice more (samples 1, 2), as a group of three would be
    t = pq.read_table(path).to_pandas()
    more = t[t["example_id"] == "q1"].loc[lambda d: d.index.repeat(2)].assign(sample_idx=[1, 2], id=["q1#1", "q1#2"])
    pq.write_table(pa.Table.from_pandas(q.pd.concat([t, more], ignore_index=True), preserve_index=False), path)
    qm = q.question_metrics(tmp_path).set_index("question")
    assert qm["n"].to_dict() == {"q1": 3, "q6": 1} and qm["cem"].to_dict() == {"q1": 1.0, "q6": 0.0}
    fig = dash.compare_figure(q.method_metrics(tmp_path), ["cem"], questions=q.question_metrics(tmp_path))
    bar = _trace(fig, "direct")
    assert bar.y[0] == pytest.approx(3 / 4) and list(bar.customdata[0][2:]) == [2, 4]  # 2 questions, 4 trajectories
    assert _bounds(bar) == pytest.approx(wilson_by_hand(1, 2), abs=1e-6)  # over the 2 questions, not 3 of 4 samples


def test_bars_and_hop_points_carry_their_intervals_and_counts(interval_root):
    methods, questions = q.method_metrics(interval_root), q.question_metrics(interval_root)
    fig = dash.compare_figure(methods, ["cem", "f1"], questions=questions)
    direct, search = _trace(fig, "direct"), _trace(fig, "search_r1")
    assert direct.y[0] == pytest.approx(5 / 8) and _bounds(direct) == pytest.approx(wilson_by_hand(5, 8), abs=1e-6)
    assert _bounds(search) == pytest.approx(wilson_by_hand(3, 8), abs=1e-6)
    assert list(direct.customdata[0][2:]) == [8, 8]  # questions, trajectories: in the hover
    assert "questions" in direct.hovertemplate and "95% intervals over questions" in fig.layout.title.text
    by_dataset = dash.compare_figure(methods, ["cem"], by="dataset", questions=questions)
    assert _bounds(_trace(by_dataset, "direct")) == pytest.approx(wilson_by_hand(5, 8), abs=1e-6)
    assert list(_trace(by_dataset, "direct").customdata[0][2:]) == [8, 8]
    assert dash.compare_figure(methods, ["cem"]).data[0].error_y.array is None  # without questions: as before

    hops = dash.hops_figure(q.hop_breakdown(interval_root), ["cem"], questions=questions)
    line = _trace(hops, f"{RUN} · direct")
    assert list(line.x) == [1, 2, 3] and list(line.y) == pytest.approx([2 / 3, 2 / 3, 0.5])  # q1 q2 q6 · q3 q4 q7 · q5 q8
    for i, (k, n) in enumerate([(2, 3), (2, 3), (1, 2)]):
        assert _bounds(line, i) == pytest.approx(wilson_by_hand(k, n), abs=1e-6)
    assert [list(c[2:]) for c in line.customdata] == [[3, 3], [3, 3], [2, 2]]  # n per point


def test_question_by_question_difference_is_the_paired_comparison_of_the_runs(interval_root):
    """The tab's right − left over the shared questions is ``workbench.eval.paired``'s comparison of the same two
    sources (what bench/compare_methods.py writes and notebook 05 shows): the same numbers, interval included."""
    frame, pairs = ct.comparison(interval_root, (RUN, "direct"), (RUN, "search_r1"))
    got = pair_difference(pairs, frame["example_id"].iloc[pairs["left_row"]].to_numpy())
    a, b, _ = paired.align(paired.run_scores(interval_root / RUN, "direct"),
                           paired.run_scores(interval_root / RUN, "search_r1"))
    want = paired.paired_rows(a, b).set_index("hops").loc["all"]
    assert got["n"] == 8 and got["diff"] == pytest.approx(-0.25)
    for k in ("a", "a_lo", "a_hi", "b", "b_lo", "b_hi", "diff", "diff_lo", "diff_hi"):
        assert got[k] == pytest.approx(want[k], abs=1e-12), k
    assert got["diff_lo"] < -0.25 < got["diff_hi"]
    shuffled = pair_difference(pairs)  # the table's order (fixed, broken, ...): another resampling, another interval
    assert shuffled["diff"] == got["diff"] and (shuffled["diff_lo"], shuffled["diff_hi"]) != (got["diff_lo"], got["diff_hi"])
    line = ct.difference_html(frame, pairs)
    assert f"<b>{got['diff']:+.3f}</b> [{got['diff_lo']:+.3f}, {got['diff_hi']:+.3f}]" in line and "8 questions" in line


def test_the_forest_plot_shows_notebook_05s_numbers(tmp_path):
    """The Compare tab draws every shipped comparison overall, one metric at a time, with the table and labels of
    ``queries.comparison_table`` (what notebook 05 draws); on one file, its numbers are the file's own."""
    c = paired.Comparison.load(SHIPPED)
    want = c.rows().set_index("hops").loc["all"]
    table = q.comparison_table(tmp_path, dash.results_dir())  # notebook 05's call, over an empty runs root
    assert (table.groupby("comparison")["file"].nunique() == 1).all()
    assert not table.duplicated(["comparison", "hops"]).any()
    part = dash._comparisons_part(tmp_path, static=True)
    import panel as pn

    (forest,) = [p.object for p in part.select(pn.pane.Plotly)]
    names = [t.name for t in forest.data]
    assert len(names) == len(set(names)) == table["comparison"].nunique()  # one trace per comparison: unique labels
    trace = _trace(forest, c.name)
    assert list(trace.y) == [f"{c.name} · all"] and trace.x[0] == pytest.approx(want["diff"])
    assert _bounds(trace) == pytest.approx((want["diff_lo"], want["diff_hi"]), abs=1e-12)
    assert f"n={int(want['n'])}" in trace.text[0]
    menu = [b.label for b in forest.layout.updatemenus[0].buttons]
    assert menu[0] == "metric: cem" and set(menu) == {f"metric: {m}" for m in table["metric"]}
    assert all(t.visible is False for t in forest.data if t.name in set(table.loc[table["metric"] != "cem", "comparison"]))
    (rows,) = [w.value for w in part.select(pn.widgets.Tabulator)]
    row = rows[(rows["comparison"] == c.name) & (rows["hops"] == "all")].iloc[0]
    assert row["B − A 95%"] == f"[{want['diff_lo']:+.2f}, {want['diff_hi']:+.2f}]" and row["n"] == want["n"]


def test_a_comparison_under_two_roots_is_one_comparison(tmp_path):
    shutil.copytree(dash.results_dir() / "transfer_adapter_vs_direct", tmp_path / "res" / "t")
    inner = q.comparison_table(tmp_path / "res", tmp_path / "res" / "t")
    assert len(inner) == len(q.comparison_table(tmp_path / "res"))
    broken = tmp_path / "res" / "t" / "comparison.json"
    d = json.loads(broken.read_text())
    d["b"]["seeds"][0] = d["b"]["seeds"][0][:-1]  # an edited file whose sides no longer pair: named, not drawn
    broken.write_text(json.dumps(d))
    assert q.comparison_table(tmp_path / "res").empty and "question(s) are in one run only" in next(
        iter(q.comparison_table(tmp_path / "res").attrs["errors"].values()))


# --------------------------------------------------------------------------- the served page


def test_served_compare_tab_draws_error_bars_and_the_forest_in_chromium(interval_root):
    with _served_page(interval_root) as page:
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.get_by_text("Paired differences B − A in cem").first.wait_for(timeout=30_000)
        bars = page.locator(".js-plotly-plot").first
        assert bars.locator(".errorbar").count() == 2  # one per method's bar of the metric shown
        assert page.locator(".ytick", has_text="transfer: adapter vs direct · all").count() == 1
        assert page.get_by_text("one comparison by hop count").count() >= 1
        forest = page.locator(".js-plotly-plot", has_text="Paired differences B − A in ")  # the title follows the menu
        forest.locator(".updatemenu-header-group").click()  # the dropdown: another metric, its comparisons only
        forest.locator(".updatemenu-dropdown-button", has_text="metric: n_searches").click()
        forest.locator(".ytick", has_text="dspo_parts: dspo vs dapo (n_searches) · all").wait_for(timeout=10_000)
        assert forest.locator(".ytick", has_text="transfer: adapter vs direct · all").count() == 0
        assert forest.locator(".ytick").count() == 9
        shots = _artifact_dir()
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "dashboard-compare-intervals.png"), full_page=True)
        page.locator(".bk-tab", has_text="Breakdowns").click()
        hops = page.locator(".js-plotly-plot", has_text="by hop count · bars: 95% intervals over questions")
        hops.first.wait_for(timeout=30_000)
        assert hops.first.locator(".errorbar").count() == 6  # two lines of three hop counts, each point its own
        page.screenshot(path=str(shots / "dashboard-hops-intervals.png"), full_page=True)
        page.locator(".bk-tab", has_text="Question by question").click()
        line = page.locator(".wb-pair-difference").first
        line.wait_for(timeout=30_000)
        assert "paired bootstrap over the 8 questions" in line.inner_text()
        for word in ("Traceback", "could not be built"):
            assert page.get_by_text(word).count() == 0, word
        page.screenshot(path=str(shots / "dashboard-question-difference.png"), full_page=True)


def test_comparison_rows_are_kept_on_disk_by_the_files_bytes(tmp_path, monkeypatch):
    """A comparison's rows (bootstrap intervals) are computed once per file and code, then read back equal from the
    cache by any later process; an entry that is not rows is computed again, and an edited file gets its own."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "results" / "x" / "comparison.json"
    src.parent.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / "data/results/deep_rl/rl0_vs_rl1/comparison.json", src)
    c = paired.Comparison.load(src)
    calls = []
    monkeypatch.setattr(paired.Comparison, "rows", lambda self, _r=paired.Comparison.rows: calls.append(1) or _r(self))
    first = q._stored_rows(src, c)
    (entry,) = (tmp_path / "cache" / "comparison_rows").iterdir()
    again = q._stored_rows(src, c)
    assert len(calls) == 1  # the second read came from the cache
    import pandas as pd

    pd.testing.assert_frame_equal(first, again)
    entry.write_text('{"not": "rows"}')
    pd.testing.assert_frame_equal(q._stored_rows(src, c), first)
    assert len(calls) == 2
    d = json.loads(src.read_text())
    d["name"] = "edited"
    src.write_text(json.dumps(d))
    q._stored_rows(src, paired.Comparison.load(src))
    assert len(calls) == 3 and len(list((tmp_path / "cache" / "comparison_rows").iterdir())) == 2
