"""Exploring the graph around a question: k-hop neighbourhoods and how much of a gold KG path
the agent's searches returned. Pure functions; ``widgets/kg_explorer.py`` draws them.

:func:`neighbourhood` is a breadth-first walk over ``KnowledgeGraph.triples_of``;
:func:`gold_path_recall` compares each question's gold path (``Example.kg_path``) with the
triples that its trajectories' ``kg`` tool calls returned (:class:`TripleSet` matching).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.core.types import ToolCall, Triple
from workbench.data.example import Example
from workbench.tools.kg.store import KnowledgeGraph
from workbench.tools.kg.strings import normalize_name

MAX_HOPS = 3
"""Deepest neighbourhood :func:`neighbourhood` walks."""


def _triple(d: Triple | Mapping[str, Any]) -> Triple:
    if isinstance(d, Triple):
        return d
    return Triple(**{k: str(d.get(k) or "") for k in ("head", "relation", "tail", "head_id", "relation_id", "tail_id")})


class TripleSet:
    """Triples compared by ids when both sides have all three, else by normalized names.

    >>> s = TripleSet([{"head": "Ostrel", "relation": "country", "tail": "Velmark"}])
    >>> Triple("ostrel", "Country", "VELMARK", "Q1", "P17", "Q2") in s
    True
    """

    def __init__(self, triples: Iterable[Triple | Mapping[str, Any]] = ()):
        self.triples: list[Triple] = []
        self._ids: set[tuple[str, str, str]] = set()
        self._names: set[tuple[str, str, str]] = set()
        for t in triples:
            self.add(_triple(t))

    @staticmethod
    def _keys(t: Triple) -> tuple[tuple[str, str, str] | None, tuple[str, str, str]]:
        ids = (t.head_id, t.relation_id, t.tail_id)
        return (ids if all(ids) else None), (normalize_name(t.head), normalize_name(t.relation), normalize_name(t.tail))

    def add(self, t: Triple) -> None:
        if t in self:
            return
        ids, names = self._keys(t)
        self.triples.append(t)
        if ids:
            self._ids.add(ids)
        self._names.add(names)

    def __contains__(self, t: object) -> bool:
        if not isinstance(t, Triple):
            return False
        ids, names = self._keys(t)
        return (ids is not None and ids in self._ids) or names in self._names

    def __len__(self) -> int:
        return len(self.triples)

    def __iter__(self):
        return iter(self.triples)


def _resolve(kg: KnowledgeGraph, entity_id: str, name: str) -> str | None:
    """An entity id of the graph for an id (when known) or else an exact name match."""
    if entity_id and kg.entity_index(entity_id) is not None:
        return entity_id
    ms = kg.match_entity(name, fuzzy=False) if name else []
    return ms[0].id if ms else None


# ----------------------------------------------------------------------------- neighbourhood


@dataclass
class Neighbourhood:
    """The k-hop neighbourhood of one entity.

    ``nodes``: entity ids in breadth-first order (the centre first); ``depth``: hops from the
    centre (None for a node outside the k hops that was added to show a gold path); ``edges``:
    every triple followed from a node closer than k hops (so edges among the outermost nodes are
    not drawn), each once; ``truncated``: the node cap stopped the walk.
    """

    center: str
    hops: int
    nodes: list[str]
    depth: dict[str, int | None]
    edges: list[Triple]
    truncated: bool = False
    names: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)


def _key(t: Triple) -> tuple[str, str, str]:
    return (t.head_id, t.relation_id, t.tail_id)


def neighbourhood(
    kg: KnowledgeGraph,
    entity_id: str,
    hops: int = 2,
    relations: Iterable[str] | None = None,
    max_nodes: int = 60,
    include: Iterable[Triple | Mapping[str, Any]] = (),
) -> Neighbourhood:
    """Breadth-first walk from ``entity_id`` over triples in both directions, at most ``hops`` deep.

    Args:
        relations: relation ids (or display names) to follow; None = all. Other relations are
            neither followed nor drawn.
        max_nodes: the walk adds no node beyond this many (edges to skipped nodes are dropped).
        include: triples always drawn, with their end nodes, whatever the filters and cap (a gold
            path); those resolving to no entity of the graph are skipped.
    """
    if not 0 <= int(hops) <= MAX_HOPS:
        raise ValueError(f"hops must be in 0..{MAX_HOPS}, got {hops}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    if kg.entity_index(entity_id) is None:
        raise KeyError(f"no entity {entity_id!r} in the graph")
    allowed = None if relations is None else set(relations)
    depth: dict[str, int | None] = {entity_id: 0}
    order, edges, truncated = [entity_id], {}, False
    frontier = [entity_id]
    for d in range(int(hops)):
        nxt = []
        for e in frontier:
            for t in kg.triples_of(e):
                if allowed is not None and t.relation_id not in allowed and t.relation not in allowed:
                    continue
                other = t.tail_id if t.head_id == e else t.head_id
                if other not in depth:
                    if len(order) >= max_nodes:
                        truncated = True
                        continue
                    depth[other] = d + 1
                    order.append(other)
                    nxt.append(other)
                edges.setdefault(_key(t), t)
        frontier = nxt
    for raw in include:
        t = _triple(raw)
        h, tl = _resolve(kg, t.head_id, t.head), _resolve(kg, t.tail_id, t.tail)
        if h is None or tl is None:
            continue
        for e in (h, tl):
            if e not in depth:
                depth[e] = None
                order.append(e)
        edge = _find_edge(kg, h, t, tl)
        edges.setdefault(_key(edge), edge)
    names, aliases = {}, {}
    for e in order:
        i = kg.entity_index(e)
        al = kg.entity_aliases(i)
        names[e], aliases[e] = al[0], al[1:]
    return Neighbourhood(entity_id, int(hops), order, depth, list(edges.values()), truncated, names, aliases)


def _find_edge(kg: KnowledgeGraph, h: str, t: Triple, tl: str) -> Triple:
    """The graph's triple ``h -relation-> tl`` (relation by id or name), else one made from ``t``'s relation."""
    rel = normalize_name(t.relation)
    for x in kg.triples_of(h, "out"):
        if x.tail_id == tl and (x.relation_id == t.relation_id or normalize_name(x.relation) == rel):
            return x
    name = {e: kg.entity_name(kg.entity_index(e)) for e in (h, tl)}
    return Triple(name[h], t.relation, name[tl], h, t.relation_id or t.relation, tl)


# ----------------------------------------------------------------------------- questions and agent searches


def gold_triples(example: Example) -> list[Triple]:
    """The example's gold KG path as triples (``kg_path`` dicts: head, relation, tail and ids)."""
    return [_triple(d) for d in example.kg_path or []]


def anchor_of(example: Example) -> tuple[str, str]:
    """``(id, name)`` of where the question starts: ``meta["anchors"][0]``, else the first gold head."""
    anchors = (example.meta or {}).get("anchors") or []
    path = example.kg_path or []
    first = path[0] if path else {}
    if anchors:
        aid = str(anchors[0])
        name = next((d.get("head", "") for d in path if d.get("head_id") == aid), "")
        return aid, name
    return str(first.get("head_id") or ""), str(first.get("head") or "")


def kg_calls(traj: Trajectory) -> list[ToolCall]:
    """The trajectory's knowledge-graph tool calls (tool name ``kg``)."""
    return [c for c in traj.tool_calls if c.name == "kg"]


def returned_triples(trajs: Iterable[Trajectory]) -> TripleSet:
    """Every triple that a KG search of these trajectories returned."""
    out = TripleSet()
    for t in trajs:
        for c in kg_calls(t):
            for x in c.triples():
                out.add(x)
    return out


def gold_path_recall(trajs: Sequence[Trajectory], examples: Iterable[Example]) -> pd.DataFrame:
    """Per question with a gold path and at least one trajectory: how much of the path the agent's KG searches returned.

    Columns: ``example_id``, ``n_trajectories``, ``n_kg_calls``, ``n_gold``, ``n_gold_returned``
    (gold triples among everything returned for the question, over all its trajectories),
    ``all_returned`` (every gold triple was returned).
    """
    by_ex: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_ex.setdefault(t.example_id, []).append(t)
    rows = []
    for ex in examples:
        gold = gold_triples(ex)
        ts = by_ex.get(ex.id, [])
        if not gold or not ts:
            continue
        got = returned_triples(ts)
        n_ret = sum(g in got for g in gold)
        rows.append(
            {
                "example_id": ex.id,
                "n_trajectories": len(ts),
                "n_kg_calls": sum(len(kg_calls(t)) for t in ts),
                "n_gold": len(gold),
                "n_gold_returned": n_ret,
                "all_returned": n_ret == len(gold),
            }
        )
    cols = ["example_id", "n_trajectories", "n_kg_calls", "n_gold", "n_gold_returned", "all_returned"]
    return pd.DataFrame(rows, columns=cols)


# ----------------------------------------------------------------------------- figures
