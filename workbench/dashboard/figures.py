"""The dashboard's plotly figures: metric comparisons, training curves, per-hop and per-protocol views.

Each figure holds the traces of every metric and a plotly dropdown to pick one: the selector runs in
the browser, so it works the same served and in the static file. Names from runs (run ids, methods,
protocols) are escaped before plotly sees them (:func:`escape_label`): plotly reads a few HTML tags in labels
and shows entities as the characters they stand for. A frame with a ``status`` column (``queries.method_metrics``
and the others) has each unfinished run marked where it is named (:func:`run_label`) and left out of means over runs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import pandas as pd

from workbench.dashboard.intervals import metric_intervals


def with_metric_menu(fig, traces_by_metric: dict[str, list[int]], titles: dict[str, str],
                     layouts: dict[str, dict[str, Any]] | None = None):
    """Show the first metric's traces; a dropdown (top left) switches the visible traces and the title (and, with
    ``layouts``, the layout properties given for that metric, such as ``{"height": 900}``)."""
    n = len(fig.data)
    metrics = list(traces_by_metric)
    if not metrics:
        return fig
    layouts = layouts or {}

    def visible(m: str) -> list[bool]:
        on = set(traces_by_metric[m])
        return [i in on for i in range(n)]

    for i, v in enumerate(visible(metrics[0])):
        fig.data[i].visible = v
    buttons = [dict(label=f"metric: {m}", method="update",
                    args=[{"visible": visible(m)}, {"title.text": titles[m], **layouts.get(m, {})}]) for m in metrics]
    fig.update_layout(layouts.get(metrics[0], {}))
    fig.update_layout(
        title_text=titles[metrics[0]], title_x=0.3,
        # just above the plot area, however tall the figure is (y is a fraction of the plot's height)
        updatemenus=[dict(buttons=buttons, direction="down", x=0, xanchor="left", y=1, yanchor="bottom",
                          pad=dict(b=16), showactive=True, active=0)],
        margin=dict(l=40, r=20, t=80, b=40),
    )
    return fig


def escape_label(x: Any) -> str:
    """A name as plotly text: escaped (plotly reads a few HTML tags in labels and shows entities as characters)."""
    return html.escape(str(x), quote=False)


def run_label(run_id: Any, status: Any = "complete") -> str:
    """A run's name as a view shows it: an unfinished run's marked with its state.

    >>> run_label("r1"), run_label("r2", "killed")
    ('r1', 'r2 (killed)')
    """
    return str(run_id) if status == "complete" else f"{run_id} ({status})"


def _run_labels(df: pd.DataFrame) -> pd.Series:
    """Each row's :func:`run_label` (the plain run id where ``df`` has no ``status``)."""
    if "status" not in df:
        return df["run_id"].astype(str)
    return pd.Series([run_label(r, s) for r, s in zip(df["run_id"], df["status"])], index=df.index, dtype=object)


def _pooled(df: pd.DataFrame, by: str, m: str) -> pd.DataFrame:
    """``m`` per ``by`` and method over the runs in ``df``: each run's mean weighted by its trajectories (``n``, then
    their sum; unweighted without it), so a one-question run counts for one question, not for a run."""
    if "n" not in df:
        return df.groupby([by, "method"], as_index=False)[m].mean()
    d = df[df[m].notna()].assign(_w=lambda x: x["n"].astype(float), _wm=lambda x: x[m] * x["n"].astype(float))
    g = d.groupby([by, "method"], as_index=False)[["_wm", "_w"]].sum()
    return g.assign(**{m: g["_wm"] / g["_w"], "n": g["_w"].astype("int64")})[[by, "method", m, "n"]]


def _complete_evals(df: pd.DataFrame) -> pd.Series:
    """Which rows belong to complete evaluation runs, where ``df`` says (``status`` and ``kind`` columns): a killed or
    running run's partial means would pull a mean over runs, a training run's batches are sampled rollouts of
    training questions, an ask run is one question."""
    keep = pd.Series(True, index=df.index)
    if "status" in df:
        keep &= df["status"] == "complete"
    if "kind" in df:
        keep &= df["kind"].isin(["eval", ""])
    return keep


def _error_bars(g: pd.DataFrame, m: str) -> dict[str, Any]:
    """A trace's 95% interval of ``m`` as plotly error bars (``m_lo``, ``m_hi`` around ``m``; :mod:`.intervals`)."""
    return dict(type="data", symmetric=False, array=(g[f"{m}_hi"] - g[m]).clip(lower=0).to_numpy(),
                arrayminus=(g[m] - g[f"{m}_lo"]).clip(lower=0).to_numpy(), thickness=1.2, width=3)


def compare_figure(df: pd.DataFrame, metrics: list[str], by: str = "run_id", questions: pd.DataFrame | None = None):
    """Grouped bars, one group per run (or dataset), one bar per method; a dropdown picks the metric. By run, an
    unfinished run is marked (:func:`run_label`); by dataset, the means pool complete evaluation runs only (when
    ``df`` says which: ``status`` and ``kind`` columns; a training run's batches are sampled rollouts of training
    questions, an ask run one question), weighted by each run's trajectories, and the title counts the runs left out.

    With ``questions`` (``queries.question_metrics``: one row per run, dataset, method and question) each bar has its
    95% interval over the questions it holds (:func:`.intervals.metric_intervals`; by dataset, over those of the runs
    pooled) as an error bar, and its hover names the interval and how many questions and trajectories it holds."""
    import plotly.graph_objects as go

    fig = go.Figure()
    traces: dict[str, list[int]] = {}
    colours = _colours(sorted(df["method"].astype(str).unique()))
    left_out = 0
    keys = ["run_id", "dataset", "method"] if by == "run_id" else [by, "method"]
    if by == "run_id":
        df = df.assign(_x=_run_labels(df))
    else:
        keep = _complete_evals(df)
        left_out = df.loc[~keep, "run_id"].nunique()
        df = df[keep]
        if questions is not None:
            questions = questions[questions["run_id"].isin(set(df["run_id"]))]
    ivals = metric_intervals(questions, keys, metrics) if questions is not None else None
    for m in metrics:
        data = df if by == "run_id" else _pooled(df, by, m).assign(_x=lambda d: d[by])
        if ivals is not None:
            data = data.merge(ivals[[*keys, f"{m}_n", f"{m}_lo", f"{m}_hi"]], on=keys, how="left")
        for method, g in data.groupby("method", sort=True):
            traces.setdefault(m, []).append(len(fig.data))
            kw: dict[str, Any] = {}
            if ivals is not None:
                n = g["n"] if "n" in g else pd.Series(float("nan"), index=g.index)
                kw = dict(error_y=_error_bars(g, m), customdata=list(zip(g[f"{m}_lo"], g[f"{m}_hi"], g[f"{m}_n"], n)),
                          hovertemplate="%{x} · %{fullData.name}: %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                                        " (95%), %{customdata[2]} questions, %{customdata[3]} trajectories<extra></extra>")
            # each bar labelled with its value: a method that scored 0 shows "0" where its bar would be
            fig.add_bar(name=escape_label(method), x=g["_x"].map(escape_label), y=g[m], marker_color=colours[str(method)],
                        legendgroup=str(method), text=g[m], texttemplate="%{y:.3~f}", cliponaxis=False,
                        # with an error bar, the value at the bar's foot (where the whisker is not)
                        **(dict(textposition="auto", insidetextanchor="start") if ivals is not None else
                           dict(textposition="outside")), **kw)
    runs = ("complete eval runs" if "kind" in df else "complete runs") if "status" in df else "runs"
    weighted = ", weighted by questions" if "n" in df else ""
    what = "run" if by == "run_id" else (f"{by} (mean over {runs}{weighted}"
                                         + (f"; {left_out} other or unfinished left out)" if left_out else ")"))
    bars = " · bars: 95% intervals over questions" if ivals is not None else ""
    fig.update_layout(barmode="group", height=380, legend_title_text="method", xaxis_type="category")
    return with_metric_menu(fig, traces, {m: f"{m} by {what} and method{bars}" for m in metrics})


def curves_figure(curves: pd.DataFrame, metrics: list[str]):
    """One line per run against step; a dropdown picks the metric."""
    import plotly.graph_objects as go

    fig = go.Figure()
    traces: dict[str, list[int]] = {}
    colours = _colours(sorted(curves["run_id"].unique()))
    for m in metrics:
        for run_id, g in curves[curves["metric"] == m].groupby("run_id", sort=True):
            g = g.sort_values("step")
            traces.setdefault(m, []).append(len(fig.data))
            fig.add_scatter(x=g["step"], y=g["value"], mode="lines+markers",
                            name=escape_label(_run_labels(g).iloc[0]), line_color=colours[run_id])
    # steps are whole numbers: no 1.5 on the axis of a 2-step run
    fig.update_layout(xaxis_title="step", height=400, legend_title_text="run", xaxis_tickformat="d",
                      xaxis_dtick=1 if curves["step"].nunique() <= 12 else None)
    return with_metric_menu(fig, traces, {m: f"{m} per training step" for m in metrics})


def hops_figure(hops: pd.DataFrame, metrics: list[str], questions: pd.DataFrame | None = None):
    """Metric against hop count, one line per run and method; a dropdown picks the metric. Each point's hover names
    how many trajectories it holds; with ``questions`` (``queries.question_metrics``) each point has its 95% interval
    over its questions as an error bar (:func:`.intervals.metric_intervals`), named in the hover with their count."""
    import plotly.graph_objects as go

    fig = go.Figure()
    traces: dict[str, list[int]] = {}
    keys = ["run_id", "method", "hops"]
    ivals = None
    if questions is not None:
        ivals = metric_intervals(questions[questions["hops"].notna()].astype({"hops": "int64"}), keys, metrics)
        hops = hops.astype({"hops": "int64"})
    for m in metrics:
        data = hops if ivals is None else hops.merge(ivals[[*keys, f"{m}_n", f"{m}_lo", f"{m}_hi"]], on=keys, how="left")
        for (_, method), g in data.groupby(["run_id", "method"], sort=True):
            traces.setdefault(m, []).append(len(fig.data))
            name = escape_label(f"{_run_labels(g).iloc[0]} · {method}")
            kw: dict[str, Any] = {"text": [f"n={n}" for n in g["n"]]}
            if ivals is not None:
                kw = dict(error_y=_error_bars(g, m), customdata=list(zip(g[f"{m}_lo"], g[f"{m}_hi"], g[f"{m}_n"], g["n"])),
                          hovertemplate="%{fullData.name}, %{x} hops: %{y:.3f} [%{customdata[0]:.3f}, "
                                        "%{customdata[1]:.3f}] (95%), %{customdata[2]} questions, "
                                        "n=%{customdata[3]} trajectories<extra></extra>")
            fig.add_scatter(x=g["hops"], y=g[m], mode="lines+markers", name=name, **kw)
    bars = " · bars: 95% intervals over questions" if ivals is not None else ""
    fig.update_layout(xaxis_title="hops", height=380, xaxis_dtick=1)
    return with_metric_menu(fig, traces, {m: f"{m} by hop count{bars}" for m in metrics})


def protocol_figure(protocols: pd.DataFrame):
    """Grouped bars per protocol and method (:func:`workbench.dashboard.queries.protocol_breakdown`): EM, F1, format
    OK, answered, ended by an answer; the title says what was pooled and how many runs were left out."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if "method" in protocols:
        x = [escape_label(m if m == p else f"{m} ({p})") for p, m in zip(protocols["protocol"], protocols["method"])]
    else:
        x = list(protocols["protocol"].map(escape_label))
    for col in ("em", "f1", "format_ok", "answered", "finished_by_answer"):
        fig.add_bar(name=col, x=x, y=protocols[col])
    left_out = protocols.attrs.get("left_out", 0)
    more = f"; {left_out} training, ask or unfinished run(s) left out" if left_out else ""
    fig.update_layout(barmode="group", title=f"Per protocol and method (complete eval runs, each trajectory once{more})",
                      height=340, yaxis_range=[0, 1.05], margin=dict(l=40, r=20, t=50, b=40), xaxis_type="category")
    return fig


def _colours(keys: list[str]) -> dict[str, str]:
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    return {k: palette[i % len(palette)] for i, k in enumerate(keys)}


def comparison_figure(df: pd.DataFrame, levels: Sequence[str] | None = None, by_metric: bool = False):
    """Forest plot of paired comparisons (:func:`workbench.dashboard.queries.comparison_table`): per comparison
    and hop level the difference B − A with its 95% interval as a horizontal bar; the zero line is "no effect".
    ``levels``: the hop levels drawn (``("all",)``: each comparison overall; default every row). ``by_metric``: a
    dropdown picks the metric (comparisons of searches and of right answers do not share a scale), the figure as
    tall as that metric's rows."""
    import plotly.graph_objects as go

    if levels is not None:
        df = df[df["hops"].isin(list(levels))]
    fig = go.Figure()
    colours = _colours(list(dict.fromkeys(df["comparison"].astype(str))))
    traces: dict[str, list[int]] = {}
    for name, g in df.groupby("comparison", sort=False):
        labels = [escape_label(f"{name} · {h}" + ("" if h == "all" else "-hop")) for h in g["hops"]]
        hover = [f"{escape_label(b)} − {escape_label(a)}: {d:+.3f} [{lo:+.2f}, {hi:+.2f}], n={n}<br>"
                 f"{escape_label(a)} {va:.3f} · {escape_label(b)} {vb:.3f}"
                 for a, b, d, lo, hi, n, va, vb in zip(g["a_label"], g["b_label"], g["diff"], g["diff_lo"],
                                                         g["diff_hi"], g["n"], g["a"], g["b"])]
        traces.setdefault(str(g["metric"].iloc[0]), []).append(len(fig.data))
        fig.add_scatter(x=g["diff"], y=labels, mode="markers", name=escape_label(name), text=hover,
                        hoverinfo="text", marker=dict(size=[11 if h == "all" else 7 for h in g["hops"]],
                                                      color=colours[str(name)]),
                        error_x=dict(type="data", symmetric=False, array=g["diff_hi"] - g["diff"],
                                     arrayminus=g["diff"] - g["diff_lo"]))
    fig.add_vline(x=0, line_dash="dot", line_color="grey")
    fig.update_layout(title="Paired differences B − A with 95% intervals", xaxis_title="difference (B − A)",
                      height=_forest_height(len(df)), yaxis_autorange="reversed", showlegend=False,
                      margin=dict(l=40, r=20, t=50, b=40))
    if not by_metric:
        return fig
    rows = df.groupby("metric", sort=False).size()
    order = sorted(traces, key=lambda m: (-rows[m], m))  # the metric most comparisons are on first
    fig = with_metric_menu(fig, {m: traces[m] for m in order},
                           {m: f"Paired differences B − A in {m} with 95% intervals" for m in order},
                           # one row per comparison of the metric shown, none left blank at either end
                           layouts={m: {"height": _forest_height(rows[m]), "yaxis.autorange": False,
                                        "yaxis.range": [rows[m] - 0.5, -0.5]} for m in order})
    # the title at the top, the dropdown under it (both just above the rows, however many there are)
    return fig.update_layout(margin_t=110, title=dict(yref="container", y=1, yanchor="top", pad=dict(t=14)))


def _forest_height(rows: int) -> int:
    return max(260, 28 * rows + 120)
