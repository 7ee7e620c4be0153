"""The Panel dashboard over a runs root: runs table, metric comparisons, training curves,
per-hop and per-protocol breakdowns, and a drill-down into one run's trajectories. Failed trajectories
(a tool, backend, judge or evidence call that failed: NaN reward) are counted per run and named in the
drill-down (``failures.py``); column headers show what each column means (``tooltips.py``).

``build_app(runs_dir)`` returns the page (tests serve it); ``serve_dashboard`` serves it on
127.0.0.1 (another address only with ``allow_remote=True``); ``save_static`` writes one
self-contained HTML file that opens offline. All data comes from ``queries.py``; a section
whose query fails shows the error text instead of taking the page down.
"""

from __future__ import annotations

import datetime as _dt
import html
import ipaddress
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.dashboard import failures as fq
from workbench.dashboard import queries as q
from workbench.dashboard.tooltips import column_tooltips

log = logging.getLogger(__name__)

#: Metrics offered by the comparison selector (columns of ``queries.method_metrics``).
COMPARE_METRICS = ("f1", "em", "cem", "format_ok", "answered", "searches", "tokens")
#: Transcripts embedded per run in the static page (it has no server to fetch more).
STATIC_TRANSCRIPTS = 30
#: Runs whose trajectories the static page lists (newest first).
STATIC_RUNS = 20
#: Rows of a run's trajectory table in the static page (the table is in the file: a big run would bloat it).
STATIC_ROWS = 1000
#: Rows per page of the served drill-down's trajectory table (each page is read when shown).
PAGE_ROWS = 50
LOOPBACK_NAMES = ("localhost",)


def _pn():
    import panel as pn

    pn.extension("tabulator", "plotly")
    return pn


# --------------------------------------------------------------------------- figures
# Each figure holds the traces of every metric and a plotly dropdown to pick one: the
# selector runs in the browser, so it works the same served and in the static file.


def with_metric_menu(fig, traces_by_metric: dict[str, list[int]], titles: dict[str, str]):
    """Show the first metric's traces; a dropdown (top left) switches the visible traces and the title."""
    n = len(fig.data)
    metrics = list(traces_by_metric)
    if not metrics:
        return fig

    def visible(m: str) -> list[bool]:
        on = set(traces_by_metric[m])
        return [i in on for i in range(n)]

    for i, v in enumerate(visible(metrics[0])):
        fig.data[i].visible = v
    buttons = [dict(label=f"metric: {m}", method="update", args=[{"visible": visible(m)}, {"title.text": titles[m]}]) for m in metrics]
    fig.update_layout(
        title_text=titles[metrics[0]], title_x=0.3,
        updatemenus=[dict(buttons=buttons, direction="down", x=0, xanchor="left", y=1.18, yanchor="top",
                          showactive=True, active=0)],
        margin=dict(l=40, r=20, t=80, b=40),
    )
    return fig


def compare_figure(df: pd.DataFrame, metrics: list[str], by: str = "run_id"):
    """Grouped bars, one group per run (or dataset), one bar per method; a dropdown picks the metric."""
    import plotly.graph_objects as go

    fig = go.Figure()
    traces: dict[str, list[int]] = {}
    colours = _colours(sorted(df["method"].astype(str).unique()))
    for m in metrics:
        data = df if by == "run_id" else df.groupby([by, "method"], as_index=False)[m].mean()
        for method, g in data.groupby("method", sort=True):
            traces.setdefault(m, []).append(len(fig.data))
            fig.add_bar(name=str(method), x=g[by].astype(str), y=g[m], marker_color=colours[str(method)],
                        legendgroup=str(method))
    what = "run" if by == "run_id" else f"{by} (mean over runs)"
    fig.update_layout(barmode="group", height=380, legend_title_text="method", xaxis_type="category")
    return with_metric_menu(fig, traces, {m: f"{m} by {what} and method" for m in metrics})


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
            fig.add_scatter(x=g["step"], y=g["value"], mode="lines+markers", name=str(run_id),
                            line_color=colours[run_id])
    fig.update_layout(xaxis_title="step", height=400, legend_title_text="run")
    return with_metric_menu(fig, traces, {m: f"{m} per training step" for m in metrics})


def hops_figure(hops: pd.DataFrame, metrics: list[str]):
    """Metric against hop count, one line per run and method; a dropdown picks the metric."""
    import plotly.graph_objects as go

    fig = go.Figure()
    traces: dict[str, list[int]] = {}
    for m in metrics:
        for (run_id, method), g in hops.groupby(["run_id", "method"], sort=True):
            traces.setdefault(m, []).append(len(fig.data))
            fig.add_scatter(x=g["hops"], y=g[m], mode="lines+markers", name=f"{run_id} · {method}",
                            text=[f"n={n}" for n in g["n"]])
    fig.update_layout(xaxis_title="hops", height=380, xaxis_dtick=1)
    return with_metric_menu(fig, traces, {m: f"{m} by hop count" for m in metrics})


def protocol_figure(protocols: pd.DataFrame):
    """Grouped bars per protocol: EM, F1, format OK, answered, ended by an answer."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for col in ("em", "f1", "format_ok", "answered", "finished_by_answer"):
        fig.add_bar(name=col, x=protocols["protocol"], y=protocols[col])
    fig.update_layout(barmode="group", title="Per protocol (all runs)", height=340, yaxis_range=[0, 1.05],
                      margin=dict(l=40, r=20, t=50, b=40))
    return fig


def _colours(keys: list[str]) -> dict[str, str]:
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    return {k: palette[i % len(palette)] for i, k in enumerate(keys)}


# --------------------------------------------------------------------------- sections


def _safe(title: str, build: Callable[[], Any]):
    """``build()``, or an error box naming the section when it raises."""
    pn = _pn()
    try:
        return build()
    except Exception as e:  # noqa: BLE001 - one broken section must not take the page down
        log.exception("dashboard section %r failed", title)
        return pn.pane.Alert(f"**{title}** could not be built: `{type(e).__name__}: {html.escape(str(e))}`",
                             alert_type="danger")


def _rounded(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in df.columns:
        if pd.api.types.is_float_dtype(df[c]):
            df[c] = df[c].round(3)
    return df


def _table(df: pd.DataFrame, means: bool = False, **kw: Any):
    pn = _pn()
    df = _rounded(df)
    # every column fits the page width: text wraps (long ids too, at any character), numbers stay narrow,
    # headers wrap between words ("n_trajectories" shows as "n trajectories")
    text = {c: {"type": "textarea"} for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])}
    narrow = {c: 84 for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])}
    opts = dict(disabled=True, show_index=False, sizing_mode="stretch_width", layout="fit_columns",
                titles={c: str(c).replace("_", " ") for c in df.columns},
                header_tooltips=column_tooltips(list(df.columns), means=means),
                configuration={"columnDefaults": {"headerWordWrap": True}}, stylesheets=[_TABLE_CSS])
    opts.update(kw)
    opts["formatters"] = {**text, **kw.get("formatters", {})}
    opts["widths"] = {**narrow, **kw.get("widths", {})}
    return pn.widgets.Tabulator(df, **opts)


_TABLE_CSS = """
.tabulator-cell { overflow-wrap: anywhere; }
.tabulator-col-title { white-space: normal !important; }
"""


def _red_if(v: Any) -> str:
    return "color:#b00020;font-weight:bold" if isinstance(v, str) and v or not isinstance(v, str) and pd.notna(v) and v else ""


def _runs_section(runs: pd.DataFrame):
    pn = _pn()
    size = {"height": 480} if len(runs) > 10 else {}  # small tables grow to fit their (wrapped) rows
    n_err = int((runs["error"] != "").sum())
    table = _table(runs, selectable=1, widths={"run_id": 210, "created": 100, "error": 280 if n_err else 60},
                   formatters={"error": {"type": "textarea"}}, **size)
    table.style.map(_red_if, subset=["error", *(["failed"] if "failed" in runs else [])])
    note = f" · **{n_err} with errors** (see the `error` column)" if n_err else ""
    n_failed = int((runs["failed"].fillna(0) > 0).sum()) if "failed" in runs else 0
    if n_failed:
        note += f" · **{n_failed} with failed trajectories** (the `failed` column; the Trajectories tab names them)"
    return table, pn.Column(pn.pane.Markdown(f"## Runs\n{len(runs)} run(s){note}"), table, sizing_mode="stretch_width")


def _plot(fig):
    return _pn().pane.Plotly(fig, sizing_mode="stretch_width", config={"displaylogo": False})


def _compare_section(runs_dir: Path):
    pn = _pn()
    df = q.method_metrics(runs_dir)
    if df.empty:
        return pn.pane.Alert("No trajectories to compare yet.", alert_type="info")
    metrics = [m for m in COMPARE_METRICS if df[m].notna().any()]
    return pn.Column(_plot(compare_figure(df, metrics)), _plot(compare_figure(df, metrics, by="dataset")),
                     _table(df, means=True), sizing_mode="stretch_width")


def _training_section(runs_dir: Path):
    pn = _pn()
    curves = q.training_curves(runs_dir)
    names = q.curve_metrics(curves)
    if not names:
        return pn.pane.Alert(f"No training runs (no `metrics.jsonl`) under `{runs_dir}`.", alert_type="info")
    return pn.Column(_plot(curves_figure(curves, names)), sizing_mode="stretch_width")


def _breakdown_section(runs_dir: Path):
    pn = _pn()
    hops, protocols = q.hop_breakdown(runs_dir), q.protocol_breakdown(runs_dir)
    parts: list[Any] = [pn.pane.Markdown("### Per hop count")]
    if hops.empty:
        parts.append(pn.pane.Alert("No trajectories with a hop count.", alert_type="info"))
    else:
        metrics = [m for m in ("f1", "em", "cem", "searches") if hops[m].notna().any()]
        parts += [_plot(hops_figure(hops, metrics)), _table(hops, means=True)]
    parts.append(pn.pane.Markdown("### Per protocol"))
    if protocols.empty:
        parts.append(pn.pane.Alert("No trajectories.", alert_type="info"))
    else:
        parts += [_plot(protocol_figure(protocols)), _table(protocols, means=True)]
    return pn.Column(*parts, sizing_mode="stretch_width")


def transcript_html(runs_dir: Path, run_id: str, row: int) -> str:
    """The transcript of one trajectory (``widgets.trajectory.turns_html``)."""
    from widgets.trajectory import turns_html

    return turns_html(q.load_trajectory(runs_dir, run_id, row))


def failure_html(failed: str, failure: str) -> str:
    """A red box naming the failure flags and the failure text of a failed trajectory ("" if it did not fail)."""
    if not failed and not failure:
        return ""
    lines = "<br>".join(html.escape(line) for line in str(failure).splitlines())
    return (f"<div style='border:1px solid #b00020;color:#b00020;padding:6px;margin:4px 0'>"
            f"<b>failed: {html.escape(str(failed) or 'yes')}</b> (reward NaN)<br>{lines}</div>")


def _static_transcripts(runs_dir: Path, run_id: str, trajs: pd.DataFrame, total: int | None = None) -> str:
    """Collapsible transcripts (plain HTML ``<details>``) for the static page."""
    parts = []
    for r in trajs.head(STATIC_TRANSCRIPTS).itertuples():
        failed = getattr(r, "failed", "")
        summary = html.escape(f"#{r.row} · {r.method} · {r.question}" + (f" · FAILED ({failed})" if failed else ""))
        try:
            body = failure_html(failed, getattr(r, "failure", "")) + transcript_html(runs_dir, run_id, int(r.row))
        except Exception as e:  # noqa: BLE001
            body = f"<b style='color:#b00020'>{html.escape(f'{type(e).__name__}: {e}')}</b>"
        parts.append(f"<details><summary>{summary}</summary>{body}</details>")
    more = (len(trajs) if total is None else total) - STATIC_TRANSCRIPTS
    if more > 0:
        parts.append(f"<p>… and {more} more (serve the dashboard to see them all).</p>")
    return "\n".join(parts)


def _trajectory_table(df: pd.DataFrame, pagination: str | None = "local"):
    table = _table(df, selectable=1, page_size=15 if pagination else None, pagination=pagination,
                   widths={"question": 360, "answer": 220, **({"failed": 110, "failure": 260} if "failure" in df else {})})
    if "failed" in df:
        table.style.map(_red_if, subset=["failed", "failure"])
    return table


def _drilldown_section(runs_dir: Path, run_ids: list[str]):
    """Served: pick a run, then a row of its trajectory table, to see the transcript. The table holds one page of
    ``PAGE_ROWS`` rows, read when shown (``run_trajectory_table(limit=, offset=)``): a big run never goes to the
    browser, nor into the server's memory, whole."""
    pn = _pn()
    if not run_ids:
        return None, pn.pane.Alert("No readable trajectories.", alert_type="info")
    run_select = pn.widgets.Select(label="run", options=run_ids, value=run_ids[0], width=420)
    hint = "<i>Select a trajectory (a row) to see its transcript.</i>"
    transcript = pn.pane.HTML(hint, sizing_mode="stretch_width")

    def trajectories(run_id: str):
        n, failures = q.run_size(runs_dir, run_id), fq.run_failures(runs_dir, run_id)
        pages = max(1, -(-n // PAGE_ROWS))
        page = pn.widgets.IntInput(name=f"page (of {pages:,})", value=1, start=1, end=pages, width=140)
        prev, nxt = pn.widgets.Button(name="‹ previous", width=100), pn.widgets.Button(name="next ›", width=100)
        info = pn.pane.Markdown(sizing_mode="stretch_width")
        state = {"df": fq.run_trajectory_table(runs_dir, run_id, limit=PAGE_ROWS, offset=0, failures=failures)}
        table = _trajectory_table(state["df"], pagination=None)

        def load(event: Any = None) -> None:
            start = (page.value - 1) * PAGE_ROWS
            if event is not None:
                state["df"] = fq.run_trajectory_table(runs_dir, run_id, limit=PAGE_ROWS, offset=start, failures=failures)
                table.selection = []
                table.value = _rounded(state["df"])
            info.object = f"trajectories {start + 1:,}–{min(start + PAGE_ROWS, n):,} of {n:,}"

        def show(event: Any) -> None:
            if not event.new:
                return
            r = state["df"].iloc[event.new[0]]
            try:
                transcript.object = failure_html(r["failed"], r["failure"]) + transcript_html(runs_dir, run_id, int(r["row"]))
            except Exception as e:  # noqa: BLE001 - shown in place of the transcript
                transcript.object = f"<b style='color:#b00020'>{html.escape(f'{type(e).__name__}: {e}')}</b>"

        page.param.watch(load, "value")
        prev.on_click(lambda _: setattr(page, "value", max(1, page.value - 1)))
        nxt.on_click(lambda _: setattr(page, "value", min(pages, page.value + 1)))
        table.param.watch(show, "selection")
        load()
        transcript.object = hint
        return pn.Column(pn.Row(prev, page, nxt, info), table, sizing_mode="stretch_width")

    body = pn.bind(lambda r: _safe("trajectories", lambda: trajectories(r)), run_select)
    return run_select, pn.Column(run_select, pn.panel(body), transcript, sizing_mode="stretch_width")


def _static_drilldown_section(runs_dir: Path, run_ids: list[str]):
    """Static: one collapsible card per run with its first ``STATIC_ROWS`` rows and first transcripts (no server
    to ask for more)."""
    pn = _pn()
    if not run_ids:
        return pn.pane.Alert("No readable trajectories.", alert_type="info")

    def card(run_id: str):
        n = q.run_size(runs_dir, run_id)
        df = fq.run_trajectory_table(runs_dir, run_id, limit=STATIC_ROWS)
        cap = [pn.pane.Markdown(f"The first {STATIC_ROWS:,} of {n:,} trajectories (serve the dashboard to page "
                                "through them all).")] if n > STATIC_ROWS else []
        return pn.Column(*cap, _trajectory_table(df), pn.pane.HTML(_static_transcripts(runs_dir, run_id, df, n),
                                                                   sizing_mode="stretch_width"),
                         name=run_id, sizing_mode="stretch_width")

    cards = [_safe(f"trajectories of {r}", lambda r=r: card(r)) for r in run_ids[:STATIC_RUNS]]
    for r, c in zip(run_ids, cards):
        c.name = r
    acc = pn.Accordion(*cards, active=[0], sizing_mode="stretch_width")
    note = f"Showing the newest {STATIC_RUNS} of {len(run_ids)} runs." if len(run_ids) > STATIC_RUNS else ""
    return pn.Column(pn.pane.Markdown(note), acc, sizing_mode="stretch_width") if note else acc


def _safe_failures(runs: pd.DataFrame, root: Path) -> pd.DataFrame:
    try:
        return fq.runs_with_failures(runs, root)
    except Exception:  # noqa: BLE001 - the runs table shows without the column rather than not at all
        log.exception("failure counts could not be read")
        return runs


def build_app(runs_dir: str | os.PathLike | None = None, static: bool = False):
    """The dashboard page for ``runs_dir`` (default: ``runs/``).

    ``static``: the page for :func:`save_static`: without a server to answer clicks, the drill-down
    lists each run's trajectories with their transcripts as collapsible HTML instead.
    """
    from workbench.paths import runs_dir as default_runs_dir

    pn = _pn()
    root = Path(runs_dir) if runs_dir is not None else default_runs_dir()
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = pn.pane.Markdown(f"# Workbench runs\nRuns root `{root}` · built {stamp}", sizing_mode="stretch_width")
    runs = q.runs_table(root)
    if not runs.empty:
        runs = _safe_failures(runs, root)
    if runs.empty:
        msg = (f"No runs under `{root}` (a run is a folder with a `config.json`). "
               "Make one with `workbench demo`, or point the dashboard at another folder with `--runs DIR`.")
        return pn.Column(header, pn.pane.Alert(msg, alert_type="info"), sizing_mode="stretch_width", name="dashboard")

    runs_table, runs_view = _runs_section(runs)
    with_trajs = [r for r in runs["run_id"] if r in q.trajectory_sources(root).files]
    if static:
        drill = _safe("trajectories", lambda: _static_drilldown_section(root, with_trajs))
    else:
        run_select, drill = _drilldown_section(root, with_trajs)
        if run_select is not None:
            def pick(event: Any) -> None:  # selecting a run in the runs table opens it in the drill-down
                if event.new and runs.iloc[event.new[0]]["run_id"] in run_select.options:
                    run_select.value = runs.iloc[event.new[0]]["run_id"]

            runs_table.param.watch(pick, "selection")
    tabs = pn.Tabs(
        ("Compare", _safe("metric comparison", lambda: _compare_section(root))),
        ("Training", _safe("training curves", lambda: _training_section(root))),
        ("Breakdowns", _safe("breakdowns", lambda: _breakdown_section(root))),
        ("Trajectories", drill),
        dynamic=False, sizing_mode="stretch_width",
    )
    return pn.Column(header, runs_view, tabs, sizing_mode="stretch_width", name="dashboard")


# --------------------------------------------------------------------------- serving


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless ``allow_remote``: the dashboard has no authentication."""
    if not is_loopback(host) and not allow_remote:
        raise ValueError(
            f"refusing to bind the dashboard to {host!r}, which is not a loopback address: it has no "
            "authentication and would expose every run to the network. Use the default 127.0.0.1 (e.g. through "
            "an SSH tunnel), or pass --allow-remote to bind to it anyway."
        )


def serve_dashboard(
    runs_dir: str | os.PathLike | None = None, port: int = 5006, host: str = "127.0.0.1",
    allow_remote: bool = False, threaded: bool = False, show: bool = False,
):
    """Serve the dashboard at ``http://host:port/``. Blocks unless ``threaded`` (then returns a thread with
    ``.stop()``). Each browser session builds a fresh page, so reloading picks up new runs."""
    import panel as pn

    check_host(host, allow_remote)
    if port == 0:  # pick the port now: the allowed websocket origins must name it
        import socket

        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    ipv6 = ":" in host
    netloc = f"[{host}]" if ipv6 else host
    # bokeh's origin whitelist cannot parse a bracketed IPv6 origin ("[::1]:port" is an "invalid host"), so
    # on IPv6 the whitelist is open; the socket is still bound to the address given (loopback unless
    # --allow-remote), so only this machine can connect
    origins = ["*"] if allow_remote or ipv6 else [f"{netloc}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"]
    kw = dict(port=port, address=host, websocket_origin=origins, show=show, title="workbench dashboard", verbose=False)
    if ipv6:  # panel's Location parses the Host header as "name:port", which "[::1]:port" breaks; the app uses no URL state
        kw["location"] = False
    if threaded:
        return pn.serve(lambda: build_app(runs_dir), threaded=True, **kw)
    server = pn.serve(lambda: build_app(runs_dir), start=False, **kw)
    server.start()
    print(f"workbench dashboard: http://{netloc}:{port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        server.stop()
    return server


def save_static(path: str | os.PathLike, runs_dir: str | os.PathLike | None = None, share_plotlyjs: bool = True) -> Path:
    """Write the dashboard as an HTML file that opens offline.

    The metric selectors are plotly dropdowns, so they work without a server. Panel's
    ``save(..., resources=INLINE)`` inlines the JavaScript, but its stylesheets (and favicon)
    stay links to cdn.holoviz.org (https://github.com/holoviz/panel/issues/6759):
    :func:`inline_cdn_links` turns those into ``data:`` URLs read from Panel's own ``dist/``.
    With ``share_plotlyjs`` the 4.8 MB plotly.js is not inlined but loaded from the ``plotly.min.js``
    that the run's saved figures share (``widgets.figures.asset_dir``: the run directory above
    ``path``, else its folder), so keep the two files together; without it the page is one file.
    """
    from bokeh.resources import INLINE

    from widgets.figures import externalize_plotlyjs
    from workbench.io import atomic_write_text

    path = Path(path)
    if runs_dir is not None and not Path(runs_dir).is_dir():
        raise FileNotFoundError(f"--runs {runs_dir}: no such folder; pass the runs root (the folder that holds the "
                                "run directories, default runs/)")
    path.parent.mkdir(parents=True, exist_ok=True)
    app = build_app(runs_dir, static=True)
    tmp = path.with_name(f".{path.name}.tmp.html")
    try:
        app.save(str(tmp), resources=INLINE, title="workbench dashboard")
        page = inline_cdn_links(tmp.read_text(encoding="utf-8"))
        atomic_write_text(path, externalize_plotlyjs(page, path) if share_plotlyjs else page)
    finally:
        tmp.unlink(missing_ok=True)
    return path


_MIME = {".css": "text/css", ".png": "image/png", ".ico": "image/x-icon", ".svg": "image/svg+xml",
         ".woff2": "font/woff2", ".woff": "font/woff", ".js": "text/javascript"}


def _data_url(data: bytes, suffix: str) -> str:
    import base64

    return f"data:{_MIME.get(suffix, 'application/octet-stream')};base64,{base64.b64encode(data).decode('ascii')}"


def inline_cdn_links(page: str) -> str:
    """Replace ``https://cdn.holoviz.org/panel/<version>/dist/<file>`` links with ``data:`` URLs of the
    same files from the installed Panel (CSS ``url(...)`` references to woff2 fonts inlined too).
    Links to files that are not installed are left as they are."""
    import re

    import panel

    dist = Path(panel.__file__).parent / "dist"

    def css_with_fonts(css: str, base: Path) -> str:
        def font(m: re.Match[str]) -> str:
            ref = m.group(2).split("?")[0].split("#")[0]
            f = (base / ref).resolve()
            return f"url({_data_url(f.read_bytes(), f.suffix)})" if ref.endswith(".woff2") and f.is_file() else m.group(0)

        return re.sub(r"url\((['\"]?)([^)'\"]+)\1\)", font, css)

    cache: dict[str, str] = {}

    def inline(m: re.Match[str]) -> str:
        url = m.group(0)
        if url not in cache:
            f = dist / m.group(1)
            if not f.is_file():
                cache[url] = url
            elif f.suffix == ".css":
                cache[url] = _data_url(css_with_fonts(f.read_text(encoding="utf-8"), f.parent).encode(), ".css")
            else:
                cache[url] = _data_url(f.read_bytes(), f.suffix)
        return cache[url]

    return re.sub(r"https://cdn\.holoviz\.org/panel/[^/\"'\\\s]+/dist/([^?\"'\\\s)]+)(?:\?[^\"'\\\s)]*)?", inline, page)
