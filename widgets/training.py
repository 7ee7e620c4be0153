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
    fig.update_xaxes(title_text="step")
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
