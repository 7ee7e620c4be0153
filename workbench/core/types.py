"""The value types every layer passes around: a corpus ``Passage``, a retrieved ``Hit``, a knowledge-graph ``Triple``
and the ``ToolCall`` record of one tool invocation inside a trajectory.

They live here, below ``tools`` and ``data``, so that the corpus loaders and the search tools share them without
importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Passage:
    """A corpus document."""

    id: str
    title: str
    text: str
    source: str = "wiki"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hit:
    """One retrieved document."""

    id: str
    title: str
    text: str
    score: float = 0.0
    source: str = "wiki"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_passage(cls, p: Passage, score: float) -> Hit:
        return cls(id=p.id, title=p.title, text=p.text, score=float(score), source=p.source)


@dataclass
class Triple:
    """One knowledge-graph triple, with names for rendering and ids where known."""

    head: str
    relation: str
    tail: str
    head_id: str = ""
    relation_id: str = ""
    tail_id: str = ""
    score: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        return f"({self.head}, {self.relation}, {self.tail})"


@dataclass
class ToolCall:
    """The record of one tool invocation inside a trajectory."""

    name: str
    args: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    """``Hit`` or ``Triple`` dicts (or a tool's own dicts), as returned."""
    error: str | None = None
    latency_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(**d)

    @property
    def ok(self) -> bool:
        return self.error is None

    def hits(self) -> list[Hit]:
        return [Hit(**r) for r in self.results if "text" in r]

    def triples(self) -> list[Triple]:
        return [Triple(**r) for r in self.results if "relation" in r]
