"""Build the toolbox a protocol needs from a world or a passage corpus.

One place decides how each *kind* of tool is made, so that ``workbench eval``, ``workbench
train`` and the notebooks roll out the same environment. A protocol declares the kinds it
calls (``required_tools``); each kind has one registered builder:

- ``search``: BM25 (default) or dense (chromadb + sentence-transformers) over the passages, or dense over a
  faiss index file of them (``index``: Search-R1's ``e5_Flat.index``; :mod:`workbench.tools.faiss_index`);
- ``kg``: knowledge-graph search over the world's graph (or any ``KnowledgeGraph``);
- ``plan``: NL-DAG plans over the multi-source registry (general / news / academic).

A new kind is one :func:`register_tool` call (e.g. in a method's file); no code here names a
protocol or a method.

    >>> tb = build_toolbox(get_protocol("dynasearcher"), world)   # doctest: +SKIP
    >>> tb.names()                                          # doctest: +SKIP
    ['search', 'kg']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.core.types import Passage
from workbench.tools.base import Toolbox

RETRIEVERS = ("bm25", "dense")


@dataclass
class ToolContext:
    """What tool builders may use: the data, the retriever choice and the policy tokenizer."""

    world: Any = None
    corpus: Sequence[Passage] | None = None
    retriever: str = "bm25"
    kg: Any = None
    tokenizer: Any = None
    encoder: Any = None
    plan_k: int = 3
    index: str | None = None
    """A faiss index file whose row i embeds ``corpus[i]`` (dense search only)."""


@dataclass(frozen=True)
class ToolKind:
    name: str
    build: Callable[[ToolContext], Any]
    needs: str
    """What the data must provide, for error messages (e.g. "a passage corpus")."""
    available: Callable[[ToolContext], bool]
    """Whether ``build`` can run on this context."""


TOOL_KINDS: dict[str, ToolKind] = {}


def register_tool(name: str, needs: str, available: Callable[[ToolContext], bool]) -> Callable:
    """Decorator registering ``build(ctx) -> tool`` as the builder of tool kind ``name``."""

    def deco(build: Callable[[ToolContext], Any]) -> Callable[[ToolContext], Any]:
        TOOL_KINDS[name] = ToolKind(name, build, needs, available)
        return build

    return deco


def world_kg(world: Any) -> Any:
    """The world's graph as a :class:`~workbench.tools.kg.KnowledgeGraph` (names and aliases from the world)."""
    from workbench.tools.kg import KnowledgeGraph

    return KnowledgeGraph.from_triples(
        world.triples,
        entity_names={e.id: e.name for e in world.entities.values()},
        entity_aliases={e.id: list(e.aliases) for e in world.entities.values()},
        relation_names={r.id: [r.name, *r.aliases] for r in world.relations.values()},
    )


def make_searcher(passages: Sequence[Passage], retriever: str = "bm25", encoder: Any = None,
                  index: str | None = None) -> Any:
    """A ``search(query, k)`` callable over ``passages``: ``bm25`` or ``dense`` (over the faiss ``index`` of them
    when given)."""
    if index is not None:
        if retriever != "dense":
            raise ValueError(f"--index {index} is a dense (faiss) index; the retriever is {retriever!r}: add "
                             "--retriever dense")
        from workbench.tools.faiss_index import FaissSearch

        return FaissSearch(index, passages, encoder)
    if retriever == "bm25":
        from workbench.tools.bm25 import BM25Search

        return BM25Search(list(passages))
    if retriever == "dense":
        from workbench.tools.dense import DenseSearch

        return DenseSearch(list(passages), encoder=encoder) if encoder is not None else DenseSearch(list(passages))
    raise ValueError(f"unknown retriever {retriever!r}; valid: {', '.join(RETRIEVERS)}")


def _has_corpus(ctx: ToolContext) -> bool:
    return bool(ctx.corpus)


@register_tool("search", needs="a passage corpus", available=_has_corpus)
def _search(ctx: ToolContext) -> Any:
    return make_searcher(ctx.corpus or [], ctx.retriever, ctx.encoder, ctx.index)


@register_tool("kg", needs="a knowledge graph", available=lambda ctx: ctx.kg is not None or ctx.world is not None)
def _kg(ctx: ToolContext) -> Any:
    from workbench.tools.kg import make_kg_tool

    kg = ctx.kg if ctx.kg is not None else world_kg(ctx.world)
    tok = ctx.tokenizer
    count = (lambda s: len(tok.encode(s, add_special_tokens=False))) if tok is not None else None
    return make_kg_tool(kg, count_tokens=count)


@register_tool("plan", needs="a passage corpus (for the multi-source plan tool)", available=_has_corpus)
def _plan(ctx: ToolContext) -> Any:
    from workbench.tools.plan import make_plan_tool
    from workbench.tools.sources import SourceRegistry

    corpus = ctx.corpus or []
    if ctx.retriever == "bm25":
        reg = SourceRegistry.from_passages(corpus)
    else:
        reg = SourceRegistry.from_passages(corpus, searcher=lambda ps: make_searcher(ps, ctx.retriever, ctx.encoder))
    return make_plan_tool(reg, k=ctx.plan_k)


def required_tools(protocol: Any) -> tuple[str, ...]:
    """The tool kinds ``protocol`` (an instance or a class) declares."""
    if isinstance(protocol, str):
        raise TypeError(f"expected a protocol, got the name {protocol!r}: build it with workbench.methods.get_protocol")
    return tuple(getattr(protocol, "required_tools", ("search",)))


def unavailable_tools(protocol: Any, ctx: ToolContext) -> list[tuple[str, str]]:
    """``(kind, what the data lacks)`` for each tool ``protocol`` needs that ``ctx`` cannot build."""
    out = []
    for kind in required_tools(protocol):
        spec = TOOL_KINDS.get(kind)
        if spec is None:
            out.append((kind, "a registered builder (workbench.tools.toolbox.register_tool)"))
        elif not spec.available(ctx):
            out.append((kind, spec.needs))
    return out


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
    index: str | None = None,
) -> Toolbox:
    """The tools ``protocol`` requires, over ``world`` or ``passages``.

    Args:
        protocol: a protocol (instance or class); only its ``required_tools`` are built.
        world: a synthetic :class:`~workbench.data.world.World` (passages and graph).
        passages: a corpus instead of (or overriding) the world's passages.
        retriever: ``bm25`` (default) or ``dense``.
        kg: a KnowledgeGraph for the ``kg`` tool (default: the world's graph).
        tokenizer: the policy tokenizer, to cut KG results at 1,024 tokens (else words).
        encoder: dense encoder (path or object) for ``retriever="dense"``.
        plan_k: hits per plan node.
        index: a faiss index file of the passages (row i = passage i) for ``retriever="dense"``; the passages may
            then be a lazy sequence (:class:`~workbench.data.jsonl_corpus.JsonlCorpus`), read only as hits need them.
    """
    if retriever not in RETRIEVERS:
        raise ValueError(f"unknown retriever {retriever!r}; valid: {', '.join(RETRIEVERS)}")
    name = getattr(protocol, "name", type(protocol).__name__)
    if passages is not None:  # a sequence (a list, a lazy corpus) is used as it is: an index's rows point into it
        corpus = passages if isinstance(passages, Sequence) else list(passages)
    else:
        corpus = list(world.passages) if world is not None else None
    ctx = ToolContext(world=world, corpus=corpus, retriever=retriever, kg=kg, tokenizer=tokenizer, encoder=encoder,
                      plan_k=plan_k, index=index)
    missing = unavailable_tools(protocol, ctx)
    if missing:
        kind, needs = missing[0]
        raise ValueError(f"protocol {name!r} needs the {kind!r} tool, which needs {needs}: pass world= "
                         f"{'or kg=' if kind == 'kg' else 'or passages='}, or register the tool yourself with "
                         "Toolbox.register(name, fn)")
    return Toolbox({kind: TOOL_KINDS[kind].build(ctx) for kind in required_tools(protocol)})
