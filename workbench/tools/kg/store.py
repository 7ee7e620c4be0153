"""The knowledge graph's storage: entities, aliases, relations and triples in numpy, with CSR
adjacency, the exact-alias / id hash indexes, the word vocabulary, word -> alias postings and the
symmetric-delete index that fuzzy matching uses; ``save`` / ``load`` to one ``.npz``.

:class:`KnowledgeGraph` inherits matching and search (:class:`~workbench.tools.kg.search.GraphSearch`)
and the file readers (:class:`~workbench.tools.kg.readers.GraphReaders`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz

from workbench.core.types import Triple
from workbench.tools.kg.readers import GraphReaders
from workbench.tools.kg.search import GraphSearch
from workbench.tools.kg.strings import (
    _LEN_CAP,
    MAX_DELETE_WORD,
    MIN_FUZZY_WORD,
    StringTable,
    _chunks_by_size,
    _gather_ranges,
    _HashIndex,
    _line_spans,
    _normalize_block,
    _ptr_from_counts,
    _py_hash,
    _seg_delete_hashes,
    _seg_hash,
    _unique_first,
    name_words,
    normalize_name,
)

# ----------------------------------------------------------------------------- the graph


class KnowledgeGraph(GraphSearch, GraphReaders):
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

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | Path) -> Path:
        """Write everything (storage and indexes) to one ``.npz`` file; :meth:`load` reads it back."""
        from workbench.util.io import atomic_path

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


# ----------------------------------------------------------------------------- building helpers


def _check_ptr(what: str, ptr: np.ndarray, n: int, n_alias: int) -> None:
    if len(ptr) != n + 1 or (n + 1 and (ptr[0] != 0 or ptr[-1] != n_alias)):
        raise ValueError(f"{what}_alias_ptr must have {n + 1} entries from 0 to {n_alias}")
    if n and int(np.diff(ptr).min()) < 1:
        raise ValueError(f"every {what} needs at least one alias (use its id as its name)")


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
