"""Trajectory inspector widget (ipywidgets): pick a trajectory, see its turns and tokens."""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from widgets.trajectory import tokens_html, turns_html
from workbench.runs import Run, open_run


def trajectory_inspector(run: Run | str, tokenizer: Any = None, max_items: int = 500) -> W.VBox:
    """A dropdown over the run's trajectories, the transcript, and (with a tokenizer) the token view."""
    run = open_run(run)
    trajs = run.trajectories()[:max_items]
    if not trajs:
        return W.VBox([W.HTML("<i>This run has no trajectories.</i>")])
    options = [(f"{t.id} · {t.meta.get('method', t.protocol)} · {t.finish_reason} · {t.answer!s:.30}", i) for i, t in enumerate(trajs)]
    pick = W.Dropdown(options=options, value=0, description="trajectory", layout=W.Layout(width="90%"))
    transcript, tokens = W.HTML(), W.HTML()

    def show(_: Any = None) -> None:
        t = trajs[pick.value]
        transcript.value = turns_html(t)
        tokens.value = tokens_html(t, tokenizer) if tokenizer is not None else ""

    pick.observe(show, names="value")
    show()
    box = W.VBox([pick, W.Tab(children=[transcript, tokens], titles=("turns", "tokens"))])
    box.pick, box.transcript, box.tokens, box.trajectories = pick, transcript, tokens, trajs  # for tests
    return box
