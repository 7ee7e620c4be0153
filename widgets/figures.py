"""Plotly figures built from run tables (views only)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


def metrics_bar(summary: pd.DataFrame, metrics: tuple[str, ...] = ("em", "cem", "f1")) -> go.Figure:
    """Grouped bars: one group per metric, one bar per method."""
    fig = go.Figure()
    for method, row in summary.iterrows():
        fig.add_bar(name=str(method), x=list(metrics), y=[row.get(m) for m in metrics])
    fig.update_layout(barmode="group", title="Answer metrics by method", yaxis_range=[0, 1], height=350)
    return fig


def searches_histogram(df: pd.DataFrame) -> go.Figure:
    """Distribution of search counts per trajectory, per method."""
    fig = go.Figure()
    for method, g in df.groupby("method"):
        fig.add_histogram(x=g["n_searches"], name=str(method), opacity=0.7)
    fig.update_layout(barmode="overlay", title="Searches per trajectory", xaxis_title="searches", height=300)
    return fig


def save_figure(fig: go.Figure, path) -> None:
    """Write a figure as HTML next to a shared plotly.min.js (no CDN needed to open it)."""
    fig.write_html(str(path), include_plotlyjs="directory", full_html=True)
