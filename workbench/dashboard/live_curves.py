"""The served dashboard's training curves: every run overlaid, smoothed, against steps or wall-clock time, and
read again while a run trains.

The view reads ``queries.training_curves`` (each run's ``metrics.jsonl``, long format). :func:`curve_series` is
the arithmetic, kept apart from the widgets so that it is tested without a browser:

- **smoothing** is TensorBoard's: an exponential moving average with weight ``s`` on the previous value, debiased
  (divided by ``1 - s**k`` after ``k`` points), so the first points are not pulled towards zero; 0 draws the raw
  values. With smoothing on, each run's raw values stay drawn faintly under its smoothed line.
- **wall-clock** is the run's training time at the end of each step, in minutes: the running sum of its steps'
  ``time_step_s`` (evaluation rows have none and are left out of that axis), so runs that started on different days
  or were resumed line up at 0.

:class:`LiveCurves` is the Panel view: a metric picker, the runs to overlay, the axis, the smoothing slider and a
*follow* switch. While *follow* is on, the view checks the size and modification time of every ``metrics.jsonl`` and
``health.jsonl`` under the runs root every ``period_s`` seconds and reads the curves and the runs' health alarms
again when one moved (a new step, an alarm, a new run), saying when it last did; the alarms of the runs drawn are
listed above the plot, newest step first. The static page keeps the plain figure (``figures.curves_figure``): it has no server.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.dashboard import queries as q
from workbench.dashboard.figures import _colours, escape_label, run_label
from workbench.rl.health import HEALTH_FILE

#: Seconds between two looks at the runs' files while *follow* is on.
PERIOD_S = 5.0
#: The axes a reader can draw the curves against.
AXES = {"step": "step", "wall-clock (min)": "wall"}
SERIES_COLUMNS = ["run_id", "status", "step", "x", "value", "smoothed"]


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased exponential moving average of ``values`` (``weight`` on the previous value, in [0, 1))."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight {weight} must be in [0, 1)")
    out, acc = [], 0.0
    for k, v in enumerate(values, start=1):
        acc = weight * acc + (1.0 - weight) * v
        out.append(acc / (1.0 - weight ** k) if weight > 0 else v)
    return out


def curve_series(curves: pd.DataFrame, metric: str, axis: str = "step", smoothing: float = 0.0,
                 runs: list[str] | None = None) -> pd.DataFrame:
    """One row per (run, step) of ``metric``: the run, its status, the step, ``x`` (the step, or with ``axis="wall"``
    the run's training minutes at the end of the step) and the value raw and smoothed (:func:`ema`); ``runs``: only
    these run ids. Sorted by run then step."""
    if axis not in AXES.values():
        raise ValueError(f"axis {axis!r} is not one of {sorted(AXES.values())}")
    df = curves[curves["metric"] == metric]
    if runs is not None:
        df = df[df["run_id"].isin(runs)]
    if df.empty:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    status = "status" in curves
    parts = []
    for run_id, g in df.groupby("run_id", sort=True):
        g = g.sort_values("step", kind="stable").drop_duplicates("step", keep="last")
        if axis == "wall":
            t = curves[(curves["run_id"] == run_id) & (curves["metric"] == "time_step_s")]
            minutes = t.sort_values("step").drop_duplicates("step", keep="last").set_index("step")["value"].cumsum() / 60
            g = g[g["step"].isin(minutes.index)]
            x = g["step"].map(minutes)
        else:
            x = g["step"]
        parts.append(pd.DataFrame({"run_id": run_id, "status": g["status"] if status else "complete",
                                   "step": g["step"], "x": x, "value": g["value"],
                                   "smoothed": ema(g["value"].astype(float).tolist(), smoothing)}))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SERIES_COLUMNS)


def live_figure(series: pd.DataFrame, metric: str, axis: str = "step", smoothing: float = 0.0):
    """The curves of :func:`curve_series`: a line per run (its smoothed values, the raw ones faint beneath when
    smoothing is on), coloured by run, with the step in each point's hover."""
    import plotly.graph_objects as go

    fig = go.Figure()
    colours = _colours(sorted(series["run_id"].unique())) if not series.empty else {}
    for run_id, g in series.groupby("run_id", sort=True):
        name = escape_label(run_label(run_id, g["status"].iloc[0]))
        hover = "%{fullData.name}<br>step %{customdata}: %{y:.4g}<extra></extra>"
        if smoothing > 0:
            fig.add_scatter(x=g["x"], y=g["value"], mode="lines", name=name, legendgroup=run_id, showlegend=False,
                            line={"color": colours[run_id], "width": 1}, opacity=0.3, customdata=g["step"],
                            hovertemplate=hover)
        fig.add_scatter(x=g["x"], y=g["smoothed"], mode="lines+markers", name=name, legendgroup=run_id,
                        line_color=colours[run_id], customdata=g["step"], hovertemplate=hover)
    wall = axis == "wall"
    fig.update_layout(title=f"{escape_label(metric)} per training step" + (f" (smoothed {smoothing:g})" if smoothing else ""),
                      xaxis_title="training time (min, summed step times)" if wall else "step", height=420,
                      legend_title_text="run", uirevision=f"{metric}/{axis}")
    if not wall:  # steps are whole numbers: no 1.5 on the axis of a 2-step run
        fig.update_layout(xaxis_tickformat="d", xaxis_dtick=1 if series["step"].nunique() <= 12 else None)
    return fig


#: The files a training run writes as it goes: its step rows and its health rows (the alarms).
FOLLOWED = (q.STEP_METRICS, HEALTH_FILE)


def files_signature(runs_dir: str | os.PathLike) -> tuple[tuple[str, str, int, int], ...]:
    """``(run, file, size, mtime_ns)`` of every run's ``metrics.jsonl`` and ``health.jsonl`` under ``runs_dir``: what
    changes when a step lands or an alarm fires."""
    out = []
    for d in q.run_dirs(runs_dir):
        for name in FOLLOWED:
            try:
                st = (d / name).stat()
            except OSError:
                continue
            out.append((d.name, name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def alarms_html(alarms: pd.DataFrame, runs: list[str], limit: int = 8) -> str:
    """The alarms of the runs drawn, newest step first: one line each (run, step, alarm, what happened)."""
    df = alarms[alarms["run_id"].isin(runs)] if len(alarms) else alarms
    if df.empty:
        return "<small class='wb-live-alarms-none'>no health alarm in the runs drawn</small>"
    df = df.sort_values(["step", "run_id"], ascending=[False, False])
    lines = [f"<li><b>{html.escape(str(r['alarm']))}</b> at step {int(r['step'])} · {html.escape(str(r['run_id']))}: "
             f"{html.escape(str(r['what happened']))}</li>" for _, r in df.head(limit).iterrows()]
    more = f"<li>… and {len(df) - limit} more</li>" if len(df) > limit else ""
    return (f"<div style='color:#b00020'><small>{len(df)} health alarm(s) in the runs drawn</small>"
            f"<ul style='margin:2px 0'>{''.join(lines)}{more}</ul></div>")


class LiveCurves:
    """The Training tab's curves, served: pick a metric, the runs to overlay, the axis and the smoothing; with
    *follow* on, new steps appear as the runs write them (every ``period_s`` seconds)."""

    def __init__(self, runs_dir: str | os.PathLike, period_s: float | None = None, curves: pd.DataFrame | None = None):
        import panel as pn

        self.root, self.period_s = Path(runs_dir), float(PERIOD_S if period_s is None else period_s)
        self.signature = files_signature(self.root)  # before reading: a step landing meanwhile is read next time
        self.curves = curves if curves is not None else q.training_curves(self.root)
        self.alarms = q.health_alarms(self.root)
        names = q.curve_metrics(self.curves)
        runs = self._runs()
        self.metric = pn.widgets.Select(label="metric", options=names, value=names[0] if names else None, width=260)
        self.runs = pn.widgets.MultiChoice(label="runs overlaid", options=runs, value=list(runs), width=520)
        self.axis = pn.widgets.RadioButtonGroup(label="x axis", options=list(AXES), value="step")
        self.smoothing = pn.widgets.FloatSlider(label="smoothing", start=0.0, end=0.95, step=0.05, value=0.0, width=220)
        self.follow = pn.widgets.Toggle(label=f"follow training (every {self.period_s:g} s)", value=True, width=220)
        self.status = pn.pane.HTML("", css_classes=["wb-live-status"], sizing_mode="stretch_width")
        self.alarm_pane = pn.pane.HTML("", css_classes=["wb-live-alarms"], sizing_mode="stretch_width")
        self.plot = pn.pane.Plotly(sizing_mode="stretch_width", config={"displaylogo": False})
        for w in (self.metric, self.runs, self.axis, self.smoothing):
            w.param.watch(lambda _e: self.draw(), "value")
        self.callback = None
        self.follow.param.watch(self._follow, "value")
        self.view = pn.Column(pn.Row(self.metric, self.axis, self.smoothing, self.follow), self.runs, self.status,
                              self.alarm_pane, self.plot, sizing_mode="stretch_width")
        self.draw()
        self._follow()

    def _runs(self) -> list[str]:
        return sorted(self.curves["run_id"].unique().tolist(), reverse=True)  # newest first

    def draw(self) -> None:
        metric = self.metric.value
        if metric is None:
            return
        axis = AXES[self.axis.value]
        series = curve_series(self.curves, metric, axis, float(self.smoothing.value), list(self.runs.value))
        self.plot.object = live_figure(series, metric, axis, float(self.smoothing.value))
        self.alarm_pane.object = alarms_html(self.alarms, list(self.runs.value))
        newest = {r: int(g["step"].max()) for r, g in series.groupby("run_id")} if not series.empty else {}
        steps = ", ".join(f"{html.escape(r)} at step {s}" for r, s in sorted(newest.items(), reverse=True)[:3])
        stamp = _dt.datetime.now().strftime("%H:%M:%S")
        self.status.object = (f"<small>read {stamp} · {len(newest)} run(s) drawn" + (f" · {steps}" if steps else "")
                              + (" · following" if self.follow.value else "") + "</small>")

    def refresh(self) -> bool:
        """Read the curves and alarms again if a run's ``metrics.jsonl`` or ``health.jsonl`` changed since the last
        read; whether one did."""
        sig = files_signature(self.root)
        if sig == self.signature:
            return False
        self.signature, self.curves, self.alarms = sig, q.training_curves(self.root), q.health_alarms(self.root)
        names, runs = q.curve_metrics(self.curves), self._runs()
        new_runs = [r for r in runs if r not in self.runs.options]
        self.metric.options = names
        if self.metric.value not in names and names:
            self.metric.value = names[0]
        self.runs.options = runs
        if new_runs:  # a run that started while the page was open is drawn too
            self.runs.value = [*new_runs, *[r for r in self.runs.value if r in runs]]
        self.draw()
        return True

    def _follow(self, _event: Any = None) -> None:
        import panel as pn

        if self.follow.value and self.callback is None:
            self.callback = pn.state.add_periodic_callback(self.refresh, period=int(self.period_s * 1000))
        elif not self.follow.value and self.callback is not None:
            self.callback.stop()
            self.callback = None
        self.draw()
