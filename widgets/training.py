"""Training-run figures from ``metrics.jsonl`` rows (views only; the rows come from the trainer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

#: Panels of :func:`training_curves`: title -> metric keys of a step row.
CURVES = {
    "reward (train batch)": ("reward_mean",),
    "held-out (greedy)": ("eval_reward_mean", "eval_cem", "eval_f1"),
    "behaviour": ("searches_mean", "answered", "format_ok"),
    "optimizer": ("kept_group_share", "clip_frac", "entropy"),
}
PHASES = ("time_rollout_s", "time_reward_s", "time_reference_s", "time_old_logprobs_s", "time_update_s")


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and v == v:
            xs.append(r.get("step", len(xs)))
            ys.append(v)
    return xs, ys


def training_curves(rows: Sequence[dict[str, Any]], title: str = "") -> go.Figure:
    """A 2×2 grid: training reward (± std), held-out metrics, behaviour, optimizer statistics."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=list(CURVES))
    for i, (_, keys) in enumerate(CURVES.items()):
        row, col = i // 2 + 1, i % 2 + 1
        for k in keys:
            xs, ys = _series(rows, k)
            if xs:
                fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=k, row=row, col=col)
        if keys == ("reward_mean",):
            xs, ys = _series(rows, "reward_mean")
            _, sd = _series(rows, "reward_std")
            if xs and len(sd) == len(ys):
                fig.add_scatter(x=xs + xs[::-1], y=[a + b for a, b in zip(ys, sd)] + [a - b for a, b in zip(ys, sd)][::-1],
                                fill="toself", line={"width": 0}, opacity=0.2, name="± std", row=row, col=col)
    steps = {r.get("step") for r in rows}
    # steps are whole numbers: no 1.5 on the axis of a 2-step run (a tick a step while they fit)
    fig.update_xaxes(title_text="step", tickformat="d", dtick=1 if len(steps) <= 12 else None)
    fig.update_layout(height=600, title=title or "Training curves")
    return fig


def phase_times(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Stacked seconds per training step by phase (rollout, reward, reference, old logprobs, update)."""
    fig = go.Figure()
    train_rows = [r for r in rows if "reward_mean" in r]
    for k in PHASES:
        xs, ys = _series(train_rows, k)
        if xs and any(ys):
            fig.add_bar(x=xs, y=ys, name=k.removeprefix("time_").removesuffix("_s"))
    fig.update_layout(barmode="stack", title="Seconds per step by phase", xaxis_title="step", yaxis_title="s", height=350)
    return fig


def health_figure(rows: Sequence[dict[str, Any]], title: str = "Health") -> go.Figure:
    """The health strip of a run (``health.jsonl`` rows, ``workbench.rl.health``): each signal that has a reference,
    as its ratio to that reference over the steps (1 = as at the start; red below, blue above), with an × where an
    alarm fired."""
    signals = sorted({k for r in rows for k in r.get("reference", {})})
    steps = [r["step"] for r in rows]
    z, text = [], []
    for sig in signals:
        line, words = [], []
        for r in rows:
            v, ref = r.get("signals", {}).get(sig), r.get("reference", {}).get(sig)
            ratio = v / ref if isinstance(v, (int, float)) and isinstance(ref, (int, float)) and ref else None
            line.append(None if ratio is None else min(ratio, 3.0))
            words.append("" if v is None else f"{sig} {v:.3g} (start {ref:.3g})" if ref is not None else f"{v:.3g}")
        z.append(line)
        text.append(words)
    fig = go.Figure()
    if signals:
        fig.add_heatmap(x=steps, y=signals, z=z, text=text, hoverinfo="text", zmin=0, zmid=1, zmax=2,
                        colorscale="RdBu", colorbar={"title": "÷ start"})
    fired = [(r["step"], a.get("signal"), a.get("name"), a.get("text", "")) for r in rows for a in r.get("fired", [])]
    if fired:
        fig.add_scatter(x=[f[0] for f in fired], y=[f[1] for f in fired], mode="markers+text",
                        marker={"symbol": "x", "size": 14, "color": "black"}, text=[f[2] for f in fired],
                        textposition="top center", hovertext=[f[3] for f in fired], hoverinfo="text", name="alarm")
    fig.update_xaxes(title_text="step", dtick=1)
    fig.update_layout(title=title + (f": {len(fired)} alarm(s)" if fired else ": no alarm"),
                      height=140 + 28 * max(1, len(signals)), showlegend=False)
    return fig


def _bundle(fig: go.Figure, first: bool = False) -> dict[str, Any]:
    """``fig``'s mime bundle from the default renderers. A figure's own ``_repr_mimebundle_`` has plotly's notebook
    renderer display its plotly.js loader each time (4.8 MB a redraw); here it is activated as a displayed figure does
    it, once a kernel, when ``first``."""
    import plotly.io as pio

    if first:
        from plotly.io._base_renderers import MimetypeRenderer

        activate = getattr(pio.renderers, "_activate_pending_renderers", None)
        if activate is None:  # another plotly: its own bundle, loader and all
            return fig._repr_mimebundle_()
        activate(cls=MimetypeRenderer)
    fig_dict, bundle = fig.to_dict(), {}
    for name in str(pio.renderers.default or "").split("+"):
        renderer = pio.renderers[name] if name in pio.renderers else None
        if hasattr(renderer, "to_mimebundle"):
            bundle.update(renderer.to_mimebundle(fig_dict))
    return bundle or fig._repr_mimebundle_()


class LiveCurves:
    """:func:`training_curves` that redraw while a run trains (notebook 04): :meth:`show` displays them once, then
    each :meth:`update` (``Trainer.train(on_step=live.update)``) reads the run's ``metrics.jsonl`` again and replaces
    the figure in place, so the curves grow step by step instead of appearing when ``train()`` returns.

    ``run`` is anything with ``step_metrics()`` (a :class:`workbench.storage.runs.Run`)."""

    def __init__(self, run: Any, title: str = ""):
        self.run, self.title = run, title
        self.handle: Any = None
        self.updates = 0

    def figure(self) -> go.Figure:
        return training_curves(self.run.step_metrics(), title=self.title)

    def show(self) -> LiveCurves:
        from IPython.display import display

        # the figure's mime bundle, not the figure: a plotly figure displays itself through _ipython_display_, which
        # drops the display id, so each update would add a figure below instead of replacing this one
        self.handle = display(_bundle(self.figure(), first=True), raw=True, display_id=True)
        return self

    def update(self, row: dict[str, Any] | None = None) -> go.Figure:
        """Redraw from the run's rows (``row``, the step just logged, is what ``on_step`` passes; the file has it)."""
        fig = self.figure()
        if self.handle is not None:
            self.handle.update(_bundle(fig), raw=True)
        self.updates += 1
        return fig
