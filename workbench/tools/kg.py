"""Knowledge-graph search: DynaSearcher's KG tool and KG filter (seed 000, §4.1 "Search Tools", Table 6).

The paper's recipe (Wikidata5M, transductive + inductive triples merged and deduplicated):

1. normalize the case of each queried entity and fuzzy-match it against entity aliases;
2. take all 1-hop triples of every matched entity (both directions);
3. rank them by the number of words they share with the queried entity / relation (here also
   the request's ``query`` text);
4. return the top 100 triples and at most 1024 tokens;
5. optionally an LLM keeps at most 5 of them (the KG filter, prompt in Table 6).

Storage is sized for Wikidata5M (4.6M entities, ~15M aliases, 822 relations, ~21M triples):
names live in UTF-8 buffers with ``int64`` offsets (:class:`StringTable`), triples in ``int32``
arrays with CSR adjacency in both directions, and every lookup table is a sorted ``uint64``
hash array searched with ``np.searchsorted``. No per-entity Python objects are kept.

Entity matching (``KnowledgeGraph.match``):

* exact: the query normalized by :func:`normalize_name` (NFKC, lowercase, whitespace
  collapsed, punctuation stripped at the ends) is looked up among the normalized forms of
  *all* aliases (64-bit hash, verified against the alias text), or as a raw entity id;
* fuzzy, only when nothing matched exactly: a word-level candidate index bounds the work.
  Alias words form a vocabulary; each vocabulary word of >= 4 characters is indexed under
  the hashes of its single-character deletions (symmetric-delete / SymSpell). A query word
  finds vocabulary words within one edit (insertion, deletion, substitution, adjacent
  transposition; two insertions for words of >= 8 characters) through a few hash look-ups,
  independent of vocabulary size. Their posting lists (word -> aliases), filtered by an
  alias-length window implied by the score threshold, give candidate aliases ranked by how
  many query words they contain; the best ``max_fuzzy_candidates`` are scored with
  rapidfuzz (the better of ``fuzz.ratio`` and ``fuzz.token_sort_ratio`` by default) and kept
  at ``>= threshold`` (85).

>>> kg = KnowledgeGraph.from_triples(
...     [("Q1", "P1", "Q2"), ("Q3", "P2", "Q1")],
...     entity_names={"Q1": "Velmora Quist", "Q2": "Ostrel", "Q3": "Brannick Hall"},
...     relation_names={"P1": "place of birth", "P2": "architect"})
>>> res = kg.search(["velmra quist"], relations=["birth place"])
>>> print(res.render())
(Velmora Quist, place of birth, Ostrel)
(Brannick Hall, architect, Velmora Quist)
>>> res.matched
{'velmra quist': ['Q1']}
"""

from __future__ import annotations

import json
import math
import re
import time
import unicodedata
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz, process

from workbench.tools.base import Triple, clean_text, render_triples

__all__ = [
    "EntityMatch",
    "FilterResult",
    "KGResult",
    "KnowledgeGraph",
    "StringTable",
    "approx_token_count",
    "build_filter_prompt",
    "kg_filter",
    "kg_search",
    "make_kg_tool",
    "normalize_name",
    "parse_filter_answer",
]

# ----------------------------------------------------------------------------- limits

MAX_NAME_CHARS = 256
"""Queried names are cut to this many characters before matching (no real alias is longer)."""
MAX_QUERY_CHARS = 2000
"""The request's ``query`` text is cut to this many characters before taking its words."""
MAX_NAMES_PER_CALL = 16
"""At most this many entity names per search; the rest are recorded in ``KGResult.skipped``."""
MAX_RANK_WORDS = 64
"""Ranking words are kept in a 64-bit mask per triple, so at most 64 distinct words count."""
MAX_FIELD_CHARS = 1000
"""Ids and aliases read from files are cut to this many characters."""
MIN_FUZZY_WORD = 4
"""Words shorter than this are matched exactly only (one edit in 3 letters is another word)."""
LONG_FUZZY_WORD = 8
"""Query words at least this long also try two deletions (two inserted characters)."""
MAX_DELETE_WORD = 32
"""Vocabulary words longer than this get no deletion entries (they are ids, URLs, ...)."""
MAX_FUZZY_POSTINGS = 20_000
"""At most this many (alias, word) postings are counted per fuzzy query (rarest words first)."""
MAX_WORD_VARIANTS = 64
"""At most this many vocabulary words stand in for one query word."""
_LEN_CAP = 1023  # alias lengths in the postings are capped here (10 bits)

#: Words that carry no entity or relation meaning; ignored when counting shared words.
STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is was are were be been being who whom whose what "
    "which when where why how did does do done that this these those it its as into than".split()
)

# ----------------------------------------------------------------------------- normalization

_CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # every C0/C1 control, tab and newline included
_WS = re.compile(r"[^\S\n]+")  # whitespace other than the newline that separates records
_ENDS = re.compile(r"(?m)^(?:[^\w\n]|_)+|(?:[^\w\n]|_)+$")  # punctuation/space at line ends
_NONWORD = re.compile(r"[^\w\n]|_")  # what separates words


def _norm_lines(text: str) -> str:
    """:func:`normalize_name` applied to every ``\\n``-separated line at once (C-speed)."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _ENDS.sub("", _WS.sub(" ", text))


def normalize_name(text: Any) -> str:
    """Case-normalize a name: NFKC, lowercase, whitespace collapsed, punctuation stripped at the ends.

    >>> normalize_name("  “Velmora   QUIST”!! ")
    'velmora quist'
    >>> normalize_name("Ｔｏｋｙｏ\\tTower")
    'tokyo tower'
    """
    return _norm_lines(_CTRL.sub(" ", str(text)))


def name_words(norm: str) -> list[str]:
    """The words of a normalized name (runs of letters and digits).

    >>> name_words("ac/dc (band) o'brien")
    ['ac', 'dc', 'band', 'o', 'brien']
    """
    return [w for w in _NONWORD.sub(" ", norm).split(" ") if w]


def _clean_field(s: Any) -> str:
    s = s if isinstance(s, str) else str(s)
    if not s.isprintable():  # the regular expression only when needed (it is the slow part)
        s = _CTRL.sub(" ", s)
    return s.strip()[:MAX_FIELD_CHARS]


def approx_token_count(text: str) -> int:
    """Token estimate used when no tokenizer is given: whitespace words x 1.3, rounded up."""
    return math.ceil(len(text.split()) * 1.3)


# ----------------------------------------------------------------------------- hashing

# Polynomial hash h(u) = sum_i (u_i + 1) * P^i mod 2^64 over code units (UTF-8 bytes for whole
# aliases, code points for vocabulary words). Being linear, the hash of "u without unit j" is
# computed from prefix sums, which vectorizes the symmetric-delete index over millions of words.
_HP = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_HP_INV = pow(_HP, -1, 1 << 64)
_MASK = (1 << 64) - 1
_POW = np.ones(1, np.uint64)


def _pow_table(n: int) -> np.ndarray:
    """P^0 .. P^(n-1) mod 2^64 (cached, grown on demand)."""
    global _POW
    if len(_POW) < n:
        a = np.full(max(n, 2 * len(_POW)), _HP, np.uint64)
        a[0] = 1
        _POW = np.cumprod(a)  # uint64 products wrap mod 2^64
    return _POW


def _py_hash(units: Iterable[int]) -> int:
    """The same hash as :func:`_seg_hash`, for one query string."""
    h, p = 0, 1
    for u in units:
        h = (h + (u + 1) * p) & _MASK
        p = (p * _HP) & _MASK
    return h


def _str_hash(s: str) -> int:
    """Hash of a vocabulary word (over code points)."""
    return _py_hash(map(ord, s))


def _gather_ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] .. starts[i] + lens[i] - 1`` for all i, concatenated."""
    lens = np.asarray(lens, np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first = np.cumsum(lens) - lens
    return np.repeat(np.asarray(starts, np.int64) - first, lens) + np.arange(total, dtype=np.int64)


def _chunks_by_size(lens: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split segments into consecutive groups of about ``budget`` units."""
    n = len(lens)
    if n == 0:
        return []
    cum = np.cumsum(lens, dtype=np.int64)
    cuts = np.searchsorted(cum, np.arange(budget, int(cum[-1]), budget, dtype=np.int64), side="right")
    bounds = _sorted_unique(np.concatenate([[0], cuts, [n]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _seg_hash(units: np.ndarray, starts: np.ndarray, lens: np.ndarray, budget: int = 1 << 23) -> np.ndarray:
    """Hash of every segment ``units[starts[i] : starts[i] + lens[i]]``; segments sorted, not overlapping.

    Vectorized over the buffer: each unit's power is its distance from the last segment start
    before it, and a segment's hash is a difference of running sums.
    """
    starts = np.asarray(starts, np.int64)
    lens = np.asarray(lens, np.int64)
    out = np.zeros(len(starts), np.uint64)
    for a, b in _chunks_by_size(lens + 1, budget):
        base, stop = int(starts[a]), int(starts[b - 1] + lens[b - 1])
        if stop <= base:
            continue
        s_loc = starts[a:b] - base
        m = np.zeros(stop - base, np.int64)
        m[s_loc[s_loc < len(m)]] = s_loc[s_loc < len(m)]
        np.maximum.accumulate(m, out=m)
        pos = np.arange(len(m), dtype=np.int64) - m
        pw = _pow_table(int(pos.max()) + 1)
        terms = (units[base:stop].astype(np.uint64) + np.uint64(1)) * pw[pos]
        e = np.zeros(len(terms) + 1, np.uint64)
        np.cumsum(terms, out=e[1:])
        out[a:b] = e[s_loc + lens[a:b]] - e[s_loc]
    return out


def _seg_delete_hashes(units: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every one-unit deletion of every segment, with the segment index of each."""
    keys, segs = [], []
    inv = np.uint64(_HP_INV)
    for a, b in _chunks_by_size(lens, 1 << 22):
        ln = np.asarray(lens[a:b], np.int64)
        idx = _gather_ranges(starts[a:b], ln)
        if len(idx) == 0:
            continue
        seg = np.repeat(np.arange(a, b, dtype=np.int64), ln)
        pos = idx - np.repeat(np.asarray(starts[a:b], np.int64), ln)
        pw = _pow_table(int(ln.max()) + 1)
        terms = (units[idx].astype(np.uint64) + np.uint64(1)) * pw[pos]
        e = np.zeros(len(terms) + 1, np.uint64)
        np.cumsum(terms, out=e[1:])
        k = np.arange(len(terms), dtype=np.int64)  # local position of the deleted unit
        begin = k - pos
        end = begin + ln[seg - a]
        # prefix before k, plus the suffix after k shifted down one power
        keys.append((e[k] - e[begin]) + (e[end] - e[k + 1]) * inv)
        segs.append(seg)
    if not keys:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    return np.concatenate(keys), np.concatenate(segs)


def _py_delete_hashes(word: str, depth: int) -> tuple[set[int], set[int]]:
    """Hashes of ``word`` with one deletion, and (``depth >= 2``) with two deletions."""
    d1 = {word[:i] + word[i + 1 :] for i in range(len(word))}
    d2: set[str] = set()
    if depth >= 2:
        for d in d1:
            d2.update(d[:i] + d[i + 1 :] for i in range(len(d)))
        d2 -= d1
    return {_str_hash(d) for d in d1}, {_str_hash(d) for d in d2}


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (numpy 2's hash-based ``np.unique`` is slow on large integer arrays)."""
    s = np.sort(a)
    if len(s) < 2:
        return s
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


def _unique_first(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of ``a`` (sorted) and the index of each one's first occurrence."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    new = np.ones(len(s), bool)
    new[1:] = s[1:] != s[:-1]
    return s[new], order[new]


_CTRL_KEEP_NL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _line_spans(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length (without the ``\\n``) of every ``\\n``-terminated line of ``buf``."""
    nl = np.flatnonzero(buf == 10)
    starts = np.zeros(len(nl), np.int64)
    starts[1:] = nl[:-1] + 1
    return starts, nl - starts


def _splice_lines(fast: np.ndarray, slow: np.ndarray, which: np.ndarray) -> np.ndarray:
    """``fast``'s lines with lines ``which`` replaced by ``slow``'s lines (all ``\\n``-terminated)."""
    start, ln = _line_spans(fast)
    s_start, s_len = _line_spans(slow)
    start[which] = s_start + len(fast)
    ln[which] = s_len
    return np.concatenate([fast, slow])[_gather_ranges(start, ln + 1)]


def _normalize_block(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`normalize_name` of every line of a ``\\n``-terminated UTF-8 buffer, and the lines' words.

    Returns two buffers with the same lines: the normalized names, and the same with every
    non-word character as a space. ASCII lines take a numpy path (lowercase; controls to
    spaces; keep from the first to the last letter/digit; collapse space runs), the others
    the regular expressions; both give exactly ``normalize_name`` (tested).
    """
    nl = raw == 10
    n_lines = int(np.count_nonzero(nl))
    line_id = np.cumsum(nl)
    line_id -= nl  # the newline belongs to its line
    b = raw.copy()
    b[(b >= 65) & (b <= 90)] += 32
    b[((b < 32) | (b == 127)) & ~nl] = 32
    alnum = ((b >= 48) & (b <= 57)) | ((b >= 97) & (b <= 122))
    apos = np.flatnonzero(alnum)
    alid = line_id[apos]
    lines = np.arange(n_lines)
    lo, hi = np.searchsorted(alid, lines, "left"), np.searchsorted(alid, lines, "right")
    has = hi > lo
    first, last = np.zeros(n_lines, np.int64), np.full(n_lines, -1, np.int64)
    first[has], last[has] = apos[lo[has]], apos[hi[has] - 1]
    pos = np.arange(len(b), dtype=np.int64)
    keep = (pos >= first[line_id]) & (pos <= last[line_id])
    del pos
    sp = b == 32
    keep[1:] &= ~(sp[1:] & sp[:-1])
    keep |= nl
    norm = b[keep]
    words = np.where(alnum | nl, b, np.uint8(32))
    high = raw >= 128
    if high.any():
        which = _sorted_unique(line_id[high])
        starts, lens = _line_spans(raw)
        text = raw[_gather_ranges(starts[which], lens[which] + 1)].tobytes().decode("utf-8", "replace")
        slow = _norm_lines(_CTRL_KEEP_NL.sub(" ", text))
        norm = _splice_lines(norm, np.frombuffer(slow.encode("utf-8"), np.uint8), which)
        words = _splice_lines(words, np.frombuffer(_NONWORD.sub(" ", slow).encode("utf-8"), np.uint8), which)
    return norm, words


class _HashIndex:
    """Sorted ``uint64`` keys with a value per key; several values may share a key."""

    __slots__ = ("keys", "vals")

    def __init__(self, keys: np.ndarray, vals: np.ndarray, presorted: bool = False):
        if presorted:
            self.keys, self.vals = keys, vals
        else:
            order = np.argsort(keys, kind="stable")
            self.keys, self.vals = keys[order], vals[order]

    def get(self, key: int) -> np.ndarray:
        k = np.uint64(key)
        lo = int(np.searchsorted(self.keys, k, side="left"))
        hi = int(np.searchsorted(self.keys, k, side="right"))
        return self.vals[lo:hi]

    def get_many(self, keys: Iterable[int]) -> np.ndarray:
        k = np.fromiter(keys, np.uint64)
        if len(k) == 0 or len(self.keys) == 0:
            return self.vals[:0]
        lo = np.searchsorted(self.keys, k, side="left")
        hi = np.searchsorted(self.keys, k, side="right")
        return self.vals[_gather_ranges(lo, hi - lo)]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes


# ----------------------------------------------------------------------------- string table


class StringTable:
    """``n`` strings in one UTF-8 buffer, each followed by ``\\n``; string ``i`` starts at ``offsets[i]``.

    >>> t = StringTable.from_strings(["Paris", "Île-de-France", "tab\\there"])
    >>> len(t), t[1], t[2], t.byte_lengths().tolist()
    (3, 'Île-de-France', 'tab here', [5, 14, 8])
    """

    __slots__ = ("data", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data = data  # uint8, every string terminated by b"\n"
        self.offsets = offsets  # int64, n + 1 entries, offsets[n] == len(data)

    @classmethod
    def from_strings(cls, strings: Iterable[Any]) -> StringTable:
        """Strings are cleaned: control characters (tabs, newlines) become spaces, ends stripped."""
        return cls.from_text("".join(_clean_field(s) + "\n" for s in strings))

    @classmethod
    def from_text(cls, text: str | bytes) -> StringTable:
        """From ``\\n``-terminated lines that are already clean (no other control characters)."""
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if raw and not raw.endswith(b"\n"):
            raw += b"\n"
        data = np.frombuffer(raw, np.uint8)
        nl = np.flatnonzero(data == 10)
        offsets = np.zeros(len(nl) + 1, np.int64)
        offsets[1:] = nl + 1
        return cls(data, offsets)

    @classmethod
    def concat(cls, tables: Sequence[StringTable]) -> StringTable:
        if not tables:
            return cls.from_text(b"")
        shifts = np.cumsum([0] + [len(t.data) for t in tables[:-1]])
        data = np.concatenate([t.data for t in tables])
        offsets = np.concatenate([t.offsets[:-1] + s for t, s in zip(tables, shifts)] + [[len(data)]])
        return cls(data, offsets.astype(np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1]) - 1
        return self.data[a:b].tobytes().decode("utf-8", "replace")

    def __iter__(self):
        return iter(self.text().split("\n")[:-1])

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self.offsets) - 1

    def text(self, start: int = 0, stop: int | None = None) -> str:
        """Strings ``start .. stop - 1`` as one ``\\n``-terminated text."""
        stop = len(self) if stop is None else stop
        return self.data[int(self.offsets[start]) : int(self.offsets[stop])].tobytes().decode("utf-8", "replace")

    def take(self, idx: np.ndarray) -> StringTable:
        idx = np.asarray(idx, np.int64)
        lens = self.offsets[idx + 1] - self.offsets[idx]
        data = self.data[_gather_ranges(self.offsets[idx], lens)]
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return StringTable(data, offsets)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.offsets.nbytes


# ----------------------------------------------------------------------------- results


@dataclass
class EntityMatch:
    """One entity matched for a queried name."""

    id: str
    name: str
    score: float
    """100 for an exact (normalized) alias or id match, else the fuzzy score."""
    exact: bool
    alias: str = ""
    """The alias that matched."""


@dataclass
class KGResult:
    """What ``KnowledgeGraph.search`` found."""

    triples: list[Triple]
    matched: dict[str, list[str]]
    """Queried entity name -> matched entity ids (best first)."""
    unmatched: list[str]
    truncated: bool = False
    """True when triples were dropped by ``max_triples`` or ``max_tokens``."""
    skipped: list[str] = field(default_factory=list)
    """Inputs that were not usable names (non-strings, empty strings, over the per-call limit)."""
    n_candidates: int = 0
    """Distinct 1-hop triples of the matched entities, before the caps."""

    def render(self) -> str:
        """One triple per line; a plain sentence when there is nothing to show."""
        if self.triples:
            return render_triples(self.triples)
        if not self.matched:
            names = ", ".join(clean_text(n, 80) for n in self.unmatched) or "(no entity given)"
            return f"No knowledge-graph entity matched: {names}"
        return "No knowledge-graph triples found for: " + ", ".join(clean_text(n, 80) for n in self.matched)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- the graph


class KnowledgeGraph:
    """Entities, relations and triples in compact numpy storage, with entity matching and DynaSearcher search.

    Build it with a loader (:meth:`from_wikidata5m`, :meth:`from_codex`, :meth:`from_fb15k237`,
    :meth:`from_triples`) or directly from tables (what the loaders and the benchmark do).

    Args:
        entity_ids: one id per entity.
        entity_alias_ptr: ``int64[n_entities + 1]``; entity ``e``'s aliases are
            ``aliases[ptr[e]:ptr[e + 1]]``, the first being its display name. Every entity has >= 1.
        aliases: all entity aliases, grouped by entity.
        relation_ids, relation_alias_ptr, relation_aliases: the same for relations.
        heads, rels, tails: triples as entity / relation indices.
        threshold: fuzzy-match score cut-off (0-100) for ``scorers``.
        max_matches: at most this many entities per queried name (exact matches ranked by
            canonical-name match, then degree; fuzzy ones by score, then degree).
        max_fuzzy_candidates: aliases scored by rapidfuzz per fuzzy query.
        scorers: rapidfuzz scorers on normalized strings; a candidate's score is the best of
            them. The default pairs ``fuzz.ratio`` (typos) with ``fuzz.token_sort_ratio`` (word
            order): token sorting alone fails when a typo changes the sort order of the words.
            The alias-length window assumes ratio-like scorers (no partial matching).
        dedupe: drop repeated ``(head, relation, tail)`` rows, keeping the first.
        stats: loader statistics to keep in ``self.stats``.
    """

    def __init__(
        self,
        entity_ids: StringTable,
        entity_alias_ptr: np.ndarray,
        aliases: StringTable,
        relation_ids: StringTable,
        relation_alias_ptr: np.ndarray,
        relation_aliases: StringTable,
        heads: np.ndarray,
        rels: np.ndarray,
        tails: np.ndarray,
        *,
        threshold: float = 85.0,
        max_matches: int = 5,
        max_fuzzy_candidates: int = 200,
        scorers: Sequence[Callable[..., float]] = (fuzz.ratio, fuzz.token_sort_ratio),
        dedupe: bool = True,
        stats: Mapping[str, Any] | None = None,
        _index: Mapping[str, np.ndarray] | None = None,
    ):
        t0 = time.perf_counter()
        self.entity_ids = entity_ids
        self.entity_alias_ptr = np.asarray(entity_alias_ptr, np.int64)
        self.aliases = aliases
        self.relation_ids = relation_ids
        self.relation_alias_ptr = np.asarray(relation_alias_ptr, np.int64)
        self.relation_aliases = relation_aliases
        self.threshold = float(threshold)
        self.max_matches = int(max_matches)
        self.max_fuzzy_candidates = int(max_fuzzy_candidates)
        self.scorers = tuple(scorers) if isinstance(scorers, (list, tuple)) else (scorers,)
        self.stats: dict[str, Any] = dict(stats or {})
        if not 0 < self.threshold <= 100:
            raise ValueError(f"threshold={threshold!r} must be in (0, 100] (rapidfuzz scores)")
        if self.max_matches < 1 or self.max_fuzzy_candidates < 1:
            raise ValueError("max_matches and max_fuzzy_candidates must be >= 1")
        n_ent, n_rel = len(entity_ids), len(relation_ids)
        _check_ptr("entity", self.entity_alias_ptr, n_ent, len(aliases))
        _check_ptr("relation", self.relation_alias_ptr, n_rel, len(relation_aliases))
        heads, rels, tails = (np.asarray(a, np.int32).ravel() for a in (heads, rels, tails))
        if not len(heads) == len(rels) == len(tails):
            raise ValueError(f"heads/rels/tails differ in length: {len(heads)}, {len(rels)}, {len(tails)}")
        for name, a, n in (("heads", heads, n_ent), ("tails", tails, n_ent), ("rels", rels, n_rel)):
            if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
                raise ValueError(f"{name} hold indices outside 0..{n - 1}")
        if dedupe and len(heads):
            keep = _first_unique_rows(heads, rels, tails)
            self.stats["duplicate_triples"] = self.stats.get("duplicate_triples", 0) + len(heads) - len(keep)
            if len(keep) < len(heads):
                heads, rels, tails = heads[keep], rels[keep], tails[keep]
        self.heads, self.rels, self.tails = heads, rels, tails
        self.out_ptr, self.out_idx = _csr(heads, n_ent)
        self.in_ptr, self.in_idx = _csr(tails, n_ent)
        self.alias_entity = np.repeat(np.arange(n_ent, dtype=np.int32), np.diff(self.entity_alias_ptr))
        if _index is None:
            self._build_index()
        else:
            self._set_index(_index)
        self._build_relation_words()
        self.stats.update(
            entities=n_ent, relations=n_rel, triples=len(heads), aliases=len(aliases), vocabulary=len(self.vocab)
        )
        self.stats.setdefault("malformed_lines", 0)
        self.stats["index_seconds"] = round(time.perf_counter() - t0, 3)

    # ------------------------------------------------------------------ building

    def _build_index(self) -> None:
        """Exact-alias hashes, the word vocabulary, word -> alias postings, the deletion index."""
        al = self.aliases
        n_alias = len(al)
        exact = np.zeros(n_alias, np.uint64)
        norm_len = np.zeros(n_alias, np.int64)
        occ_hash, occ_alias, chunk_words, chunk_word_hash = [], [], [], []
        for lo, hi in _chunks_by_size(al.byte_lengths() + 1, 1 << 23):
            nb, wb = _normalize_block(al.data[int(al.offsets[lo]) : int(al.offsets[hi])])
            starts, lens = _line_spans(nb)
            if len(starts) != hi - lo:  # cannot happen for cleaned tables; guard the alignment anyway
                raise RuntimeError(f"alias normalization changed the line count ({len(starts)} != {hi - lo})")
            exact[lo:hi] = _seg_hash(nb, starts, lens)
            norm_len[lo:hi] = lens
            sep = (wb == 32) | (wb == 10)
            inword = ~sep
            ws = np.flatnonzero(inword & np.concatenate([[True], sep[:-1]]))
            we = np.flatnonzero(inword & np.concatenate([sep[1:], [True]])) + 1
            wl = we - ws
            h = _seg_hash(wb, ws, wl)
            occ_hash.append(h)
            occ_alias.append((lo + np.searchsorted(np.flatnonzero(wb == 10), ws)).astype(np.int32))
            uh, first = _unique_first(h)
            # each word is followed by a separator byte; gather it too and make it the terminator
            data = wb[_gather_ranges(ws[first], wl[first] + 1)]
            offsets = np.zeros(len(first) + 1, np.int64)
            np.cumsum(wl[first] + 1, out=offsets[1:])
            data[offsets[1:] - 1] = 10
            chunk_words.append(StringTable(data, offsets))
            chunk_word_hash.append(uh)
        keep = np.flatnonzero(norm_len > 0)
        self._exact = _HashIndex(exact[keep], keep.astype(np.int32))
        del exact, keep

        # vocabulary: one entry per distinct word (byte hash), in hash order
        all_hash = np.concatenate(chunk_word_hash) if chunk_word_hash else np.zeros(0, np.uint64)
        vocab_hash, first = _unique_first(all_hash)
        self.vocab = StringTable.concat(chunk_words).take(first)
        del all_hash, chunk_words, chunk_word_hash, first
        oh = np.concatenate(occ_hash) if occ_hash else np.zeros(0, np.uint64)
        oa = np.concatenate(occ_alias) if occ_alias else np.zeros(0, np.int32)
        del occ_hash, occ_alias
        wid = np.searchsorted(vocab_hash, oh).astype(np.int32)
        del oh, vocab_hash
        n_vocab = len(self.vocab)

        # display-name words per entity (for ranking): occurrences are in alias order
        canon = oa == self.entity_alias_ptr[self.alias_entity[oa]]
        self.name_words = wid[canon]
        self.name_word_ptr = _ptr_from_counts(np.bincount(self.alias_entity[oa[canon]], minlength=len(self.entity_ids)))
        del canon

        # word -> aliases postings: per word, sorted int64 keys (normalized alias length << 32 | alias),
        # so a length window and a membership test are both binary searches
        alen = np.minimum(norm_len, _LEN_CAP)
        del norm_len
        post = (alen[oa] << 32) | oa
        del oa
        order = np.lexsort((post, wid))
        word, post = wid[order], post[order]
        del wid, order
        new = np.ones(len(word), bool)
        new[1:] = (word[1:] != word[:-1]) | (post[1:] != post[:-1])
        self.word_post = post[new]
        self.word_ptr = _ptr_from_counts(np.bincount(word[new], minlength=n_vocab))
        del word, post, new, alen

        # vocabulary lookup and the deletion index, over code points
        cp = np.frombuffer(self.vocab.text().encode("utf-32-le"), np.uint32)
        starts, lens = _line_spans(cp)
        self._vocab = _HashIndex(_seg_hash(cp, starts, lens), np.arange(n_vocab, dtype=np.int32))
        sel = np.flatnonzero((lens >= MIN_FUZZY_WORD) & (lens <= MAX_DELETE_WORD))
        dk, dseg = _seg_delete_hashes(cp, starts[sel], lens[sel])
        dw = sel[dseg].astype(np.int32)
        order = np.lexsort((dw, dk))
        dk, dw = dk[order], dw[order]
        if len(dk):  # "aab" loses either "a" to give "ab": keep one entry per (key, word)
            uniq = np.concatenate([[True], (dk[1:] != dk[:-1]) | (dw[1:] != dw[:-1])])
            dk, dw = dk[uniq], dw[uniq]
        self._deletes = _HashIndex(dk, dw, presorted=True)
        ids = self.entity_ids
        self._ids = _HashIndex(
            _seg_hash(ids.data, ids.offsets[:-1], ids.byte_lengths()), np.arange(len(ids), dtype=np.int32)
        )

    _INDEX_FIELDS = ("exact", "vocab", "deletes", "ids")

    def _index_arrays(self) -> dict[str, np.ndarray]:
        out = {
            "vocab_data": self.vocab.data,
            "vocab_offsets": self.vocab.offsets,
            "name_words": self.name_words,
            "name_word_ptr": self.name_word_ptr,
            "word_post": self.word_post,
            "word_ptr": self.word_ptr,
        }
        for f in self._INDEX_FIELDS:
            ix: _HashIndex = getattr(self, "_" + f)
            out[f + "_keys"], out[f + "_vals"] = ix.keys, ix.vals
        return out

    def _set_index(self, d: Mapping[str, np.ndarray]) -> None:
        self.vocab = StringTable(d["vocab_data"], d["vocab_offsets"])
        self.name_words, self.name_word_ptr = d["name_words"], d["name_word_ptr"]
        self.word_post, self.word_ptr = d["word_post"], d["word_ptr"]
        for f in self._INDEX_FIELDS:
            setattr(self, "_" + f, _HashIndex(d[f + "_keys"], d[f + "_vals"], presorted=True))

    def _build_relation_words(self) -> None:
        """Relation display names and, per word of any relation alias, the relations that have it."""
        self.relation_names = [self.relation_aliases[int(p)] for p in self.relation_alias_ptr[:-1]]
        words: dict[str, set[int]] = {}
        for r in range(len(self.relation_ids)):
            a, b = int(self.relation_alias_ptr[r]), int(self.relation_alias_ptr[r + 1])
            for i in range(a, b):
                for w in name_words(normalize_name(self.relation_aliases[i])):
                    words.setdefault(w, set()).add(r)
        self._rel_words = {w: np.array(sorted(s), np.int64) for w, s in words.items()}

    # ------------------------------------------------------------------ sizes and lookups

    @property
    def num_entities(self) -> int:
        return len(self.entity_ids)

    @property
    def num_relations(self) -> int:
        return len(self.relation_ids)

    @property
    def num_triples(self) -> int:
        return len(self.heads)

    def __repr__(self) -> str:
        return (
            f"KnowledgeGraph({self.num_entities:,} entities, {len(self.aliases):,} aliases, "
            f"{self.num_relations:,} relations, {self.num_triples:,} triples)"
        )

    def nbytes(self) -> int:
        """Bytes held in numpy arrays (the Python-level relation tables are small and not counted)."""
        arrays = [self.entity_alias_ptr, self.relation_alias_ptr, self.heads, self.rels, self.tails]
        arrays += [self.out_ptr, self.out_idx, self.in_ptr, self.in_idx, self.alias_entity]
        arrays += list(self._index_arrays().values())
        tables = [self.entity_ids, self.aliases, self.relation_ids, self.relation_aliases]
        return sum(a.nbytes for a in arrays) + sum(t.nbytes for t in tables)

    def entity_index(self, entity_id: str) -> int | None:
        """Dense index of an entity id, or None."""
        raw = str(entity_id).encode("utf-8", "replace")
        for i in self._ids.get(_py_hash(raw)):
            if self.entity_ids[int(i)] == entity_id:
                return int(i)
        return None

    def entity_name(self, e: int) -> str:
        return self.aliases[int(self.entity_alias_ptr[e])]

    def entity_aliases(self, e: int) -> list[str]:
        return [self.aliases[i] for i in range(int(self.entity_alias_ptr[e]), int(self.entity_alias_ptr[e + 1]))]

    def degree(self, e: np.ndarray | int) -> np.ndarray:
        e = np.asarray(e, np.int64)
        return (self.out_ptr[e + 1] - self.out_ptr[e]) + (self.in_ptr[e + 1] - self.in_ptr[e])

    def triple(self, t: int, score: float = 0.0) -> Triple:
        h, r, tl = int(self.heads[t]), int(self.rels[t]), int(self.tails[t])
        return Triple(
            head=self.entity_name(h),
            relation=self.relation_names[r],
            tail=self.entity_name(tl),
            head_id=self.entity_ids[h],
            relation_id=self.relation_ids[r],
            tail_id=self.entity_ids[tl],
            score=float(score),
        )

    def triples_of(self, entity_id: str, direction: str = "both") -> list[Triple]:
        """All 1-hop triples of one entity id (``direction``: "out", "in" or "both")."""
        e = self.entity_index(entity_id)
        if e is None:
            return []
        return [self.triple(int(t)) for t in self._one_hop(np.array([e]), direction)[0]]

    def _one_hop(self, ents: np.ndarray, direction: str = "both") -> tuple[np.ndarray, np.ndarray]:
        """Triple indices of ``ents`` (out-edges then in-edges per entity) and the entity each came from.

        With ``direction="both"`` each triple is listed once: an in-edge whose head is one of
        ``ents`` (a self-loop included) is already among that head's out-edges.
        """
        if direction not in ("out", "in", "both"):
            raise ValueError(f"direction must be 'out', 'in' or 'both', not {direction!r}")
        ents = np.asarray(ents, np.int64)
        parts, src = [], []
        for e in ents:
            e = int(e)
            if direction in ("out", "both"):
                parts.append(self.out_idx[self.out_ptr[e] : self.out_ptr[e + 1]])
                src.append(np.full(len(parts[-1]), e, np.int32))
            if direction in ("in", "both"):
                inn = self.in_idx[self.in_ptr[e] : self.in_ptr[e + 1]]
                if direction == "both" and len(inn):
                    hh = self.heads[inn]
                    inn = inn[hh != e] if len(ents) == 1 else inn[~np.isin(hh, ents)]
                parts.append(inn)
                src.append(np.full(len(inn), e, np.int32))
        if not parts:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        return np.concatenate(parts), np.concatenate(src)

    # ------------------------------------------------------------------ matching

    def match_entity(self, name: Any, fuzzy: bool = True) -> list[EntityMatch]:
        """Entities for one name: exact (normalized alias or raw id) matches, else fuzzy ones."""
        return [
            EntityMatch(
                self.entity_ids[e], self.entity_name(e), s, x, self.aliases[a] if a >= 0 else self.entity_ids[e]
            )
            for e, s, x, a in self._match(str(name)[:MAX_NAME_CHARS], fuzzy)
        ]

    def _match(self, name: str, fuzzy: bool = True) -> list[tuple[int, float, bool, int]]:
        """``(entity, score, exact, alias)`` for a name, best first, at most ``max_matches``."""
        norm = normalize_name(name)
        out = self._match_exact(name.strip(), norm)
        if out or not fuzzy or not norm:
            return out[: self.max_matches]
        return self._match_fuzzy(norm)[: self.max_matches]

    def _match_exact(self, raw: str, norm: str) -> list[tuple[int, float, bool, int]]:
        """Entity-id match first, then aliases equal after normalization: display names before
        other aliases, then higher degree."""
        e_id = self.entity_index(raw) if raw else None
        out = [(e_id, 100.0, True, -1)] if e_id is not None else []
        bucket = self._exact.get(_py_hash(norm.encode("utf-8"))) if norm else self._exact.vals[:0]
        if len(bucket):
            # a bucket holds one normalized text unless two texts share a 64-bit hash: check its
            # ends, and every alias only if they disagree
            probe = {int(bucket[0]), int(bucket[-1])}
            if any(normalize_name(self.aliases[a]) != norm for a in probe):
                bucket = np.array([a for a in bucket if normalize_name(self.aliases[int(a)]) == norm], np.int64)
        if len(bucket):
            bucket = np.asarray(bucket, np.int64)
            ents = self.alias_entity[bucket].astype(np.int64)
            rank = np.where(bucket == self.entity_alias_ptr[ents], 1, 2)
            order = np.lexsort((ents, -self.degree(ents), rank))
            seen = {e_id}
            for i in order:
                e = int(ents[i])
                if e not in seen:
                    seen.add(e)
                    out.append((e, 100.0, True, int(bucket[i])))
                    if len(out) >= self.max_matches:
                        break
        return out

    def _word_variants(self, w: str) -> list[tuple[int, np.ndarray]]:
        """``(edits, vocabulary ids)``: ``w`` itself (0), words about one edit away (1), and words
        ``w`` has two extra characters over (2, words of >= ``LONG_FUZZY_WORD`` only).

        One edit: ``w`` has one extra character, lacks one, or shares a one-character deletion
        with the word (substitution, adjacent transposition). At most ``MAX_WORD_VARIANTS`` in all,
        closest first (a dense vocabulary has many words one or two edits away).
        """
        exact = self._vocab.get(_str_hash(w))
        groups = [(0, exact)]
        if MIN_FUZZY_WORD <= len(w) <= MAX_DELETE_WORD + 1:  # longer words have no deletion entries
            d1, d2 = _py_delete_hashes(w, 2 if len(w) >= LONG_FUZZY_WORD else 1)
            one = [self._deletes.get(_str_hash(w)), self._deletes.get_many(d1)]
            if len(w) > MIN_FUZZY_WORD:  # keep the deletions of w >= MIN_FUZZY_WORD long
                one.insert(0, self._vocab.get_many(d1))
            groups += [(1, np.concatenate(one)), (2, self._vocab.get_many(d2))]
        out: list[tuple[int, np.ndarray]] = []
        seen = set()
        left = MAX_WORD_VARIANTS
        for edits, ids in groups:
            ids = [v for v in _sorted_unique(np.asarray(ids, np.int64)).tolist() if v not in seen][:left]
            seen.update(ids)
            left -= len(ids)
            if ids:
                out.append((edits, np.array(ids, np.int64)))
        return out

    def _match_fuzzy(self, norm: str) -> list[tuple[int, float, bool, int]]:
        words = list(dict.fromkeys(name_words(norm)))[:8]
        if not words or len(self.aliases) == 0:
            return []
        qlen = len(norm.encode("utf-8"))
        t = self.threshold
        # an Indel ratio >= t needs the lengths within a factor (200 - t) / t; widened for slack
        lo_len = max(0, math.floor(qlen * t / (200.0 - t) * 0.8) - 2)
        hi_len = min(_LEN_CAP, math.ceil(qlen * (200.0 - t) / t * 1.25) + 4)
        post, ptr = self.word_post, self.word_ptr
        # posting groups (edits, size, query word, start, stop), one per vocabulary word stand-in
        groups = []
        n_alias = len(self.aliases) + 1
        cap = [math.inf] * len(words)  # a word that exists lends its stand-ins no more weight than itself
        for wi, w in enumerate(words):
            for edits, vids in self._word_variants(w):
                if edits == 0:
                    cap[wi] = math.log(n_alias / max(int(ptr[vids[0] + 1] - ptr[vids[0]]), 1))
                p0, q0 = ptr[vids], ptr[vids + 1]
                for v_p, v_q in zip(p0.tolist(), q0.tolist()):
                    seg = post[v_p:v_q]
                    p = v_p + int(np.searchsorted(seg, lo_len << 32))
                    q = v_p + int(np.searchsorted(seg, (hi_len + 1) << 32))
                    if q > p:
                        groups.append((edits, q - p, wi, p, q))
        # rarest groups first (two-edit stand-ins last): a rare query word, or a rare stand-in
        # of a typo'd one, anchors the name; a group over the remaining budget keeps the alias
        # lengths nearest the query's (one typo changes the length by at most one)
        groups.sort(key=lambda g: (g[0] > 1, g[1]))
        left = MAX_FUZZY_POSTINGS
        idx, word_of, weight = [], [], []
        for edits, size, wi, p, q in groups:
            if left <= 0:
                break
            if size > left:
                if edits > 1:
                    continue
                r = np.arange(max(hi_len - qlen, qlen - lo_len) + 1)
                seg = post[p:q]
                lo_b = np.searchsorted(seg, np.maximum(qlen - r, 0) << 32)
                hi_b = np.searchsorted(seg, (qlen + r + 1) << 32)
                fits = np.flatnonzero(hi_b - lo_b <= left)
                k = int(fits[-1]) if len(fits) else 0
                p, q = p + int(lo_b[k]), min(p + int(hi_b[k]), p + int(lo_b[k]) + left)
                if q <= p:
                    continue
            idx.append(np.arange(p, q))
            word_of.append(np.full(q - p, wi, np.int64))
            weight.append(np.full(q - p, min(math.log(n_alias / size), cap[wi])))  # rare words weigh more
            left -= q - p
        if not idx:
            return []
        al = post[np.concatenate(idx)] & 0xFFFFFFFF
        # evidence per alias: over the distinct query words it contains, the sum of each word's
        # best (rarest) stand-in weight; one (alias, word) pair counts once
        pair, wt = al * 8 + np.concatenate(word_of), np.concatenate(weight)
        order = np.lexsort((-wt, pair))
        pair, wt = pair[order], wt[order]
        new = np.ones(len(pair), bool)
        new[1:] = pair[1:] != pair[:-1]
        pair, wt = pair[new], wt[new]
        cand, first = _unique_first(pair // 8)
        evidence = np.add.reduceat(wt, first) if len(first) else wt[:0]
        if len(cand) > self.max_fuzzy_candidates:
            clen = self.aliases.offsets[cand + 1] - self.aliases.offsets[cand] - 1
            top = np.lexsort((cand, np.abs(clen - qlen), -evidence))[: self.max_fuzzy_candidates]
            cand = cand[np.sort(top)]
        choices = [normalize_name(self.aliases[int(a)]) for a in cand]
        best: dict[int, tuple[float, int]] = {}
        scores = np.max([process.cdist([norm], choices, scorer=f)[0] for f in self.scorers], axis=0)
        for i in np.flatnonzero(scores >= t):
            a, score = int(cand[i]), float(scores[i])
            e = int(self.alias_entity[a])
            if e not in best or score > best[e][0]:
                best[e] = (float(score), a)
        if not best:
            return []
        ents = np.fromiter(best, np.int64)
        deg = self.degree(ents)
        order = sorted(range(len(ents)), key=lambda i: (-best[int(ents[i])][0], -int(deg[i]), int(ents[i])))
        return [(int(ents[i]), best[int(ents[i])][0], False, best[int(ents[i])][1]) for i in order]

    # ------------------------------------------------------------------ search

    def search(
        self,
        entities: Any,
        relations: Any = None,
        query: Any = "",
        max_triples: int = 100,
        max_tokens: int = 1024,
        count_tokens: Callable[[str], int] | None = None,
    ) -> KGResult:
        """DynaSearcher KG search: match entities, take 1-hop triples, rank by shared words, cap.

        Ranking key, best first: number of distinct normalized words (stopwords excluded, at most
        64) shared between the queried entities + relations + ``query`` and the triple's
        head + relation (all its aliases) + tail; then triples of exactly matched entities before
        fuzzily matched ones; then words shared with the relation alone; then discovery order
        (queried-name order, match rank, out-edges before in-edges, storage order).

        The top ``max_triples`` are kept, then cut so that the rendered block (one triple per line,
        :func:`render_triples`) is at most ``max_tokens`` tokens by ``count_tokens``. Without a
        tokenizer, tokens are *approximated* as whitespace words x 1.3 (:func:`approx_token_count`).

        Never raises on bad input: non-string names are coerced (numbers) or skipped (anything
        else) and listed in ``skipped``; names that match nothing are listed in ``unmatched``.
        """
        count = count_tokens or approx_token_count
        names, skipped = _coerce_names(entities, "entity")
        rel_names, rel_skipped = _coerce_names(relations, "relation")
        skipped += rel_skipped
        if len(names) > MAX_NAMES_PER_CALL:
            skipped += [
                f"entity over the limit of {MAX_NAMES_PER_CALL}: {n[:80]!r}" for n in names[MAX_NAMES_PER_CALL:]
            ]
            names = names[:MAX_NAMES_PER_CALL]
        qtext = query if isinstance(query, str) else (str(query) if isinstance(query, (int, float)) else "")
        if query is not None and not isinstance(query, (str, int, float)):
            skipped.append(f"query is not a string: {_short_repr(query)}")
        qtext = _clean_field(qtext)[:MAX_QUERY_CHARS]

        matched: dict[str, list[str]] = {}
        unmatched: list[str] = []
        ents: list[int] = []
        exact: list[bool] = []
        for n in names:
            ms = self._match(n)
            if not ms:
                unmatched.append(n)
                continue
            matched[n] = [self.entity_ids[e] for e, _, _, _ in ms]
            for e, _, x, _ in ms:
                if e not in ents:
                    ents.append(e)
                    exact.append(x)
        try:
            max_triples = max(0, int(max_triples))
            max_tokens = max(0, int(max_tokens))
        except (TypeError, ValueError):
            max_triples, max_tokens = 100, 1024
            skipped.append("max_triples/max_tokens not integers; used 100/1024")
        res = KGResult([], matched, unmatched, skipped=skipped)
        if not ents:
            return res

        tid, src = self._one_hop(np.array(ents, np.int64))
        if len(tid) == 0:
            return res
        n = res.n_candidates = len(tid)
        qwords = _rank_words([*names, *rel_names, qtext])
        shared, rel_shared = self._shared_words(qwords, tid, src)
        exact_ents = np.array([e for e, x in zip(ents, exact) if x], np.int64)
        is_exact = np.isin(src, exact_ents).astype(np.int64)
        # one int64 sort key: shared words | exact match | relation words | earlier first
        key = (shared << 42) | (is_exact << 41) | (rel_shared << 34) | ((1 << 34) - 1 - np.arange(n, dtype=np.int64))
        k = min(max_triples, n)
        top = np.argpartition(key, n - k)[n - k :] if 0 < k < n else np.arange(n if k else 0)
        keep = top[np.argsort(-key[top])]
        res.truncated = n > max_triples
        triples = [self.triple(int(tid[i]), float(shared[i])) for i in keep]
        res.triples, cut = _cut_to_tokens(triples, max_tokens, count)
        res.truncated |= cut
        return res

    def _shared_words(self, qwords: list[str], tid: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per triple: distinct query words in head + relation + tail, and in the relation alone."""
        if not qwords:
            z = np.zeros(len(tid), np.int64)
            return z, z
        bits = {w: np.uint64(1) << np.uint64(i) for i, w in enumerate(qwords)}
        rel_mask = np.zeros(len(self.relation_ids), np.uint64)
        for w, b in bits.items():
            rs = self._rel_words.get(w)
            if rs is not None:
                rel_mask[rs] |= b
        vid, vbit = [], []
        for w, b in bits.items():
            for v in self._vocab.get(_str_hash(w)):
                if self.vocab[int(v)] == w:
                    vid.append(int(v))
                    vbit.append(b)
        h, r, t = self.heads[tid], self.rels[tid], self.tails[tid]
        other = np.where(h == src, t, h)
        mask = rel_mask[r]
        if vid:
            order = np.argsort(vid)
            vid_s, vbit_s = np.array(vid, np.int64)[order], np.array(vbit, np.uint64)[order]
            centers = _sorted_unique(src)
            cinv = np.searchsorted(centers, src)
            mask = mask | self._name_masks(centers, vid_s, vbit_s)[cinv] | self._name_masks(other, vid_s, vbit_s)
        return _popcount(mask), _popcount(rel_mask[r])

    def _name_masks(self, ents: np.ndarray, vid: np.ndarray, vbit: np.ndarray) -> np.ndarray:
        """OR of the query-word bits present in each entity's display name."""
        ents = np.asarray(ents, np.int64)
        starts = self.name_word_ptr[ents]
        lens = self.name_word_ptr[ents + 1] - starts
        words = self.name_words[_gather_ranges(starts, lens)]
        pos = np.minimum(np.searchsorted(vid, words), len(vid) - 1)
        b = np.where(vid[pos] == words, vbit[pos], np.uint64(0))
        out = np.zeros(len(ents), np.uint64)
        nz = lens > 0
        if len(b):
            out[nz] = np.bitwise_or.reduceat(b, (np.cumsum(lens) - lens)[nz])
        return out

    # ------------------------------------------------------------------ loaders

    @classmethod
    def from_triples(
        cls,
        triples: Iterable[Any],
        entity_names: Mapping[str, str] | None = None,
        relation_names: Mapping[str, str | Sequence[str]] | None = None,
        entity_aliases: Mapping[str, Sequence[str]] | None = None,
        **options: Any,
    ) -> KnowledgeGraph:
        """From in-memory ``(head_id, relation_id, tail_id)`` rows (tuples or :class:`Triple`).

        ``entity_names``: id -> display name; ``entity_aliases``: id -> further aliases;
        ``relation_names``: id -> name or list of aliases (first = display name). Ids without a
        name are their own name. Entities named but not in any triple are kept.
        """
        ents, rels = _Registry(), _Registry()
        entity_names, entity_aliases, relation_names = entity_names or {}, entity_aliases or {}, relation_names or {}
        for eid in dict.fromkeys([*entity_names, *entity_aliases]):
            names = [entity_names[eid]] if eid in entity_names else []
            ents.add(str(eid), [*names, *entity_aliases.get(eid, [])])
        for rid, rn in relation_names.items():
            rels.add(str(rid), [rn] if isinstance(rn, str) else list(rn))
        h, r, t = array("i"), array("i"), array("i")
        for i, row in enumerate(triples):
            if isinstance(row, Triple):
                row = (row.head_id or row.head, row.relation_id or row.relation, row.tail_id or row.tail)
            try:
                a, b, c = (_clean_field(x) for x in row)
            except (TypeError, ValueError) as e:
                raise ValueError(f"from_triples: row {i} is not a (head, relation, tail) triple: {row!r}") from e
            if not (a and b and c):
                raise ValueError(f"from_triples: row {i} has an empty field: {row!r}")
            h.append(ents.get_or_add(a))
            r.append(rels.get_or_add(b))
            t.append(ents.get_or_add(c))
        return cls._from_registries(ents, rels, h, r, t, {"source": "memory"}, options)

    @classmethod
    def from_wikidata5m(
        cls,
        directory: str | Path | None = None,
        entity_file: str | Path | None = None,
        relation_file: str | Path | None = None,
        triple_files: Sequence[str | Path] | None = None,
        **options: Any,
    ) -> KnowledgeGraph:
        """Wikidata5M files: ``id\\talias1\\talias2...`` (first alias = name) and ``head\\trelation\\ttail``.

        With ``directory``, missing arguments default to ``wikidata5m_entity.txt``,
        ``wikidata5m_relation.txt`` and ``wikidata5m_all_triplet.txt`` there, or, when that is
        absent, every ``wikidata5m_{transductive,inductive}_{train,valid,test}.txt`` found there
        (or in the ``wikidata5m_transductive/`` and ``wikidata5m_inductive/`` folders), merged
        and deduplicated as in DynaSearcher. Triples whose entities have no alias line load with
        the id as name. Malformed triple lines are skipped and counted in ``stats``.
        """
        d = Path(directory) if directory is not None else None
        if d is not None and not d.is_dir():
            raise FileNotFoundError(f"Wikidata5M directory not found: {d}")
        if d is not None:
            entity_file = entity_file or _require(d / "wikidata5m_entity.txt", "Wikidata5M entity alias file")
            relation_file = relation_file or _require(d / "wikidata5m_relation.txt", "Wikidata5M relation alias file")
            if not triple_files:
                triple_files = _wikidata5m_triple_files(d)
        if not triple_files:
            raise ValueError("from_wikidata5m needs a directory or triple_files")
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "wikidata5m", "files": []}
        if entity_file is not None:
            _read_alias_file(Path(entity_file), ents, stats)
        if relation_file is not None:
            _read_alias_file(Path(relation_file), rels, stats)
        h, r, t = array("i"), array("i"), array("i")
        for f in triple_files:
            _read_triple_file(Path(f), ents, rels, h, r, t, stats)
        return cls._from_registries(ents, rels, h, r, t, stats, options)

    @classmethod
    def from_codex(
        cls,
        triples_file: str | Path,
        relations_file: str | Path | None,
        entities_file: str | Path | None = None,
        **options: Any,
    ) -> KnowledgeGraph:
        """CoDEx: ``Q1\\tP2\\tQ3`` triples, ``relations_en.json`` / ``entities_en.json`` as ``{id: {"label": ...}}``.

        Entities without a label (CoDEx ships no entity labels in some packagings) are named by id.
        """
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "codex", "files": []}
        if entities_file is not None:
            for k, label in _read_label_json(Path(entities_file), stats).items():
                ents.add(k, label)
        if relations_file is not None:
            for k, label in _read_label_json(Path(relations_file), stats).items():
                rels.add(k, label)
        h, r, t = array("i"), array("i"), array("i")
        _read_triple_file(Path(triples_file), ents, rels, h, r, t, stats)
        return cls._from_registries(ents, rels, h, r, t, stats, options)

    @classmethod
    def from_fb15k237(
        cls,
        triples_file: str | Path,
        entity2text: str | Path | None = None,
        relation2text: str | Path | None = None,
        **options: Any,
    ) -> KnowledgeGraph:
        """FB15k-237: MID triples, ``mid\\tname`` names, optional ``relation\\ttext`` names.

        Without ``relation2text`` a relation is named by the last segment of its path with
        underscores as spaces (``/people/person/place_of_birth`` -> ``place of birth``); with it,
        that readable form is kept as an alias.
        """
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "fb15k237", "files": []}
        if entity2text is not None:
            _read_alias_file(Path(entity2text), ents, stats)
        rel_text: dict[str, list[str]] = {}
        if relation2text is not None:
            tmp = _Registry()
            _read_alias_file(Path(relation2text), tmp, stats)
            ids, ptr, al = tmp.tables()
            rel_text = {ids[i]: [al[j] for j in range(ptr[i], ptr[i + 1])] for i in range(len(ids))}
        h, r, t = array("i"), array("i"), array("i")
        _read_triple_file(Path(triples_file), ents, rels, h, r, t, stats)
        # name relations only now: readable path form, after relation2text's text when given
        named = _Registry()
        for rid in rels.ids:
            readable = readable_relation(rid)
            text = [a for a in rel_text.get(rid, []) if a != rid]
            named.add(rid, [*text, readable] if text else [readable])
        return cls._from_registries(ents, named, h, r, t, stats, options)

    @classmethod
    def _from_registries(cls, ents, rels, h, r, t, stats, options) -> KnowledgeGraph:
        e_ids, e_ptr, e_al = ents.tables()
        r_ids, r_ptr, r_al = rels.tables()
        stats["entities_without_alias"] = ents.n_fallback
        stats["relations_without_alias"] = rels.n_fallback
        stats["duplicate_triples"] = 0
        heads, rels_a, tails = (np.frombuffer(a, np.int32) if len(a) else np.zeros(0, np.int32) for a in (h, r, t))
        return cls(e_ids, e_ptr, e_al, r_ids, r_ptr, r_al, heads, rels_a, tails, stats=stats, **options)

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | Path) -> Path:
        """Write everything (storage and indexes) to one ``.npz`` file; :meth:`load` reads it back."""
        from workbench.io import atomic_path

        path = Path(path)
        arrays = {
            "entity_ids_data": self.entity_ids.data,
            "entity_ids_offsets": self.entity_ids.offsets,
            "entity_alias_ptr": self.entity_alias_ptr,
            "aliases_data": self.aliases.data,
            "aliases_offsets": self.aliases.offsets,
            "relation_ids_data": self.relation_ids.data,
            "relation_ids_offsets": self.relation_ids.offsets,
            "relation_alias_ptr": self.relation_alias_ptr,
            "relation_aliases_data": self.relation_aliases.data,
            "relation_aliases_offsets": self.relation_aliases.offsets,
            "heads": self.heads,
            "rels": self.rels,
            "tails": self.tails,
            **{"index_" + k: v for k, v in self._index_arrays().items()},
        }
        meta = {"format": 1, "stats": self.stats, "threshold": self.threshold, "max_matches": self.max_matches}
        arrays["meta"] = np.frombuffer(json.dumps(meta, default=str).encode("utf-8"), np.uint8)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> KnowledgeGraph:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"knowledge-graph file not found: {path}")
        with np.load(path) as z:
            a = {k: z[k] for k in z.files}
        meta = json.loads(a.pop("meta").tobytes().decode("utf-8"))
        if meta.get("format") != 1:
            raise ValueError(f"{path}: unknown knowledge-graph file format {meta.get('format')!r}")
        index = {k[len("index_") :]: v for k, v in a.items() if k.startswith("index_")}
        opts = {"threshold": meta["threshold"], "max_matches": meta["max_matches"], **options}

        def table(name: str) -> StringTable:
            return StringTable(a[name + "_data"], a[name + "_offsets"])

        return cls(
            table("entity_ids"), a["entity_alias_ptr"], table("aliases"),
            table("relation_ids"), a["relation_alias_ptr"], table("relation_aliases"),
            a["heads"], a["rels"], a["tails"], dedupe=False, stats=meta["stats"], _index=index, **opts,
        )  # fmt: skip


# ----------------------------------------------------------------------------- search helpers


def kg_search(
    kg: KnowledgeGraph,
    entities: Any,
    relations: Any = None,
    query: Any = "",
    max_triples: int = 100,
    max_tokens: int = 1024,
    count_tokens: Callable[[str], int] | None = None,
) -> KGResult:
    """:meth:`KnowledgeGraph.search` as a function."""
    return kg.search(entities, relations, query, max_triples, max_tokens, count_tokens)


def make_kg_tool(
    kg: KnowledgeGraph,
    count_tokens: Callable[[str], int] | None = None,
    max_triples: int = 100,
    max_tokens: int = 1024,
) -> Callable[..., list[Triple]]:
    """A ``Toolbox`` tool: ``tool(entities, relations=None, query="") -> list[Triple]``.

    Also accepts DynaSearcher's request keys ``entity=`` / ``relation=``.
    """

    def kg_tool(
        entities: Any = None, relations: Any = None, query: Any = "", *, entity: Any = None, relation: Any = None
    ) -> list[Triple]:
        ents = entities if entities is not None else entity
        rels = relations if relations is not None else relation
        return kg.search(ents, rels, query, max_triples, max_tokens, count_tokens).triples

    kg_tool.__name__ = "kg_search"
    return kg_tool


def _short_repr(x: Any, n: int = 80) -> str:
    try:
        s = repr(x)
    except Exception:  # a hostile __repr__ is still just a bad input
        s = f"<{type(x).__name__}>"
    return s if len(s) <= n else s[: n - 1] + "…"


def _coerce_names(x: Any, what: str) -> tuple[list[str], list[str]]:
    """Names from a list / a single string; numbers become strings, other items are skipped."""
    if x is None:
        return [], []
    items = [x] if isinstance(x, (str, int, float)) else None
    if items is None:
        try:
            items = list(x) if isinstance(x, (list, tuple, set, frozenset)) else None
        except Exception:
            items = None
    if items is None:
        return [], [f"{what} list is not a list: {_short_repr(x)}"]
    names, skipped = [], []
    for it in items:
        if isinstance(it, bool) or not isinstance(it, (str, int, float)):
            skipped.append(f"{what} is not a string: {_short_repr(it)}")
            continue
        s = _clean_field(it)[:MAX_NAME_CHARS].strip()
        if not s:
            skipped.append(f"empty {what} name")
        elif s not in names:
            names.append(s)
    return names, skipped


def _rank_words(texts: Sequence[str]) -> list[str]:
    words: dict[str, None] = {}
    for t in texts:
        for w in name_words(normalize_name(t)):
            if w not in STOPWORDS:
                words[w] = None
                if len(words) >= MAX_RANK_WORDS:
                    return list(words)
    return list(words)


def _cut_to_tokens(triples: list[Triple], max_tokens: int, count: Callable[[str], int]) -> tuple[list[Triple], bool]:
    """Longest prefix whose rendered block is at most ``max_tokens`` tokens."""
    if not triples:
        return triples, False
    lines = render_triples(triples).split("\n")
    total, n = 0, 0
    for line in lines:  # per-line sums first (cheap), then check the real block
        c = count(line)
        if total + c > max_tokens:
            break
        total, n = total + c, n + 1
    while n > 0 and count("\n".join(lines[:n])) > max_tokens:
        n -= 1
    return triples[:n], n < len(triples)


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1).astype(np.int64)  # pragma: no cover


# ----------------------------------------------------------------------------- building helpers


def _check_ptr(what: str, ptr: np.ndarray, n: int, n_alias: int) -> None:
    if len(ptr) != n + 1 or (n + 1 and (ptr[0] != 0 or ptr[-1] != n_alias)):
        raise ValueError(f"{what}_alias_ptr must have {n + 1} entries from 0 to {n_alias}")
    if n and int(np.diff(ptr).min()) < 1:
        raise ValueError(f"every {what} needs at least one alias (use its id as its name)")


def _ptr_from_counts(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row pointers and triple indices grouped by ``keys`` (stable: storage order within a row)."""
    return _ptr_from_counts(np.bincount(keys, minlength=n)), np.argsort(keys, kind="stable").astype(np.int32)


def _first_unique_rows(h: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct (h, r, t), in original order."""
    n_e, n_r = int(max(h.max(), t.max())) + 1, int(r.max()) + 1
    if n_e * n_e * n_r < 2**62:
        _, first = _unique_first((h.astype(np.int64) * n_r + r) * n_e + t)
        return np.sort(first)
    order = np.lexsort((np.arange(len(h)), t, r, h))
    hs, rs, ts = h[order], r[order], t[order]
    new = np.ones(len(h), bool)
    new[1:] = (hs[1:] != hs[:-1]) | (rs[1:] != rs[:-1]) | (ts[1:] != ts[:-1])
    return np.sort(order[new])


def readable_relation(path: str) -> str:
    """A Freebase relation path's readable form: its last segment, underscores as spaces.

    >>> readable_relation("/people/person/spouse_s./people/marriage/type_of_union")
    'type of union'
    """
    seg = [s for s in re.split(r"[/.]", path) if s]
    return (seg[-1] if seg else path).replace("_", " ").strip() or path


class _Registry:
    """Ids -> dense indices, each with its aliases; ids never named fall back to the id itself."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.ids: list[str] = []
        self.counts = array("i")
        self._buf: list[str] = []
        self._chunks: list[str] = []
        self.n_fallback = 0

    def add(self, eid: str, aliases: Iterable[Any]) -> bool:
        """Register ``eid`` with aliases; False (ignored) if it is already known."""
        if eid in self.index:
            return False
        names = [a for a in dict.fromkeys(_clean_field(a) for a in aliases) if a]
        if not names:
            names = [eid]
            self.n_fallback += 1
        self.index[eid] = len(self.ids)
        self.ids.append(eid)
        self.counts.append(len(names))
        self._buf.append("\n".join(names) + "\n")
        if len(self._buf) >= 65536:
            self._chunks.append("".join(self._buf))
            self._buf = []
        return True

    def get_or_add(self, eid: str) -> int:
        i = self.index.get(eid)
        if i is None:
            self.add(eid, ())
            i = len(self.ids) - 1
        return i

    def tables(self) -> tuple[StringTable, np.ndarray, StringTable]:
        aliases = StringTable.from_text("".join(self._chunks) + "".join(self._buf))
        counts = np.frombuffer(self.counts, np.int32) if len(self.counts) else np.zeros(0, np.int32)
        return StringTable.from_strings(self.ids), _ptr_from_counts(counts), aliases


def _require(p: Path, what: str) -> Path:
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {p}")
    return p


def _wikidata5m_triple_files(d: Path) -> list[Path]:
    allf = d / "wikidata5m_all_triplet.txt"
    if allf.is_file():
        return [allf]
    found = []
    for setting in ("transductive", "inductive"):
        for split in ("train", "valid", "test"):
            name = f"wikidata5m_{setting}_{split}.txt"
            for p in (d / name, d / f"wikidata5m_{setting}" / name):
                if p.is_file():
                    found.append(p)
                    break
    if not found:
        raise FileNotFoundError(
            f"no Wikidata5M triple file in {d}: expected wikidata5m_all_triplet.txt or "
            "wikidata5m_{transductive,inductive}_{train,valid,test}.txt"
        )
    return found


def _open_text(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    return open(path, encoding="utf-8", errors="replace", newline="")


def _read_alias_file(path: Path, reg: _Registry, stats: dict[str, Any]) -> None:
    """``id\\talias1\\talias2...`` lines; a line with an empty id is an error (file and line named)."""
    dup = 0
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            eid = _clean_field(parts[0])
            if not eid:
                raise ValueError(f"{path}:{lineno}: malformed line (empty id before the first tab): {line[:120]!r}")
            if not reg.add(eid, parts[1:]):
                dup += 1
    stats.setdefault("files", []).append(str(path))
    stats["duplicate_alias_lines"] = stats.get("duplicate_alias_lines", 0) + dup


def _read_label_json(path: Path, stats: dict[str, Any]) -> dict[str, list[str]]:
    """``{id: {"label": ...}}`` (or ``{id: "label"}``) -> id -> [label]."""
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(obj, dict):
        raise ValueError(f'{path}:1: expected a JSON object {{id: {{"label": ...}}}}, got {type(obj).__name__}')
    out: dict[str, list[str]] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            label = v.get("label")
            out[str(k)] = [label] if isinstance(label, str) else []
        elif isinstance(v, str):
            out[str(k)] = [v]
        else:
            raise ValueError(f"{path}: entry {k!r} is neither an object with a 'label' nor a string")
    stats.setdefault("files", []).append(str(path))
    return out


def _read_triple_file(
    path: Path,
    ents: _Registry,
    rels: _Registry,
    h: array,
    r: array,
    t: array,
    stats: dict[str, Any],
) -> None:
    """Tab-separated ``head relation tail`` lines; malformed lines are skipped and counted."""
    bad = 0
    examples: list[str] = stats.setdefault("malformed_examples", [])
    eget, rget = ents.index.get, rels.index.get
    n0 = len(h)
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 3:
                if not line.strip():
                    continue
                if "\t" not in line:  # tolerate space-separated ids
                    parts = line.split()
            if len(parts) == 3:
                a, b, c = parts[0].strip(), parts[1].strip(), parts[2].strip()
            if len(parts) != 3 or not (a and b and c):
                bad += 1
                if len(examples) < 5:
                    examples.append(f"{path}:{lineno}: {line.rstrip()[:120]!r}")
                continue
            i = eget(a)
            if i is None:
                i = ents.get_or_add(_clean_field(a))
            j = rget(b)
            if j is None:
                j = rels.get_or_add(_clean_field(b))
            k = eget(c)
            if k is None:
                k = ents.get_or_add(_clean_field(c))
            h.append(i)
            r.append(j)
            t.append(k)
    stats.setdefault("files", []).append(str(path))
    stats["malformed_lines"] = stats.get("malformed_lines", 0) + bad
    if len(h) == n0 and bad:
        raise ValueError(f"{path}: no valid triple line ({bad} malformed; first: {examples[0] if examples else '?'})")


# ----------------------------------------------------------------------------- KG filter (Table 6)

#: DynaSearcher Table 6, the KG filtering prompt, verbatim. The PDF text flattens the example
#: answer onto one line; we lay it out as a header row and a data row inside ``<evidence>``.
FILTER_PROMPT = """You are an information extraction expert. Given an input of query, entities and relations, your task is to extract the most relevant evidence(s). If there is no relevant one, return "None". The names of entities or relations can be multiple alias, retain the exact one.

For example,

<input> {"query": "Who is the director of Avatar", "entity": ["Avatar"], "relation": ["director"]} </input>
<result>
  {"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y1", "relation": "distinct element of; has class", "entity2_id": "x2", "entity2": "character code; codeset"}
  {"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y2", "relation": "director; directed", "entity2_id": "x3", "entity2": "James Cameron; james cameron; James Cameron"}
</result>
start extracting:
<evidence>
entity1; relation; entity2
Avatar; director; James Cameron
</evidence>
Now, start!

<input> {input} </input>
<result>
{result}
</result>
start extracting:
"""


@dataclass
class FilterResult:
    """The KG filter's outcome. On an unusable answer ``ok`` is False and ``kept`` holds the unfiltered top triples."""

    kept: list[Triple]
    ok: bool
    error: str | None
    raw: str
    prompt: str
    kept_indices: list[int] = field(default_factory=list)
    """0-based positions in the input list of the kept triples."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_filter_prompt(
    triples: Sequence[Triple],
    question: str,
    query: str,
    sub_query: str | None = None,
    entities: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
) -> str:
    """Table 6 prompt with the request (question, query, sub-query, entities, relations) and numbered triples.

    ``query`` is the search request's query; ``sub_query`` the current sub-question when the
    caller tracks one separately. The paper's example input holds query / entity / relation;
    the question and sub-query are added as the paper's text says the filter sees them.
    """
    inp: dict[str, Any] = {"question": str(question), "query": str(query)}
    if sub_query:
        inp["sub_query"] = str(sub_query)
    inp["entity"] = [str(e) for e in (entities or [])]
    inp["relation"] = [str(r) for r in (relations or [])]
    rows = []
    for i, t in enumerate(triples, 1):
        row = {
            "entity1_id": t.head_id, "entity1": t.head, "relation_id": t.relation_id,
            "relation": t.relation, "entity2_id": t.tail_id, "entity2": t.tail,
        }  # fmt: skip
        rows.append(f"  [{i}] " + json.dumps({k: clean_text(v, 300) for k, v in row.items()}, ensure_ascii=False))
    return FILTER_PROMPT.replace("{input}", json.dumps(inp, ensure_ascii=False)).replace("{result}", "\n".join(rows))


_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_EVIDENCE_RE = re.compile(r"<evidence>(.*?)(?:</evidence>|$)", re.S | re.I)
_HEADER_RE = re.compile(r"^\s*entity\s*1\s*;\s*relation\s*;\s*entity\s*2\s*", re.I)
_INDEX_LINE_RE = re.compile(r"^[\s\[\]().,;#]*\d+(?:[\s\[\]().,;#]+\d+)*[\s\[\]().,;#]*$")
_INDEX_PREFIX_RE = re.compile(r"^\s*(?:\[(\d+)\]|(\d+)[.):])\s*")


def parse_filter_answer(raw: str, triples: Sequence[Triple]) -> tuple[list[int] | None, str | None]:
    """Positions of the triples an answer keeps, or ``(None, why)`` when it is unusable.

    Accepts the paper's ``<evidence> head; relation; tail </evidence>`` (one per line, header row
    optional), numbered indices (``[2]``, ``2.``, ``1, 3``), and echoed triples (``(h, r, t)`` or
    the JSON rows of the prompt). ``None`` (no relevant evidence) gives ``([], None)``.
    """
    text = _THINK_RE.sub(" ", str(raw or "")).strip()
    if not text:
        return None, "empty answer"
    blocks = _EVIDENCE_RE.findall(text)
    body = "\n".join(blocks) if blocks else text
    body = _HEADER_RE.sub("", body.strip())
    if normalize_name(body) in ("none", "") and (blocks or normalize_name(text) == "none"):
        return [], None
    keys = [tuple(normalize_name(x) for x in (t.head, t.relation, t.tail)) for t in triples]
    joined = [" ".join(k) for k in keys]
    found: list[int] = []
    for line in re.split(r"\n|</?evidence>", body):
        line = _HEADER_RE.sub("", line).strip()
        if not line:
            continue
        for i in _parse_line(line, triples, keys, joined):
            if i not in found:
                found.append(i)
    if not found:
        why = "answer names no given triple" if blocks or ";" in body else "answer is prose without evidence or indices"
        return None, why
    return found, None


def _parse_line(line: str, triples: Sequence[Triple], keys: list[tuple[str, ...]], joined: list[str]) -> list[int]:
    n = len(triples)
    if _INDEX_LINE_RE.match(line):
        return [int(d) - 1 for d in re.findall(r"\d+", line) if 1 <= int(d) <= n]
    m = _INDEX_PREFIX_RE.match(line)
    if m and 1 <= int(m.group(1) or m.group(2)) <= n:
        rest = line[m.end() :].strip()  # "[2] (h, r, t)": trust the echoed triple over the number
        by_content = _parse_line(rest, triples, keys, joined) if rest else []
        return by_content or [int(m.group(1) or m.group(2)) - 1]
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            ids = (obj.get("entity1_id"), obj.get("relation_id"), obj.get("entity2_id"))
            for i, t in enumerate(triples):
                if all(ids) and ids == (t.head_id, t.relation_id, t.tail_id):
                    return [i]
            line = "; ".join(str(obj.get(k, "")) for k in ("entity1", "relation", "entity2"))
    if line.startswith("(") and line.endswith(")"):
        line = line[1:-1]
    parts = [normalize_name(p) for p in (line.split(";") if ";" in line else line.split(","))]
    if len(parts) == 3 and tuple(parts) in keys:
        return [keys.index(tuple(parts))]
    # names with ';' or ',' inside, or small slips: closest whole triple, if close enough
    flat = " ".join(name_words(normalize_name(line)))
    if not flat:
        return []
    best = process.extractOne(flat, [" ".join(name_words(j)) for j in joined], scorer=fuzz.ratio, score_cutoff=90)
    return [best[2]] if best else []


def kg_filter(
    triples: Sequence[Triple],
    question: str,
    query: str,
    sub_query: str | None = None,
    *,
    llm: Callable[[str], str],
    max_keep: int = 5,  # DynaSearcher: "up to five"
    entities: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
) -> FilterResult:
    """DynaSearcher's KG filter: an LLM keeps at most ``max_keep`` of the matched triples (Table 6).

    An unusable answer (the call raised, empty, prose, names nothing given) is recorded as
    ``ok=False`` with ``error`` saying why, and ``kept`` falls back to the first ``max_keep``
    triples (the search ranking). An explicit "None" answer is usable: nothing is kept.
    """
    triples = list(triples)
    prompt = build_filter_prompt(triples, question, query, sub_query, entities, relations)
    if not triples:
        return FilterResult([], True, None, "", prompt)
    fallback = triples[:max_keep]
    try:
        raw = llm(prompt)
    except Exception as e:  # the failure is recorded, the rollout goes on
        return FilterResult(
            fallback, False, f"llm raised {type(e).__name__}: {e}", "", prompt, list(range(len(fallback)))
        )
    raw = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    idx, why = parse_filter_answer(raw, triples)
    if idx is None:
        return FilterResult(fallback, False, why, raw, prompt, list(range(len(fallback))))
    idx = idx[:max_keep]
    return FilterResult([triples[i] for i in idx], True, None, raw, prompt, idx)
