"""The Panel dashboard over a runs root: runs table, metric comparisons, training curves,
per-hop and per-protocol breakdowns, and a drill-down into one run's trajectories. Failed trajectories
(a tool, backend, judge or evidence call that failed: NaN reward) are counted per run and named in the
drill-down (``failures.py``); column headers show what each column means (``tooltips.py``).

``build_app(runs_dir)`` returns the page (tests serve it); ``serve_dashboard`` serves it on
127.0.0.1 (another address only with ``allow_remote=True``), answering its own pages only (``origins.py``: a
request with another site's ``Origin``, or on loopback another ``Host``, gets 403); ``save_static`` writes one
self-contained HTML file that opens offline. All data comes from ``queries.py``; a section
whose query fails shows the error text instead of taking the page down, and a run whose files do
not read is left out of a section with a note naming it (never the section blanked for all runs).
``save_static`` still writes the page when a section could not be built, then raises
:class:`StaticExportError` naming it (``workbench dashboard --static`` exits non-zero).

Everything the page shows from files or names (run folders, methods, questions, answers, config
values, error texts) is escaped: HTML panes get ``html.escape``d text, table cells go through
Tabulator's escaping formatters, plotly labels are escaped before plotly sees them.
"""

from __future__ import annotations

import datetime as _dt
import html
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.dashboard import compare_tab, origins
from workbench.dashboard import failures as fq
from workbench.dashboard import queries as q
from workbench.dashboard.exports import EXPORT_KINDS, download_buttons, export_table  # noqa: F401 - export_table re-exported
from workbench.dashboard.figures import (  # noqa: F401 - the figures are part of this module's API (notebook 05)
    compare_figure,
    comparison_figure,
    curves_figure,
    hops_figure,
    protocol_figure,
    run_label,
    with_metric_menu,
)
from workbench.dashboard.tooltips import column_tooltips
from workbench.eval.compare import MISSING
from workbench.rewards.gold_evidence import EVIDENCE_KINDS
from workbench.util.http_stack import IDLE_TIMEOUT_S, MAX_HEAD_BYTES, READ_TIMEOUT_S, is_loopback
from workbench.util.paths import repo_root

log = logging.getLogger(__name__)

#: Metrics offered by the comparison selector (columns of ``queries.method_metrics``).
COMPARE_METRICS = ("f1", "em", "cem", "format_ok", "answered", "n_searches", "tokens")
#: Transcripts embedded per run in the static page (it has no server to fetch more).
STATIC_TRANSCRIPTS = 30
#: Runs whose trajectories the static page lists (newest first).
STATIC_RUNS = 20
#: Rows of a run's trajectory table in the static page (the table is in the file: a big run would bloat it).
STATIC_ROWS = 1000
#: Rows per page of the served drill-down's trajectory table (each page is read when shown).
PAGE_ROWS = 50


class StaticExportError(ValueError):
    """The static page was written, but sections of it could not be built (each shows its error)."""


def _pn():
    import panel as pn

    pn.extension("tabulator", "plotly")
    return pn


# --------------------------------------------------------------------------- sections


def _box(text_html: str, kind: str = "danger"):
    """A coloured box of HTML (every piece of it from a file or a name already escaped)."""
    colour = {"danger": "#b00020", "warning": "#8a5a00", "info": "#1b4f72"}[kind]
    return _pn().pane.HTML(f"<div style='border:1px solid {colour};color:{colour};padding:6px 10px;margin:4px 0;"
                           f"border-radius:4px'>{text_html}</div>", sizing_mode="stretch_width")


def _safe(title: str, build: Callable[[], Any], problems: list[str] | None = None):
    """``build()``, or an error box naming the section when it raises (and a line in ``problems``)."""
    try:
        return build()
    except Exception as e:  # noqa: BLE001 - one broken section must not take the page down
        log.exception("dashboard section %r failed", title)
        if problems is not None:
            problems.append(f"{title}: {type(e).__name__}: {e}")
        return _box(f"<b>{html.escape(title)}</b> could not be built: <code>{html.escape(f'{type(e).__name__}: {e}')}"
                    "</code>")


def _left_out(*frames: pd.DataFrame) -> list[Any]:
    """A note naming the runs a section's queries left out (``attrs["errors"]``: their files do not read)."""
    errors: dict[str, str] = {}
    for df in frames:
        errors.update(df.attrs.get("errors") or {})
    if not errors:
        return []
    items = "".join(f"<li><code>{html.escape(r)}</code>: {html.escape(e)}</li>" for r, e in sorted(errors.items()))
    return [_box(f"Left out {len(errors)} run(s) whose trajectory files do not read:<ul style='margin:2px 0'>{items}"
                 "</ul>", "warning")]


def _rounded(df: pd.DataFrame) -> pd.DataFrame:
    """Floats to three decimals; a missing text (no answer, no gold) as ``MISSING``, as every view shows it."""
    df = df.copy()
    for c in df.columns:
        if pd.api.types.is_float_dtype(df[c]):
            df[c] = df[c].round(3)
        elif df[c].dtype == object:
            df[c] = df[c].where(df[c].notna(), MISSING)
    return df


def _table(df: pd.DataFrame, means: bool = False, **kw: Any):
    pn = _pn()
    df = _rounded(df)
    # every column fits the page width: text wraps between words (a word breaks only when it alone is wider than its
    # column), numbers stay narrow and show a missing value as MISSING, headers wrap ("n_trajectories": "n trajectories")
    text = {c: {"type": "textarea"} for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])}
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    narrow = {c: 72 for c in numeric}
    text.update({c: _missing_number() for c in numeric})
    # a text column the caller gives no width (a run id, a method, a protocol) shares what the fixed columns leave,
    # which on a narrow table is Tabulator's 40 px minimum ("direc|t"): it gets a minimum that holds its longest value
    # on one line (up to NAME_MAX_PX; a longer one wraps between words), and the table scrolls sideways instead
    names = []
    for c in [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c]) and c not in kw.get("widths", {})]:
        px = _one_line_width(df[c])
        one_line = px <= NAME_MAX_PX
        names.append({"field": c, "minWidth": min(px, NAME_MAX_PX)})
        if one_line:
            names[-1]["cssClass"], text[c] = "wb-one-line", {"type": "plaintext"}
    opts = dict(disabled=True, show_index=False, sizing_mode="stretch_width", layout="fit_columns",
                titles={c: str(c).replace("_", " ") for c in df.columns},
                header_tooltips=column_tooltips(list(df.columns), means=means),
                configuration={"columnDefaults": {"headerWordWrap": True}, "columns": names}, stylesheets=[_TABLE_CSS])
    opts.update(kw)
    opts["formatters"] = {**text, **kw.get("formatters", {})}
    opts["widths"] = {**narrow, **kw.get("widths", {})}
    return pn.widgets.Tabulator(df, **opts)


#: Pixels a text column needs per character of its longest value to hold it on one line (Tabulator's 14 px sans-serif,
#: wide letters included), the cell's padding, and the widest minimum such a column gets.
NAME_PX_PER_CHAR, NAME_PAD_PX, NAME_MAX_PX = 8.5, 24, 360


def _one_line_width(values: pd.Series) -> int:
    """The width in px that holds a column's longest value on one line."""
    longest = int(values.astype(str).str.len().max()) if len(values) else 0
    return int(longest * NAME_PX_PER_CHAR + NAME_PAD_PX)


_TABLE_CSS = """
.tabulator-cell { overflow-wrap: break-word; word-break: normal; }
.tabulator-cell.wb-one-line { white-space: nowrap; }
.tabulator-col-title { white-space: normal !important; }
"""


def _missing_number() -> Any:
    """Floats with up to three decimals, a missing one as ``MISSING`` (the mark every view uses); a new model per
    column (a bokeh model belongs to one page)."""
    from bokeh.models.widgets.tables import NumberFormatter

    return NumberFormatter(format="0.[000]", nan_format=MISSING, null_format=MISSING, text_align="right")


def _red_if(v: Any) -> str:
    return "color:#b00020;font-weight:bold" if isinstance(v, str) and v or not isinstance(v, str) and pd.notna(v) and v else ""


def _amber_unless_complete(v: Any) -> str:
    """Amber for a run that did not finish: a ``status`` cell of the runs table ("incomplete (...)") or of a per-run
    frame ("killed", "failed", "running", "incomplete")."""
    return "color:#8a5a00;font-weight:bold" if isinstance(v, str) and v and not v.startswith("complete") else ""


def _runs_section(runs: pd.DataFrame):
    pn = _pn()
    size = {"height": 480} if len(runs) > 10 else {}  # small tables grow to fit their (wrapped) rows
    n_err = int((runs["error"] != "").sum())
    n_incomplete = int(runs["status"].str.startswith("incomplete").sum())
    # shares of the table's width (they add up to 100%): every column on a 1400 px page, text wrapping between words
    share = {"run_id": 9, "kind": 4, "tags": 4, "status": 7, "error": 13 if n_err else 4, "created": 5, "model": 7,
             "dataset": 5, "corpus_setting": 5, "methods": 8, "n_trajectories": 6, "failed": 4, "best_method": 7, "em": 4,
             "cem": 4, "f1": 4, "n_searches": 5, "steps": 4, "reward_mean": 4}
    if n_err:
        share.update(run_id=8, status=5, methods=6)
    # an ISO timestamp with a space for its "T" wraps between the date and the time, not inside the time
    runs = runs.assign(created=runs["created"].map(lambda v: v.replace("T", " ") if isinstance(v, str) else v))
    table = _table(runs, selectable=1, widths={c: f"{share.get(c, 4)}%" for c in runs.columns},
                   formatters={"error": {"type": "textarea"}}, **size)
    table.style.map(_red_if, subset=["error", *(["failed"] if "failed" in runs else [])])
    table.style.map(_amber_unless_complete, subset=["status"])
    note = f" · **{n_err} with errors** (see the `error` column)" if n_err else ""
    if n_incomplete:
        note += (f" · **{n_incomplete} incomplete** (killed, failed or still running: no completion marker; the `status` "
                 "column says which and why; never picked as the newest run)")
    n_failed = int((runs["failed"].fillna(0) > 0).sum()) if "failed" in runs else 0
    if n_failed:
        note += f" · **{n_failed} with failed trajectories** (the `failed` column; the Trajectories tab names them)"
    return table, pn.Column(pn.pane.Markdown(f"## Runs\n{len(runs)} run(s){note}"), table, sizing_mode="stretch_width")


def _plot(fig):
    return _pn().pane.Plotly(fig, sizing_mode="stretch_width", config={"displaylogo": False})


def _compare_section(runs_dir: Path, static: bool = False, problems: list[str] | None = None):
    """The runs' metrics by run and by dataset, each bar with its 95% interval over questions, their table, then the
    paired comparisons (:func:`_comparisons_part`)."""
    pn = _pn()
    df = q.method_metrics(runs_dir)
    comparisons = _safe("paired comparisons", lambda: _comparisons_part(runs_dir, static), problems)
    if df.empty:
        return pn.Column(*_left_out(df), pn.pane.Alert("No trajectories to compare yet.", alert_type="info"),
                         comparisons, sizing_mode="stretch_width")
    metrics = [m for m in COMPARE_METRICS if df[m].notna().any()]
    questions = q.question_metrics(runs_dir)
    table = _table(df, means=True)
    table.style.map(_amber_unless_complete, subset=["status"])
    return pn.Column(*_left_out(df), *_unfinished_note(df), _plot(compare_figure(df, metrics, questions=questions)),
                     _plot(compare_figure(df, metrics, by="dataset", questions=questions)), table,
                     *_exports(lambda: df, "per-method", static), comparisons,
                     sizing_mode="stretch_width")


def results_dir() -> Path:
    """The shipped paired comparisons (``data/results`` in the checkout: the ones behind ``bench/RESULTS.md``), which
    the Compare tab shows beside the runs root's, as notebook 05 does."""
    return repo_root() / "data" / "results"


def comparison_rows(df: pd.DataFrame) -> pd.DataFrame:
    """``queries.comparison_table`` as the Compare tab's table shows it: each side's mean and the difference B − A,
    each with its 95% interval, per comparison and hop level."""

    def ci(lo: pd.Series, hi: pd.Series, sign: str = "") -> list[str]:
        return [f"[{a:{sign}.2f}, {b:{sign}.2f}]" for a, b in zip(lo, hi)]

    return pd.DataFrame({
        "comparison": df["comparison"], "metric": df["metric"], "hops": df["hops"], "n": df["n"],
        "A": df["a_label"], "A mean": df["a"], "A 95%": ci(df["a_lo"], df["a_hi"]),
        "B": df["b_label"], "B mean": df["b"], "B 95%": ci(df["b_lo"], df["b_hi"]),
        "B − A": df["diff"], "B − A 95%": ci(df["diff_lo"], df["diff_hi"], "+"),
        "seeds": [f"{a} / {b}" for a, b in zip(df["seeds_a"], df["seeds_b"])],
    })


def _comparisons_part(runs_dir: Path, static: bool):
    """Every paired comparison (``comparison.json`` under the runs root and in :func:`results_dir`;
    ``queries.comparison_table``, the table and labels notebook 05 shows): a forest plot of each one's overall
    difference B − A with its 95% interval (a dropdown picks the metric); served, one comparison's per-hop forest
    picked by name; the table of every hop level."""
    pn = _pn()
    df = q.comparison_table(runs_dir, results_dir())
    head = pn.pane.Markdown(
        "### Paired comparisons\nEach `comparison.json` under the runs root and in the shipped `data/results` "
        "(`bench/ablate.py`, `bench/compare_methods.py --save`): the difference B − A on the same questions with its "
        "95% paired bootstrap interval (n: questions); an interval across the dotted zero line is no clear effect. "
        "The numbers notebook 05 shows.", sizing_mode="stretch_width")
    errors = df.attrs.get("errors") or {}
    bad = [_box("Left out unreadable comparison files:<ul style='margin:2px 0'>" + "".join(
        f"<li>{html.escape(e)}</li>" for e in errors.values()) + "</ul>", "warning")] if errors else []
    if df.empty:
        return pn.Column(head, *bad, pn.pane.Alert("No comparison.json under the runs root or in data/results.",
                                                   alert_type="info"), sizing_mode="stretch_width")
    parts: list[Any] = [head, *bad, _plot(comparison_figure(df, levels=("all",), by_metric=True))]
    if not static:
        names = list(dict.fromkeys(df["comparison"]))
        pick = pn.widgets.Select(label="one comparison by hop count", options=names, value=names[0], width=700)
        parts += [pick, pn.panel(pn.bind(lambda name: _plot(comparison_figure(df[df["comparison"] == name])), pick))]
    table = _table(comparison_rows(df), height=420,
                   widths={"comparison": "24%", "metric": "6%", "hops": "4%", "n": "4%", "A": "11%", "A mean": "5%",
                           "A 95%": "7%", "B": "11%", "B mean": "5%", "B 95%": "7%", "B − A": "5%",
                           "B − A 95%": "7%", "seeds": "4%"})  # 100% of the page: nothing scrolls sideways
    return pn.Column(*parts, table, *_exports(lambda: comparison_rows(df), "paired-comparisons", static),
                     sizing_mode="stretch_width")


def _unfinished_note(df: pd.DataFrame) -> list[Any]:
    """A note naming the runs of a per-run frame that have not finished (killed, still running): marked, and left out
    of the means over runs."""
    unfinished = df.loc[df["status"] != "complete", ["run_id", "status"]].drop_duplicates()
    if unfinished.empty:
        return []
    names = ", ".join(f"<code>{html.escape(run_label(r, s))}</code>" for r, s in zip(unfinished["run_id"], unfinished["status"]))
    return [_box(f"{len(unfinished)} run(s) not finished (no completion marker): {names}. Their bars are marked, and "
                 "the means over runs leave them out.", "warning")]


def _training_section(runs_dir: Path, static: bool = True):
    """The training runs' curves (served: :class:`~workbench.dashboard.live_curves.LiveCurves`, overlaid, smoothed,
    against steps or training time, following the runs as they train), then their health alarms and reports."""
    pn = _pn()
    curves = q.training_curves(runs_dir)
    names = q.curve_metrics(curves)
    if not names:
        return _box(f"No training runs (no <code>metrics.jsonl</code>) under <code>{html.escape(str(runs_dir))}</code>.",
                    "info")
    if static:
        return pn.Column(_plot(curves_figure(curves, names)), *_health_part(runs_dir), sizing_mode="stretch_width")
    from workbench.dashboard.live_curves import LiveCurves

    return pn.Column(LiveCurves(runs_dir, curves=curves).view, *_health_part(runs_dir), sizing_mode="stretch_width")


def _health_part(runs_dir: Path) -> list[Any]:
    """The training runs' health alarms (``health.jsonl``), one row each, under the curves."""
    pn = _pn()
    alarms = q.health_alarms(runs_dir)
    head = pn.pane.Markdown("### Health alarms")
    if alarms.empty:
        body = pn.pane.Alert("No health alarm fired in any training run (searches, answers, format, turns, the "
                             "rollout-trainer logprob gap and the learning signal are watched each step).",
                             alert_type="success")
    else:
        body = _table(alarms)
    return [head, body, *_reports_part(runs_dir)]


def _reports_part(runs_dir: Path) -> list[Any]:
    """``workbench report RUN`` of each training run that watched its health, newest first, each folded."""
    from workbench.eval.run_report import format_report, run_report

    parts = []
    for d in q.run_dirs(runs_dir):
        if not (d / "health.jsonl").is_file():
            continue
        try:
            text = format_report(run_report(d, write_html=False))
        except (OSError, ValueError, KeyError, TypeError) as e:  # one run's report never takes the section down
            text = f"{d.name}: the report could not be built ({type(e).__name__}: {e})"
        parts.append(f"<details><summary><code>{html.escape(d.name)}</code>: what happened</summary>"
                     f"<pre style='white-space:pre-wrap'>{html.escape(text)}</pre></details>")
    return [_pn().pane.HTML("".join(parts), sizing_mode="stretch_width")] if parts else []


def _exports(rows: Callable[[], pd.DataFrame], stem: str, static: bool) -> list[Any]:
    """A served table's CSV / Parquet buttons (none in a static page, which has no server to hand the file)."""
    return [] if static else [_pn().Row(*download_buttons(rows, stem, "export this table as", width=220))]


def _breakdown_section(runs_dir: Path, static: bool = False):
    pn = _pn()
    hops, protocols = q.hop_breakdown(runs_dir), q.protocol_breakdown(runs_dir)
    parts: list[Any] = [*_left_out(hops, protocols), pn.pane.Markdown("### Per hop count")]
    if hops.empty:
        parts.append(pn.pane.Alert("No trajectories with a hop count.", alert_type="info"))
    else:
        metrics = [m for m in ("f1", "em", "cem", "n_searches") if hops[m].notna().any()]
        parts += [_plot(hops_figure(hops, metrics, questions=q.question_metrics(runs_dir))), _table(hops, means=True),
                  *_exports(lambda: hops, "per-hop", static)]
    parts.append(pn.pane.Markdown("### Per protocol and method"))
    if protocols.empty:
        parts.append(pn.pane.Alert("No trajectories.", alert_type="info"))
    else:
        parts += [_plot(protocol_figure(protocols)), _table(protocols, means=True),
                  *_exports(lambda: protocols, "per-protocol", static)]
    return pn.Column(*parts, sizing_mode="stretch_width")


def transcript_html(runs_dir: Path, run_id: str, row: int) -> str:
    """The transcript of one trajectory beside its gold answer (``widgets.trajectory.turns_html``)."""
    from widgets.trajectory import turns_html

    return turns_html(q.load_trajectory(runs_dir, run_id, row), example=q.run_examples(runs_dir, run_id))


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
    # shares of the table's width (adding up to 100%), so every column fits and wraps between words
    share = {"row": 4, "id": 12, "method": 9, "question": 22, "answer": 13, "gold": 12, "cem": 4, "f1": 4,
             "n_searches": 5, "finish_reason": 7, "failed": 4, "failure": 4}
    if "failure" in df and (df["failure"].astype(str) != "").any():
        share.update(id=10, question=18, answer=11, gold=10, failed=6, failure=12)
    table = _table(df, selectable=1, page_size=15 if pagination else None, pagination=pagination,
                   widths={c: f"{share.get(c, 4)}%" for c in df.columns}, css_classes=["wb-trajectories"])
    if "failed" in df:
        table.style.map(_red_if, subset=["failed", "failure"])
    return table


#: The drill-down's filters before a user sets any (``clear filters`` goes back to them).
DRILL_DEFAULTS: dict[str, Any] = {"correct": "all answers", "methods": [], "hops": [], "score": (0.0, 1.0),
                                  "evidence": "any", "text": ""}
#: The drill-down's answer filter: label -> ``TrajectoryFilter.correct``.
CORRECTNESS = {"all answers": None, "correct": True, "wrong": False}
#: The drill-down's gold-evidence filter: label -> ``TrajectoryFilter.evidence`` ("any": no filter).
EVIDENCE = {"any": "any", **{label: kind for kind, label in EVIDENCE_KINDS.items()}}


def count_line(n: int, total: int, filters: q.TrajectoryFilter) -> str:
    """How many trajectories the drill-down lists, and the filters that chose them (HTML, escaped).

    >>> count_line(12, 180, q.TrajectoryFilter(correct=False, hops=(3, 4)))
    '<b>12</b> of 180 trajectories · hops 3, 4 · answer wrong (cover-EM)'
    """
    active = filters.describe()
    if not active:
        return f"<b>{total:,}</b> trajectories"
    return f"<b>{n:,}</b> of {total:,} trajectories · " + " · ".join(html.escape(a) for a in active)


def _drilldown_section(runs_dir: Path, run_ids: list[str], address: Any = None):
    """Served: pick a run, filter its trajectories (answer right or wrong, methods, hop counts, an F1 range, the gold
    evidence retrieved, a text), then pick a row of the table to see the transcript. The filters are SQL over the run's file
    (``queries.TrajectoryFilter``), and the table holds one page of ``PAGE_ROWS`` of the rows that pass, read when shown
    (``run_trajectory_table(limit=, offset=, filters=)``): a big run never goes to the browser, nor into the server's
    memory, whole."""
    pn = _pn()
    if not run_ids:
        return None, pn.pane.Alert("No readable trajectories.", alert_type="info")
    states = q.run_states(runs_dir)
    options = {run_label(r, states.get(r, "complete")): r for r in run_ids}  # an unfinished run marked
    run_select = pn.widgets.Select(label="run", options=options, value=run_ids[0], width=420, css_classes=["wb-drill-run"])
    hint = "<i>Select a trajectory (a row) to see its transcript.</i>"
    # above the table, in a box of its own height: a click never moves the table
    transcript = pn.pane.HTML(hint, sizing_mode="stretch_width", height=compare_tab.VIEW_HEIGHT,
                              styles={"overflow-y": "auto", "border-bottom": "1px solid #ddd"})
    # the filters a user set, kept when another run is opened (its methods and hop counts: those this run has)
    kept: dict[str, Any] = dict(DRILL_DEFAULTS)
    if address is not None:  # an address that names a run and filters opens on them (address.py)
        from workbench.dashboard.address import parse_filters

        kept.update(parse_filters(address.query, list(CORRECTNESS)))
        if address.query.get("run") in run_ids:
            run_select.value = address.query["run"]
        address.set(run=run_select.value)
        run_select.param.watch(lambda e: address.set(run=e.new), "value")

    # the filter widgets and the table are built once; opening another run swaps what they hold (options, values,
    # rows), so the browser redraws a few models instead of the whole section
    correct = pn.widgets.RadioButtonGroup(options=list(CORRECTNESS), value=kept["correct"])
    # options set per run in open_run (labels escaped there: bokeh's MultiChoice renders them as HTML)
    method = pn.widgets.MultiChoice(label="methods", options={}, value=[], placeholder="all", width=300)
    hops = pn.widgets.MultiChoice(label="hops", options={}, value=[], placeholder="all", width=180)
    score = pn.widgets.RangeSlider(label="F1", start=0.0, end=1.0, value=kept["score"], step=0.05, width=180)
    evidence = pn.widgets.Select(label="gold evidence", options=EVIDENCE, value="any", width=190)
    text = pn.widgets.TextInput(label="text (Enter)", value=kept["text"],
                                placeholder="question, answer, gold or transcript", width=300)
    clear = pn.widgets.Button(name="clear filters", width=110)
    page = pn.widgets.IntInput(label="page", value=1, start=1, end=1, width=140)
    prev, nxt = pn.widgets.Button(name="‹ previous", width=100), pn.widgets.Button(name="next ›", width=100)
    count = pn.pane.HTML(sizing_mode="stretch_width")
    info = pn.pane.Markdown(sizing_mode="stretch_width")
    # the run shown: its id, size and failure flags (what every callback below reads)
    cur: dict[str, Any] = {"run": None, "total": 0, "failures": None}
    downloads = download_buttons(lambda: export_rows(), "trajectories")
    notes = pn.Column(sizing_mode="stretch_width")  # the run's failure-flags warning and eval card
    table_slot = pn.Column(sizing_mode="stretch_width")
    state: dict[str, Any] = {"filters": q.TrajectoryFilter(), "n": 0, "pages": 1, "df": None, "table": None}
    controls = pn.Column(notes, pn.Row(method, hops, score, evidence, text),
                         pn.Row(correct, clear, *downloads, align="start"), count, pn.Row(prev, page, nxt, info),
                         table_slot, sizing_mode="stretch_width")
    body = pn.Column(sizing_mode="stretch_width")

    def put_rows(df: pd.DataFrame) -> None:
        """The table shows ``df``: new rows in the same table, or a new table when the columns differ."""
        table = state["table"]
        state["df"] = df
        if table is not None and list(table.value.columns) == list(df.columns):  # the schema types them alike
            table.selection = []
            table.value = _rounded(df)
            return
        table = state["table"] = _trajectory_table(df, pagination=None)
        table.param.watch(show, "selection")
        table_slot.objects = [table]

    def load(event: Any = None) -> None:
        if state.get("clearing"):
            return
        start, n = (page.value - 1) * PAGE_ROWS, state["n"]
        if event is not None:
            put_rows(fq.run_trajectory_table(runs_dir, cur["run"], limit=PAGE_ROWS, offset=start,
                                             failures=cur["failures"], filters=state["filters"]))
        info.object = f"trajectories {start + 1:,}–{min(start + PAGE_ROWS, n):,} of {n:,}" if n else ""

    def paged(n: int) -> None:
        state["n"], state["pages"] = n, max(1, -(-n // PAGE_ROWS))
        page.param.update(end=state["pages"], label=f"page (of {state['pages']:,})")
        count.object = (f"<div class='wb-drill-count' data-run='{html.escape(cur['run'])}'>"
                        f"{count_line(n, cur['total'], state['filters'])}</div>")

    def refilter(_: Any = None) -> None:  # a filter changed: count what passes, then page 1 of it
        if state.get("clearing"):
            return
        kept.update(correct=correct.value, methods=list(method.value), hops=list(hops.value),
                    score=tuple(score.value), evidence=evidence.value, text=text.value)
        if address is not None:
            address.set(**{k: kept[k] for k in DRILL_DEFAULTS})
        lo, hi = score.value
        state["filters"] = q.TrajectoryFilter(correct=CORRECTNESS[correct.value], methods=method.value,
                                              hops=hops.value, score=None if (lo, hi) == (0.0, 1.0) else (lo, hi),
                                              evidence=None if evidence.value == "any" else evidence.value,
                                              text=text.value.strip())
        paged(q.count_trajectories(runs_dir, cur["run"], state["filters"]))
        if page.value != 1:
            page.value = 1  # its watcher reads page 1
        else:
            load(True)
        if len(state["df"]):
            state["table"].selection = [0]  # the first match opens (show() draws it)
        else:
            transcript.object = "<i>No trajectory passes the filters.</i>"

    def show(event: Any) -> None:
        if not event.new or event.obj is not state["table"]:
            return
        r = state["df"].iloc[event.new[0]]
        transcript.object = f"<b>row {int(r['row'])}</b> of the table below<br>"
        try:
            transcript.object += (failure_html(r["failed"], r["failure"])
                                  + transcript_html(runs_dir, cur["run"], int(r["row"])))
        except Exception as e:  # noqa: BLE001 - shown in place of the transcript
            transcript.object = f"<b style='color:#b00020'>{html.escape(f'{type(e).__name__}: {e}')}</b>"

    def export_rows() -> pd.DataFrame:
        """Every row that passes the filters (not only this page)."""
        return fq.run_trajectory_table(runs_dir, cur["run"], failures=cur["failures"], filters=state["filters"])

    def quietly(change: Callable[[], None]) -> None:
        """Set widgets without each change filtering again (one count follows)."""
        state["clearing"] = True
        try:
            change()
        finally:
            state["clearing"] = False

    def clear_filters(_: Any = None) -> None:  # every filter back to its default, then one count
        def reset() -> None:
            correct.value, method.value, hops.value = DRILL_DEFAULTS["correct"], [], []
            score.value, text.value = DRILL_DEFAULTS["score"], DRILL_DEFAULTS["text"]
            evidence.value = DRILL_DEFAULTS["evidence"]
        quietly(reset)
        refilter()

    def open_run(run_id: str) -> None:
        """Show ``run_id``: everything is read first, so a run that cannot be read leaves no half-swapped view."""
        total, (failures, failures_error) = q.run_size(runs_dir, run_id), fq.safe_run_failures(runs_dir, run_id)
        methods, hop_counts = q.run_facets(runs_dir, run_id)
        has_evidence = q.run_evidence(runs_dir, run_id) is not None  # its features tell the gold passages retrieved
        df = fq.run_trajectory_table(runs_dir, run_id, limit=PAGE_ROWS, offset=0, failures=failures)
        card = _card_part(runs_dir, run_id)
        cur.update(run=run_id, total=total, failures=failures)

        def swap() -> None:  # the filters kept from the run shown before, where this run has them
            # labels escaped: bokeh's MultiChoice (choices.js) renders its options' labels as HTML
            method.param.update(options={html.escape(m): m for m in methods},
                                value=[m for m in kept["methods"] if m in methods])
            hops.param.update(options={str(h): h for h in hop_counts}, value=[h for h in kept["hops"] if h in hop_counts])
            evidence.param.update(label="gold evidence" if has_evidence else "gold evidence (no features table)",
                                  value=kept["evidence"] if has_evidence else "any", disabled=not has_evidence)
            correct.value, score.value, text.value = kept["correct"], kept["score"], kept["text"]
            page.value = 1
        quietly(swap)
        for button, kind in zip(downloads, EXPORT_KINDS):
            button.filename = f"{run_id}-trajectories.{kind}"
        notes.objects = [*_features_note(failures_error), card]
        state["filters"] = q.TrajectoryFilter()
        put_rows(df)
        paged(total)
        load()
        transcript.object = hint
        if (correct.value, method.value, hops.value, score.value, evidence.value, text.value) != (
                DRILL_DEFAULTS["correct"], [], [], DRILL_DEFAULTS["score"], DRILL_DEFAULTS["evidence"],
                DRILL_DEFAULTS["text"]):
            refilter()  # the count line names the filters kept
        elif len(df):
            state["table"].selection = [0]  # the first trajectory opens at once (show() draws it)

    def opened(run_id: str) -> None:
        shown = _safe("trajectories", lambda: open_run(run_id) or controls)
        body.objects = [shown]

    page.param.watch(load, "value")
    for w in (correct, method, hops, score, evidence, text):
        w.param.watch(refilter, "value")
    clear.on_click(clear_filters)
    prev.on_click(lambda _: setattr(page, "value", max(1, page.value - 1)))
    nxt.on_click(lambda _: setattr(page, "value", min(state["pages"], page.value + 1)))
    run_select.param.watch(lambda e: opened(e.new), "value")
    opened(run_select.value)
    return run_select, pn.Column(run_select, transcript, body, sizing_mode="stretch_width")


def _card_part(runs_dir: Path, run_id: str):
    """The run's eval card (``workbench.eval.card``), folded: what its scores were measured with."""
    from workbench.eval.card import card_rows, read_card

    pn = _pn()
    try:
        card = read_card(runs_dir / run_id)
    except (OSError, ValueError) as e:
        return _box(f"eval card: {html.escape(str(e))}", "warning")
    rows = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{html.escape(v)}</td></tr>" for k, v in card_rows(card))
    note = "" if card.get("hashed", True) else "<p><i>Built from config.json: this run is from before eval cards (no file hashes).</i></p>"
    return pn.Card(pn.pane.HTML(f"<div class='wb-card'>{note}<table>{rows}</table></div>", sizing_mode="stretch_width"),
                   title="eval card: what these scores were measured with", collapsed=True, sizing_mode="stretch_width")


def _static_drilldown_section(runs_dir: Path, run_ids: list[str]):
    """Static: one collapsible card per run with its first ``STATIC_ROWS`` rows and first transcripts (no server
    to ask for more)."""
    pn = _pn()
    if not run_ids:
        return pn.pane.Alert("No readable trajectories.", alert_type="info")

    def card(run_id: str):
        n = q.run_size(runs_dir, run_id)
        df = fq.run_trajectory_table(runs_dir, run_id, limit=STATIC_ROWS)
        cap = [pn.pane.Markdown(f"The first {STATIC_ROWS:,} of {n:,} trajectories (serve the dashboard to filter "
                                "them and page through them all).")] if n > STATIC_ROWS else []
        return pn.Column(*_features_note(df.attrs.get("error")), *cap, _trajectory_table(df),
                         pn.pane.HTML(_static_transcripts(runs_dir, run_id, df, n), sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")

    # a card that cannot be built shows its error in place: the other runs' cards are unaffected
    # an Accordion title is HTML: the run's name escaped, an unfinished run marked
    states = q.run_states(runs_dir)
    cards = [pn.Column(_safe(f"trajectories of {r}", lambda r=r: card(r)),
                       name=html.escape(run_label(r, states.get(r, "complete"))), sizing_mode="stretch_width")
             for r in run_ids[:STATIC_RUNS]]
    acc = pn.Accordion(*cards, active=[0], sizing_mode="stretch_width")
    note = f"Showing the newest {STATIC_RUNS} of {len(run_ids)} runs." if len(run_ids) > STATIC_RUNS else ""
    return pn.Column(pn.pane.Markdown(note), acc, sizing_mode="stretch_width") if note else acc


def _features_note(error: str | None) -> list[Any]:
    if not error:
        return []
    return [_box(f"The failure flags of this run are unknown: {html.escape(error)}", "warning")]


def _safe_failures(runs: pd.DataFrame, root: Path) -> pd.DataFrame:
    try:
        return fq.runs_with_failures(runs, root)
    except Exception:  # noqa: BLE001 - the runs table shows without the column rather than not at all
        log.exception("failure counts could not be read")
        return runs


def build_app(runs_dir: str | os.PathLike | None = None, static: bool = False, problems: list[str] | None = None,
              asker: Any = None, ask_paths: bool = True):
    """The dashboard page for ``runs_dir`` (default: ``runs/``).

    ``static``: the page for :func:`save_static`: without a server to answer clicks, the drill-down
    lists each run's trajectories with their transcripts as collapsible HTML instead, and there is no Ask tab.
    ``problems`` gets one line per section that could not be built. ``asker``: the
    :class:`~workbench.eval.ask.Asker` the Ask tab's questions go to (default: a new one); ``ask_paths``: whether the Ask
    tab offers corpus files, retrieval servers and adapter paths (``ask_tab.ask_section``). When the Ask tab has saved
    a run, everything that lists runs is read again (the Ask tab itself stays as it is), so the new run is there
    without a reload.
    """
    from workbench.util.paths import runs_dir as default_runs_dir

    pn = _pn()
    root = Path(runs_dir) if runs_dir is not None else default_runs_dir()
    header = pn.pane.HTML(_header_html(root, not static), sizing_mode="stretch_width")
    if static:
        top, sections = _run_views(root, static, problems)
        tabs = [pn.Tabs(*sections, dynamic=False, sizing_mode="stretch_width")] if sections else []
        return pn.Column(header, *top, *tabs, sizing_mode="stretch_width", name="dashboard")

    top = pn.Column(sizing_mode="stretch_width")
    tabs = pn.Tabs(dynamic=False, sizing_mode="stretch_width")

    def refresh(_: Any = None) -> None:
        on_ask = len(tabs) > 0 and tabs.objects[tabs.active] is ask
        header.object = _header_html(root, True)
        top.objects, sections = _run_views(root, static, problems, address)
        tabs[:] = [*sections, ("Ask", ask)]
        if on_ask:  # the tab the question was asked in stays open
            tabs.active = len(tabs) - 1

    from workbench.dashboard.address import ViewAddress

    address = ViewAddress(DRILL_DEFAULTS)  # the address keeps the tab, the run and the filters (address.py)
    ask = _safe("ask", lambda: _ask_section(root, asker, ask_paths, on_saved=refresh), problems)
    refresh()
    tab = address.query.get("tab", "")
    if tab.isdigit() and int(tab) < len(tabs):
        tabs.active = int(tab)
    address.set(tab=tabs.active)
    tabs.param.watch(lambda e: address.set(tab=e.new), "active")
    return pn.Column(header, top, tabs, address.bar, sizing_mode="stretch_width", name="dashboard")


def _header_html(root: Path, served: bool = False) -> str:
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    keep = " · the address keeps the tab, the run and the filters: copy it to reopen this view" if served else ""
    return f"<h1>Workbench runs</h1>Runs root <code>{html.escape(str(root))}</code> · built {stamp}{keep}"


def _run_views(root: Path, static: bool, problems: list[str] | None,
               address: Any = None) -> tuple[list[Any], list[tuple[str, Any]]]:
    """What the page shows of the runs under ``root``: the runs table (or a note that there are none) and the tabs that
    list runs, as ``(name, view)``; read anew on each call."""
    runs = q.runs_table(root)
    if runs.empty:
        msg = (f"No runs under <code>{html.escape(str(root))}</code> (a run is a folder with a <code>config.json</code>). "
               "Make one with <code>workbench demo</code>, ask the agent a question in the Ask tab, or point the "
               "dashboard at another folder with <code>--runs DIR</code>.")
        return [_box(msg, "info")], []

    with_trajs = [r for r in runs["run_id"] if r in q.trajectory_sources(root).files]
    complete = set(runs.loc[~runs["status"].str.startswith("incomplete"), "run_id"])
    with_trajs.sort(key=lambda r: r not in complete)  # the drill-down opens the newest complete run
    run_select = None
    if static:
        drill = _safe("trajectories", lambda: _static_drilldown_section(root, with_trajs), problems)
    else:
        run_select, drill = _drilldown_section(root, with_trajs, address)
    sections = [
        ("Compare", _safe("metric comparison", lambda: _compare_section(root, static, problems), problems)),
        ("Training", _safe("training curves", lambda: _training_section(root, static), problems)),
        ("Breakdowns", _safe("breakdowns", lambda: _breakdown_section(root, static), problems)),
        ("Trajectories", drill),
        ("Question by question", _safe("question-by-question comparison", lambda: _compare_questions(root, static), problems)),
    ]
    # the runs table last: the sections' queries may have found files whose data does not read
    late = q.trajectory_sources(root).errors
    runs["error"] = [e if not late.get(r) or late[r] in e else "; ".join(x for x in (e, late[r]) if x)
                     for r, e in zip(runs["run_id"], runs["error"])]
    runs = _safe_failures(runs, root)
    runs_table, runs_view = _runs_section(runs)
    if not static:  # tags and notes, a tag filter, two runs' settings (organise.py)
        from workbench.dashboard.organise import organise_part

        runs_view.append(_safe("organise", lambda: organise_part(root, runs, runs_table), problems))
        # the rows the runs table shows now (a tag filter, a column filter applied), as a file
        runs_view.append(_pn().Row(*download_buttons(lambda: runs_table.current_view, "runs",
                                                     "export the runs shown as", width=240)))
    if run_select is not None:
        def pick(event: Any) -> None:  # selecting a run in the runs table opens it in the drill-down
            if event.new and runs.iloc[event.new[0]]["run_id"] in run_select.values:
                run_select.value = runs.iloc[event.new[0]]["run_id"]

        def follow(event: Any) -> None:  # a run picked in the drill-down is highlighted in the runs table
            rows = [i for i, r in enumerate(runs["run_id"]) if r == event.new]  # table positions, as pick reads
            if rows and runs_table.selection != [rows[0]]:
                runs_table.selection = [rows[0]]

        runs_table.param.watch(pick, "selection")
        run_select.param.watch(follow, "value")
    return [runs_view], sections


def _compare_questions(root: Path, static: bool):
    """Two sources joined on their shared questions (``compare_tab``): served, any two; static, the default pair."""
    methods = q.method_metrics(root)
    if static:
        return _pn().pane.HTML(compare_tab.static_compare_html(root, methods), sizing_mode="stretch_width")
    return compare_tab.compare_section(root, methods, _table)


def _ask_section(root: Path, asker: Any, ask_paths: bool, on_saved: Callable[[Any], None]):
    from workbench.dashboard.ask_tab import ask_section
    from workbench.eval.ask import Asker

    return ask_section(root, asker if asker is not None else Asker(), allow_paths=ask_paths, on_saved=on_saved)


# --------------------------------------------------------------------------- serving


HTTP_LIMITS = {"idle_connection_timeout": IDLE_TIMEOUT_S, "body_timeout": READ_TIMEOUT_S,
               "max_header_size": MAX_HEAD_BYTES}
"""tornado's limits for the served dashboard, the other servers' values: a request head must arrive whole within
``idle_connection_timeout`` seconds of the connection opening or of its last reply (tornado's default is an hour, so a
client sending a head a byte at a time, or never, held its connection for that long), and hold at most
``max_header_size`` bytes; a body must arrive within ``body_timeout``. A websocket, once open, is not an idle
HTTP connection: bokeh's pings keep it."""


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
    allow_remote: bool = False, threaded: bool = False, show: bool = False, asker: Any = None,
    allowed_origins: Sequence[str] = (),
):
    """Serve the dashboard at ``http://host:port/``. Blocks unless ``threaded`` (then returns a thread with
    ``.stop()``). Each browser session builds a fresh page, so reloading picks up new runs. The Ask tab's questions
    of every session go to ``asker`` (default: one :class:`~workbench.eval.ask.Asker` for this server, loading the model
    at the first question); on a non-loopback ``host`` it offers the world only.

    Only the dashboard's own pages are answered, on every bind (``origins.py``): a request whose ``Origin`` is another
    site (or, on loopback, whose ``Host`` is another name) gets 403. ``allowed_origins`` adds origins to accept, such
    as a reverse proxy's (``https://dash.example.org``, ``name:port``)."""
    import uuid

    from workbench.eval.ask import Asker

    check_host(host, allow_remote)
    asker = asker if asker is not None else Asker()
    ask_paths = is_loopback(host)
    if port == 0:  # pick the port now: the allowed origins must name it
        import socket

        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    guard = origins.ForeignRequest(host, port, allowed_origins)
    ipv6 = ":" in host
    netloc = f"[{host}]" if ipv6 else host
    # bokeh's origin allowlist cannot hold a bracketed IPv6 origin ("[::1]:port" is an "invalid host"): it is left
    # open, and `guard`, first in the server's routing, decides for every request on every bind
    kw = dict(port=port, address=host, websocket_origin=["*"], show=show, title="workbench dashboard", verbose=False,
              http_server_kwargs=dict(HTTP_LIMITS), location=False)
    # location=False: panel's Location parses the Host header as "name:port", which an allowed "[::1]:port" breaks
    # (a 500 on every bind); the app keeps no state in the URL
    page = lambda: build_app(runs_dir, asker=asker, ask_paths=ask_paths)  # noqa: E731
    if threaded:  # as panel's own threaded serve, but the guard goes in before the loop accepts a connection
        from panel.io.threads import StoppableThread
        from tornado.ioloop import IOLoop

        loop = IOLoop(make_current=False)
        thread = StoppableThread(target=_serve, io_loop=loop, owns_loop=True, args=(page, guard),
                                 kwargs={**kw, "loop": loop, "server_id": uuid.uuid4().hex})  # .stop() finds it by id
        thread.start()
        return thread
    return _serve(page, guard, announce=f"workbench dashboard: http://{netloc}:{port}/  (Ctrl-C to stop)", **kw)


def _serve(page: Callable[[], Any], guard: origins.ForeignRequest, announce: str | None = None, **kw: Any):
    """Build the server of ``page`` (``panel.serve``), put ``guard`` first in its routing, then serve in this thread
    until stopped: nothing is accepted before the guard is in place."""
    import panel as pn

    with origins.bokeh_wildcard_quiet():
        server = pn.serve(page, start=False, **kw)
    origins.refuse_foreign(server._tornado, guard)  # bokeh's Server names no public accessor of its tornado app
    server.start()
    if announce:
        print(announce, flush=True)
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        server.stop()
    return server


def save_static(path: str | os.PathLike, runs_dir: str | os.PathLike | None = None, share_plotlyjs: bool = False) -> Path:
    """Write the dashboard as one self-contained HTML file at ``path`` that opens offline, and nothing else.

    The metric selectors are plotly dropdowns, so they work without a server. A section that could not be
    built shows its error in the page, and :class:`StaticExportError` (a ValueError: the CLI's one-line error,
    exit 2) is raised after the page is written. Panel's
    ``save(..., resources=INLINE)`` inlines the JavaScript, but its stylesheets (and favicon)
    stay links to cdn.holoviz.org (https://github.com/holoviz/panel/issues/6759):
    :func:`inline_cdn_links` turns those into ``data:`` URLs read from Panel's own ``dist/``.
    ``path`` names a file in an existing folder: a folder, a path in a folder that does not exist, or something
    that is not a file is refused (ValueError) before anything is built or written.

    ``share_plotlyjs`` (opt-in, for a page inside a run directory whose saved figures already share one
    ``plotly.min.js``: the demo's ``<run>/dashboard.html``): the 4.8 MB plotly.js is loaded from that shared file
    (``widgets.figures.asset_dir``: the run directory above ``path``, else its folder; written there if missing)
    instead of inlined, so keep the files together. A ``plotly.min.js`` there that is not the installed plotly's is
    never overwritten: the page then inlines its own copy.
    """
    from bokeh.resources import INLINE

    from workbench.util.io import atomic_write_text

    path = _static_target(path)
    if runs_dir is not None and not Path(runs_dir).is_dir():
        raise FileNotFoundError(f"--runs {runs_dir}: no such folder; pass the runs root (the folder that holds the "
                                "run directories, default runs/)")
    problems: list[str] = []
    app = build_app(runs_dir, static=True, problems=problems)
    tmp = path.with_name(f".{path.name}.tmp.html")
    try:
        app.save(str(tmp), resources=INLINE, title="workbench dashboard")
        page = inline_cdn_links(tmp.read_text(encoding="utf-8"))
        atomic_write_text(path, _share_plotlyjs(page, path) if share_plotlyjs else page)
    finally:
        tmp.unlink(missing_ok=True)
    if problems:
        first = " | ".join(" ".join(p.split()) for p in problems)[:600]
        raise StaticExportError(f"wrote {path}, but {len(problems)} section(s) could not be built ({first}): each shows "
                                "its error in the page; fix or move the runs it names, then export again")
    return path


def _static_target(path: str | os.PathLike) -> Path:
    """``path`` as the one file :func:`save_static` writes; ValueError naming it and the fix when it is a folder, lies
    in a folder that does not exist, or is there but not a file."""
    raw = os.fspath(path)
    target = Path(raw)
    if raw.endswith(("/", os.sep)) or target.is_dir():
        raise ValueError(f"{raw} is a folder: the static dashboard is one HTML file; give a file name such as "
                         f"{target / 'dashboard.html'}")
    if not target.parent.is_dir():
        raise ValueError(f"{raw}: the folder {target.parent} does not exist; create it first, or give a file name in "
                         "an existing folder (such as ./dashboard.html)")
    if target.exists() and not target.is_file():
        raise ValueError(f"{raw} exists and is not a file; give a file name such as {target.parent / 'dashboard.html'}")
    return target


def _share_plotlyjs(page: str, path: Path) -> str:
    """``page`` loading plotly.js from the shared ``plotly.min.js`` beside ``path`` (``widgets.figures``), unless a
    ``plotly.min.js`` is there that is not the installed plotly's: that file is left as it is and ``page`` keeps its
    inlined copy."""
    from plotly.offline import get_plotlyjs

    from widgets.figures import PLOTLY_JS, asset_dir, externalize_plotlyjs

    shared = asset_dir(path) / PLOTLY_JS
    if shared.exists() and (not shared.is_file() or shared.read_text(encoding="utf-8", errors="replace") != get_plotlyjs()):
        log.warning("%s is not the installed plotly.js: left as it is; %s inlines its own copy", shared, path)
        return page
    return externalize_plotlyjs(page, path)


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
