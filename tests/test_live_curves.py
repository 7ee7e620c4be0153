"""The served Training tab's curves (``workbench.dashboard.live_curves``): smoothing, the wall-clock axis, the runs
overlaid, and new steps read while a run trains (the queries here; the page in headless Chromium)."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from tests.test_dashboard import _served_page
from workbench.dashboard import live_curves as lc
from workbench.dashboard import queries as q
from workbench.storage.runs import Run

OLD, NEW = "20261201-100000-train-old", "20261202-100000-train-new"


def _curves(rows: dict[str, list[dict]]) -> pd.DataFrame:
    out = [(run, row["step"], k, float(v)) for run, rs in rows.items() for row in rs for k, v in row.items() if k != "step"]
    return pd.DataFrame(out, columns=["run_id", "step", "metric", "value"])


def test_smoothing_is_tensorboards_debiased_moving_average():
    assert lc.ema([1.0, 3.0, 3.0], 0.0) == [1.0, 3.0, 3.0]
    # weight 0.5: 0.5 -> 0.5 / 0.5 = 1; 0.25 + 1.5 = 1.75 -> / 0.75; 0.875 + 1.5 = 2.375 -> / 0.875
    assert lc.ema([1.0, 3.0, 3.0], 0.5) == pytest.approx([1.0, 1.75 / 0.75, 2.375 / 0.875])
    assert lc.ema([2.0], 0.9) == pytest.approx([2.0])  # debiased: the first point is not pulled towards 0
    with pytest.raises(ValueError, match=r"must be in \[0, 1\)"):
        lc.ema([1.0], 1.0)


def test_the_wall_clock_axis_sums_each_runs_step_times_and_leaves_eval_rows_out():
    curves = _curves({
        OLD: [{"step": 0, "eval_cem": 0.5}, {"step": 1, "reward_mean": 0.2, "time_step_s": 60.0},
              {"step": 2, "reward_mean": 0.4, "time_step_s": 120.0}, {"step": 2, "eval_cem": 0.6}],
        NEW: [{"step": 1, "reward_mean": 0.9, "time_step_s": 30.0}],
    })
    wall = lc.curve_series(curves, "reward_mean", "wall")
    assert wall[wall["run_id"] == OLD]["x"].tolist() == [1.0, 3.0]  # minutes at the end of steps 1 and 2
    assert wall[wall["run_id"] == NEW]["x"].tolist() == [0.5]
    evals = lc.curve_series(curves, "eval_cem", "wall")
    assert evals["step"].tolist() == [2] and evals["x"].tolist() == [3.0]  # step 0 has no step time: left out
    steps = lc.curve_series(curves, "eval_cem", "step")
    assert steps["x"].tolist() == [0, 2] and steps["value"].tolist() == [0.5, 0.6]
    only = lc.curve_series(curves, "reward_mean", runs=[NEW])
    assert only["run_id"].tolist() == [NEW] and only["smoothed"].tolist() == [0.9]
    with pytest.raises(ValueError, match="axis 'time'"):
        lc.curve_series(curves, "reward_mean", "time")


def test_a_smoothed_figure_keeps_the_raw_values_beneath_each_run():
    curves = _curves({OLD: [{"step": s, "reward_mean": float(s % 2)} for s in range(1, 5)],
                      NEW: [{"step": s, "reward_mean": 0.5} for s in range(1, 3)]})
    series = lc.curve_series(curves, "reward_mean", smoothing=0.6)
    fig = lc.live_figure(series, "reward_mean", smoothing=0.6)
    assert len(fig.data) == 4 and sum(t.showlegend is False for t in fig.data) == 2  # raw lines: no legend entry
    raw = [t for t in fig.data if t.showlegend is False and len(t.y) == 4][0]
    smooth = [t for t in fig.data if t.showlegend is not False and len(t.y) == 4][0]
    assert list(raw.y) == [1.0, 0.0, 1.0, 0.0]
    assert smooth.y[0] == 1.0 and 0.0 < min(smooth.y[1:]) and max(smooth.y[1:]) < 1.0  # the swings damped
    assert "smoothed 0.6" in fig.layout.title.text
    assert len(lc.live_figure(lc.curve_series(curves, "reward_mean"), "reward_mean").data) == 2  # no smoothing: one line a run


def _train_run(root, run_id, steps):
    run = Run.create(root, kind="train", run_id=run_id, config={"model": "scripted", "dataset": "world"})
    for s in steps:
        run.append_step_metrics({"step": s, "reward_mean": 0.1 * s, "time_step_s": 30.0})
    return run


def _fire(run, step, name):
    """A ``health.jsonl`` row with one alarm fired, as the trainer appends it."""
    from workbench.rl.health import HEALTH_FILE

    row = {"step": step, "signals": {}, "fired": [{"name": name, "step": step, "text": f"{name} text", "says": ""}]}
    with open(run.path / HEALTH_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def test_a_new_step_or_run_is_read_again_and_nothing_else_is(tmp_path):
    root = tmp_path / "runs"
    old = _train_run(root, OLD, [1, 2])
    view = lc.LiveCurves(root)
    try:
        assert view.runs.value == [OLD] and len(view.plot.object.data[0].x) == 2
        assert view.refresh() is False  # nothing moved: not read again
        old.append_step_metrics({"step": 3, "reward_mean": 0.3, "time_step_s": 30.0})
        assert view.refresh() is True and list(view.plot.object.data[0].x) == [1, 2, 3]
        assert "at step 3" in view.status.object
        _train_run(root, NEW, [1])  # a run that starts while the page is open joins the overlay
        assert view.refresh() is True and view.runs.value == [NEW, OLD] and len(view.plot.object.data) == 2
        assert "no health alarm" in view.alarm_pane.object
        _fire(old, 3, "search_drop")  # an alarm written while the page is open is listed at the next look
        assert view.refresh() is True and "search_drop" in view.alarm_pane.object and "at step 3" in view.alarm_pane.object
        view.runs.value = [NEW]  # only the runs drawn: the other run's alarm is not listed
        assert "no health alarm" in view.alarm_pane.object
        view.runs.value = [NEW, OLD]
        view.axis.value = "wall-clock (min)"
        assert sorted(len(t.x) for t in view.plot.object.data) == [1, 3]
        assert "training time" in view.plot.object.layout.xaxis.title.text
    finally:
        view.follow.value = False
    assert view.callback is None


def test_the_served_training_tab_follows_a_run_as_it_trains(tmp_path, monkeypatch):
    """In Chromium: the Training tab draws the run's two steps; a third written to its metrics.jsonl appears
    without a reload, and the axis buttons switch the figure to training time."""
    monkeypatch.setattr(lc, "PERIOD_S", 0.5)
    root = tmp_path / "runs"
    run = _train_run(root, OLD, [1, 2])
    points = "el => el.data ? el.data.map(t => t.x.length) : []"
    with _served_page(root) as page:
        page.locator(".bk-tab", has_text="Training").click()
        plot = page.locator(".js-plotly-plot >> visible=true").first
        plot.wait_for(timeout=60_000)
        deadline = time.time() + 30
        while plot.evaluate(points) != [2] and time.time() < deadline:
            time.sleep(0.2)
        assert plot.evaluate(points) == [2]
        run.append_step_metrics({"step": 3, "reward_mean": 0.3, "time_step_s": 30.0})
        deadline = time.time() + 30
        while plot.evaluate(points) != [3] and time.time() < deadline:
            time.sleep(0.2)
        assert plot.evaluate(points) == [3], "the new step did not reach the page"
        page.locator(".wb-live-status", has_text="at step 3").first.wait_for(timeout=30_000)  # its own message
        _fire(run, 3, "search_drop")  # an alarm as the trainer writes it: listed without a reload
        page.locator(".wb-live-alarms", has_text="search_drop").first.wait_for(timeout=30_000)
        page.locator(".bk-btn", has_text="wall-clock (min)").click()
        title = "el => el.layout.xaxis.title.text || ''"
        deadline = time.time() + 30
        while "training time" not in plot.evaluate(title) and time.time() < deadline:
            time.sleep(0.2)
        assert "training time" in plot.evaluate(title)
        assert plot.evaluate("el => Array.from(el.data[0].x)") == [0.5, 1.0, 1.5]  # 30 s a step
    assert json.loads((root / OLD / q.STEP_METRICS).read_text().splitlines()[-1])["step"] == 3
