"""Build the toolbox a protocol needs from a world or a passage corpus.

One place decides which tools each method gets, so that ``workbench eval``, ``workbench
train`` and the notebooks roll out the same environment:

- ``search``: BM25 (default) or dense (chromadb + sentence-transformers) over the passages;
- ``kg``: knowledge-graph search over the world's graph (or any ``KnowledgeGraph``);
- ``plan``: NL-DAG plans over the multi-source registry (general / news / academic).

    >>> tb = build_toolbox("dynasearcher", world)          # doctest: +SKIP
    >>> tb.names()
    ['search', 'kg']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.tools.base import Passage, Toolbox

RETRIEVERS = ("bm25", "dense")


def world_kg(world: Any) -> Any:
    """The world's graph as a :class:`~workbench.tools.kg.KnowledgeGraph` (names and aliases from the world)."""
    from workbench.tools.kg import KnowledgeGraph

    return KnowledgeGraph.from_triples(
        world.triples,
        entity_names={e.id: e.name for e in world.entities.values()},
        entity_aliases={e.id: list(e.aliases) for e in world.entities.values()},
        relation_names={r.id: [r.name, *r.aliases] for r in world.relations.values()},
    )


def make_searcher(passages: Sequence[Passage], retriever: str = "bm25", encoder: Any = None) -> Any:
    """A ``search(query, k)`` callable over ``passages``: ``bm25`` or ``dense``."""
    if retriever == "bm25":
        from workbench.tools.bm25 import BM25Search

        return BM25Search(list(passages))
    if retriever == "dense":
        from workbench.tools.dense import DenseSearch

        return DenseSearch(list(passages), encoder=encoder) if encoder is not None else DenseSearch(list(passages))
    raise ValueError(f"unknown retriever {retriever!r}; valid: {', '.join(RETRIEVERS)}")


def build_toolbox(
    protocol: Any,
    world: Any = None,
    *,
    passages: Sequence[Passage] | None = None,
    retriever: str = "bm25",
    kg: Any = None,
    tokenizer: Any = None,
    encoder: Any = None,
    plan_k: int = 3,
) -> Toolbox:
    """The tools ``protocol`` (a name or a Protocol) requires, over ``world`` or ``passages``.

    Args:
        protocol: protocol name or instance; only its ``required_tools`` are built.
        world: a synthetic :class:`~workbench.data.world.World` (passages and graph).
        passages: a corpus instead of (or overriding) the world's passages.
        retriever: ``bm25`` (default) or ``dense``.
        kg: a KnowledgeGraph for the ``kg`` tool (default: the world's graph).
        tokenizer: the policy tokenizer, to cut KG results at 1,024 tokens (else words).
        encoder: dense encoder (path or object) for ``retriever="dense"``.
        plan_k: hits per plan node.
    """
    from workbench.protocols import get_protocol

    proto = get_protocol(protocol) if isinstance(protocol, str) else protocol
    need = tuple(getattr(proto, "required_tools", ("search",)))
    corpus = list(passages) if passages is not None else (list(world.passages) if world is not None else None)
    tools: dict[str, Any] = {}
    if "search" in need or "plan" in need:
        if corpus is None:
            raise ValueError(f"protocol {proto.name!r} needs a corpus: pass world= or passages=")
    if "search" in need:
        tools["search"] = make_searcher(corpus, retriever, encoder)
    if "kg" in need:
        if kg is None:
            if world is None:
                raise ValueError(f"protocol {proto.name!r} needs a knowledge graph: pass world= or kg=")
            kg = world_kg(world)
        from workbench.tools.kg import make_kg_tool

        count = (lambda s: len(tokenizer.encode(s, add_special_tokens=False))) if tokenizer is not None else None
        tools["kg"] = make_kg_tool(kg, count_tokens=count)
    if "plan" in need:
        from workbench.protocols.rsearch_dag import make_plan_tool
        from workbench.tools.sources import SourceRegistry

        if retriever == "bm25":
            reg = SourceRegistry.from_passages(corpus)
        else:
            reg = SourceRegistry.from_passages(corpus, searcher=lambda ps: make_searcher(ps, retriever, encoder))
        tools["plan"] = make_plan_tool(reg, k=plan_k)
    unknown = [t for t in need if t not in tools]
    if unknown:
        raise ValueError(f"protocol {proto.name!r} needs tools {unknown} that build_toolbox cannot make; "
                         "register them yourself with Toolbox.register(name, fn)")
    return Toolbox(tools)
