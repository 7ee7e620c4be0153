"""Two trajectories side by side, and two sources compared over every question they share (views only, no widgets:
the inspector's diff tab and the dashboard's comparison both draw these).

:func:`diff_html` puts two trajectories of one question side by side: the gold answer, both answers with the words
that differ marked, the verdicts, scores, searches and the queries only one side issued (each differing cell
highlighted), then both transcripts (:func:`widgets.trajectory.turns_html`). :func:`pairs_html` draws
:func:`workbench.eval.compare.pair_table`: counts per category and the first pairs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from widgets.trajectory import turns_html
from workbench.core.trajectory import Trajectory
from workbench.eval.compare import MISSING, category_counts, gold_list, is_missing, show, word_diff
from workbench.eval.filters import correct_mask

#: Pairs listed in a comparison table (a picker opens any of them).
PAIR_ROWS = 20
#: Category colours.
CATEGORY_COLOURS = {"fixed": "#1b7f3b", "broken": "#b00020", "both wrong": "#8a5a00", "both right": "#1b4f72",
                    "unknown": "#666"}

def failures_html(failure: str | None) -> str:
    """One red line per failure ("search tool failed: ..."), or "" when nothing failed."""
    if not failure or (isinstance(failure, float) and math.isnan(failure)):
        return ""
    lines = "".join(f"<div>⚠ {html.escape(line)}</div>" for line in str(failure).splitlines() if line.strip())
    return ("<div style='color:#b00;font-family:sans-serif;font-weight:bold;margin:4px 0'>"
            f"{lines}<div style='font-weight:normal'>its reward is NaN where it depends on what failed</div></div>")


def cell_text(v: Any) -> str:
    """A table cell: gold alias lists as :func:`gold_text`, missing values as MISSING (escaped)."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return html.escape(gold_text(v))
    return html.escape(show(v))


def gold_text(golds: Any, limit: int = 2) -> str:
    """Gold aliases as one short cell: the first ``limit`` joined by " | " ("+n" for the rest); MISSING if none.

    >>> gold_text(["Paris", "City of Paris", "Lutetia"]), gold_text(None)
    ('Paris | City of Paris +1', '–')
    """
    g = gold_list(golds)
    if not g:
        return MISSING
    return " | ".join(g[:limit]) + (f" +{len(g) - limit}" if len(g) > limit else "")


def html_table(rows: list[dict[str, Any]], cols: Sequence[str], bold_first: bool = False) -> str:
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(
            f"<td style='padding:2px 8px;text-align:left'>{'<b>' if bold_first and k == 0 else ''}{cell_text(r.get(c))}"
            f"{'</b>' if bold_first and k == 0 else ''}</td>" for k, c in enumerate(cols)
        ) + "</tr>"
        for r in rows
    )
    return f"<table style='border-collapse:collapse;font-family:sans-serif;font-size:12px'><tr>{head}</tr>{body}</table>"


def _verdict(row: pd.Series, metric: str, threshold: float) -> str:
    ok = correct_mask(row.to_frame().T, metric, threshold).iloc[0]
    return MISSING if pd.isna(ok) else ("✔ yes" if ok == 1.0 else "✘ no")


_SAME, _DIFF = "", "background:#fff3b0"


def _word_marks(a: Any, b: Any) -> tuple[str, str]:
    """Both answers as HTML with the words that differ marked (deleted on the left, inserted on the right)."""
    if is_missing(a) or is_missing(b):
        return html.escape(show(a)), html.escape(show(b))
    left, right = [], []
    for op, x, y in word_diff(a, b):
        if op == "equal":
            left.append(html.escape(x))
            right.append(html.escape(y))
            continue
        if x:
            left.append(f"<span style='background:#ffd6d6'>{html.escape(x)}</span>")
        if y:
            right.append(f"<span style='background:#c8f0c8'>{html.escape(y)}</span>")
    return " ".join(left), " ".join(right)


def diff_html(frame: pd.DataFrame, trajs: Sequence[Trajectory], left: int | None, right: int | None,
              metric: str = "cem", threshold: float = 0.5, highlight: str = "", examples: Any = None,
              note: str = "") -> str:
    """Two trajectories side by side: a summary (gold, both answers with the differing words marked, verdicts,
    scores, searches and the queries only one side issued, each differing cell highlighted) and both transcripts.
    ``examples(i)``: row ``i``'s Example (gold answers and passages) or None."""
    rows = [(i, frame.loc[i] if i is not None else None) for i in (left, right)]
    trs = [trajs[i] if i is not None else None for i in (left, right)]
    queries = [list(t.queries) if t is not None else [] for t in trs]
    a_l, a_r = _word_marks(*(r["answer"] if r is not None else None for _, r in rows))
    gold = next((r["gold"] for _, r in rows if r is not None and gold_list(r["gold"])), None)

    def cell(r: pd.Series | None, key: str) -> str:
        if r is None:
            return MISSING
        if key == "correct?":
            return _verdict(r, metric, threshold)
        if key == "searches":
            return show(r["n_searches"])
        return cell_text(r.get(key))

    fields = [("source", "source"), ("correct?", "correct?"), ("cover-EM", "cem"), ("F1", "f1"), ("EM", "em"),
              ("searches", "searches"), ("policy tokens", "n_policy_tokens"), ("reward", "reward"),
              ("finish", "finish_reason"), ("failed", "failed")]
    body = ["<colgroup><col style='width:110px'><col><col></colgroup>",
            f"<tr><th style='text-align:left;padding:2px 8px'>gold</th><td colspan=2 style='padding:2px 8px;text-align:left'>"
            f"<code style='background:#e6f4ea'>{html.escape(' | '.join(gold_list(gold)) or MISSING)}</code></td></tr>",
            "<tr><th style='text-align:left;padding:2px 8px'>answer</th>"
            + "".join(f"<td style='padding:2px 8px;text-align:left;{_DIFF if a_l != a_r else _SAME}'>{a}</td>"
                      for a in (a_l, a_r))
            + "</tr>"]
    for label, key in fields:
        vals = [cell(r, key) for _, r in rows]
        style = _DIFF if vals[0] != vals[1] and key != "source" else _SAME
        body.append(f"<tr><th style='text-align:left;padding:2px 8px'>{label}</th>"
                    + "".join(f"<td style='padding:2px 8px;text-align:left;{style}'>"
                              f"{'<b>' if key == 'source' else ''}{html.escape(v)}"
                              f"{'</b>' if key == 'source' else ''}</td>" for v in vals) + "</tr>")
    only = [[q for q in queries[k] if q not in queries[1 - k]] for k in (0, 1)]
    body.append("<tr><th style='text-align:left;padding:2px 8px'>queries</th>" + "".join(
        "<td style='padding:2px 8px;text-align:left'>" + (" · ".join(
            f"<span style='{_DIFF if q in only[k] else _SAME}'>{html.escape(q)}</span>" for q in queries[k])
            or MISSING) + "</td>" for k in (0, 1)) + "</tr>")
    head = (f"<div style='font-family:sans-serif;font-size:12px;color:#555'>{html.escape(note)}</div>" if note else "")
    summary = (f"{head}<table class='wb-diff-summary' style='border-collapse:collapse;font-family:sans-serif;"
               f"font-size:12px;width:100%;table-layout:fixed'>{''.join(body)}</table>"
               "<div style='font-family:sans-serif;font-size:11px;color:#777'>highlighted: what differs between the two "
               "sides (answer words: red = only left, green = only right; queries only one side issued)</div>")
    cols = []
    for (i, r), t in zip(rows, trs):
        if i is None:
            cols.append("<i>no trajectory of this source on this question</i>")
            continue
        ex = examples(i) if examples is not None else None
        cols.append(failures_html(r.get("failure")) + turns_html(t, highlight=highlight, example=ex, metric=metric,
                                                                  threshold=threshold))
    cells = "".join(f"<td style='vertical-align:top;width:50%;padding:0 6px;text-align:left'>{c}</td>" for c in cols)
    return f"{summary}<table style='width:100%;table-layout:fixed'><tr>{cells}</tr></table>"


def counts_html(pairs: pd.DataFrame) -> str:
    """One line: the two sources, how many questions they share (and each side's samples of them, where a side drew
    more than one a question), the questions per category, the questions only one of them answered."""
    a = pairs.attrs
    n = len(pairs)
    samples = [a.get("left_samples", n), a.get("right_samples", n)]
    drawn = (f" ({samples[0]} samples left, {samples[1]} right; a side with several is judged by most of them)"
             if samples != [n, n] else "")
    return (f"<div style='font-family:sans-serif;font-size:13px;margin:4px 0'><b>{html.escape(str(a.get('left')))}</b>"
            f" → <b>{html.escape(str(a.get('right')))}</b> over {n} shared question{'s' if n != 1 else ''}{drawn}: "
            + " · ".join(f"<b style='color:{CATEGORY_COLOURS[c]}'>{n} {c}</b>" for c, n in category_counts(pairs).items())
            + (f" · only left: {a['only_left']} questions" if a.get("only_left") else "")
            + (f" · only right: {a['only_right']} questions" if a.get("only_right") else "") + "</div>")


def pairs_html(pairs: pd.DataFrame, max_rows: int = PAIR_ROWS) -> str:
    """The comparison of two sources: :func:`counts_html`, then the first ``max_rows`` pairs (gold, both answers and
    scores)."""
    a = pairs.attrs
    head = counts_html(pairs)
    if pairs.empty:
        return head + "<i>No question answered by both.</i>"
    metric = "cover-EM" if a.get("metric") == "cem" else f"F1 ≥ {a.get('threshold', 0.5):g}"
    rows = [{"category": r.category, "question": r.question, "gold": gold_text(r.gold),
             "left answer": r.left_answer, f"left {metric}": r.left_score, "left F1": r.left_f1,
             "right answer": r.right_answer, f"right {metric}": r.right_score, "right F1": r.right_f1}
            for r in pairs.head(max_rows).itertuples()]
    more = f"<div><i>… {len(pairs) - max_rows} more (pick one below)</i></div>" if len(pairs) > max_rows else ""
    return head + html_table(rows, list(rows[0])) + more
