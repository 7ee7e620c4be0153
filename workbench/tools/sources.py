"""Named search sources for multi-source plans (Shi & Shen's General / News / Academic tools).

A source is any callable ``search(query, k) -> list[Hit]``. The registry maps the tool names
a model writes (``(News)``, ``(Web)``, ``(arXiv search)``) to one canonical source, and
describes the sources for a system prompt.

>>> from workbench.core.types import Passage
>>> reg = SourceRegistry.from_passages([
...     Passage("w1", "Paris", "Paris is the capital of France."),
...     Passage("n1", "Coke prices", "Coke rose 11.1% in early October 2024.", source="news"),
... ])
>>> reg.names()
['general', 'news']
>>> reg.resolve("Web Search"), reg.resolve("GNews"), reg.resolve("Academic")
('general', 'news', None)
>>> [h.id for h in reg.search("News", "coke price October", k=1)]
['n1']
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.core.types import Hit, Passage

SearchFn = Callable[[str, int], list[Hit]]
SearcherFactory = Callable[[list[Passage]], SearchFn]

#: The three corpus-backed sources of ``from_passages``: aliases a model may write, and what each covers.
DEFAULT_SOURCES: dict[str, tuple[tuple[str, ...], str]] = {
    "general": (("web", "wiki", "wikipedia", "google", "bing", "internet"), "general web search over all documents"),
    "news": (("gnews", "news articles"), "recent news articles"),
    "academic": (("arxiv", "scholar", "paper", "papers", "literature"), "academic papers (arXiv-style abstracts)"),
}

# Words a model tacks onto a tool name: "Web Search", "News search tool", "arXiv-API".
_SUFFIX_WORDS = {"search", "engine", "tool", "api"}


def normalize_tool_name(name: str) -> str:
    """Lower-case, collapse whitespace/underscores, drop quotes.

    >>> normalize_tool_name("  News_Search ")
    'news search'
    """
    name = re.sub(r"[\s_]+", " ", str(name)).strip().strip("\"'`*").strip()
    return name.lower()


def _strip_suffix(key: str) -> str:
    words = key.replace("-", " ").split()
    while words and words[-1] in _SUFFIX_WORDS:
        words.pop()
    return " ".join(words)


def _as_hit(r: Any) -> Hit:
    if isinstance(r, Hit):
        return r
    if isinstance(r, Mapping):
        return Hit(**{k: r[k] for k in ("id", "title", "text", "score", "source") if k in r})
    raise TypeError(f"a search source must return Hit objects (or dicts with id/title/text), got {type(r).__name__}")


@dataclass
class Source:
    """One registered search source."""

    name: str
    fn: SearchFn
    aliases: tuple[str, ...] = ()
    description: str = ""
    lock: threading.Lock | None = field(default=None, repr=False)
    """Held around each call when the searcher is not safe to call from several threads."""

    def __call__(self, query: str, k: int) -> list[Hit]:
        if self.lock is None:
            out = self.fn(query, k)
        else:
            with self.lock:
                out = self.fn(query, k)
        return [_as_hit(r) for r in (out or [])]


class SourceRegistry:
    """Search sources by canonical (lower-case) name, with aliases.

    ``unavailable`` records sources that were asked for but could not be built (e.g. no
    ``academic`` passages in the corpus); ``describe()`` says so.
    """

    def __init__(self, k_default: int = 3):
        self.k_default = k_default
        self._sources: dict[str, Source] = {}
        self._keys: dict[str, str] = {}  # normalized name or alias -> canonical name
        self.unavailable: dict[str, str] = {}

    # ------------------------------------------------------------------ building
    def register(
        self,
        name: str,
        fn: SearchFn,
        aliases: Iterable[str] = (),
        description: str = "",
        *,
        serialize: bool = False,
        replace: bool = False,
    ) -> Source:
        """Add a source. ``fn(query, k)`` returns hits; ``serialize=True`` runs one call at a time.

        Names and aliases are case-insensitive. Re-using a name or alias of another source raises
        unless ``replace=True``, which first drops the source of the same name (and its aliases).
        """
        if not callable(fn):
            raise TypeError(f"register({name!r}): fn must be callable as fn(query, k), got {type(fn).__name__}")
        canon = normalize_tool_name(name)
        if not canon:
            raise ValueError("register: the source name is empty")
        keys = [canon] + [normalize_tool_name(a) for a in aliases]
        keys = [k for i, k in enumerate(keys) if k and k not in keys[:i]]
        if replace and canon in self._sources:
            self.unregister(canon)
        for key in keys:
            owner = self._keys.get(key)
            if owner is not None:
                raise ValueError(
                    f"register({name!r}): {key!r} already names source {owner!r}; pass replace=True to override it"
                )
        src = Source(canon, fn, tuple(keys[1:]), description, threading.Lock() if serialize else None)
        self._sources[canon] = src
        for key in keys:
            self._keys[key] = canon
        self.unavailable.pop(canon, None)
        return src

    def unregister(self, name: str) -> None:
        canon = self.resolve(name)
        if canon is None:
            return
        del self._sources[canon]
        self._keys = {k: v for k, v in self._keys.items() if v != canon}

    @classmethod
    def from_passages(
        cls,
        passages: Iterable[Passage],
        searcher: SearcherFactory | None = None,
        k_default: int = 3,
    ) -> SourceRegistry:
        """``general`` over all passages, ``news`` / ``academic`` over passages of that source.

        ``searcher`` is any factory ``list[Passage] -> search(query, k)`` (default: ``BM25Search``).
        Wiki passages are searchable through ``general`` only. A source without passages is
        left out and listed in ``unavailable``.
        """
        if searcher is None:
            from workbench.tools.bm25 import BM25Search

            searcher = BM25Search
        passages = list(passages)
        reg = cls(k_default=k_default)
        for name, (aliases, what) in DEFAULT_SOURCES.items():
            subset = passages if name == "general" else [p for p in passages if str(p.source).lower() == name]
            if not subset:
                where = "the corpus is empty" if name == "general" else f"no passages with source {name!r}"
                reg.unavailable[name] = where
                continue
            desc = f"{what} ({len(subset)} documents)"
            reg.register(name, searcher(subset), aliases, desc, serialize=True)
        return reg

    # ------------------------------------------------------------------ lookup
    def resolve(self, tool_name: str) -> str | None:
        """Canonical source name for a tool name as a model wrote it, or ``None``.

        Tries the name itself, then without a trailing "search"/"tool"/"engine"/"api".
        """
        key = normalize_tool_name(tool_name)
        if not key:
            return None
        if key in self._keys:
            return self._keys[key]
        return self._keys.get(_strip_suffix(key))

    def names(self) -> list[str]:
        return sorted(self._sources)

    def __contains__(self, tool_name: object) -> bool:
        return isinstance(tool_name, str) and self.resolve(tool_name) is not None

    def __len__(self) -> int:
        return len(self._sources)

    def __getitem__(self, tool_name: str) -> Source:
        canon = self.resolve(tool_name)
        if canon is None:
            raise KeyError(f"unknown search source {tool_name!r} (available: {', '.join(self.names()) or 'none'})")
        return self._sources[canon]

    def search(self, name: str, query: str, k: int | None = None) -> list[Hit]:
        """Run one source; raises ``KeyError`` for an unknown name, and whatever the source raises."""
        return self[name](query, self.k_default if k is None else int(k))

    def describe(self) -> str:
        """The sources as a list for a system prompt (unavailable ones are marked as such)."""
        lines = ["Available search tools (write one in parentheses after each sub-query):"]
        for name in self.names():
            src = self._sources[name]
            aka = f" (also: {', '.join(src.aliases)})" if src.aliases else ""
            lines.append(f"- {name}{aka}: {src.description or 'search'}")
        for name, why in sorted(self.unavailable.items()):
            lines.append(f"- {name}: not available ({why})")
        if len(lines) == 1:
            lines.append("- none")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SourceRegistry({self.names()})"
