"""KG explorer (ipywidgets + plotly): search an entity, draw its k-hop neighbourhood, filter relations,
and for a question show its gold path and the triples the agent's KG searches returned.

Views only: entity matching and 1-hop triples come from :class:`workbench.tools.kg.KnowledgeGraph`
(``world_kg(world)`` for the synthetic world), trajectories and examples from ``workbench.storage.runs``.
The computations live in :mod:`workbench.tools.kg.explore` (:func:`neighbourhood`, a breadth-first
walk over ``KnowledgeGraph.triples_of``, :func:`gold_triples`, :func:`kg_calls`,
:func:`gold_path_recall`); here :func:`network_layout` (networkx's spring layout with a fixed seed,
so a figure is the same on every run), which nodes carry a label (:func:`labelled_nodes`) and the
figures, each drawn whole into an ``Output`` widget on every change (:func:`widgets.figures.redraw`).

    >>> box = kg_explorer(load_world(), run, entity="Shadows over Gerndo", hops=2)  # doctest: +SKIP
    >>> box.explorer.neighbourhood.nodes[:3]                                        # doctest: +SKIP
"""

from __future__ import annotations

import html
import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from widgets.figures import figure_view, redraw
from workbench.core.trajectory import Trajectory
from workbench.core.types import Triple
from workbench.data.example import Example
from workbench.eval.compare import MISSING, judge, show
from workbench.tools.kg import EntityMatch, KnowledgeGraph, normalize_name
from workbench.tools.kg.explore import (
    MAX_HOPS,
    Neighbourhood,
    TripleSet,
    anchor_of,
    gold_path_recall,
    gold_triples,
    kg_calls,
    neighbourhood,
    returned_triples,
)

#: Node colours by distance from the centre (0, 1, 2, 3 hops); grey = outside (a gold node added to the view).
HOP_COLOURS = ("#1f3b73", "#4a7bd0", "#8fb3e8", "#c9dbf5")
OUTSIDE_COLOUR = "#bdbdbd"
GOLD, RETURNED, EDGE = "#d62728", "#ff9f1c", "#b0b0b0"
#: Node labels: font size (px) and the characters per line they wrap at (between words; a name is never cut).
LABEL_SIZE, LABEL_WRAP = 9, 20
#: The network figure's height (px) and margins; the plot area the label fit assumes is at least ``FIT_WIDTH`` px wide.
HEIGHT, MARGIN, FIT_WIDTH = 560, {"l": 10, "r": 10, "t": 40, "b": 10}, 700
#: Room around the nodes, as a share of their extent (more at the top, where labels sit above their node).
PAD, PAD_TOP = 0.08, 0.14


# ----------------------------------------------------------------------------- graph access


def as_kg(world_or_kg: Any) -> KnowledgeGraph:
    """A :class:`KnowledgeGraph` from a KnowledgeGraph, a synthetic world (``world_kg``), or KG files
    (a path or a list of paths: Wikidata5M, CoDEx, FB15k-237 with their label files; ``load_kg``)."""
    if isinstance(world_or_kg, KnowledgeGraph):
        return world_or_kg
    if isinstance(world_or_kg, (str, os.PathLike, list, tuple)):
        from workbench.tools.kg.files import load_kg

        return load_kg(world_or_kg)
    if hasattr(world_or_kg, "triples") and hasattr(world_or_kg, "entities"):
        from workbench.tools.toolbox import world_kg

        return world_kg(world_or_kg)
    raise TypeError(f"kg_explorer needs a World or a KnowledgeGraph, got {type(world_or_kg).__name__}")


def find_entity(kg: KnowledgeGraph, text: str) -> list[EntityMatch]:
    """Entities for a typed name or id: exact alias / id matches, else fuzzy ones (best first)."""
    text = str(text or "").strip()
    return kg.match_entity(text) if text else []


def network_layout(nb: Neighbourhood, seed: int = 0, iterations: int = 100) -> dict[str, tuple[float, float]]:
    """Node positions: networkx's spring layout, seeded, the centre pinned at the origin (deterministic).

    A part of the drawing not joined to the centre (the second gold path of a comparison question, which starts at
    its other anchor) is tied to the centre by an edge the layout pulls on and the figure does not draw, from its
    best-connected node: else the layout's repulsion pushes it away from the neighbourhood, off the axes' scale."""
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(nb.nodes)
    g.add_edges_from((t.head_id, t.tail_id) for t in nb.edges if t.head_id != t.tail_id)
    if len(nb.nodes) == 1:
        return {nb.center: (0.0, 0.0)}
    order = {n: i for i, n in enumerate(nb.nodes)}
    for part in list(nx.connected_components(g)):
        if nb.center not in part:
            g.add_edge(nb.center, min(part, key=lambda n: (-g.degree(n), order[n])))
    pos = nx.spring_layout(g, seed=seed, iterations=iterations, pos={nb.center: (0.0, 0.0)}, fixed=[nb.center])
    return {n: (float(p[0]), float(p[1])) for n, p in pos.items()}


# ----------------------------------------------------------------------------- figures


def _edge_xy(edges: Sequence[Triple], pos: Mapping[str, tuple[float, float]]) -> tuple[list, list]:
    xs, ys = [], []
    for t in edges:
        (x0, y0), (x1, y1) = pos[t.head_id], pos[t.tail_id]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return xs, ys


def key_nodes(nb: Neighbourhood, gold: TripleSet | None = None, returned: TripleSet | None = None,
              question: Iterable[str] = ()) -> set[str]:
    """The nodes that matter in a drawn neighbourhood: the centre, the question's entities (ids in ``question``), the
    entities of the gold path and of the triples the agent's KG searches returned (by id, else by name)."""
    ids, names = {nb.center, *question}, set()
    for t in [*(gold.triples if gold else []), *(returned.triples if returned else [])]:
        ids.update(x for x in (t.head_id, t.tail_id) if x)
        names.update(normalize_name(x) for x in (t.head, t.tail) if x)
    return {n for n in nb.nodes if n in ids or normalize_name(nb.names.get(n, n)) in names}


def label_lines(name: str) -> list[str]:
    """A name in lines of at most ``LABEL_WRAP`` characters, broken between words (a longer word keeps a line of
    its own): the whole name, never cut."""
    return textwrap.wrap(name, LABEL_WRAP, break_long_words=False, break_on_hyphens=False) or [name]


def plot_ranges(pos: Mapping[str, tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The x and y ranges that fit these positions with room around them (for labels: more above), so each new
    neighbourhood fills the view whatever the previous one was."""
    xs, ys = [p[0] for p in pos.values()] or [0.0], [p[1] for p in pos.values()] or [0.0]
    span = max(max(xs) - min(xs), max(ys) - min(ys), 1e-9)
    return ([min(xs) - PAD * span, max(xs) + PAD * span], [min(ys) - PAD * span, max(ys) + PAD_TOP * span])


#: Where a key node's label may go, tried in this order until one overlaps no label placed before it.
LABEL_PLACES = ("top center", "bottom center", "middle right", "middle left")


def label_places(nb: Neighbourhood, pos: Mapping[str, tuple[float, float]], key: Iterable[str]) -> dict[str, str]:
    """Each labelled node and where its label goes (a plotly ``textposition``): every ``key`` node, at the first of
    :data:`LABEL_PLACES` where its label overlaps none placed before (above, if none is free); then each other node,
    in breadth-first order, above it where its label would overlap nothing (the others show their name on hover).

    The fit is an estimate: a label's box from its lines at ``LABEL_SIZE`` (0.62 em a character, 1.3 em a line,
    2 px apart), beside its node, at the scale that :func:`plot_ranges` gives a plot area ``HEIGHT`` less the
    margins high and at least ``FIT_WIDTH`` wide (the plot keeps x and y at one scale)."""
    (x0, x1), (y0, y1) = plot_ranges(pos)
    scale = min((HEIGHT - MARGIN["t"] - MARGIN["b"]) / (y1 - y0), FIT_WIDTH / (x1 - x0))  # px per layout unit
    placed: list[tuple[float, float, float, float]] = []

    def box(n: str, where: str) -> tuple[float, float, float, float]:
        lines = label_lines(nb.names.get(n, n))
        w, h = 0.62 * LABEL_SIZE * max(map(len, lines)) + 2, 1.3 * LABEL_SIZE * len(lines) + 2
        x, y = pos[n][0] * scale, pos[n][1] * scale
        if where == "top center":  # its bottom a few px above the marker's centre
            return x - w / 2, x + w / 2, y + 6, y + 6 + h
        if where == "bottom center":
            return x - w / 2, x + w / 2, y - 6 - h, y - 6
        if where == "middle right":
            return x + 8, x + 8 + w, y - h / 2, y + h / 2
        return x - 8 - w, x - 8, y - h / 2, y + h / 2

    def free(b: tuple[float, float, float, float]) -> bool:
        return all(b[1] <= o[0] or o[1] <= b[0] or b[3] <= o[2] or o[3] <= b[2] for o in placed)

    keys, chosen = set(key), {}
    for n in nb.nodes:
        if n in keys:
            where = next((w for w in LABEL_PLACES if free(box(n, w))), LABEL_PLACES[0])
            placed.append(box(n, where))
            chosen[n] = where
    for n in nb.nodes:
        if n not in chosen and free(b := box(n, LABEL_PLACES[0])):
            placed.append(b)
            chosen[n] = LABEL_PLACES[0]
    return chosen


def labelled_nodes(nb: Neighbourhood, pos: Mapping[str, tuple[float, float]], key: Iterable[str]) -> set[str]:
    """The nodes whose name is drawn (:func:`label_places`)."""
    return set(label_places(nb, pos, key))


def network_traces(nb: Neighbourhood, pos: Mapping[str, tuple[float, float]], gold: TripleSet | None = None,
                   returned: TripleSet | None = None, question: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Data of the five traces (edges, returned edges, gold edges, edge hover points, nodes), in that order. The
    :func:`key_nodes` are labelled (in bold) at any size, each beside its node where it overlaps no other key label,
    the others where their label fits (:func:`label_places`); a label is the whole name, wrapped between words, and a node's hover starts with it."""
    gold, returned = gold or TripleSet(), returned or TripleSet()
    key = key_nodes(nb, gold, returned, question)
    shown = label_places(nb, pos, key)
    gold_e = [t for t in nb.edges if t in gold]
    ret_e = [t for t in nb.edges if t in returned and t not in gold]
    plain = [t for t in nb.edges if t not in gold and t not in returned]
    gold_nodes = {n for t in gold_e for n in (t.head_id, t.tail_id)}
    mid_x = [(pos[t.head_id][0] + pos[t.tail_id][0]) / 2 for t in nb.edges]
    mid_y = [(pos[t.head_id][1] + pos[t.tail_id][1]) / 2 for t in nb.edges]
    mid_text = [f"{html.escape(t.head)} — <b>{html.escape(t.relation)}</b> → {html.escape(t.tail)}"
                + (" · <b>gold path</b>" if t in gold else "") + (" · returned by the agent" if t in returned else "")
                for t in nb.edges]

    def hover(n: str) -> str:
        d = nb.depth.get(n)
        where = "centre" if d == 0 else (f"{d} hop{'s' if d != 1 else ''}" if d is not None else "outside the k hops")
        al = ", ".join(html.escape(a) for a in nb.aliases.get(n, [])[:8]) or "–"
        return f"<b>{html.escape(nb.names.get(n, n))}</b><br>{html.escape(n)} · {where}<br>aliases: {al}"

    def label(n: str) -> str:
        if n not in shown:
            return ""
        text = "<br>".join(html.escape(line) for line in label_lines(nb.names.get(n, n)))
        return f"<b>{text}</b>" if n in key else text

    nodes = nb.nodes
    return [
        dict(zip(("x", "y"), _edge_xy(plain, pos))),
        dict(zip(("x", "y"), _edge_xy(ret_e, pos))),
        dict(zip(("x", "y"), _edge_xy(gold_e, pos))),
        {"x": mid_x, "y": mid_y, "hovertext": mid_text},
        {
            "x": [pos[n][0] for n in nodes], "y": [pos[n][1] for n in nodes],
            "text": [label(n) for n in nodes],
            "textposition": [shown.get(n, LABEL_PLACES[0]) for n in nodes],
            "hovertext": [hover(n) for n in nodes],
            "marker": {
                "color": [OUTSIDE_COLOUR if nb.depth.get(n) is None else HOP_COLOURS[min(nb.depth[n], 3)] for n in nodes],
                "size": [18 if n == nb.center else 11 for n in nodes],
                "symbol": ["star" if n == nb.center else "circle" for n in nodes],
                "line": {"color": [GOLD if n in gold_nodes else "#ffffff" for n in nodes],
                         "width": [3 if n in gold_nodes else 1 for n in nodes]},
            },
        },
    ]


def network_figure() -> go.Figure:
    """An empty network figure with its five traces (fill it with :func:`update_network`)."""
    fig = go.Figure()
    fig.add_scatter(mode="lines", line={"color": EDGE, "width": 1}, hoverinfo="skip", name="edges")
    fig.add_scatter(mode="lines", line={"color": RETURNED, "width": 3}, hoverinfo="skip", name="returned by the agent")
    fig.add_scatter(mode="lines", line={"color": GOLD, "width": 4}, hoverinfo="skip", name="gold path")
    fig.add_scatter(mode="markers", marker={"size": 7, "color": "rgba(0,0,0,0.05)"}, hoverinfo="text",
                    name="relations", showlegend=False)
    fig.add_scatter(mode="markers+text", textposition="top center", textfont={"size": LABEL_SIZE}, hoverinfo="text",
                    name="entities", showlegend=False, cliponaxis=False)  # a label at the edge runs into the margin
    fig.update_layout(height=HEIGHT, margin=MARGIN, plot_bgcolor="white",
                      xaxis={"visible": False}, yaxis={"visible": False, "scaleanchor": "x"},
                      legend={"orientation": "h", "y": -0.02}, hoverlabel={"align": "left"})
    return fig


def update_network(fig: go.Figure, nb: Neighbourhood, pos: Mapping[str, tuple[float, float]],
                   gold: TripleSet | None = None, returned: TripleSet | None = None, title: str = "",
                   question: Iterable[str] = ()) -> None:
    """Fill ``fig`` (:func:`network_figure`) with ``nb`` at ``pos``; its axes fit these nodes (:func:`plot_ranges`)."""
    traces = network_traces(nb, pos, gold, returned, question=question)
    for tr, data in zip(fig.data, traces):
        tr.update(**data)
    xr, yr = plot_ranges(pos)
    fig.update_layout(title=title, xaxis_range=xr, yaxis_range=yr)


def reach_counts(kg: KnowledgeGraph, entity_id: str, relations: Iterable[str] | None = None,
                 cap: int = 10_000) -> dict[int, int]:
    """Entities within k hops for k = 1..3 (the walk stops at ``cap`` entities)."""
    rel = None if relations is None else list(relations)
    return {k: len(neighbourhood(kg, entity_id, k, rel, max_nodes=cap).nodes) for k in range(1, MAX_HOPS + 1)}


def reach_figure(counts: Mapping[int, int], name: str = "") -> go.Figure:
    fig = go.Figure(go.Bar(x=[f"{k} hop{'s' if k > 1 else ''}" for k in counts], y=list(counts.values()),
                           text=list(counts.values()), textposition="outside", marker_color=HOP_COLOURS[1]))
    fig.update_layout(title=f"Entities within k hops of {name}", yaxis_title="entities", height=320)
    return fig


# ----------------------------------------------------------------------------- html


def returned_html(example: Example | None, trajs: Sequence[Trajectory], gold: TripleSet, has_run: bool,
                  max_triples: int = 15) -> str:
    """The gold path and, per KG call of the question's trajectories, what it returned (gold marked)."""
    if example is None:
        return "<i>Pick a question to see its gold path and the agent's KG searches.</i>"
    parts = [f"<div style='font-family:sans-serif'><b>{html.escape(example.id)}</b>: {html.escape(example.question)}"
             f" · gold answer <code>{html.escape(' | '.join(example.answers[:3]) or MISSING)}</code></div>"]
    if gold:
        path = "<br>".join(f"<span style='color:{GOLD}'>{html.escape(t.render())}</span>" for t in gold)
        parts.append(f"<div style='font-family:monospace;font-size:12px;margin:4px 0'>gold path:<br>{path}</div>")
    else:
        parts.append("<div><i>This question has no gold KG path.</i></div>")
    if not has_run:
        parts.append("<div><i>No run: set <code>run_dir</code> in the notebook's parameters cell (or pass "
                     "<code>run=</code> to <code>kg_explorer</code>) to see what the agent's KG searches returned.</i></div>")
        return "".join(parts)
    if trajs:  # what the run answered, beside the gold answer above
        answers = " · ".join(f"{html.escape(str(t.meta.get('method', t.protocol)))} {_answer_mark(t, example)}"
                             for t in trajs[:8])
        parts.append(f"<div style='font-family:sans-serif;font-size:12px'>the run's answers: {answers}"
                     f"{' …' if len(trajs) > 8 else ''}</div>")
    calls = [(t, c) for t in trajs for c in kg_calls(t)]
    if not calls:
        methods = sorted({t.meta.get("method", t.protocol) for t in trajs}) or ["none"]
        parts.append(f"<div><i>No KG searches for this question in the run ({len(trajs)} trajectories; "
                     f"methods: {html.escape(', '.join(methods))}).</i></div>")
        return "".join(parts)
    got = returned_triples(trajs)
    n_ret = sum(g in got for g in gold)
    parts.append(f"<div style='font-family:sans-serif'>gold triples returned by the agent's KG searches: "
                 f"<b>{n_ret} / {len(gold)}</b> ({len(calls)} KG calls in {len(trajs)} trajectories)</div>")
    for t, c in calls:
        req = ", ".join(map(str, c.args.get("entities") or c.args.get("entity") or []))
        rels = ", ".join(map(str, c.args.get("relations") or c.args.get("relation") or []))
        triples = c.triples()
        lines = "".join(
            f"<div style='{'color:' + GOLD + ';font-weight:bold' if x in gold else ''}'>"
            f"{'✓ ' if x in gold else ''}{html.escape(x.render())}</div>" for x in triples[:max_triples])
        more = f"<div><i>… {len(triples) - max_triples} more</i></div>" if len(triples) > max_triples else ""
        err = f" <span style='color:#b00'>error: {html.escape(str(c.error))}</span>" if c.error else ""
        parts.append(
            f"<div style='border-left:3px solid {RETURNED};padding:2px 8px;margin:6px 0;font-size:12px'>"
            f"<div style='font-family:sans-serif'>{html.escape(t.id)} · {html.escape(str(t.meta.get('method', t.protocol)))}"
            f" · answered {_answer_mark(t, example)}"
            f" · entities <code>{html.escape(req)}</code> relations <code>{html.escape(rels)}</code> · "
            f"{len(triples)} triples{err}</div><div style='font-family:monospace'>{lines}{more}</div></div>")
    return "".join(parts)


def _answer_mark(t: Trajectory, example: Example) -> str:
    """The trajectory's answer and whether it is right (cover-EM against the gold aliases)."""
    v = judge(t.answer, example.answers)
    mark = MISSING if v.correct is None else ("✔" if v.correct else "✘")
    return f"<code>{html.escape(show(t.answer))}</code> {mark}"


def _on_path(example: Example, entity_id: str) -> bool:
    return any(entity_id in (d.get("head_id"), d.get("tail_id")) for d in example.kg_path or [])


# ----------------------------------------------------------------------------- the widget


class KGExplorer:
    """State and widgets of the explorer; :func:`kg_explorer` returns its ``box``."""

    def __init__(self, kg: KnowledgeGraph, run: Any = None, examples: Sequence[Example] = (), entity: str = "",
                 question: str | None = None, hops: int = 2, max_nodes: int = 60, seed: int = 0):
        self.kg, self.run, self.seed = kg, run, seed
        self.examples = {e.id: e for e in examples if e.kg_path}
        self.trajectories = run.trajectories() if run is not None else []
        self._by_example: dict[str, list[Trajectory]] = {}
        for t in self.trajectories:
            self._by_example.setdefault(t.example_id, []).append(t)
        self.example: Example | None = None
        self.gold, self.returned = TripleSet(), TripleSet()
        self.matches: list[EntityMatch] = []
        self.neighbourhood: Neighbourhood | None = None
        self.positions: dict[str, tuple[float, float]] = {}

        style = {"description_width": "70px"}
        self.entity_w = W.Text(description="entity", placeholder="name, alias or id (Enter)", continuous_update=False,
                               style=style, layout=W.Layout(width="360px"))
        self.match_w = W.Dropdown(options=[], description="matches", style=style, layout=W.Layout(width="360px"))
        self.hops_w = W.IntSlider(value=hops, min=1, max=MAX_HOPS, description="hops", continuous_update=False,
                                  style=style)
        self.cap_w = W.IntSlider(value=max_nodes, min=5, max=max(300, max_nodes), step=5, description="max nodes",
                                 continuous_update=False, style=style)
        rel = sorted(zip(kg.relation_names, kg.relation_ids), key=lambda p: p[0].lower())
        self.relations_w = W.SelectMultiple(options=rel, value=[r for _, r in rel], description="relations", rows=8,
                                            style=style, layout=W.Layout(width="360px"))
        q_opts = [("(no question)", "")] + [(f"{e.id} · {e.question[:80]}", e.id) for e in self.examples.values()]
        self.question_w = W.Dropdown(options=q_opts, value="", description="question", style=style,
                                     layout=W.Layout(width="720px"))
        self.status = W.HTML()
        self.returned_html = W.HTML()
        self.fig = network_figure()
        self.view = figure_view(self.fig)

        self._lock = False
        self.entity_w.observe(lambda ch: self.search(ch["new"], follow=True), names="value")
        self.match_w.observe(lambda ch: self._pick_match(ch["new"]), names="value")
        for w in (self.hops_w, self.cap_w, self.relations_w):
            w.observe(lambda _: self.refresh(), names="value")
        self.question_w.observe(lambda ch: self.select_question(ch["new"]), names="value")

        if question is None:  # default: the first question (or the first whose gold path touches the entity)
            question = self._question_for(entity)
        if question:
            self.select_question(question, recentre=not entity)
        if entity or self.neighbourhood is None:
            self.search(entity or self._fallback_entity())
        controls = W.VBox([
            W.HBox([self.entity_w, self.match_w]),
            W.HBox([W.VBox([self.hops_w, self.cap_w]), self.relations_w]),
            self.question_w, self.status,
        ])
        self.box = W.VBox([controls, self.view, self.returned_html])

    # ---------------------------------------------------------------- choices
    def _fallback_entity(self) -> str:
        return self.kg.entity_ids[int(np.argmax(self.kg.degree(np.arange(self.kg.num_entities))))]

    def _question_for(self, entity: str) -> str:
        if not entity:
            return next(iter(self.examples), "")
        ms = find_entity(self.kg, entity)
        return self._question_through(ms[0].id) if ms else ""

    def _question_through(self, entity_id: str) -> str:
        """The first question whose gold path passes through ``entity_id`` ("" if none does)."""
        return next((e.id for e in self.examples.values() if _on_path(e, entity_id)), "")

    def _follow(self, entity_id: str) -> None:
        """The view moves to ``entity_id``: a question whose gold path does not pass through it gives way to the first
        one whose path does, or to none, so no gold path is drawn apart from the neighbourhood (an island that the
        layout would push the neighbourhood away from). Without a question, none is picked."""
        if self.example is not None and not _on_path(self.example, entity_id):
            self._set_question(self._question_through(entity_id))

    def _pick_match(self, entity_id: str | None) -> None:
        if self._lock or entity_id is None:
            return
        self._follow(entity_id)
        self.refresh()

    def search(self, text: str, label: str = "", follow: bool = False) -> list[EntityMatch]:
        """Match ``text`` against entity names, aliases and ids; centre the view on the best match.

        ``label``: what the text box shows (default ``text``). ``follow``: the question follows the new centre, as
        when an entity is typed (see :meth:`_follow`)."""
        if self._lock:
            return self.matches
        self.matches = find_entity(self.kg, text)
        self._lock = True
        try:
            self.entity_w.value = label or text
            self.match_w.options = [(f"{m.name} ({m.id}, {'exact' if m.exact else f'{m.score:.0f}'})", m.id)
                                    for m in self.matches]
            self.match_w.value = self.matches[0].id if self.matches else None
        finally:
            self._lock = False
        if not self.matches:
            self.status.value = f"<span style='color:#b00'>No entity matches {html.escape(str(text))!r}.</span>"
            return []
        if follow:
            self._follow(self.matches[0].id)
        self.refresh()
        return self.matches

    def _set_question(self, example_id: str) -> None:
        """The question, its gold path and the agent's KG searches for it, in the state and the widgets (not drawn)."""
        self.example = self.examples.get(example_id) if example_id else None
        self.gold = TripleSet(gold_triples(self.example)) if self.example else TripleSet()
        trajs = self._by_example.get(example_id, []) if example_id else []
        self.returned = returned_triples(trajs)
        self._lock = True
        try:
            self.question_w.value = example_id if self.example else ""
        finally:
            self._lock = False
        self.returned_html.value = returned_html(self.example, trajs, self.gold, self.run is not None)

    def select_question(self, example_id: str, recentre: bool = True) -> Example | None:
        """Show a question's gold path (and the agent's KG searches for it); centre on its anchor."""
        if self._lock:
            return self.example
        self._set_question(example_id)
        if self.example and recentre:
            aid, name = anchor_of(self.example)
            self.search(aid or name, label=name)
        elif self.neighbourhood is not None:
            self.refresh()
        return self.example

    # ---------------------------------------------------------------- drawing
    def relations(self) -> list[str] | None:
        chosen = list(self.relations_w.value)
        return None if len(chosen) == len(self.relations_w.options) else chosen

    def refresh(self) -> Neighbourhood | None:
        if self._lock or self.match_w.value is None:
            return None
        nb = neighbourhood(self.kg, self.match_w.value, self.hops_w.value, self.relations(), self.cap_w.value,
                           include=self.gold)
        self.neighbourhood, self.positions = nb, network_layout(nb, self.seed)
        name = nb.names[nb.center]
        question = [anchor_of(self.example)[0]] if self.example is not None else []
        update_network(self.fig, nb, self.positions, self.gold, self.returned,
                       title=f"{name}: {self.hops_w.value}-hop neighbourhood", question=question)
        redraw(self.view, self.fig)
        cut = " (node cap reached: raise <i>max nodes</i> to see more)" if nb.truncated else ""
        in_view = sum(t in self.gold for t in nb.edges)
        gold = f" · gold path {in_view}/{len(self.gold)} edges drawn" if self.gold else ""
        self.status.value = (f"<b>{html.escape(name)}</b> ({html.escape(nb.center)}): {len(nb.nodes)} entities, "
                             f"{len(nb.edges)} triples{cut}{gold}")
        return nb

    # ---------------------------------------------------------------- numbers for metrics.json
    def recall_table(self) -> pd.DataFrame:
        """Per question of the run: how much of its gold path the agent's KG searches returned (:func:`gold_path_recall`)."""
        return gold_path_recall(self.trajectories, self.examples.values())

    def reach_figure(self) -> go.Figure:
        """Entities within 1, 2 and 3 hops of the current centre (with the current relation filter)."""
        c = self.neighbourhood.center if self.neighbourhood else self._fallback_entity()
        return reach_figure(reach_counts(self.kg, c, self.relations()), self.kg.entity_name(self.kg.entity_index(c)))

    def metrics(self) -> dict[str, Any]:
        """What notebook 03 writes to ``metrics.json``."""
        out: dict[str, Any] = {
            "n_entities": int(self.kg.num_entities), "n_relations": int(self.kg.num_relations),
            "n_triples": int(self.kg.num_triples),
        }
        nb = None
        if self.neighbourhood is not None:  # the walk alone, without the gold path added to the view
            c = self.neighbourhood.center
            nb = neighbourhood(self.kg, c, self.hops_w.value, self.relations(), self.cap_w.value)
            out.update({
                "entity_id": c, "entity": nb.names[c], "hops": nb.hops,
                "neighbourhood_nodes": len(nb.nodes), "neighbourhood_edges": len(nb.edges),
                "neighbourhood_truncated": bool(nb.truncated),
                **{f"reach_{k}": v for k, v in reach_counts(self.kg, c, self.relations()).items()},
            })
        if self.example is not None:
            out.update({"question_id": self.example.id, "gold_path_length": len(self.gold),
                        "gold_in_neighbourhood": sum(t in self.gold for t in nb.edges) if nb else 0})
        if self.run is not None:
            rec = self.recall_table()
            out.update({
                "kg_questions": int(len(rec)), "kg_calls": int(sum(len(kg_calls(t)) for t in self.trajectories)),
                "kg_gold_returned_share": float(rec["all_returned"].mean()) if len(rec) else 0.0,
                "kg_gold_triple_recall": float((rec["n_gold_returned"] / rec["n_gold"]).mean()) if len(rec) else 0.0,
            })
        return out


def kg_explorer(
    world_or_kg: Any,
    run: Any = None,
    entity: str = "",
    hops: int = 2,
    max_nodes: int = 60,
    question: str | None = None,
    examples: Sequence[Example] | None = None,
    seed: int = 0,
) -> W.VBox:
    """Search an entity, see its k-hop neighbourhood, and a question's gold path vs the agent's KG searches.

    Args:
        world_or_kg: a synthetic :class:`~workbench.data.world.World` or a ``KnowledgeGraph``.
        run: optional Run or run directory whose trajectories' KG searches are shown per question.
        entity: name, alias or id to start from; empty: the anchor of the first question.
        hops, max_nodes: initial k (1-3) and node cap.
        question: example id to show first; None: the first question (or the first whose gold path
            touches ``entity``); "": none.
        examples: the questions to pick from (default: the run's examples, else the world's dev split).
        seed: layout seed.

    Returns a VBox; ``box.explorer`` is the :class:`KGExplorer` (widgets, current neighbourhood, metrics).
    """
    from workbench.storage.runs import open_run

    kg = as_kg(world_or_kg)
    run = open_run(run) if run is not None and run != "" else None
    if examples is None:
        if run is not None and run.exists("examples.jsonl"):
            examples = run.examples()
        elif hasattr(world_or_kg, "split"):
            examples = world_or_kg.split("dev")
        else:
            examples = []
    ex = KGExplorer(kg, run, examples, entity, question, hops, max_nodes, seed)
    ex.box.explorer = ex
    return ex.box
