"""A seeded, deterministic generator of a fictional multi-hop world.

A small model (SmolLM2-135M) cannot answer questions about this world from memory: every
person, place, organisation, work and award has an invented, syllable-based name
("Velmora Anselt Quist", "Tarnhollow", "Republic of Ostrevia"). The world has three layers:

1. a **knowledge graph** in Wikidata5M layout (entities ``Q1...`` with aliases, real Wikidata
   P-ids, literal dates and years as ``value`` entities ``V1...``, award years as qualifiers);
2. a **passage corpus** (FlashRAG JSONL) that states every fact at least once, tagged with a
   source (``wiki``: biography and geography, ``news``: careers, awards, companies,
   ``academic``: education and books), some facts in more than one source, plus distractors
   (similarly named entities, passages that mention an entity without stating the fact);
3. **questions** (``Example``) of five types (``1hop``, ``compositional``, ``comparison``,
   ``inference``, ``chain``) with their KG path, decomposition and supporting passages.
   The question names only its anchor entities. ``supporting_ids`` has one passage per hop
   (the passage that primarily states that hop's triple); ``decomposition`` uses MuSiQue-style
   placeholders (``#1`` = answer of hop 1) and ``meta["decomposition_resolved"]`` the names;
   ``meta`` also records ``template``, ``anchors``, ``answer_id`` and, by type,
   ``inferred_relation`` or ``compare`` (``earlier`` / ``same``).

Same :class:`WorldConfig` -> byte-identical files. Every random choice comes from a
``random.Random`` seeded by ``f"{seed}:{stage}"``; nothing depends on ``hash()`` or set order.
:func:`verify` checks the whole world for consistency and returns a list of problems.

>>> w = build_world(WorldConfig(n_entities=60, n_passages=120, n_questions=40))
>>> verify(w)
[]
>>> sorted({e.qtype for e in w.examples})
['1hop', 'chain', 'comparison', 'compositional', 'inference']
"""

from workbench.data.world.builder import build_world
from workbench.data.world.cache import load_world
from workbench.data.world.config import WorldConfig, default_world_config
from workbench.data.world.model import World
from workbench.data.world.schema import (
    AWARD_YEAR,
    ENTITY_TYPES,
    QTYPE_SHARE,
    QTYPES,
    RELATIONS,
    SIGNATURES,
    SOURCES,
    SPLITS,
    WORLD_FORMAT,
    Entity,
    Relation,
)
from workbench.data.world.templates import TEMPLATES
from workbench.data.world.verify import verify

__all__ = [
    "AWARD_YEAR",
    "ENTITY_TYPES",
    "QTYPES",
    "QTYPE_SHARE",
    "RELATIONS",
    "SIGNATURES",
    "SOURCES",
    "SPLITS",
    "TEMPLATES",
    "WORLD_FORMAT",
    "Entity",
    "Relation",
    "World",
    "WorldConfig",
    "build_world",
    "default_world_config",
    "load_world",
    "verify",
]
