"""Entity matching and DynaSearcher's KG search over a :class:`~workbench.tools.kg.store.KnowledgeGraph`.

:class:`GraphSearch` holds the matching (exact, then fuzzy through the symmetric-delete candidate
index built by the store) and ``search`` (1-hop triples ranked by shared words, capped); the
store's class inherits it. The recipe is described in :mod:`workbench.tools.kg`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from rapidfuzz import process

from workbench.core.types import Triple
from workbench.tools.base import clean_text, render_triples
from workbench.tools.kg.strings import (
    _LEN_CAP,
    LONG_FUZZY_WORD,
    MAX_DELETE_WORD,
    MAX_FUZZY_POSTINGS,
    MAX_NAME_CHARS,
    MAX_NAMES_PER_CALL,
    MAX_QUERY_CHARS,
    MAX_RANK_WORDS,
    MAX_WORD_VARIANTS,
    MIN_FUZZY_WORD,
    STOPWORDS,
    _clean_field,
    _gather_ranges,
    _py_delete_hashes,
    _py_hash,
    _sorted_unique,
    _str_hash,
    _unique_first,
    approx_token_count,
    name_words,
    normalize_name,
)

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


# ----------------------------------------------------------------------------- matching and search


class GraphSearch:
    """Entity matching and search; mixed into :class:`~workbench.tools.kg.store.KnowledgeGraph`,
    whose storage and indexes (``aliases``, ``_exact``, ``_vocab``, ``_deletes``, postings) it reads."""

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


def kg_search(
    kg: GraphSearch,
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
    kg: GraphSearch,
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
