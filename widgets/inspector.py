"""Trajectory inspector (ipywidgets): filter the trajectories of one or more runs, read each one turn
by turn and token by token, see its reward breakdown, and compare two runs (or two methods of one
run) on the same question.

Views only: the table comes from :func:`widgets.inspector_data.load_inspector_data` (scalar columns
only, read with DuckDB; a trajectory is read from disk when it is shown, full-text search runs in
DuckDB), answer metrics, features and rewards from ``workbench.rewards``. The selection is the pure
function :func:`workbench.eval.filters.filter_trajectories` over that table, so it is tested without
any widget. The trajectory picker lists one page of matches (``PAGE`` around the shown one).

    >>> inspector = trajectory_inspector([run_a, run_b], tokenizer)   # doctest: +SKIP
    >>> inspector.inspector.set_filters(correct=False, text="Ostrel")  # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as W
import numpy as np
import pandas as pd

from widgets.diff import diff_html, failures_html, gold_text, html_table, pairs_html
from widgets.inspector_data import FEATURE_MODES, TABLE_COLUMNS, InspectorData, load_inspector_data
from widgets.trajectory import tokens_html, turns_html
from workbench.eval.compare import CATEGORIES, MISSING, best_gain, pair_table, show
from workbench.eval.filters import FAILURE_KINDS, correct_mask, describe_filters, filter_trajectories
from workbench.storage.runs import Run

__all__ = ["FEATURE_MODES", "TABLE_COLUMNS", "InspectorData", "TrajectoryInspector", "load_inspector_data",
           "trajectory_inspector"]
#: Matches listed in the trajectory picker at once (prev / next walk through all of them).
PAGE = 200
#: Pairs the diff tab's "open" picker lists (of the chosen category).
PAIRS = 500
#: Position of the diff tab among the inspector's tabs.
DIFF_TAB = 3
#: Full-text search keeps the first this many matches in table order (DuckDB stops reading there; the count
#: then shows "N+": narrow the search, or pick a run, to see all).
TEXT_HITS = 10_000

# ----------------------------------------------------------------------------- html pieces
# (the diff tab's: widgets.diff)


def reward_html(table: Any, i: int, subset_breakdown: pd.DataFrame | None, note: str) -> str:
    """One trajectory's reward components and the breakdown over the matching trajectories."""
    row = table.frame.iloc[i]
    comps = [{"component": "total", "weight": "", "value": float(row["total"])}] + [
        {"component": c, "weight": f"{w:g}", "value": float(row[c])} for c, w in table.weights.items()
    ]
    parts = [f"<div style='color:#666;font-size:12px;font-family:sans-serif'>{html.escape(note)}</div>",
             "<b style='font-family:sans-serif'>this trajectory</b>", html_table(comps, ["component", "weight", "value"], True)]
    if subset_breakdown is not None:
        bd = subset_breakdown.reset_index().to_dict("records")
        parts += ["<b style='font-family:sans-serif'>over the matching trajectories</b>",
                  html_table(bd, ["component", "weight", "mean", "std", "min", "max", "missing"], True)]
    return "".join(parts)


def matches_html(frame: pd.DataFrame, idx: Sequence[int], current: int | None, max_rows: int = 200) -> str:
    """The matching trajectories as a table (the shown one marked ▶)."""
    cols = ["source", "id", "dataset", "hops", "answer", "gold", "cem", "f1", "n_searches", "reward", "failed"]
    # one take of the shown columns only (a take of every column costs ~0.1 s at 1M rows even for no row)
    shown = frame.iloc[list(idx[:max_rows]), [frame.columns.get_loc(c) for c in cols if c in frame.columns]]
    rows = shown.to_dict("records")
    for i, r in zip(shown.index, rows):
        r["hops"] = None if pd.isna(r["hops"]) else int(r["hops"])
        if i == current:
            r["id"] = f"▶ {r['id']}"
    more = f"<div><i>… and {len(idx) - max_rows} more</i></div>" if len(idx) > max_rows else ""
    return html_table(rows, cols) + more


# ----------------------------------------------------------------------------- the widget


ALL = ""  # the "no filter" value of the dropdowns (a None value would show an empty dropdown)
_CORRECT = {"any": None, "correct": True, "wrong": False}
#: The failures dropdown: label -> ``filter_trajectories(failed=...)`` value (ALL: no filter).
_FAILED = [("any", ALL), ("none failed", False), ("any failure", True), *[(f"{k} failed", k) for k in FAILURE_KINDS]]


def _all(label: str, values: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(label, ALL)] + [(str(v), v) for v in values]


class TrajectoryInspector:
    """State and widgets of the inspector; :func:`trajectory_inspector` returns its ``box``."""

    def __init__(self, data: InspectorData, tokenizer: Any = None, preset: str | None = None):
        from workbench.methods import PRESETS

        self.data, self.tokenizer = data, tokenizer
        self.frame, self.trajectories = data.frame, data.trajectories
        f = self.frame
        self.matches: list[int] = list(range(len(f)))
        self._match_arr = np.arange(len(f))
        self._page_start = 0
        self._text_hits: tuple[Any, np.ndarray] | None = None  # the last (text, run) searched and its rows
        self._breakdown: tuple[str, list[int], Any] | None = None  # (preset, matches, breakdown) last shown
        self._by_question: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.reward_table: Any = None
        style = {"description_width": "72px"}
        lay = W.Layout(width="230px")

        def uniq(col: str) -> list[Any]:
            return sorted(pd.unique(f[col].dropna()).tolist())

        self.run_w = W.Dropdown(options=_all("all runs", uniq("run")), description="run", style=style, layout=lay)
        self.dataset_w = W.Dropdown(options=_all("all", uniq("dataset")), description="dataset", style=style, layout=lay)
        self.method_w = W.Dropdown(options=_all("all", uniq("method")), description="method", style=style, layout=lay)
        self.protocol_w = W.Dropdown(options=_all("all", uniq("protocol")), description="protocol", style=style,
                                     layout=lay)
        self.hops_w = W.Dropdown(options=_all("all", [int(h) for h in uniq("hops")]),
                                 description="hops", style=style, layout=lay)
        self.correct_w = W.ToggleButtons(options=list(_CORRECT),
                                         description="answer", style={**style, "button_width": "70px"})
        self.metric_w = W.Dropdown(options=[("cover-EM", "cem"), ("F1 ≥ threshold", "f1")], description="by",
                                   style=style, layout=lay)
        self.threshold_w = W.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="F1 ≥",
                                         continuous_update=False, style=style, layout=lay)
        max_s = int(f["n_searches"].max()) if len(f) else 0
        self.searches_w = W.IntRangeSlider(value=(0, max(max_s, 1)), min=0, max=max(max_s, 1), description="searches",
                                           continuous_update=False, style=style, layout=W.Layout(width="300px"))
        self.reward_w = W.FloatRangeSlider(value=(0.0, 1.0), min=0.0, max=1.0, step=0.01, description="reward",
                                           continuous_update=False, style=style, layout=W.Layout(width="300px"))
        self.failed_w = W.Dropdown(options=_FAILED, value=ALL, description="failures", style=style, layout=lay)
        self.search_w = W.Text(placeholder="full-text search in every turn (Enter)", description="text",
                               continuous_update=False, style=style, layout=W.Layout(width="460px"))
        self.count_w = W.HTML()
        self.clear_w = W.Button(description="clear filters", tooltip="show every trajectory",
                                layout=W.Layout(width="110px", display="none"))
        self.filter_note = ""  # why the filters are set, when code (not the widgets) set them
        self.prev_w = W.Button(description="◀ prev", tooltip="previous match (Tab here, then Enter / Space)",
                               layout=W.Layout(width="80px"))
        self.next_w = W.Button(description="next ▶", tooltip="next match (Tab here, then Enter / Space)",
                               layout=W.Layout(width="80px"))
        self.pick = W.Dropdown(options=[], description="trajectory", style=style, layout=W.Layout(width="60%"))
        presets = sorted(PRESETS)
        default = preset or next((r.config.get("reward") for r in data.runs if r.config.get("reward") in PRESETS),
                                 None) or ("dspo" if "dspo" in PRESETS else presets[0])
        if default not in PRESETS:
            raise ValueError(f"unknown reward preset {default!r}; valid names: {', '.join(presets)}")
        self.preset_w = W.Dropdown(options=presets, value=default, description="preset", style=style, layout=lay)
        sources = sorted(set(f["source"]))
        self.left_w = W.Dropdown(options=sources, description="left", style=style, layout=W.Layout(width="45%"))
        self.right_w = W.Dropdown(options=sources, description="right", style=style, layout=W.Layout(width="45%"))
        self.transcript, self.tokens, self.reward, self.diff, self.table = (W.HTML() for _ in range(5))
        self.pairs_view = W.HTML()
        self.category_w = W.ToggleButtons(options=["all", *CATEGORIES[:4]], value="all", description="pairs",
                                          style={**style, "button_width": "84px"})
        self.pair_w = W.Dropdown(options=[], description="open", style=style, layout=W.Layout(width="90%"))
        self.pairs: pd.DataFrame | None = None  # the comparison of left and right over every shared question
        self._pairs_key: tuple[Any, ...] | None = None
        self._pairs_shown: tuple[Any, ...] | None = None
        self.diff_note = ""
        self.diff_reason = ""  # why open_on_difference opened nothing, in plain text ("" when it opened a pair)
        self.diff_pinned = False
        """True once the diff tab's sources were chosen (by hand, ``diff_methods`` / ``compare_dir`` or a pair opened):
        from then on a filter change or another trajectory keeps them, instead of the left following the one shown."""

        for w in (self.run_w, self.dataset_w, self.method_w, self.protocol_w, self.hops_w, self.correct_w,
                  self.metric_w, self.threshold_w, self.searches_w, self.reward_w, self.failed_w, self.search_w):
            w.observe(self._on_filter, names="value")
        self.prev_w.on_click(lambda _: self.step(-1))
        self.next_w.on_click(lambda _: self.step(+1))
        self.pick.observe(lambda _: self.show(), names="value")
        self.preset_w.observe(self._on_preset, names="value")
        self.left_w.observe(self._on_source, names="value")
        self.right_w.observe(self._on_source, names="value")
        self.category_w.observe(lambda _: self._show_pairs(), names="value")
        self.pair_w.observe(self._on_pair, names="value")
        self.clear_w.on_click(lambda _: self.clear_filters())
        self._diff_lock = False

        self._busy = False
        self._rescore()
        self.apply_filters()
        filters = W.VBox([
            W.HBox([self.run_w, self.dataset_w, self.method_w, self.protocol_w]),
            W.HBox([self.hops_w, self.searches_w, self.reward_w]),
            W.HBox([self.correct_w, self.metric_w, self.threshold_w, self.failed_w]),
            W.HBox([self.search_w, self.count_w, self.clear_w]),
        ])
        nav = W.HBox([self.prev_w, self.next_w, self.pick])
        self.tabs = tabs = W.Tab(children=[
            self.transcript, self.tokens, W.VBox([self.preset_w, self.reward]),
            W.VBox([W.HBox([self.left_w, self.right_w]), self.pairs_view, self.category_w, self.pair_w, self.diff]),
            self.table,
        ], titles=("turns", "tokens", "reward", "diff", "matches"))
        tabs.observe(lambda _: self._show_diff(), names="selected_index")  # the comparison is made when first shown
        self.box = W.VBox([filters, nav, tabs])

    # ---------------------------------------------------------------- filters
    def filters(self) -> dict[str, Any]:
        """The current filter values as :func:`filter_trajectories` arguments."""
        s_lo, s_hi = self.searches_w.value
        r_lo, r_hi = self.reward_w.value
        full_s = (s_lo, s_hi) == (self.searches_w.min, self.searches_w.max)
        full_r = self.reward_w.disabled or (r_lo <= self.reward_w.min and r_hi >= self.reward_w.max)
        def v(w: W.ValueWidget) -> Any:
            return None if w.value == ALL else w.value

        return {
            "run": v(self.run_w), "dataset": v(self.dataset_w), "method": v(self.method_w),
            "protocol": v(self.protocol_w), "hops": v(self.hops_w), "correct": _CORRECT[self.correct_w.value],
            "correct_metric": self.metric_w.value, "f1_threshold": self.threshold_w.value,
            "searches": None if full_s else (s_lo, s_hi), "reward": None if full_r else (r_lo, r_hi),
            "failed": v(self.failed_w), "text": self.search_w.value.strip(),
        }

    def set_filters(self, **kw: Any) -> list[int]:
        """Set several filter widgets at once (names as in :meth:`filters`); returns the matches."""
        widgets = {"run": self.run_w, "dataset": self.dataset_w, "method": self.method_w, "protocol": self.protocol_w,
                   "hops": self.hops_w, "correct": self.correct_w, "correct_metric": self.metric_w,
                   "f1_threshold": self.threshold_w, "searches": self.searches_w, "reward": self.reward_w,
                   "failed": self.failed_w, "text": self.search_w}
        unknown = sorted(set(kw) - set(widgets))
        if unknown:
            raise ValueError(f"unknown filter(s) {unknown}; valid: {', '.join(widgets)}")
        given = ", ".join(f"{k}={v!r}" for k, v in kw.items() if v is not None and v != "")
        self.filter_note = f"set from code: set_filters({given})" if given else ""
        self._busy = True
        try:
            for k, v in kw.items():
                if k == "searches" and v is None:
                    v = (self.searches_w.min, self.searches_w.max)
                if k == "reward" and v is None:
                    v = (self.reward_w.min, self.reward_w.max)
                if k == "text" and v is None:
                    v = ""
                if k == "correct":
                    v = {val: name for name, val in _CORRECT.items()}[v]
                elif k in ("run", "dataset", "method", "protocol", "hops", "failed") and v is None:
                    v = ALL
                widgets[k].value = v
        finally:
            self._busy = False
        return self.apply_filters()

    def _on_filter(self, _: Any = None) -> None:
        if not self._busy:
            self.filter_note = ""  # a widget moved: the filters are the reader's own now
            self.apply_filters()

    def clear_filters(self) -> list[int]:
        """Every filter off (every trajectory matches)."""
        out = self.set_filters(run=None, dataset=None, method=None, protocol=None, hops=None, failed=None, text=None,
                               searches=None, reward=None, correct=None)
        self.filter_note = ""
        self._count_text()
        return out

    def apply_filters(self) -> list[int]:
        current = self.pick.value
        flt = self.filters()
        text = flt.pop("text")
        keep = np.asarray(filter_trajectories(self.frame, **flt), dtype=np.int64)
        if text:  # searched in DuckDB over the files (of the chosen run only), once per text, then intersected
            key = (text, flt["run"])
            if self._text_hits is None or self._text_hits[0] != key:
                self._text_hits = (key, self.data.search(text, runs=flt["run"], max_hits=TEXT_HITS))
            hits, mask = self._text_hits[1], np.zeros(len(self.frame), dtype=bool)
            mask[keep] = True  # both sorted and unique: a mask is linear where intersect1d sorts both
            keep = hits[mask[hits]]
        self._match_arr, self.matches = keep, keep.tolist()
        n = len(self.matches)
        self._more = bool(text) and len(self._text_hits[1]) >= TEXT_HITS  # the search stopped: there may be more
        self._active = describe_filters(**flt, text=text)
        self._count_text()
        pos = self._pos(current)
        pos = pos if pos >= 0 else (0 if n else -1)
        self._busy = True
        try:
            self._page(max(pos, 0))
            self.pick.value = self.matches[pos] if pos >= 0 else None
        finally:
            self._busy = False
        self.show()
        return self.matches

    def _count_text(self) -> None:
        """The match count, and which filters are set (and why, when code set them)."""
        n, total, more = len(self.matches), len(self.frame), getattr(self, "_more", False)
        active = getattr(self, "_active", [])
        line = (f"<b>{n}{'+' if more else ''}</b> of {total} trajectories match"
                + (f" (text: its first {TEXT_HITS:,} matches searched)" if more else ""))
        if active:
            why = f" ({html.escape(self.filter_note)})" if self.filter_note else ""
            line += (f"<br><span style='color:#8a5a00'>filtered by: {html.escape(' · '.join(active))}{why}</span>")
        elif self.filter_note:
            line += f"<br><span style='color:#555'>{html.escape(self.filter_note)}</span>"
        self.count_w.value = line
        self.clear_w.layout.display = "" if active else "none"

    def _pos(self, i: int | None) -> int:
        """Position of table row ``i`` in the matches (-1: not a match)."""
        if i is None or not len(self._match_arr):
            return -1
        pos = int(np.searchsorted(self._match_arr, i))
        return pos if pos < len(self._match_arr) and self._match_arr[pos] == i else -1

    def _page(self, pos: int) -> None:
        """The picker lists the page of ``PAGE`` matches that holds match number ``pos``."""
        self._page_start = start = (pos // PAGE) * PAGE
        names = ["source", "id", "finish_reason", "answer", "gold", "failed", "cem", "f1"]
        f = self.frame.iloc[self.matches[start:start + PAGE], [self.frame.columns.get_loc(c) for c in names]]
        ok = correct_mask(f, self.metric_w.value, self.threshold_w.value)
        mark = [MISSING if pd.isna(o) else "✔" if o == 1.0 else "✘" for o in ok]
        self.pick.options = [
            (f"{src} · {tid} · {fin} · {show(ans)[:30]} {m} gold: {gold_text(g, 1)[:30]}"
             + (f" · ⚠ {fail} failed" if fail else ""), int(i))
            for i, src, tid, fin, ans, g, fail, m in zip(f.index, f["source"], f["id"], f["finish_reason"], f["answer"],
                                                         f["gold"], f["failed"], mark)
        ]

    def step(self, delta: int) -> int | None:
        """Move to the previous (-1) or next (+1) match, wrapping around."""
        if not self.matches:
            return None
        new = (self._pos(self.pick.value) + delta) % len(self.matches)
        if self._page_start <= new < self._page_start + PAGE:
            self.pick.value = self.matches[new]
            return self.pick.value
        self._busy = True
        try:
            self._page(new)
            self.pick.value = self.matches[new]
        finally:
            self._busy = False
        self.show()
        return self.pick.value

    # ---------------------------------------------------------------- rewards
    def _on_preset(self, _: Any = None) -> None:
        self._rescore()
        self.apply_filters()

    def _rescore(self) -> None:
        from workbench.methods import get_preset

        d = self.data
        if d.features is not None:
            self.reward_table = get_preset(self.preset_w.value)(d.features)
            if not d.reward_stored:
                self.frame["reward"] = self.reward_table.total
        r = pd.to_numeric(self.frame["reward"], errors="coerce").to_numpy(np.float64)
        r = r[np.isfinite(r)]
        self._busy = True
        try:
            if len(r):
                lo, hi = float(r.min()), float(r.max())
                hi = hi if hi > lo else lo + 1.0
                self.reward_w.min, self.reward_w.max = -1e300, 1e300  # widen first so min <= max at every step
                self.reward_w.min, self.reward_w.max = lo, hi
                self.reward_w.step = (hi - lo) / 100
                self.reward_w.value = (lo, hi)
                self.reward_w.disabled = False
            else:
                self.reward_w.disabled = True
        finally:
            self._busy = False

    # ---------------------------------------------------------------- views
    def show(self) -> None:
        if self._busy:
            return
        i = self.pick.value
        self.table.value = matches_html(self.frame, self.matches, i)
        if i is None:
            msg = "<i>No trajectory matches the filters.</i>"
            self.transcript.value = self.tokens.value = self.reward.value = self.diff.value = msg
            return
        t = self.trajectories[i]
        text = self.search_w.value.strip()
        self.transcript.value = failures_html(self.frame.at[i, "failure"]) + turns_html(
            t, highlight=text, example=self.data.example(i), metric=self.metric_w.value,
            threshold=self.threshold_w.value)
        if self.tokenizer is None:
            self.tokens.value = "<i>Pass a tokenizer (trajectory_inspector(run, tokenizer)) to see the token view.</i>"
        else:
            adv = self.frame.at[i, "advantage"]
            self.tokens.value = tokens_html(t, self.tokenizer, None if pd.isna(adv) else [float(adv)])
        self._show_reward(i)
        self._default_diff(i)
        self._show_diff()

    def _show_reward(self, i: int) -> None:
        if self.reward_table is None:
            self.reward.value = "<i>No features for these runs: no reward breakdown.</i> " + html.escape("; ".join(self.data.notes))
            return
        from workbench.rewards.rubric import RewardTable

        preset, t = self.preset_w.value, self.reward_table
        if self._breakdown is None or self._breakdown[0] != preset or self._breakdown[1] is not self.matches:
            # the rubric is row-wise: the matching rows' rewards are those rows of the table (no re-scoring)
            sub = RewardTable({k: v[self._match_arr] for k, v in t.values.items()}, t.params,
                              t.weights).breakdown if self.matches else None
            self._breakdown = (preset, self.matches, sub)  # navigation keeps it; a filter or preset change redoes it
        sub = self._breakdown[2]
        note = "; ".join(self.data.notes)
        if self.data.reward_stored:
            note += " · the reward filter uses the runs' stored rewards"
        self.reward.value = reward_html(self.reward_table, i, sub, note)

    def _on_source(self, change: Any) -> None:
        if not self._diff_lock:
            self.diff_pinned = True  # picked by hand
        self._show_diff()

    def _default_diff(self, i: int) -> None:
        """Left follows the shown trajectory; right keeps its source if that one answered this question. Sources that
        were chosen (:attr:`diff_pinned`) stay."""
        if self.diff_pinned:
            return
        src = self.frame.at[i, "source"]
        rows = self._question_rows(i)
        here = set(self._sources[1][self._sources[0][rows]])
        others = [s for s in self.right_w.options if s != src and s in here]
        self._diff_lock = True
        try:
            self.left_w.value = src
            if others and self.right_w.value not in others:
                self.right_w.value = others[0]
        finally:
            self._diff_lock = False

    def _question_rows(self, i: int) -> np.ndarray:
        """The rows on row ``i``'s question, in table order (an index built once, not a scan per call)."""
        if self._by_question is None:
            codes = pd.factorize(self.frame["question"])[0]
            order = np.argsort(codes, kind="stable")
            starts = np.searchsorted(codes[order], np.arange(codes.max() + 2 if len(codes) else 1))
            self._by_question = (codes, order, starts)
            self._sources = pd.factorize(self.frame["source"])  # (codes, names): no string copies per call
            self._samples = self.frame["sample_idx"].to_numpy()
        codes, order, starts = self._by_question
        c = codes[i]
        return np.array([i]) if c < 0 else order[starts[c]:starts[c + 1]]

    def _same_question(self, i: int, source: str) -> int | None:
        """As :func:`workbench.eval.filters.same_question` (same sample index first), through the index."""
        rows = self._question_rows(i)
        rows = rows[self._sources[1][self._sources[0][rows]] == source]
        if not len(rows):
            return None
        same = rows[self._samples[rows] == self._samples[i]]
        return int(same[0] if len(same) else rows[0])

    def open_row(self, i: int) -> int:
        """Show table row ``i`` (the filters are cleared first when they hide it, and the count line says so)."""
        if self._pos(i) < 0:
            self.clear_filters()
            self.filter_note = "filters cleared to show the chosen trajectory"
            self._count_text()
        pos = self._pos(i)
        self._busy = True
        try:
            self._page(pos)
            self.pick.value = i
        finally:
            self._busy = False
        self.show()
        return i

    def source_of(self, name: str, side: str = "left") -> str | None:
        """The source ``name`` stands for: itself, or with several runs open a bare method name's ``run · method``,
        the first run's for the left side and the last run's (the one compared with) for the right; None if no run
        has it."""
        sources = list(dict.fromkeys(self.frame["source"]))  # in the order of the runs
        if name in sources:
            return name
        hits = [s for s in sources if s.endswith(" · " + name)]
        return (hits[0] if side == "left" else hits[-1]) if hits else None

    def open_on_difference(self, left: str, right: str, metric: str = "cem") -> int | None:
        """Open the diff tab on ``left`` against ``right`` (method names, or ``run · method`` with several runs; a bare
        method name then means the first run's on the left and the last run's on the right, :meth:`source_of`): the
        comparison over every question both answered, and the question where ``right`` gained most over ``left`` by
        ``metric`` (ties broken by F1; when both score the same everywhere, the first shared question, and the tab
        says so). Returns the shown row (``left``'s trajectory on that question), or None when a source is absent
        or the two share no question (the reason is in the diff tab, and as plain text in :attr:`diff_reason`)."""
        f = self.frame
        resolved = [self.source_of(name, side) for name, side in ((left, "left"), (right, "right"))]
        for name, src in zip((left, right), resolved):
            if src is None:
                self.diff_reason = (f"no trajectories of {name} here (sources: "
                                    f"{', '.join(dict.fromkeys(f['source']))})")
                self.diff.value = f"<i>{html.escape(self.diff_reason[0].upper() + self.diff_reason[1:])}.</i>"
                self.tabs.selected_index = DIFF_TAB
                return None
        left, right = resolved
        question, note = best_gain(f, left, right, metric)
        if question is None:
            self.diff_reason = note
            self.diff.value = f"<i>{html.escape(note)}.</i>"
            self.tabs.selected_index = DIFF_TAB
            return None
        self.diff_reason = ""
        i = int(f.index[(f["question"] == question) & (f["source"] == left)][0])
        self.clear_filters()  # every trajectory matches: the row can be shown
        self.filter_note = ""
        self.open_row(i)
        self.diff_note = note
        self._diff_lock = True
        try:
            self.left_w.value, self.right_w.value = left, right
        finally:
            self._diff_lock = False
        self.diff_pinned = True
        self._diff_lock = True
        try:
            self.tabs.selected_index = DIFF_TAB
        finally:
            self._diff_lock = False
        self._show_diff()
        return i

    def comparison(self) -> pd.DataFrame:
        """The pairs of the diff tab's left and right sources over every shared question
        (:func:`workbench.eval.compare.pair_table`, with the inspector's correctness metric); made once per choice."""
        key = (self.left_w.value, self.right_w.value, self.metric_w.value, self.threshold_w.value)
        if self._pairs_key != key or self.pairs is None:
            self.pairs = pair_table(self.frame, *key)
            self._pairs_key = key
        return self.pairs

    def _show_pairs(self) -> None:
        pairs = self.comparison()
        cat = self.category_w.value
        if self._pairs_shown == (self._pairs_key, cat):
            return  # navigation keeps the table and the picker
        self._pairs_shown = (self._pairs_key, cat)
        shown = pairs if cat == "all" else pairs[pairs["category"] == cat]
        shown.attrs = pairs.attrs
        self.pairs_view.value = pairs_html(shown)
        opts = [(f"{r.category} · {r.question[:60]} · {show(r.left_answer)[:25]} → {show(r.right_answer)[:25]}",
                 int(r.left_row)) for r in shown.head(PAIRS).itertuples()]
        self._diff_lock = True
        try:
            self.pair_w.options = [("(pick a pair to open it side by side)", -1), *opts]
            self.pair_w.value = -1
        finally:
            self._diff_lock = False

    def _on_pair(self, change: Any) -> None:
        if self._diff_lock or change["new"] is None or change["new"] < 0:
            return
        left, right = self.left_w.value, self.right_w.value
        self.open_row(int(change["new"]))
        self._diff_lock = True
        try:
            self.left_w.value, self.right_w.value = left, right
        finally:
            self._diff_lock = False
        self.diff_pinned = True
        self._show_diff(pairs=False)

    def _show_diff(self, pairs: bool = True) -> None:
        i = self.pick.value
        tabs = getattr(self, "tabs", None)
        if i is None or self._diff_lock or tabs is None or tabs.selected_index != DIFF_TAB:
            return  # drawn when the diff tab is open: navigation does not pay for it
        if pairs:
            self._show_pairs()
        left, right = self._same_question(i, self.left_w.value), self._same_question(i, self.right_w.value)
        note, self.diff_note = self.diff_note, ""
        self.diff.value = diff_html(self.frame, self.trajectories, left, right, self.metric_w.value,
                                    self.threshold_w.value, self.search_w.value.strip(), self.data.example, note)


def trajectory_inspector(
    runs: Run | str | Sequence[Run | str],
    tokenizer: Any = None,
    max_items: int | None = 500,
    preset: str | None = None,
    features: str = "auto",
) -> W.VBox:
    """Filters, navigation and views over the trajectories of one run or several.

    Args:
        runs: a Run or run directory, or a list of them (compared side by side in the *diff* tab).
        tokenizer: the policy tokenizer, for the *tokens* tab (ids are decoded one by one, never re-encoded).
        max_items: trajectories read per run; None = all.
        preset: reward preset for the *reward* tab (default: a training run's preset, else ``dspo``).
        features: where reward features come from (see :func:`load_inspector_data`).

    Returns a VBox; ``box.inspector`` is the :class:`TrajectoryInspector` (filters, matches, views),
    and ``box.pick``, ``box.transcript``, ``box.tokens``, ``box.trajectories`` are kept for old callers.
    """
    data = load_inspector_data(runs, max_items, features)
    if not data.trajectories:
        box = W.VBox([W.HTML("<i>This run has no trajectories.</i>")])
        box.inspector, box.trajectories = None, []
        return box
    ins = TrajectoryInspector(data, tokenizer, preset)
    box = ins.box
    box.inspector = ins
    box.pick, box.transcript, box.tokens, box.trajectories = ins.pick, ins.transcript, ins.tokens, ins.trajectories
    return box
