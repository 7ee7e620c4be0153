"""The dashboard: its DuckDB queries on small scripted runs, the Panel app served and loaded in
headless Chromium, the loopback-only rule, the static HTML export, and `workbench lab`'s command.

The browser test saves its screenshot under tmp_path and copies it to
``runs/test-artifacts/dashboard.png`` (``$WORKBENCH_RUNS/test-artifacts/`` when that is set).
"""

from __future__ import annotations

import html
import json
import os
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest

from workbench.apps import cli
from workbench.core.types import Hit
from workbench.dashboard import app as dash
from workbench.dashboard import queries as q
from workbench.data.example import Example
from workbench.eval.runner import evaluate, write_eval_run
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig
from workbench.storage.runs import Run
from workbench.tools.base import Toolbox

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
RUN_A, RUN_B, RUN_T = "20261122-100000-eval-a", "20261122-110000-eval-b", "20261122-120000-train-t"

EX_A = [Example("a1", "Who founded Tarnholm Mills?", ["Ada Quist"], dataset="world", hops=1),
        Example("a2", "Where is Ulmbridge?", ["Ostrevia"], dataset="world", hops=2)]
EX_B = [Example("b1", "Who founded Tarnholm Mills?", ["Ada Quist"], dataset="hotpotqa", hops=2),
        Example("b2", "Where is Ulmbridge?", ["Ostrevia"], dataset="hotpotqa", hops=2),
        Example("b3", "Where is Brackwater?", ["Ostrevia"], dataset="hotpotqa", hops=3)]


def _search(query: str, k: int = 3):
    return [Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)]


def _eval_run(root: Path, run_id: str, tokenizer, examples, methods: dict[str, list[str]], dataset: str,
              search=_search) -> Run:
    """An eval run written exactly as `workbench eval` writes one, with scripted model turns."""
    results = [
        evaluate(m, examples, ScriptedBackend(tokenizer, script), Toolbox({"search": search}),
                 RolloutConfig(max_turns=3), progress=False)
        for m, script in methods.items()
    ]
    run = Run.create(root, kind="eval", run_id=run_id, config={"model": "scripted", "dataset": dataset})
    return write_eval_run(run, results, examples)


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory, tokenizer) -> Path:
    """Two eval runs and a training run.

    A (world): direct and search_r1 both answer "Ada Quist" on a1 (right) and a2 (wrong);
    search_r1 searches once first. B (hotpotqa): search_r1 answers "Ostrevia" (right on b2, b3).
    """
    root = tmp_path_factory.mktemp("runs")
    _eval_run(root, RUN_A, tokenizer, EX_A, {
        "direct": ["<answer> Ada Quist </answer>"],
        "search_r1": ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"],
    }, "world")
    _eval_run(root, RUN_B, tokenizer, EX_B, {
        "search_r1": ["<search> where </search>", "<answer> Ostrevia </answer>"],
    }, "hotpotqa")
    t = Run.create(root, kind="train", run_id=RUN_T, config={"model": "scripted", "dataset": "world"})
    for step in range(3):
        t.append_step_metrics({"step": step, "reward_mean": 0.1 * step, "kl": 0.01, "reward/f1": 0.2, "note": "x"})
    return root


def _broken_copy(runs_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(runs_root, root)
    bad = Run.create(root, kind="eval", run_id="20261122-130000-broken", config={"model": "m"})
    (bad.path / "trajectories.parquet").write_bytes(b"this is not parquet")
    (bad.path / "metrics.json").write_text("{not json", encoding="utf-8")
    Run.create(root, kind="eval", run_id="20261122-140000-missing", config={"model": "m"})
    (root / RUN_T / "metrics.jsonl").write_text('{"step": 0, "reward_mean": 0.5}\n{oops\n', encoding="utf-8")
    (root / "not-a-run").mkdir()
    return root


# --------------------------------------------------------------------------- queries


def test_by_dataset_pools_complete_eval_runs_weighted_by_questions():
    """The by-dataset bars were an unweighted mean of per-run means over every run: a one-question ask run counted as
    much as an 18-question eval, and a training run's sampled batches joined in."""
    import pandas as pd

    df = pd.DataFrame([
        {"run_id": "a", "dataset": "world", "method": "search_r1", "n": 4, "f1": 0.062, "status": "complete", "kind": "eval"},
        {"run_id": "b", "dataset": "world", "method": "search_r1", "n": 18, "f1": 0.014, "status": "complete", "kind": "eval"},
        {"run_id": "c", "dataset": "world", "method": "search_r1", "n": 1, "f1": 0.0, "status": "complete", "kind": "ask"},
        {"run_id": "d", "dataset": "world", "method": "search_r1", "n": 24, "f1": 0.5, "status": "complete", "kind": "train"},
        {"run_id": "e", "dataset": "world", "method": "search_r1", "n": 3, "f1": 0.9, "status": "killed", "kind": "eval"},
    ])
    fig = dash.compare_figure(df, ["f1"], by="dataset")
    (bar,) = fig.data
    assert list(bar.y) == pytest.approx([(4 * 0.062 + 18 * 0.014) / 22])
    title = fig.layout.title.text
    assert "complete eval runs, weighted by questions" in title and "3 other or unfinished left out" in title
    by_run = dash.compare_figure(df, ["f1"])  # by run, every run is drawn, as it is
    assert len(by_run.data[0].x) == 5


def test_training_curves_have_whole_steps_on_their_axis():
    import pandas as pd

    curves = pd.DataFrame({"run_id": ["r", "r"], "metric": ["reward_mean"] * 2, "step": [1, 2], "value": [0.1, 0.2]})
    fig = dash.curves_figure(curves, ["reward_mean"])
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == "d"
    # notebook 04's grid of curves (widgets.training), every panel's axis
    from widgets.training import training_curves

    grid = training_curves([{"step": 1, "reward_mean": 0.1}, {"step": 2, "reward_mean": 0.2, "eval_cem": 0.3}])
    axes = [grid.layout[k] for k in grid.layout if k.startswith("xaxis")]
    assert len(axes) == 4 and all(a.tickformat == "d" and a.dtick == 1 for a in axes)
    long = training_curves([{"step": s, "reward_mean": 0.1} for s in range(1, 41)])
    assert long.layout.xaxis.tickformat == "d" and long.layout.xaxis.dtick is None  # 40 steps: plotly spaces them


def test_the_runs_table_counts_training_steps_not_eval_rows(tmp_path):
    """A 2-step run with held-out rows at steps 0 and 2 and validation rows beside them is a 2-step run."""
    t = Run.create(tmp_path, kind="train", run_id="20261122-120000-train-e", config={"model": "m"})
    for row in ({"step": 0, "eval_cem": 0.1}, {"step": 0, "val_cem": 0.1}, {"step": 1, "reward_mean": 0.3},
                {"step": 2, "reward_mean": 0.4}, {"step": 2, "eval_cem": 0.2}, {"step": 2, "val_cem": 0.3}):
        t.append_step_metrics(row)
    assert q.runs_table(tmp_path).set_index("run_id").loc[t.path.name, "steps"] == 2
    # an imported verl run writes one row per step holding the step's rollout and validation means together
    v = Run.create(tmp_path, kind="train", run_id="20261122-120001-verl-e", config={"model": "m"})
    for row in ({"step": 1, "reward_mean": 0.3, "eval_cem": 0.1}, {"step": 2, "reward_mean": 0.4}):
        v.append_step_metrics(row)
    assert q.runs_table(tmp_path).set_index("run_id").loc[v.path.name, "steps"] == 2


def test_runs_table_one_row_per_run(runs_root):
    df = q.runs_table(runs_root).set_index("run_id")
    assert list(df.index) == [RUN_T, RUN_B, RUN_A]  # newest first
    assert df.loc[RUN_A, "n_trajectories"] == 4 and df.loc[RUN_B, "n_trajectories"] == 3
    assert df.loc[RUN_A, "methods"] == "direct, search_r1" and df.loc[RUN_B, "methods"] == "search_r1"
    assert df.loc[RUN_B, "dataset"] == "hotpotqa" and df.loc[RUN_A, "kind"] == "eval"
    assert df.loc[RUN_B, "best_method"] == "search_r1"
    assert df.loc[RUN_B, "f1"] == pytest.approx(2 / 3) and df.loc[RUN_B, "n_searches"] == pytest.approx(1.0)
    assert df.loc[RUN_T, "kind"] == "train" and df.loc[RUN_T, "steps"] == 3
    assert df.loc[RUN_T, "reward_mean"] == pytest.approx(0.2)
    assert (df["error"] == "").all()


def test_method_metrics_means_per_run_and_method(runs_root):
    df = q.method_metrics(runs_root).set_index(["run_id", "method"])
    assert len(df) == 3
    a_direct, a_search, b_search = df.loc[(RUN_A, "direct")], df.loc[(RUN_A, "search_r1")], df.loc[(RUN_B, "search_r1")]
    assert a_direct["n"] == 2 and a_direct["em"] == pytest.approx(0.5) and a_direct["n_searches"] == 0
    assert a_search["f1"] == pytest.approx(0.5) and a_search["n_searches"] == pytest.approx(1.0)
    assert b_search["n"] == 3 and b_search["em"] == pytest.approx(2 / 3) and b_search["dataset"] == "hotpotqa"
    assert a_direct["dataset"] == "world" and a_direct["answered"] == 1.0


def test_counts_hops_and_protocols(runs_root):
    counts = q.trajectory_counts(runs_root).set_index("run_id")
    assert counts.loc[RUN_A, "n_trajectories"] == 4 and counts.loc[RUN_A, "n_methods"] == 2
    assert RUN_T not in counts.index  # a training run without trajectories

    hops = q.hop_breakdown(runs_root).set_index(["run_id", "method", "hops"])
    assert hops.loc[(RUN_A, "direct", 1), "em"] == 1.0 and hops.loc[(RUN_A, "direct", 2), "em"] == 0.0
    assert hops.loc[(RUN_B, "search_r1", 2), "n"] == 2 and hops.loc[(RUN_B, "search_r1", 2), "f1"] == pytest.approx(0.5)
    assert hops.loc[(RUN_B, "search_r1", 3), "f1"] == 1.0

    protos = q.protocol_breakdown(runs_root).set_index("protocol")
    assert protos.loc["search_r1", "n"] == 5 and protos.loc["search_r1", "runs"] == 2
    assert protos.loc["search_r1", "em"] == pytest.approx(3 / 5) and protos.loc["direct", "n_searches"] == 0
    assert protos.loc["search_r1", "finished_by_answer"] == 1.0


def test_per_protocol_rows_are_methods_over_complete_eval_runs(tmp_path, tokenizer):
    """"Per protocol (all runs)" pooled the untrained agent, the adapter's and training rollouts into one search_r1
    bar. Now the untrained and the adapter's agent are rows of their own, and training, ask and unfinished runs
    are left out and counted."""
    import dataclasses

    right = ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"]
    wrong = ["<answer> nobody </answer>"]
    tools = Toolbox({"search": _search})

    def results(script, method):
        r = evaluate("search_r1", EX_A, ScriptedBackend(tokenizer, script), tools, RolloutConfig(max_turns=3),
                     progress=False)
        for t in r.trajectories:
            t.meta["method"] = method
        return dataclasses.replace(r, method=method)

    e = Run.create(tmp_path, kind="eval", run_id="20261201-100000-eval-e", config={"model": "m"})
    write_eval_run(e, [results(wrong, "search_r1"), results(right, "search_r1+lora")], EX_A)
    for kind in ("train", "ask"):  # sampled training batches and one question: every answer right
        r = Run.create(tmp_path, kind=kind, run_id=f"20261201-11000{len(kind)}-{kind}-x", config={"model": "m"})
        write_eval_run(r, [results(right, "search_r1")], EX_A)
    killed = Run.create(tmp_path, kind="eval", run_id="20261201-120000-eval-k", config={"model": "m"})
    killed.write_trajectories(results(right, "search_r1").trajectories)  # never marked complete
    protos = q.protocol_breakdown(tmp_path)
    assert list(zip(protos["protocol"], protos["method"])) == [("search_r1", "search_r1"), ("search_r1", "search_r1+lora")]
    rows = protos.set_index("method")
    assert rows.loc["search_r1", "em"] == 0.0 and rows.loc["search_r1+lora", "em"] == 0.5  # a2's gold is Ostrevia
    assert rows["runs"].tolist() == [1, 1] and rows["n"].tolist() == [2, 2]
    assert protos.attrs["left_out"] == 3
    title = dash.protocol_figure(protos).layout.title.text
    assert "complete eval runs" in title and "3 training, ask or unfinished run(s) left out" in title


def test_run_trajectories_and_one_transcript(runs_root):
    df = q.run_trajectories(runs_root, RUN_A)
    assert list(df.columns) == q.TRAJECTORY_COLUMNS and len(df) == 4
    assert sorted(df["method"]) == ["direct", "direct", "search_r1", "search_r1"]
    row = df[(df["method"] == "search_r1") & (df["id"].str.contains("a1#"))]["row"].item()
    traj = q.load_trajectory(runs_root, RUN_A, row)
    assert traj.protocol == "search_r1" and traj.answer == "Ada Quist" and traj.n_searches == 1
    html = dash.transcript_html(runs_root, RUN_A, row)
    assert "Tarnholm Mills" in html and "observation (loss mask 0)" in html
    assert "gold <code style='background:#e6f4ea'>Ada Quist</code>" in html and "✔ correct" in html
    assert q.run_trajectories(runs_root, "no-such-run").empty
    gold = dict(zip(df["question"], df["gold"]))
    assert gold == {"Who founded Tarnholm Mills?": "Ada Quist", "Where is Ulmbridge?": "Ostrevia"}


def test_two_runs_compared_question_by_question(runs_root):
    from workbench.dashboard import compare_tab as ct

    options = ct.source_options(q.method_metrics(runs_root))
    assert options[0] == (RUN_B, "search_r1")  # newest run first
    assert ct.default_pair(options) == ((RUN_A, "direct"), (RUN_A, "search_r1"))  # RUN_B has one method
    frame, pairs = ct.comparison(runs_root, (RUN_A, "search_r1"), (RUN_B, "search_r1"))  # joined on the question
    assert dict(zip(pairs["question"], pairs["category"])) == {"Where is Ulmbridge?": "fixed",
                                                               "Who founded Tarnholm Mills?": "broken"}
    assert pairs.attrs["only_right"] == 1 and pairs.attrs["only_left"] == 0  # b3 only in RUN_B
    fixed = pairs[pairs["category"] == "fixed"].iloc[0]
    view = ct.pair_view(runs_root, frame, fixed["left_row"], fixed["right_row"])
    assert f"{RUN_A} · search_r1" in view and f"{RUN_B} · search_r1" in view and "Ostrevia" in view
    assert "background:#fff3b0" in view and view.count("turn 0 · policy") == 2  # differences marked; both turns
    shown = ct.pairs_frame(pairs)
    assert list(shown["gold"]) == ["Ostrevia", "Ada Quist"] and "left cover-EM" in shown.columns


def test_training_curves_numeric_columns_only(runs_root):
    curves = q.training_curves(runs_root)
    assert set(curves["run_id"]) == {RUN_T}
    assert set(curves["metric"]) == {"reward_mean", "kl", "reward/f1"}  # "note" is not a number
    assert q.curve_metrics(curves)[0] == "reward_mean"
    rm = curves[curves["metric"] == "reward_mean"].sort_values("step")
    assert list(rm["value"]) == pytest.approx([0.0, 0.1, 0.2])


def test_broken_and_missing_files_become_error_cells(runs_root, tmp_path):
    root = _broken_copy(runs_root, tmp_path)
    df = q.runs_table(root).set_index("run_id")
    assert "not-a-run" not in df.index
    err = df.loc["20261122-130000-broken", "error"]
    assert "trajectories.parquet" in err and "metrics.json" in err
    assert "trajectories.parquet: missing" in df.loc["20261122-140000-missing", "error"]
    assert "unreadable line" in df.loc[RUN_T, "error"] and df.loc[RUN_T, "steps"] == 1
    assert df.loc[RUN_A, "error"] == "" and df.loc[RUN_A, "n_trajectories"] == 4  # the others still count
    assert len(q.method_metrics(root)) == 3
    dash.build_app(root)  # and the app builds


def test_empty_runs_dir_renders_a_message(tmp_path):
    app = dash.build_app(tmp_path / "nothing-here")
    text = " ".join(str(getattr(o, "object", "")) for o in app.select())
    assert "No runs under" in text
    assert q.runs_table(tmp_path).empty and q.method_metrics(tmp_path).empty


def test_figures_have_a_metric_menu(runs_root):
    df = q.method_metrics(runs_root)
    fig = dash.compare_figure(df, ["f1", "em"])
    menu = fig.layout.updatemenus[0]
    assert [b.label for b in menu.buttons] == ["metric: f1", "metric: em"]
    assert sum(bool(t.visible) for t in fig.data) == 2  # f1's two methods only
    assert menu.buttons[1].args[0]["visible"] == [False, False, True, True]


# --------------------------------------------------------------------------- serving


@pytest.mark.parametrize("host,ok", [("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
                                     ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False)])
def test_only_loopback_without_allow_remote(host, ok):
    assert dash.is_loopback(host) is ok
    if ok:
        dash.check_host(host, allow_remote=False)
    else:
        with pytest.raises(ValueError, match="--allow-remote"):
            dash.serve_dashboard("runs", port=1, host=host)
        dash.check_host(host, allow_remote=True)  # the explicit flag allows it


def test_cli_refuses_remote_bind(capsys, tmp_path):
    assert cli.main(["dashboard", "--runs", str(tmp_path), "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "not a loopback address" in err and "--allow-remote" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _artifact_dir() -> Path:
    from workbench.util.paths import runs_dir

    return runs_dir() / "test-artifacts"


@contextmanager
def _served_page(root):
    """The dashboard served over ``root``, open in headless Chromium at 1400 x 1300 (skips without Chromium)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    port = _free_port()
    server = dash.serve_dashboard(root, port=port, threaded=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(f"http://127.0.0.1:{port}/", timeout=60_000)
            yield page
            browser.close()
    finally:
        server.stop()


def test_served_dashboard_renders_in_chromium(runs_root, tmp_path):
    with _served_page(runs_root) as page:
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)
        page.wait_for_selector(".tabulator-row", timeout=30_000)
        assert page.locator(".js-plotly-plot").count() >= 2
        for run_id in (RUN_A, RUN_B, RUN_T):  # the runs table (locators see into Panel's shadow DOM)
            assert page.locator(".tabulator-cell", has_text=run_id).count() >= 1, run_id
        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        _artifact_dir().mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, _artifact_dir() / "dashboard.png")
        # drill-down: open the tab, pick a trajectory row, see its transcript
        page.locator(".bk-tab", has_text="Trajectories").click()
        page.locator(".tabulator-row", has_text="b3#0").last.click()
        page.get_by_text("observation (loss mask 0)").first.wait_for(timeout=30_000)
        page.screenshot(path=str(tmp_path / "drilldown.png"), full_page=True)
        shutil.copy(tmp_path / "drilldown.png", _artifact_dir() / "dashboard-drilldown.png")
    assert shot.stat().st_size > 10_000


def test_static_export_contains_the_runs_and_no_cdn_links(runs_root, tmp_path):
    out = tmp_path / "dash.html"
    assert cli.main(["dashboard", "--runs", str(runs_root), "--static", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    for run_id in (RUN_A, RUN_B, RUN_T):
        assert run_id in page
    assert "cdn.holoviz.org" not in page and "Plotly" in page
    assert "observation (loss mask 0)" in page  # transcripts are inlined for the offline page
    assert "Question by question" in page and f"{RUN_A} \\u00b7 direct" in page and "both right" in page


def test_served_dashboard_shows_gold_answers_and_opens_a_pair_in_chromium(runs_root, tmp_path):
    """As a reader would: the drill-down's first transcript shows its gold answer at once, above the table (which has
    a gold column); the question-by-question tab opens a pair of the two methods side by side; no warning text."""
    with _served_page(runs_root) as page:
        page.wait_for_selector(".tabulator-row", timeout=60_000)
        page.locator(".bk-tab", has_text="Trajectories").click()
        verdict = page.locator(".wb-verdict").first
        verdict.wait_for(timeout=30_000)
        assert "gold" in verdict.inner_text()
        assert page.locator(".tabulator-col-title", has_text="gold").count() >= 1
        assert page.get_by_text("eval card: what these scores were measured with").count() >= 1  # folded, above
        page.locator(".bk-tab", has_text="Question by question").click()
        summary = page.locator(".wb-diff-summary").first
        summary.wait_for(timeout=30_000)
        assert "Ada Quist" in summary.inner_text()  # the gold answer of the pair opened first
        assert page.get_by_text("both right").count() >= 1
        width = page.evaluate("() => document.documentElement.scrollWidth")
        for word in ("Warning", "Traceback", "could not be built"):
            assert page.get_by_text(word).count() == 0, word
        page.screenshot(path=str(tmp_path / "pairs.png"), full_page=True)
        _artifact_dir().mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "pairs.png", _artifact_dir() / "dashboard-question-by-question.png")
    assert width <= 1400  # every table fits the page


def _lines(cells) -> list[list]:
    """Each cell's text, how many lines it renders on, and whether it is cut (its text wider than the cell)."""
    return cells.evaluate_all("""els => els.map(c => {
        const r = document.createRange(); r.selectNodeContents(c);
        const tops = new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
        return [c.innerText, tops.size, c.scrollWidth > c.clientWidth];
    })""")


def test_name_columns_render_on_one_line_in_chromium(runs_root):
    """The per-protocol table's protocol names, and the per-hop table's run ids and methods, each on one line and
    uncut: at the tests' width and in a narrow window, where the fixed-width number columns used to squeeze a name
    column to Tabulator's 40 px minimum ("direc" over "t")."""
    with _served_page(runs_root) as page:
        page.wait_for_selector(".tabulator-row", timeout=60_000)
        page.locator(".bk-tab", has_text="Breakdowns").click()
        hop_table = page.locator(".tabulator").filter(has=page.locator('.tabulator-col[tabulator-field="hops"]'))
        cells = {"protocol": page.locator('.tabulator-cell[tabulator-field="protocol"]'),
                 "run_id": hop_table.locator('.tabulator-cell[tabulator-field="run_id"]'),
                 "method": hop_table.locator('.tabulator-cell[tabulator-field="method"]')}
        cells["protocol"].first.wait_for(timeout=30_000)
        for width in (1400, 700):
            page.set_viewport_size({"width": width, "height": 1300})
            for name, loc in cells.items():
                for _ in range(50):  # Tabulator fits its columns to the new width
                    seen = _lines(loc)
                    if seen and all(n == 1 and not cut for _, n, cut in seen):
                        break
                    page.wait_for_timeout(100)
                assert seen and all(n == 1 and not cut for _, n, cut in seen), (width, name, seen)
        assert sorted(t for t, _, _ in _lines(cells["protocol"])) == ["direct", "search_r1"]


# --------------------------------------------------------------------------- lab


def test_lab_command_and_cli(monkeypatch, capsys):
    cmd = cli.lab_command(port=9123, no_browser=True, root="/x/project", extra=["--ServerApp.open_browser=False"])
    assert cmd[1:3] == ["-m", "jupyterlab"]
    assert ["--notebook-dir", "/x/project"] == cmd[3:5]
    assert cmd[-1] == "--ServerApp.open_browser=False"
    import os

    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    assert "--ServerApp.ip=127.0.0.1" in cmd and "--ServerApp.port=9123" in cmd and "--no-browser" in cmd
    assert "--MultiKernelManager.default_kernel_name=workbench" in cmd
    assert "--no-browser" not in cli.lab_command(port=8888)

    # a setting given on the command line replaces ours (Jupyter refuses two values for one setting)
    mine = cli.lab_command(port=9123, root="/x", extra=["--ServerApp.root_dir=/y", "--ServerApp.port=9000"])
    assert "--notebook-dir" not in mine and "--ServerApp.port=9123" not in mine
    assert mine[-2:] == ["--ServerApp.root_dir=/y", "--ServerApp.port=9000"] and "--ServerApp.ip=127.0.0.1" in mine

    seen, envs = [], []
    monkeypatch.setattr(cli, "_run_until_stopped", lambda c, env=None: seen.append(c) or envs.append(env) or 0)
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    assert cli.main(["lab", "--port", "9124", "--no-browser", "--LabApp.news_url=None"]) == 0
    from workbench.util.paths import repo_root

    assert "--ServerApp.port=9124" in seen[0] and seen[0][4] == str(repo_root())
    assert "--LabApp.news_url=None" in seen[0]
    out = capsys.readouterr().out
    # the token reaches the server in its environment, never on its command line (which `ps` shows everyone)
    token = envs[0]["JUPYTER_TOKEN"]
    assert len(token) == 48 and not any(token in a for a in seen[0]) and not any("token" in a.lower() for a in seen[0])
    assert f"http://127.0.0.1:9124/lab?token={token}" in out
    with pytest.raises(SystemExit) as e:
        cli.main(["lab", "--port", "9124", "--IdentityProvider.token=abc"])
    assert "visible to every user" in str(e.value) and len(seen) == 1
    with pytest.raises(SystemExit) as e:  # only `lab` passes unknown flags on
        cli.main(["eval", "--method", "direct", "--bogus-flag"])
    assert e.value.code == 2


def test_stopping_workbench_lab_stops_its_jupyter_server(tmp_path):
    """SIGTERM to `workbench lab` (a scripted start and stop): the JupyterLab server it started goes too, and its
    port is free again (it used to keep running, orphaned). While it runs, its API opens with the printed token
    only, and the token is on no process's command line."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "lab", "--port", str(port), "--no-browser",
                             "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        deadline = time.time() + 90
        while not listening() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert listening(), "JupyterLab did not start"
        token = proc.stdout.readline().strip().rsplit("token=", 1)[1]

        def status(url: str) -> int:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        api = f"http://127.0.0.1:{port}/api/kernels"
        assert status(f"{api}?token={token}") == 200 and status(api) == 403
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        lines = [Path(f"/proc/{p}/cmdline").read_bytes() for p in [proc.pid, *kids]]
        assert len(lines) >= 2 and not any(token.encode() in c for c in lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.time() + 15
        while listening() and time.time() < deadline:
            time.sleep(0.5)
        assert not listening()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_metrics_json_of_runs_is_read_as_summaries(runs_root):
    s = q.summary_metrics(runs_root).set_index(["run_id", "method"])
    summary = json.loads((runs_root / RUN_B / "metrics.json").read_text())["methods"]["search_r1"]
    assert s.loc[(RUN_B, "search_r1"), "f1"] == pytest.approx(summary["f1"]) == pytest.approx(2 / 3)
    # an answer's own latency and what an answer costs (the CLI's s/answer) are two columns with two names
    assert s.loc[(RUN_B, "search_r1"), "latency_s"] == pytest.approx(summary["seconds"])
    assert s.loc[(RUN_B, "search_r1"), "wall_s_per_answer"] == pytest.approx(summary["wall_seconds_per_answer"])
    assert "seconds" not in s.columns


# --------------------------------------------------------------------------- failed trajectories

RUN_F, RUN_OLD = "20261122-150000-eval-failed", "20261122-140000-eval-old-features"
FAILURE_TEXT = "search tool failed: tool 'search' raised RuntimeError: index offline"


def _broken_search(query: str, k: int = 3):
    raise RuntimeError("index offline")


@pytest.fixture(scope="module")
def failed_root(tmp_path_factory, tokenizer) -> Path:
    """RUN_F: direct answers both questions; search_r1's search tool raises, so both its trajectories fail.
    RUN_OLD: a features table from before the failure columns (no count: unknown, not 0). RUN_T: no features."""
    root = tmp_path_factory.mktemp("failed-runs")
    _eval_run(root, RUN_F, tokenizer, EX_A, {
        "direct": ["<answer> Ada Quist </answer>"],
        "search_r1": ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"],
    }, "world", search=_broken_search)
    old = _eval_run(root, RUN_OLD, tokenizer, EX_A, {"direct": ["<answer> Ada Quist </answer>"]}, "world")
    import pandas as pd

    f = pd.read_parquet(old.path / "features.parquet")
    f.drop(columns=["failed_tool", "backend_error", "failed_judge", "failed_evidence", "failure"]).to_parquet(
        old.path / "features.parquet")
    t = Run.create(root, kind="train", run_id=RUN_T, config={"model": "scripted", "dataset": "world"})
    t.append_step_metrics({"step": 0, "reward_mean": 0.0})
    return root


def test_failed_trajectories_are_counted_per_run(failed_root):
    from workbench.dashboard import failures as fq

    counts = fq.failure_counts(failed_root).set_index("run_id")["failed"]
    assert counts[RUN_F] == 2 and pd_isna(counts[RUN_OLD]) and RUN_T not in counts.index
    runs = fq.runs_with_failures(q.runs_table(failed_root), failed_root).set_index("run_id")
    cols = list(runs.columns)
    assert cols[cols.index("n_trajectories") + 1] == "failed"
    assert runs.loc[RUN_F, "failed"] == 2 and runs.loc[RUN_F, "n_trajectories"] == 4
    assert pd_isna(runs.loc[RUN_T, "failed"]) and pd_isna(runs.loc[RUN_OLD, "failed"])


def test_drilldown_names_the_flag_and_the_failure_text(failed_root):
    from workbench.dashboard import failures as fq

    df = fq.run_trajectory_table(failed_root, RUN_F)
    assert list(df.columns) == [*q.TRAJECTORY_COLUMNS, "failed", "failure"] and len(df) == 4
    bad, good = df[df["method"] == "search_r1"], df[df["method"] == "direct"]
    assert (bad["failed"] == "failed_tool").all() and bad["failure"].str.contains(FAILURE_TEXT, regex=False).all()
    assert (good["failed"] == "").all() and (good["failure"] == "").all()
    box = dash.failure_html(bad["failed"].iloc[0], bad["failure"].iloc[0])
    assert "failed: failed_tool" in box and html.escape(FAILURE_TEXT) in box and dash.failure_html("", "") == ""
    # features rows that do not line up with the trajectories mark nothing
    shifted = fq.run_failures(failed_root, RUN_F).assign(row=lambda f: f["row"] + 1)
    assert (fq.with_failures(q.run_trajectories(failed_root, RUN_F), shifted)["failed"] == "").all()
    assert fq.run_failures(failed_root, RUN_OLD).empty and fq.run_failures(failed_root, "no-such-run").empty


def test_served_drilldown_pages_through_the_run(failed_root, monkeypatch):
    """The served drill-down holds one page (read with limit/offset), with the failure flags of those rows."""
    import pandas as pd

    whole = dash.fq.run_trajectory_table(failed_root, RUN_F)
    monkeypatch.setattr(dash, "PAGE_ROWS", 3)
    select, section = dash._drilldown_section(failed_root, [RUN_F])
    transcript = section[1]  # above the table: a click never moves the table
    (prev, page, nxt, info), table = _pager(section)
    assert table.selection == [0] and "row 0" in transcript.object  # the first row opens at once
    assert len(table.value) == 3 and "1–3 of 4" in info.object
    nxt.clicks += 1  # page 2: the last row alone
    assert page.value == 2 and table.value["row"].tolist() == [3] and "4–4 of 4" in info.object
    pd.testing.assert_frame_equal(table.value[["row", "id", "failed", "failure"]].reset_index(drop=True),
                                  whole.iloc[3:][["row", "id", "failed", "failure"]].reset_index(drop=True))
    bad = whole.index[whole["failed"] != ""].tolist()
    page.value = 1 + bad[0] // 3
    table.selection = [bad[0] % 3]  # picking a failed row shows its failure and transcript
    assert "failed: failed_tool" in transcript.object and "observation (loss mask 0)" in transcript.object


def _pager(section):
    """The drill-down's paging row (previous, page, next, the range shown) and its table."""
    import panel as pn

    body = section[2][0]
    (row,) = [r for r in body.select(pn.Row) if any(isinstance(o, pn.widgets.IntInput) for o in r)]
    return tuple(row), body.select(pn.widgets.Tabulator)[0]


def test_header_tooltips_come_from_the_schema(failed_root):
    from workbench.storage.schema import describe

    tips = dash.column_tooltips(["em", "failed", "n_searches", "failure", "not_a_column"], means=False)
    assert tips["em"] == describe("em") and tips["n_searches"] == describe("n_searches")
    assert tips["failure"] == describe("failure") and "failed" in tips and "not_a_column" not in tips
    assert dash.column_tooltips(["f1"], means=True)["f1"] == f"mean of: {describe('f1')}"
    table = dash._trajectory_table(dash.fq.run_trajectory_table(failed_root, RUN_F))
    assert table.header_tooltips["failure"] == describe("failure")
    assert table.header_tooltips["finish_reason"] == describe("finish_reason")


def test_static_page_shows_the_failure(failed_root, tmp_path):
    out = dash.save_static(tmp_path / "dash.html", failed_root)
    page = out.read_text(encoding="utf-8")
    # the page's HTML sits JSON-encoded in the document, so compare the part without quotes
    assert "raised RuntimeError: index offline" in page and "FAILED (failed_tool)" in page and "failed: failed_tool" in page


def test_served_dashboard_shows_failures_and_tooltips_in_chromium(failed_root, tmp_path):
    with _served_page(failed_root) as page:
        page.wait_for_selector(".tabulator-row", timeout=60_000)
        page.get_by_text("1 with failed trajectories").first.wait_for(timeout=30_000)
        header = page.locator(".tabulator-col", has_text="failed").first
        header.hover()
        tip = page.locator(".tabulator-tooltip")
        tip.first.wait_for(timeout=10_000)
        assert "trajectories whose tool, backend" in tip.first.inner_text()
        # drill-down: the failed run is the newest with trajectories, so it opens first
        page.locator(".bk-tab", has_text="Trajectories").click()
        page.locator(".tabulator-cell", has_text=FAILURE_TEXT).first.wait_for(timeout=30_000)
        page.locator(".tabulator-row", has_text="search_r1:a1#0").last.click()
        page.get_by_text("failed: failed_tool").first.wait_for(timeout=30_000)
        page.get_by_text("observation (loss mask 0)").first.wait_for(timeout=30_000)
        page.screenshot(path=str(tmp_path / "failed.png"), full_page=True)
        _artifact_dir().mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "failed.png", _artifact_dir() / "dashboard-failures.png")


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def test_gold_answers_follow_the_examples_file_and_name_a_bad_line(tmp_path):
    run = tmp_path / "r1"
    run.mkdir()
    ex = run / "examples.jsonl"
    ex.write_text('{"id": "a", "question": "q", "answers": ["Ada Quist", "A. Quist"]}\n{"id": "b", "answers": []}\n')
    assert q.gold_answers(tmp_path, "r1", ["a", "b", "c", None]) == ["Ada Quist | A. Quist", None, None, None]
    ex.write_text('{"id": "a", "answers": "Ostrevia"}\n\n')  # rewritten: the cached map is not used; a bare alias
    assert q.gold_answers(tmp_path, "r1", ["a"]) == ["Ostrevia"]
    ex.write_text('{"id": "a", "answers": ["x"]}\nnot json\n')
    with pytest.raises(ValueError, match=r"examples.jsonl:2: not a valid example line"):
        q.gold_answers(tmp_path, "r1", ["a"])
    assert q.gold_answers(tmp_path, "missing-run", ["a"]) == [None]


def test_two_comparisons_never_share_a_row():
    """The shipped comparisons carry 42 rows on 21 colliding labels (deep_outline's and deep_recipe's "deep recipe:
    deep SFT vs deep SFT + RL"): each comparison's label is unique by construction, the folders telling them apart."""
    from workbench.util.paths import repo_root

    df = q.comparison_table(repo_root() / "data" / "results")
    per_label = df.groupby("comparison")["file"].nunique()
    assert (per_label == 1).all(), per_label[per_label > 1]
    assert df.groupby(["comparison", "hops"]).size().max() == 1
    labels = set(df["comparison"])
    assert {"deep recipe: deep SFT vs deep SFT + RL (deep_outline/sft_vs_rl)",
            "deep recipe: deep SFT vs deep SFT + RL (deep_recipe/sft_vs_rl)"} <= labels
    assert q.unique_labels(["a", "a", "b"], ["x/1/c.json", "y/1/c.json", "z/c.json"]) == ["a (x/1)", "a (y/1)", "b"]


def test_every_served_breakdown_and_the_pairs_export_as_csv_and_parquet(runs_root):
    """The Compare tab's method table and question-by-question pairs, the Breakdowns tab's per-hop and per-protocol
    tables: each has CSV and Parquet buttons whose files hold the table's rows (the pairs: the category picked, each
    side named); the static page has none (no server to hand a file)."""
    import io

    import pandas as pd
    import panel as pn


    page = dash.build_app(runs_root)
    files = {d.filename: d for d in page.select(pn.widgets.FileDownload)}

    def read(name: str) -> pd.DataFrame:
        got = files[name].callback()
        return pd.read_csv(got) if name.endswith(".csv") else pd.read_parquet(io.BytesIO(got.read()))

    stems = ["per-method", "compare-pairs", "per-protocol"] + (["per-hop"] if not q.hop_breakdown(runs_root).empty else [])
    for stem in stems:
        csv, parquet = read(f"{stem}.csv"), read(f"{stem}.parquet")
        assert len(csv) == len(parquet) > 0 and list(csv.columns) == list(parquet.columns), stem
    methods = read("per-method.parquet")
    want = q.method_metrics(runs_root)
    assert sorted(zip(methods["run_id"], methods["method"])) == sorted(zip(want["run_id"], want["method"]))
    assert len(read("per-protocol.csv")) == len(q.protocol_breakdown(runs_root))
    pairs = read("compare-pairs.parquet")
    (category,) = [w for w in page.select(pn.widgets.RadioButtonGroup) if "all" in w.options and "fixed" in w.options]
    (left,) = [w for w in page.select(pn.widgets.Select) if w.label == "left"]
    assert {"question", "gold", "left_run", "left_method", "right_run", "right_method"} <= set(pairs.columns)
    assert f"{pairs.loc[0, 'left_run']} · {pairs.loc[0, 'left_method']}" in left.value
    for cat in category.options[1:]:
        category.value = cat
        shown = read("compare-pairs.csv")
        assert len(shown) == int((pairs["category"] == cat).sum()) and set(shown["category"]) <= {cat}
    static = dash.build_app(runs_root, static=True)
    assert not static.select(pn.widgets.FileDownload)
