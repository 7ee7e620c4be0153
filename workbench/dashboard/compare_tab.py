"""The dashboard's Question-by-question tab: two sources (a run and a method each) joined on the questions both answered.

Each row is a pair of trajectories of one question (the same sample index where both have it): both answers, both
scores and a category, *fixed* (only the right-hand source is correct), *broken*, *both right* or *both wrong*
(:func:`workbench.eval.compare.pair_table`); a row opens the pair side by side with the differences highlighted
(:func:`widgets.diff.diff_html`), above the table. Under the counts, the difference of the two sources' mean scores
with its 95% paired bootstrap interval (:func:`difference_html`). The tab opens on the newest complete run's untrained
and trained agent (a method and its ``+lora``) when it has both, else on its first two methods; a source of an
unfinished run (killed, or still running) is marked in the pickers and opened first only when there are not two others.
The static page holds that pair's table and its first pairs side by side, folded (it has no server to draw more).
Everything shown is escaped.
"""

from __future__ import annotations

import html
import os
from typing import Any

import pandas as pd

from widgets.diff import CATEGORY_COLOURS, counts_html, diff_html, pairs_html
from workbench.dashboard import queries as q
from workbench.dashboard.exports import download_buttons
from workbench.dashboard.figures import run_label
from workbench.dashboard.intervals import pair_difference
from workbench.eval.compare import CATEGORIES, METRIC_NAMES, pair_table, show

#: Pairs the static page shows side by side (folded), fixed and broken ones first.
STATIC_PAIRS = 12
#: Height of the box the side-by-side opens in, above the table (it scrolls; the table stays in place).
VIEW_HEIGHT = 520


def source_label(source: tuple[str, str]) -> str:
    """``run_id · method``."""
    return f"{source[0]} · {source[1]}"


def source_options(methods: pd.DataFrame) -> list[tuple[str, str]]:
    """``(run_id, method)`` of every source in ``queries.method_metrics``' rows (datasets merged), newest run first."""
    if methods.empty:
        return []
    pairs = methods[["run_id", "method"]].drop_duplicates()
    pairs = pairs.sort_values(["run_id", "method"], ascending=[False, True], kind="stable")
    return [(str(r), str(m)) for r, m in zip(pairs["run_id"], pairs["method"])]


def unfinished_runs(methods: pd.DataFrame) -> dict[str, str]:
    """``{run_id: state}`` of the runs in ``queries.method_metrics``' rows that are not complete (killed, running...)."""
    if "status" not in methods:
        return {}
    return {str(r): str(s) for r, s in zip(methods["run_id"], methods["status"]) if s != "complete"}


def option_label(source: tuple[str, str], unfinished: dict[str, str]) -> str:
    """A source as the pickers show it: ``run_id · method``, an unfinished run marked (``figures.run_label``)."""
    return f"{run_label(source[0], unfinished.get(source[0], 'complete'))} · {source[1]}"


def default_pair(options: list[tuple[str, str]], unfinished: Any = ()) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The pair the tab opens on: in the newest run with two methods, a method and its ``+lora`` variant (the untrained
    and the trained agent) if it has them, else its first two methods; None with fewer than two sources. Runs in
    ``unfinished`` (killed, still running) are picked only when the others do not hold two sources.

    >>> default_pair([("r2", "direct"), ("r2", "search_r1"), ("r2", "search_r1+lora"), ("r1", "direct")])
    (('r2', 'search_r1'), ('r2', 'search_r1+lora'))
    >>> default_pair([("r3", "direct"), ("r3", "search_r1"), ("r2", "direct"), ("r1", "direct")], unfinished={"r3"})
    (('r2', 'direct'), ('r1', 'direct'))
    """
    finished = [o for o in options if o[0] not in unfinished]
    return _pair(finished) or _pair(options)


def _pair(options: list[tuple[str, str]]) -> tuple[tuple[str, str], tuple[str, str]] | None:
    by_run: dict[str, list[str]] = {}
    for run_id, method in options:
        by_run.setdefault(run_id, []).append(method)
    for run_id, methods in by_run.items():
        if len(methods) < 2:
            continue
        trained = next((m for m in methods if m.endswith("+lora") and m[: -len("+lora")] in methods), None)
        if trained:
            return (run_id, trained[: -len("+lora")]), (run_id, trained)
        return (run_id, methods[0]), (run_id, methods[1])
    return (options[0], options[1]) if len(options) >= 2 else None


def comparison(runs_dir: str | os.PathLike, left: tuple[str, str], right: tuple[str, str], metric: str = "cem",
               threshold: float = 0.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(frame, pairs)``: both sources' trajectories (``queries.source_rows``, a ``source`` label and ``run_id`` each)
    as one frame, and their :func:`~workbench.eval.compare.pair_table` (``*_row``: positions in ``frame``)."""
    parts = []
    for src in (left, right):
        df = q.source_rows(runs_dir, *src)
        df.insert(0, "source", source_label(src))
        df["run_id"] = src[0]
        parts.append(df)
    frame = pd.concat(parts, ignore_index=True)
    return frame, pair_table(frame, source_label(left), source_label(right), metric, threshold)


def pair_view(runs_dir: str | os.PathLike, frame: pd.DataFrame, left_row: int, right_row: int,
              metric: str = "cem", threshold: float = 0.5) -> str:
    """One pair side by side (``widgets.diff.diff_html``), both trajectories read from their runs."""
    two = frame.iloc[[int(left_row), int(right_row)]].reset_index(drop=True)
    trajs = [q.load_trajectory(runs_dir, r.run_id, int(r.row)) for r in two.itertuples()]

    def example(i: int) -> Any:
        return q.run_examples(runs_dir, two.at[i, "run_id"]).get(two.at[i, "example_id"])

    return diff_html(two, trajs, 0, 1, metric, threshold, examples=example)


def pairs_frame(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs as the table shows them (gold aliases joined, scores as numbers)."""
    metric = METRIC_NAMES.get(pairs.attrs.get("metric", "cem"), "score")
    return pd.DataFrame({
        "category": pairs["category"], "question": pairs["question"],
        "gold": [" | ".join(g) if isinstance(g, list) else show(g) for g in pairs["gold"]],
        "left answer": pairs["left_answer"].map(show), f"left {metric}": pairs["left_score"], "left F1": pairs["left_f1"],
        "right answer": pairs["right_answer"].map(show), f"right {metric}": pairs["right_score"],
        "right F1": pairs["right_f1"],
    })


def difference_html(frame: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """One line under the counts: the right-hand source's mean score minus the left's over the questions both were
    scored on, with its 95% paired bootstrap interval, and each side's mean with its interval
    (:func:`workbench.dashboard.intervals.pair_difference`, the questions in example-id order: the numbers
    ``workbench.eval.paired`` gives the same two runs); "" when they share no scored question. ``frame``, ``pairs``:
    :func:`comparison`'s."""
    d = pair_difference(pairs, frame["example_id"].iloc[pairs["left_row"].to_numpy()].to_numpy())
    if d is None:
        return ""
    metric = METRIC_NAMES.get(pairs.attrs.get("metric", "cem"), "score")
    left, right = (html.escape(str(pairs.attrs.get(k))) for k in ("left", "right"))
    clear = "no clear difference" if d["diff_lo"] <= 0 <= d["diff_hi"] else "a clear difference"
    return (f"<div class='wb-pair-difference' style='font-family:sans-serif;font-size:13px;margin:4px 0'>"
            f"right − left {html.escape(metric)}: <b>{d['diff']:+.3f}</b> [{d['diff_lo']:+.3f}, {d['diff_hi']:+.3f}] "
            f"(95%, paired bootstrap over the {d['n']} questions both scored; {clear}) · {left} {d['a']:.3f} "
            f"[{d['a_lo']:.3f}, {d['a_hi']:.3f}] · {right} {d['b']:.3f} [{d['b_lo']:.3f}, {d['b_hi']:.3f}]</div>")


def static_compare_html(runs_dir: str | os.PathLike, methods: pd.DataFrame) -> str:
    """The static page's tab: the default pair's table and its first pairs side by side, folded."""
    unfinished = unfinished_runs(methods)
    pick = default_pair(source_options(methods), unfinished)
    if pick is None:
        return "<p><i>Compare needs two sources (two methods, or two runs).</i></p>"
    frame, pairs = comparison(runs_dir, *pick)
    left, right = (html.escape(option_label(s, unfinished)) for s in pick)
    parts = [f"<p>Serve the dashboard (<code>workbench dashboard</code>) to pick any two sources; this page compares "
             f"<b>{left}</b> with <b>{right}</b>.</p>",
             difference_html(frame, pairs), pairs_html(pairs, max_rows=50)]
    for r in pairs.head(STATIC_PAIRS).itertuples():
        colour = CATEGORY_COLOURS.get(r.category, "#666")
        summary = (f"<b style='color:{colour}'>{html.escape(r.category)}</b> · {html.escape(str(r.question))} · "
                   f"{html.escape(show(r.left_answer))} → {html.escape(show(r.right_answer))}")
        try:
            body = pair_view(runs_dir, frame, r.left_row, r.right_row)
        except Exception as e:  # noqa: BLE001 - one unreadable trajectory must not take the page down
            body = f"<b style='color:#b00020'>{html.escape(f'{type(e).__name__}: {e}')}</b>"
        parts.append(f"<details><summary>{summary}</summary>{body}</details>")
    return "\n".join(parts)


def compare_section(runs_dir: str | os.PathLike, methods: pd.DataFrame, table: Any) -> Any:
    """The served tab: a source on each side, a category filter, the counts, the pair picked in the table
    side by side (in a box above it; the first pair at once) and the table of pairs. ``table(df, **kw)``: the
    dashboard's table builder."""
    import panel as pn

    options, unfinished = source_options(methods), unfinished_runs(methods)
    pick = default_pair(options, unfinished)
    if pick is None:
        return pn.pane.Alert("Compare needs two sources (two methods, or two runs).", alert_type="info")
    labels = {option_label(s, unfinished): s for s in options}
    left = pn.widgets.Select(label="left", options=list(labels), value=option_label(pick[0], unfinished), width=420)
    right = pn.widgets.Select(label="right", options=list(labels), value=option_label(pick[1], unfinished), width=420)
    category = pn.widgets.RadioButtonGroup(options=["all", *CATEGORIES[:4]], value="all")
    counts = pn.pane.HTML(sizing_mode="stretch_width")
    view = pn.pane.HTML(sizing_mode="stretch_width", height=VIEW_HEIGHT, styles={"overflow-y": "auto"})
    state: dict[str, Any] = {}
    state["frame"], state["pairs"] = comparison(runs_dir, *pick)
    grid = table(pairs_frame(state["pairs"]), selectable=1, height=360,
                 widths={"category": 90, "question": 300, "gold": 180, "left answer": 170, "right answer": 170},
                 formatters={c: {"type": "textarea"} for c in ("question", "gold", "left answer", "right answer")})

    def shown() -> pd.DataFrame:
        pairs = state["pairs"]
        return pairs if category.value == "all" else pairs[pairs["category"] == category.value]

    def open_pair(i: int) -> None:
        rows = shown()
        if not len(rows):
            view.object = "<i>No pair in this category.</i>"
            return
        r = rows.iloc[i]
        try:
            view.object = pair_view(runs_dir, state["frame"], r["left_row"], r["right_row"])
        except Exception as e:  # noqa: BLE001 - shown in place of the pair
            view.object = f"<b style='color:#b00020'>{html.escape(f'{type(e).__name__}: {e}')}</b>"

    def refilter(_: Any = None) -> None:
        counts.object = counts_html(state["pairs"]) + difference_html(state["frame"], state["pairs"])
        grid.selection = []
        grid.value = pairs_frame(shown()).reset_index(drop=True)
        open_pair(0)

    def load(_: Any = None) -> None:
        state["frame"], state["pairs"] = comparison(runs_dir, labels[left.value], labels[right.value])
        refilter()

    def select(event: Any) -> None:
        if event.new:
            open_pair(event.new[0])

    left.param.watch(load, "value")
    right.param.watch(load, "value")
    category.param.watch(refilter, "value")
    grid.param.watch(select, "selection")
    refilter()
    # the pairs the table shows (the category picked), with each side's run and method named in the file
    def export_rows() -> pd.DataFrame:
        rows = pairs_frame(shown()).reset_index(drop=True)
        (lr, lm), (rr, rm) = labels[left.value], labels[right.value]
        return rows.assign(left_run=lr, left_method=lm, right_run=rr, right_method=rm)

    exports = pn.Row(*download_buttons(export_rows, "compare-pairs", "export these pairs as", width=220))
    return pn.Column(pn.Row(left, right), category, counts, view, grid, exports, sizing_mode="stretch_width")
