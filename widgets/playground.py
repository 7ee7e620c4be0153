"""Reward playground (ipywidgets + plotly): move a preset's parameters and weights, watch every stored
trajectory of a run re-scored.

Views only: the numbers come from :func:`workbench.rewards.counterfactual` (old = the preset's
defaults, new = the sliders), which re-scores the features table (``run/features.parquet``)
without touching the trajectories. What is drawn:

- the total reward, old vs new, and one histogram per component (weight-0 components too:
  they are logged, not rewarded);
- the group advantages, std-normalized ``(r − mean_g) / (std_g + ε)`` and mean-only ``r − mean_g``;
- the dynamic-filter keep rate: the share of groups whose rewards are not all equal;
- a table of the trajectories whose rank inside their group changed.

Each figure is a ``go.Figure`` drawn whole into an ``Output`` widget on every change
(:func:`widgets.figures.redraw`: a reloaded page draws it too); histograms are binned here (a few
dozen bars per trace) so a slider move sends bar heights, not every reward, to the browser.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from widgets.figures import redraw
from workbench.eval.compare import MISSING, is_missing, show
from workbench.methods import PRESETS, get_preset
from workbench.rewards import Counterfactual, counterfactual, featurize_run, load_features
from workbench.rewards.components import METRIC_COLUMNS
from workbench.rewards.rubric import Rubric, Spec

OLD, NEW = "#9aa5b1", "#1f77b4"
_SLIDER = {"continuous_update": False, "style": {"description_width": "110px"}, "layout": W.Layout(width="360px")}


# ----------------------------------------------------------------------------- features


def playground_features(source: Any) -> tuple[pd.DataFrame, str]:
    """The features table of ``source`` and a note saying where it came from.

    ``source``: a features DataFrame (with ``group_id``), or a run / run directory. A run
    without ``features.parquet`` is featurized first (``featurize_run(run, encoder=False)``:
    no embedding features) and the table saved into it. A table with a ``step`` column (a
    training run) whose group ids repeat across steps is grouped by ``(step, group_id)``: a
    group is one question's rollouts at one step.
    """
    if isinstance(source, pd.DataFrame):
        df, note = source, f"features table given directly ({len(source)} rows)"
    else:
        from workbench.storage.runs import open_run

        run = open_run(source)
        try:
            df, note = load_features(run), f"features from {run.path / 'features.parquet'}"
        except FileNotFoundError:
            df = featurize_run(run, encoder=False)
            note = (f"{run.path / 'features.parquet'} was missing: computed it from the run's trajectories with "
                    "featurize_run(run, encoder=False) (no embedding features: recall is title matching, query "
                    "similarity is NaN) and saved it")
    if "group_id" not in df.columns:
        raise ValueError("the reward playground needs a 'group_id' column in the features table "
                         f"(columns: {', '.join(map(str, df.columns))})")
    if "step" in df.columns and df.groupby("group_id", sort=False)["step"].nunique().gt(1).any():
        df = df.assign(group_id=df["step"].astype(str) + ":" + df["group_id"].astype(str))
        note += "; groups are (step, group_id)"
    return df, note


# ----------------------------------------------------------------------------- controls


def _nice_step(span: float) -> float:
    """A round step near span/100 (1, 2 or 5 times a power of ten)."""
    if not span > 0 or not math.isfinite(span):
        return 0.01
    raw = span / 100
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


def _bounds(value: float, spec: Spec | None) -> tuple[float, float, float]:
    """(min, max, step) of a slider for a numeric parameter: the spec's range, open ends moved in by a
    step, infinite ends at 4×|value| (at least 1)."""
    reach = max(1.0, 4 * abs(float(value)))
    lo = spec.low if spec is not None and spec.low is not None else -reach
    hi = spec.high if spec is not None and spec.high is not None else reach
    lo, hi = min(lo, float(value)), max(hi, float(value))
    step = _nice_step(hi - lo)
    if spec is not None and spec.low is not None and spec.low_open:
        lo += step
    if spec is not None and spec.high is not None and spec.high_open:
        hi -= step
    return float(lo), float(hi), step


def _suggestions(value: Any, spec: Spec | None) -> list[str]:
    """Values to offer for a free-form (validated string) parameter: those the spec accepts."""
    cands = [str(value), "auto", *METRIC_COLUMNS, "f1>=0.5", "f1>=0.8"]
    out = []
    for c in cands:
        if c not in out and (spec is None or spec.check(c) is None):
            out.append(c)
    return out


def param_widget(name: str, value: Any, spec: Spec | None) -> W.ValueWidget:
    """A control for one rubric parameter: Dropdown for choices, Checkbox for flags, Combobox for
    validated strings, IntSlider / FloatSlider for numbers (range from the spec)."""
    tip = spec.description if spec is not None and spec.description else name
    if spec is not None and spec.choices is not None:
        return W.Dropdown(options=list(spec.choices), value=value, description=name, tooltip=tip,
                          style=_SLIDER["style"], layout=_SLIDER["layout"])
    if isinstance(value, bool):
        return W.Checkbox(value=value, description=name, tooltip=tip)
    if isinstance(value, str):
        return W.Combobox(value=value, options=_suggestions(value, spec), ensure_option=False, description=name,
                          tooltip=tip, **_SLIDER)
    lo, hi, step = _bounds(value, spec)
    if isinstance(value, (int, np.integer)):
        return W.IntSlider(value=int(value), min=math.ceil(lo), max=math.floor(hi), step=1, description=name,
                           tooltip=tip, **_SLIDER)
    return W.FloatSlider(value=float(value), min=lo, max=hi, step=step, readout_format=".3g", description=name,
                         tooltip=tip, **_SLIDER)


def weight_widget(name: str, weight: float) -> W.FloatSlider:
    """A weight slider in [min(0, 2w), max(2, 2w)]; 0 = reported, not rewarded."""
    return W.FloatSlider(value=weight, min=min(0.0, 2 * weight), max=max(2.0, 2 * weight), step=0.05,
                         readout_format=".3g", description=f"w · {name}",
                         tooltip=f"weight of {name} in the total (0: logged only)", **_SLIDER)


def _fit(widget: W.ValueWidget, value: Any) -> None:
    """Set a slider's value, widening its range first (a slider would clamp it silently)."""
    if isinstance(widget, (W.FloatSlider, W.IntSlider)):
        if value < widget.min:
            widget.min = value
        if value > widget.max:
            widget.max = value
    widget.value = value


# ----------------------------------------------------------------------------- figures


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[np.isfinite(x)]


def bin_pair(old: np.ndarray, new: np.ndarray, bins: int = 30) -> dict[str, np.ndarray]:
    """Counts of ``old`` and ``new`` (NaN dropped) on shared edges: ``centers``, ``width``, ``left``, ``right``,
    ``old``, ``new``. All-equal values get one unit-wide bin around them; no values, no bins."""
    a, b = _finite(old), _finite(new)
    both = np.concatenate([a, b])
    if both.size == 0:
        edges = np.array([0.0])
    else:
        lo, hi = float(both.min()), float(both.max())
        edges = np.linspace(lo - 0.5, hi + 0.5, 2) if lo == hi else np.linspace(lo, hi, bins + 1)
    if edges.size < 2:
        empty = np.array([])
        return {"centers": empty, "width": empty, "left": empty, "right": empty, "old": empty, "new": empty}
    return {"centers": (edges[:-1] + edges[1:]) / 2, "width": np.diff(edges), "left": edges[:-1], "right": edges[1:],
            "old": np.histogram(a, edges)[0], "new": np.histogram(b, edges)[0]}


_HOVER = "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]: %{y}<extra>%{fullData.name}</extra>"


def _bars(fig: go.Figure, row: int | None = None, col: int | None = None, legend: bool = True) -> None:
    kw = {} if row is None else {"row": row, "col": col}
    for name, colour in (("old (preset defaults)", OLD), ("new", NEW)):
        fig.add_bar(x=[], y=[], name=name, marker_color=colour, opacity=0.65, legendgroup=name,
                    showlegend=legend, hovertemplate=_HOVER, **kw)


def _set_bars(old_trace: Any, new_trace: Any, h: dict[str, np.ndarray]) -> None:
    # plain lists: a few dozen bars validate much faster than numpy arrays in plotly
    x, width, custom = h["centers"].tolist(), h["width"].tolist(), np.column_stack([h["left"], h["right"]]).tolist()
    for trace, key in ((old_trace, "old"), (new_trace, "new")):
        trace.x, trace.y, trace.width, trace.customdata = x, h[key].tolist(), width, custom


#: Layout every playground figure shares: the title at the left and the toolbar upright at the right edge, so the
#: toolbar never covers the title; a few x ticks, so the labels of narrow subplots do not run together.
_LAYOUT = {"title_x": 0.01, "title_xanchor": "left", "modebar_orientation": "v", "barmode": "overlay"}
#: Component histograms per row of the components figure.
COMPONENTS_PER_ROW = 3


def _ticks(fig: go.Figure) -> None:
    fig.update_xaxes(nticks=5, tickfont_size=10, automargin=True)
    fig.update_yaxes(tickfont_size=10, automargin=True)


def total_figure() -> go.Figure:
    fig = go.Figure()
    _bars(fig)
    fig.update_layout(title="Total reward", height=300, xaxis_title="reward", yaxis_title="trajectories",
                      margin=dict(t=50, b=40, l=50, r=40), **_LAYOUT)
    _ticks(fig)
    return fig


def components_figure(rubric: Rubric) -> go.Figure:
    names = rubric.names
    cols = min(len(names), COMPONENTS_PER_ROW)
    rows = -(-len(names) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=_component_titles(rubric), horizontal_spacing=0.08,
                        vertical_spacing=0.3 / rows)
    for i in range(len(names)):
        _bars(fig, i // cols + 1, i % cols + 1, legend=i == 0)
    fig.update_annotations(font_size=11)
    fig.update_layout(title="Reward components (weight 0: logged, not in the total)", height=90 + 200 * rows,
                      margin=dict(t=80, b=30, l=40, r=40), **_LAYOUT)
    _ticks(fig)
    return fig


def _component_titles(weights: Rubric | Mapping[str, float]) -> list[str]:
    w = weights.weights if isinstance(weights, Rubric) else weights
    return [f"{n}<br>weight {v:g}" for n, v in w.items()]


def advantages_figure() -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "std-normalized:<br>(r − mean_g) / (std_g + ε)", "mean-only:<br>r − mean_g"))
    _bars(fig, 1, 1)
    _bars(fig, 1, 2, legend=False)
    fig.update_annotations(font_size=11)
    fig.update_layout(title="Group advantages", height=300, margin=dict(t=90, b=30, l=40, r=40), **_LAYOUT)
    _ticks(fig)
    return fig


def keep_figure() -> go.Figure:
    fig = go.Figure()
    fig.add_bar(x=["old", "new"], y=[0.0, 0.0], marker_color=[OLD, NEW], text=["", ""], textposition="auto",
                hovertemplate="%{x}: %{y:.1%} of groups kept<extra></extra>")
    fig.update_layout(title="Dynamic-filter<br>keep rate", yaxis_range=[0, 1], yaxis_tickformat=".0%", height=300,
                      yaxis_title="groups with reward std > 0", margin=dict(t=60, b=40, l=60, r=40), width=340,
                      **_LAYOUT)
    return fig


# ----------------------------------------------------------------------------- table


TABLE_COLUMNS = ("group_id", "id", "protocol", "answer", "gold", "f1", "reward_old", "reward_new", "rank_old",
                 "rank_new", "adv_std_old", "adv_std_new")


def rank_changes(result: Counterfactual, features: pd.DataFrame, golds: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The rows of ``result`` whose rank inside their group changed, with the features' protocol, answer and F1 and
    the gold aliases (``golds``: example id → aliases), in group order (groups as first seen), best new rank first."""
    rows = result.rows
    mask = rows["rank_changed"].to_numpy()
    have = set(rows.columns) | set(features.columns) | ({"gold"} if golds is not None else set())
    if not mask.any():
        return pd.DataFrame(columns=[c for c in TABLE_COLUMNS if c in have])
    changed = rows.loc[mask]
    extra = [c for c in ("protocol", "answer", "f1") if c in features.columns and c not in changed.columns]
    if extra:
        changed = pd.concat([changed, features.loc[changed.index, extra]], axis=1)
    if golds is not None and "example_id" in features.columns:
        changed = changed.assign(gold=[golds.get(e) for e in features.loc[changed.index, "example_id"]])
    order = pd.factorize(changed["group_id"], sort=False)[0]
    changed = changed.iloc[np.lexsort((changed["rank_new"].to_numpy(), order))]
    changed = changed.astype({c: "Int64" for c in ("rank_old", "rank_new") if c in changed.columns})  # 2, not 2.000
    return changed[[c for c in TABLE_COLUMNS if c in changed.columns]]


def rank_table_html(changed: pd.DataFrame, n_rows: int, n_groups: int, max_rows: int = 50) -> str:
    if changed.empty:
        return f"<p><b>Rank changes:</b> none — every trajectory keeps its rank inside its group ({n_rows} rows).</p>"
    shown = changed.head(max_rows).copy()
    if "answer" in shown.columns:
        shown["answer"] = [a if a is None or len(str(a)) <= 60 else str(a)[:57] + "…" for a in shown["answer"]]
    n_groups_changed = changed["group_id"].nunique()
    head = (f"<p><b>Rank changes:</b> {len(changed)} of {n_rows} trajectories in {n_groups_changed} of {n_groups} "
            f"groups changed rank (1 = best in its group)" +
            (f"; showing the first {max_rows}" if len(changed) > max_rows else "") + ".</p>")
    th = "".join(f"<th style='padding:2px 6px'>{html.escape(str(c))}</th>" for c in shown.columns)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 6px'>{_cell(v, c)}</td>" for c, v in zip(shown.columns, row))
                   + "</tr>" for row in shown.itertuples(index=False))
    return (head + "<div style='max-height:360px;overflow:auto;font-size:12px'><table class='playground-ranks'>"
            f"<thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>")


def _cell(v: Any, column: str = "") -> str:
    if isinstance(v, (list, tuple)):
        return html.escape(" | ".join(map(str, v)) or MISSING)
    return html.escape(show(v))


# ----------------------------------------------------------------------------- the builder


@dataclass
class PlaygroundState:
    """What the playground shows now (read by tests and by the notebook)."""

    features: pd.DataFrame
    source_note: str
    preset: str = ""
    base: Rubric | None = None
    """The old rubric: the preset with its defaults."""
    params: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    result: Counterfactual | None = None
    changed: pd.DataFrame | None = None
    """The rows in the rank-change table (all of them; the HTML shows the first ``max_rows``)."""
    error: str | None = None
    """Why the last update failed (an invalid parameter value); the figures keep the last valid state."""
    updates: int = 0
    seconds: float = 0.0
    """Wall time of the last update (re-score + figures + table)."""


def playground_metrics(state: PlaygroundState) -> dict[str, Any]:
    """A JSON-ready summary of the current state (for ``metrics.json``)."""
    r = state.result
    if r is None:
        raise ValueError(f"the playground has no valid result: {state.error}")
    s, g = r.summary, max(1, r.summary["groups"])
    return {
        "preset": state.preset, "params": {k: _plain(v) for k, v in state.params.items()},
        "weights": dict(state.weights),
        "n_trajectories": s["rows"], "n_groups": s["groups"],
        "reward_mean_old": _plain(s["mean_old"]), "reward_mean_new": _plain(s["mean_new"]),
        "missing_old": s["missing_old"], "missing_new": s["missing_new"],
        "keep_rate_old": s["kept_old"] / g, "keep_rate_new": s["kept_new"] / g,
        "groups_keep_changed": s["groups_keep_changed"],
        "rows_rank_changed": s["rows_rank_changed"], "groups_rank_changed": s["groups_rank_changed"],
        "absent_columns": list(r.new.absent_columns),
    }


def train_settings(state: PlaygroundState) -> dict[str, Any]:
    """The reward the playground shows now as ``TrainConfig`` fields (section ``rewards``): the preset, every
    parameter and every weight (all of them, so a method's own defaults cannot move what was tuned here)."""
    if state.result is None:
        raise ValueError(f"the playground has no valid setting to train with: {state.error}")
    return {"reward": state.preset, "reward_params": {k: _plain(v) for k, v in state.params.items()},
            "reward_weights": {k: float(v) for k, v in state.weights.items()}}


def train_command(state: PlaygroundState) -> str:
    """A ``workbench train`` command line that trains with the reward shown (add the method, steps, ...)."""
    import json
    import shlex

    t = train_settings(state)
    return (f"workbench train --reward {shlex.quote(t['reward'])} "
            f"--reward-params {shlex.quote(json.dumps(t['reward_params'], sort_keys=True))} "
            f"--reward-weights {shlex.quote(json.dumps(t['reward_weights'], sort_keys=True))}")


def save_reward_config(state: PlaygroundState, path: str | Any) -> Any:
    """Write the reward shown as a YAML file ``workbench train --reward-config FILE`` reads (section ``rewards``; it
    also serves as ``--config FILE``; other flags on the command line add to it). Returns the path."""
    from pathlib import Path

    import yaml

    from workbench.util.io import atomic_write_text

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = f"# the reward playground's setting over {state.source_note}\n# train with it: workbench train --reward-config {p}\n"
    atomic_write_text(p, head + yaml.safe_dump({"rewards": train_settings(state)}, sort_keys=False))
    return p


def _train_html(state: PlaygroundState, saved: str = "") -> str:
    try:
        cmd = train_command(state)
    except ValueError:
        return ""
    tail = (f"<br>saved: <code>{html.escape(saved)}</code> — <code>workbench train --reward-config {html.escape(saved)}</code>"
            if saved else "")
    return (f"<div style='font-size:12px'>train with this reward: <code style='user-select:all'>{html.escape(cmd)}"
            f"</code>{tail}</div>")


def _plain(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(float(v)) else float(v)
    return v.item() if isinstance(v, np.generic) else v


def reward_playground(
    source: Any,
    preset: str = "dynasearcher",
    params: Mapping[str, Any] | None = None,
    weights: Mapping[str, float] | None = None,
    *,
    bins: int = 30,
    max_rows: int = 50,
    config_path: Any = "reward_config.yaml",
) -> W.VBox:
    """The reward playground over ``source`` (a run, a run directory, or a features DataFrame).

    Args:
        source: see :func:`playground_features`.
        preset: the starting preset (``workbench.methods.PRESETS``).
        params: parameter values to start from (as if the sliders were moved); old = the defaults.
        weights: component weights to start from.
        bins: histogram bins.
        max_rows: rows shown in the rank-change table.
        config_path: where *save reward config* writes the setting shown (a YAML file for ``workbench train
            --reward-config``).

    Returns a VBox with handles: ``preset`` (Dropdown), ``sliders`` (parameter → widget),
    ``weight_sliders`` (component → slider), ``figures`` (``total``, ``components``,
    ``advantages``, ``keep``: plotly figures) and ``views`` (the ``Output`` widgets that show
    them), ``table`` and ``summary`` (HTML), ``state``
    (:class:`PlaygroundState`), ``update()``, ``set(params=, weights=, preset=)`` (moves
    several controls with one update) and ``metrics()``.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown reward preset {preset!r}; valid names: {', '.join(sorted(PRESETS))}")
    df, note = playground_features(source)
    golds = run_golds(source)
    state = PlaygroundState(df, note)
    # the components figure is made per preset by build()
    figures: dict[str, Any] = {"total": total_figure(), "components": None, "advantages": advantages_figure(),
                               "keep": keep_figure()}
    views = {name: W.Output() for name in figures}  # each shows its figure, redrawn whole by every update
    views["total"].layout.flex = "1 1 0%"  # beside the keep rate's fixed width, the total takes the rest of the row
    preset_pick = W.Dropdown(options=sorted(PRESETS), value=preset, description="preset")
    reset = W.Button(description="reset to defaults", tooltip="parameters and weights back to the preset's defaults")
    save = W.Button(description="save reward config", tooltip=f"write the setting shown to {config_path} for "
                    "`workbench train --reward-config`")
    train_box = W.HTML()
    doc = W.HTML()
    param_box, weight_box = W.VBox(), W.VBox()
    summary, table = W.HTML(), W.HTML()
    sliders: dict[str, W.ValueWidget] = {}
    weight_sliders: dict[str, W.FloatSlider] = {}
    hold = [False]  # True while several controls move at once

    def current() -> tuple[dict[str, Any], dict[str, float]]:
        return ({k: w.value for k, w in sliders.items()}, {k: float(w.value) for k, w in weight_sliders.items()})

    def update(_: Any = None) -> None:
        if hold[0]:
            return
        t0 = time.perf_counter()
        params_now, weights_now = current()
        base = state.base
        try:
            result = counterfactual(df, base.with_weights(**weights_now), params_now, base=base)
        except ValueError as e:  # an out-of-range or malformed value typed into a control
            state.error = str(e)
            summary.value = f"<p style='color:#b00020'><b>Not updated:</b> {html.escape(str(e))}</p>"
            return
        state.params, state.weights, state.result, state.error = params_now, weights_now, result, None
        train_box.value = _train_html(state)
        _draw(result)
        state.updates += 1
        state.seconds = time.perf_counter() - t0

    def _draw(r: Counterfactual) -> None:
        rows, s = r.rows, r.summary
        h = bin_pair(rows["reward_old"].to_numpy(), rows["reward_new"].to_numpy(), bins)
        f = figures["total"]
        _set_bars(f.data[0], f.data[1], h)
        f = figures["components"]
        for i, name in enumerate(r.new.components):
            _set_bars(f.data[2 * i], f.data[2 * i + 1], bin_pair(r.old.values[name], r.new.values[name], bins))
        for ann, title in zip(f.layout.annotations, _component_titles(r.new.weights)):
            ann.text = title
        f = figures["advantages"]
        for i, kind in enumerate(("adv_std", "adv_mean")):
            hk = bin_pair(rows[f"{kind}_old"].to_numpy(), rows[f"{kind}_new"].to_numpy(), bins)
            _set_bars(f.data[2 * i], f.data[2 * i + 1], hk)
        g = s["groups"]
        rates = [s["kept_old"] / g if g else 0.0, s["kept_new"] / g if g else 0.0]
        f = figures["keep"]
        f.data[0].y = rates
        f.data[0].text = [f"{rates[0]:.0%} ({s['kept_old']}/{g})", f"{rates[1]:.0%} ({s['kept_new']}/{g})"]
        for name, fig in figures.items():
            redraw(views[name], fig)
        state.changed = rank_changes(r, df, golds)
        table.value = rank_table_html(state.changed, s["rows"], g, max_rows)
        summary.value = _summary_html(state, r)

    def build(name: str, params_: Mapping[str, Any] | None = None, weights_: Mapping[str, float] | None = None) -> None:
        """Controls and component figure for preset ``name`` (defaults, then ``params_`` / ``weights_``)."""
        base = get_preset(name)
        start = get_preset(name, weights=dict(weights_ or {}) or None, **dict(params_ or {}))  # validates
        for w in (*sliders.values(), *weight_sliders.values()):  # the old preset's controls are discarded
            w.unobserve(update, names="value")
            w.close()
        sliders.clear()
        weight_sliders.clear()
        for k in base.param_names:
            w = param_widget(k, base.params[k], base.specs.get(k))
            _fit(w, start.params[k])
            sliders[k] = w
        for k, v in base.weights.items():
            w = weight_widget(k, v)
            _fit(w, start.weights[k])
            weight_sliders[k] = w
        for w in (*sliders.values(), *weight_sliders.values()):
            w.observe(update, names="value")
        param_box.children = [W.HTML("<b>parameters</b>"), *sliders.values()] if sliders else [
            W.HTML("<b>parameters</b><br><i>this preset has none</i>")]
        weight_box.children = [W.HTML("<b>weights</b>"), *weight_sliders.values()]
        first = (base.doc or "").strip().split("\n\n")[0]
        doc.value = f"<div style='font-size:12px;color:#444'>{rst_html(first)}</div>"
        state.preset, state.base = name, base
        figures["components"] = components_figure(base)  # drawn into its view by the next update

    def set_values(params: Mapping[str, Any] | None = None, weights: Mapping[str, float] | None = None,
                   preset: str | None = None) -> None:
        """Move several controls (as a user would) with one update; unknown names raise."""
        hold[0] = True
        try:
            if preset is not None and preset != preset_pick.value:
                preset_pick.value = preset
            unknown = sorted(set(params or {}) - set(sliders)) + sorted(set(weights or {}) - set(weight_sliders))
            if unknown:
                raise ValueError(f"{state.preset}: unknown parameter(s) / component(s) {unknown}; parameters: "
                                 f"{', '.join(sliders) or '(none)'}; components: {', '.join(weight_sliders)}")
            state.base.with_params(**dict(params or {}))  # validate before moving anything
            for k, v in (params or {}).items():
                _fit(sliders[k], v)
            for k, v in (weights or {}).items():
                _fit(weight_sliders[k], float(v))
        finally:
            hold[0] = False
        update()

    def on_preset(change: Any) -> None:
        build(change["new"])
        update()

    def on_reset(_: Any) -> None:
        base = state.base
        set_values(dict(base.params), dict(base.weights))

    def on_save(_: Any) -> None:
        try:
            train_box.value = _train_html(state, str(save_reward_config(state, config_path)))
        except (OSError, ValueError) as e:
            train_box.value = f"<p style='color:#b00020'><b>Not saved:</b> {html.escape(str(e))}</p>"

    build(preset, params, weights)
    preset_pick.observe(on_preset, names="value")
    reset.on_click(on_reset)
    save.on_click(on_save)
    update()

    note_html = W.HTML(f"<div style='font-size:12px;color:#555'>{html.escape(note)}</div>")
    box = W.VBox([
        W.HBox([preset_pick, reset, save]), doc, note_html,
        W.HBox([param_box, weight_box]),
        summary, train_box,
        W.HBox([views["total"], views["keep"]]),
        views["components"],
        views["advantages"],
        table,
    ])
    box.preset, box.sliders, box.weight_sliders, box.figures = preset_pick, sliders, weight_sliders, figures
    box.views = views
    box.table, box.summary, box.state, box.source_note = table, summary, state, note
    box.update, box.set, box.metrics = update, set_values, lambda: playground_metrics(state)
    box.save_button, box.train_box = save, train_box
    return box


def _summary_html(state: PlaygroundState, r: Counterfactual) -> str:
    s = r.summary
    changed = {k: v for k, v in state.params.items() if state.base is not None and v != state.base.params.get(k)}
    wchanged = {k: v for k, v in state.weights.items() if state.base is not None and v != state.base.weights.get(k)}
    moved = ", ".join([f"{k}={v!r}" for k, v in changed.items()] + [f"w·{k}={v:g}" for k, v in wchanged.items()])
    g = s["groups"]
    parts = [
        f"<b>{s['rows']}</b> trajectories in <b>{g}</b> groups",
        f"mean reward {_fmt(s['mean_old'])} → <b>{_fmt(s['mean_new'])}</b>",
        f"groups kept {s['kept_old']} → <b>{s['kept_new']}</b>",
        f"rank changes: <b>{s['rows_rank_changed']}</b> trajectories in {s['groups_rank_changed']} groups",
    ]
    lines = [" · ".join(parts), f"changed from the defaults: {html.escape(moved) if moved else 'nothing'}"]
    if s["missing_new"] or s["missing_old"]:
        nan = [f"{c} ({int(np.isnan(r.new.values[c]).sum())} rows)" for c in r.new.components
               if np.isnan(r.new.values[c]).any()]
        lines.append(f"<span style='color:#b00020'>missing ({MISSING}) rewards: {s['missing_old']} old, "
                     f"{s['missing_new']} new — not in the histograms; their groups are not kept"
                     + (f"; missing in: {html.escape(', '.join(nan))}" if nan else "") + "</span>")
        for need, cols, how in PRESETS[state.preset].needs.uncomputed(state.features):
            lines.append(f"<span style='color:#b00020'>why: {html.escape(state.preset)} needs the "
                         f"<b>{html.escape(need)}</b>, which this run's features did not compute "
                         f"({html.escape(', '.join(cols))} empty: an eval run computes features without embeddings, "
                         f"judges or an evidence model). To compute it: <code>{html.escape(how)}</code></span>")
    if r.new.absent_columns:
        lines.append(f"<span style='color:#8a5a00'>feature columns absent from the table (read as NaN): "
                     f"{html.escape(', '.join(r.new.absent_columns))}</span>")
    if g and g == s["rows"]:
        lines.append("<i>every group has one trajectory: advantages are 0 and no group passes the filter</i>")
    return "<div style='font-size:13px'>" + "<br>".join(lines) + "</div>"


def _fmt(x: float) -> str:
    return MISSING if is_missing(x) else f"{x:.3f}"


def run_golds(source: Any) -> dict[str, list[str]] | None:
    """``{example id: gold aliases}`` of a run (None for a features table given directly, or a run without
    examples)."""
    if isinstance(source, pd.DataFrame):
        return None
    from workbench.storage.runs import EXAMPLES, open_run

    run = open_run(source)
    return {e.id: e.answers for e in run.examples()} if run.exists(EXAMPLES) else None


def rst_html(text: str) -> str:
    """A docstring paragraph as HTML: ````code```` and ``:role:`name``` as code, ``*x*`` in italics.

    >>> rst_html("``r = a + b`` from :func:`score`, *Eq. 3*")
    '<code>r = a + b</code> from <code>score</code>, <i>Eq. 3</i>'
    """
    import re

    out = html.escape(text)
    out = re.sub(r":[a-z]+:`~?([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"``(.+?)``", r"<code>\1</code>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])", r"<i>\1</i>", out)
