"""BM25 over corpora too large for one in-memory index (wiki-18's 21M passages): shards in bm25s's on-disk
format, corpus-global statistics, memory-mapped at query time.

An index directory::

    sharded.json                 n_docs, n_vocab, avg_doc_len, k1, b, method, shards [{name, n_docs, offset}]
    shard_00000/                 one bm25s index (``bm25s.BM25.load(dir, mmap=True)`` opens it):
        data.csc.index.npy       float32 BM25 weight of each (term, doc) posting, column-major by term
        indices.csc.index.npy    int32 doc index inside the shard
        indptr.csc.index.npy     int64 start of each term's postings (n_vocab + 1)
        params.index.json        bm25s's parameters (lucene, k1, b, num_docs)
        vocab.index.json         {term id: term id} (a link to ../vocab.index.json: written once)
        maxw.index.npy           ours: each term's largest weight in the shard (bm25s ignores it)

Building is streaming, two passes (:class:`ShardedBM25Builder`): ``add_shard(token_ids, lengths)`` turns one
shard's documents (a flat array of term ids and the length of each document) into postings with their term
frequencies, written to disk, and adds its document frequencies to the global counts; ``finish()`` computes
the global IDF and average length and writes each shard's BM25 weights. So each weight equals the one a single
bm25s index over the whole corpus holds (Lucene's BM25, ``idf = log(1 + (N - df + .5) / (df + .5))``,
``tf / (tf + k1 (1 - b + b |d| / avgdl))``; tested against bm25s), and only one shard is ever in memory.

:class:`ShardedBM25` answers queries of term ids with the exact top-k, shard by shard, by MaxScore: once k
documents are found, the query terms whose largest weights in a shard sum below the k-th best score cannot
bring a document into the top-k alone, so only the other terms' postings (slices of the mmapped arrays) are
added up, and the skipped terms' weights of those candidates are found by binary search. Frequent terms, whose
postings are millions long and whose weights are small, are mostly skipped. (An index without ``maxw`` is
searched exhaustively: every query term's postings added into one score array.)

A text index (:func:`build_text_index`: bm25s's tokenizer, a passage store) is searched by
:class:`ShardedBM25Search`, which ``workbench serve-retrieval --index-dir`` serves.

    >>> b = ShardedBM25Builder("/tmp/idx", n_vocab=4)                          # doctest: +SKIP
    >>> b.add_shard(np.array([0, 1, 1, 2]), np.array([2, 2])); b.finish()      # doctest: +SKIP
    >>> ShardedBM25.load("/tmp/idx").search_ids([[1, 2]], k=1)                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from workbench.core.types import Hit, Passage

META = "sharded.json"
FILES = {"data": "data.csc.index.npy", "indices": "indices.csc.index.npy", "indptr": "indptr.csc.index.npy"}
TF_FILE = "tf.build.npy"  # pass 1's term frequencies, replaced by the weights in pass 2
MAXW = "maxw.index.npy"  # ours: each term's largest weight in the shard (MaxScore's bound; bm25s ignores the file)


def bm25_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's IDF, as bm25s's ``method="lucene"`` (0 for terms in no document)."""
    df = np.asarray(df, dtype=np.float64)
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    return np.where(df > 0, idf, 0.0)


def shard_postings(token_ids: np.ndarray, lengths: np.ndarray, n_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One shard's postings in CSC order: ``(indptr int64 [V+1], doc int32 [P], tf int32 [P])``.

    ``token_ids``: every document's term ids one after another; ``lengths``: tokens per document.
    """
    token_ids = np.asarray(token_ids)
    lengths = np.asarray(lengths, dtype=np.int64)
    n_docs = len(lengths)
    if int(lengths.sum()) != len(token_ids):
        raise ValueError(f"lengths sum to {int(lengths.sum())} but there are {len(token_ids)} token ids")
    if len(token_ids) and (int(token_ids.min()) < 0 or int(token_ids.max()) >= n_vocab):
        raise ValueError(f"term ids must lie in [0, {n_vocab}); got {int(token_ids.min())}..{int(token_ids.max())}")
    bits = max(1, int(n_docs - 1).bit_length())
    key = token_ids.astype(np.int64) << bits  # term-major, then doc: sorted keys are CSC order
    key |= np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    key.sort()
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    tf = np.diff(np.append(starts, len(key))).astype(np.int32)
    key = key[starts]
    doc = (key & ((1 << bits) - 1)).astype(np.int32)
    counts = np.bincount(key >> bits, minlength=n_vocab)
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, doc, tf


def term_max(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each term's largest posting weight (0 for a term with no postings): float32 ``[n_vocab]``."""
    counts = np.diff(indptr)
    out = np.zeros(len(counts), dtype=np.float32)
    nz = counts > 0
    if nz.any():
        out[nz] = np.maximum.reduceat(data, indptr[:-1][nz])  # segments run to the next non-empty term's start
    return out


class ShardedBM25Builder:
    """Streaming two-pass build of a sharded index (see the module docstring).

    Args:
        out_dir: the index directory (created).
        n_vocab: number of term ids so far (the ids of ``add_shard`` lie in ``[0, n_vocab)``); a shard may
            raise it (``add_shard(..., n_vocab=)``: a tokenizer's vocabulary grows as it reads the corpus).
        k1, b: BM25 parameters (default: Pyserini's 0.9 / 0.4, as ``workbench.tools.bm25``).
    """

    def __init__(self, out_dir: str | os.PathLike, n_vocab: int = 0, k1: float = 0.9, b: float = 0.4):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.n_vocab, self.k1, self.b = int(n_vocab), float(k1), float(b)
        self.df = np.zeros(self.n_vocab, dtype=np.int64)
        self.shards: list[dict] = []
        self.total_len = 0

    def add_shard(self, token_ids: np.ndarray, lengths: np.ndarray, n_vocab: int | None = None) -> None:
        """Pass 1 for one shard: its postings and term frequencies to disk, its counts into the global ones."""
        if n_vocab is not None and n_vocab > self.n_vocab:
            self.df = np.concatenate([self.df, np.zeros(n_vocab - self.n_vocab, dtype=np.int64)])
            self.n_vocab = int(n_vocab)
        indptr, doc, tf = shard_postings(token_ids, lengths, self.n_vocab)
        name = f"shard_{len(self.shards):05d}"
        d = self.out / name
        d.mkdir(exist_ok=True)
        np.save(d / FILES["indptr"], indptr)
        np.save(d / FILES["indices"], doc)
        np.save(d / TF_FILE, tf)
        np.save(d / "doc_len.build.npy", np.asarray(lengths, dtype=np.int32))
        self.df += np.diff(indptr)
        self.total_len += int(np.sum(lengths))
        offset = self.shards[-1]["offset"] + self.shards[-1]["n_docs"] if self.shards else 0
        self.shards.append({"name": name, "n_docs": int(len(lengths)), "offset": int(offset)})

    def finish(self, vocab: dict[str, int] | None = None, **extra: object) -> dict:
        """Pass 2: global IDF and average length, then each shard's BM25 weights; returns the index metadata.

        ``vocab``: ``{term: id}`` written as ``vocab.index.json`` (default ``{id: id}``); ``extra``: kept in the metadata.
        """
        n_docs = sum(s["n_docs"] for s in self.shards)
        if not n_docs:
            raise ValueError("the sharded index has no documents: call add_shard first")
        with open(self.out / "vocab.index.json", "w", encoding="utf-8") as f:
            json.dump(vocab if vocab is not None else {str(i): i for i in range(self.n_vocab)}, f, ensure_ascii=False)
        avg = self.total_len / n_docs
        idf = bm25_idf(self.df, n_docs)
        for s in self.shards:
            d = self.out / s["name"]
            indptr = np.load(d / FILES["indptr"])
            if len(indptr) < self.n_vocab + 1:  # a shard written before the vocabulary grew: no postings for new ids
                indptr = np.concatenate([indptr, np.full(self.n_vocab + 1 - len(indptr), indptr[-1])])
                np.save(d / FILES["indptr"], indptr)
            doc = np.load(d / FILES["indices"])
            tf = np.load(d / TF_FILE).astype(np.float64)
            doc_len = np.load(d / "doc_len.build.npy").astype(np.float64)
            term = np.repeat(np.arange(self.n_vocab, dtype=np.int32), np.diff(indptr))
            norm = self.k1 * ((1 - self.b) + self.b * doc_len[doc] / avg)
            data = (idf[term] * (tf / (norm + tf))).astype(np.float32)  # bm25s: idf * tfc, stored float32
            del term, norm, tf
            np.save(d / FILES["data"], data)
            np.save(d / MAXW, term_max(data, indptr))
            (d / TF_FILE).unlink()
            (d / "doc_len.build.npy").unlink()
            params = {"k1": self.k1, "b": self.b, "delta": 0.5, "method": "lucene", "idf_method": "lucene",
                      "dtype": "float32", "int_dtype": "int32", "num_docs": s["n_docs"], "backend": "numpy"}
            (d / "params.index.json").write_text(json.dumps(params, indent=4))
            link = d / "vocab.index.json"
            if not link.exists():
                link.symlink_to(Path("..") / "vocab.index.json")
        meta = {"n_docs": n_docs, "n_vocab": self.n_vocab, "avg_doc_len": avg, "k1": self.k1, "b": self.b,
                "method": "lucene", **extra, "shards": self.shards}
        (self.out / META).write_text(json.dumps(meta, indent=1))
        return meta


class ShardedBM25:
    """Query a sharded index (see the module docstring); ``mmap=True`` (default) reads postings from disk on demand."""

    def __init__(self, meta: dict, shards: list[dict[str, np.ndarray]]):
        self.meta, self.shards = meta, shards
        self.n_docs = int(meta["n_docs"])
        self.offsets = [int(s["offset"]) for s in meta["shards"]]
        self._scores = np.zeros(self.n_docs, dtype=np.float32)  # reused; only touched entries are reset
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True) -> ShardedBM25:
        path = Path(path)
        if not (path / META).exists():
            raise FileNotFoundError(f"{path} is not a sharded BM25 index (no {META}): build one with "
                                    "workbench.tools.bm25_sharded.ShardedBM25Builder")
        meta = json.loads((path / META).read_text())
        mode = "r" if mmap else None
        # np.asarray: plain views of the maps (np.memmap's per-slice bookkeeping is a tenth of a query's time)
        files = {**FILES, "maxw": MAXW}
        shards = [{k: np.asarray(np.load(path / s["name"] / f, mmap_mode=mode)) for k, f in files.items()
                   if (path / s["name"] / f).exists()} for s in meta["shards"]]
        return cls(meta, shards)

    def search_ids(self, queries: Sequence[Sequence[int]], k: int = 10) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Top-``k`` per query of term ids: ``(doc ids, scores)`` lists (global doc ids, best first, score > 0)."""
        docs, scores = [], []
        one = self._maxscore if all("maxw" in sh for sh in self.shards) else self._exhaustive
        with self._lock:
            for q in queries:
                d, s = one(np.asarray(q, dtype=np.int64), int(k))
                docs.append(d)
                scores.append(s)
        return docs, scores

    def _maxscore(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k by MaxScore (Turtle & Flood 1995), shard by shard with the running k-th best score ``thr``:
        the query terms whose largest weights in the shard sum below ``thr`` ("non-essential") cannot put a
        document in the top-k alone, so only the other terms' postings are accumulated; the non-essential
        terms' weights of those candidates are then looked up by binary search (postings are sorted by doc)."""
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = q[(q >= 0) & (q < int(self.meta["n_vocab"]))]
        if k <= 0 or not len(q):
            return empty
        terms, mult = np.unique(q, return_counts=True)  # a repeated query term counts again, as in bm25s
        mult = mult.astype(np.float32)
        best_d, best_s = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        thr = np.float32(0)
        for sh, off in zip(self.shards, self.offsets):
            ub = sh["maxw"][terms] * mult
            order = np.argsort(ub, kind="stable")
            n_non = int(np.searchsorted(np.cumsum(ub[order]), thr, side="left")) if thr > 0 else 0
            if n_non >= len(terms):
                continue  # no document of this shard can reach the top-k
            acc, parts = self._scores, []
            for j in order[n_non:]:
                a, b = int(sh["indptr"][terms[j]]), int(sh["indptr"][terms[j] + 1])
                if a < b:
                    idx = sh["indices"][a:b].astype(np.int64)
                    acc[idx] += sh["data"][a:b] * mult[j]
                    parts.append(idx)
            if not parts:
                continue
            cand = np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0]
            sc = acc[cand]
            for p in parts:  # reset only what this shard touched
                acc[p] = 0
            rest = float(ub[order[:n_non]].sum())
            keep = (sc + rest >= thr) & (sc > 0) if n_non else sc > 0
            cand, sc = cand[keep], sc[keep]
            for j in order[:n_non]:
                a, b = int(sh["indptr"][terms[j]]), int(sh["indptr"][terms[j] + 1])
                col = sh["indices"][a:b]
                pos = np.searchsorted(col, cand)
                hit = pos < len(col)
                hit[hit] = col[pos[hit]] == cand[hit]
                sc[hit] += sh["data"][a + pos[hit]] * mult[j]
            best_d = np.concatenate([best_d, cand + off])
            best_s = np.concatenate([best_s, sc.astype(np.float32)])
            if len(best_s) > k:
                top = np.argpartition(-best_s, k - 1)[:k]
                best_d, best_s = best_d[top], best_s[top]
            if len(best_s) == k:
                thr = best_s.min()
        order = np.lexsort((best_d, -best_s))  # best first; ties by doc id
        return best_d[order], best_s[order]

    def _exhaustive(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Every query term's postings added into one score array over all documents (an index without ``maxw``)."""
        acc = self._scores
        q = q[(q >= 0) & (q < int(self.meta["n_vocab"]))]
        if k <= 0 or not len(q):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        touched: list[list[np.ndarray]] = []  # per query term, its docs (global ids) per shard
        for t in q:
            per_term = []
            for sh, off in zip(self.shards, self.offsets):
                a, b = int(sh["indptr"][t]), int(sh["indptr"][t + 1])
                if a == b:
                    continue
                idx = sh["indices"][a:b].astype(np.int64) + off  # intp once: numpy indexes with intp
                acc[idx] += sh["data"][a:b]  # a term's postings name each document once: no np.add.at needed
                per_term.append(idx)
            touched.append(per_term)
        flat = [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in touched]
        # exact top-k without scanning all N: the k-th best among the rarest term's docs bounds the k-th best overall
        rare = min((f for f in flat if len(f)), key=len, default=None)
        if rare is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        thr = np.partition(acc[rare], len(rare) - k)[len(rare) - k] if len(rare) >= k else np.float32(0)
        cand = np.unique(np.concatenate([f[acc[f] >= thr] for f in flat]))
        vals = acc[cand]
        keep = vals > 0
        cand, vals = cand[keep], vals[keep]
        if len(cand) > k:
            top = np.argpartition(-vals, k - 1)[:k]
            cand, vals = cand[top], vals[top]
        order = np.lexsort((cand, -vals))  # best first; ties by doc id
        for f in flat:  # reset only what this query touched
            acc[f] = 0
        return cand[order], vals[order].astype(np.float32)

    def scores_ids(self, q: Sequence[int]) -> np.ndarray:
        """The full score vector of one query (all N documents): for tests and small indexes."""
        out = np.zeros(self.n_docs, dtype=np.float32)
        for t in np.asarray(q, dtype=np.int64):
            for sh, off in zip(self.shards, self.offsets):
                a, b = int(sh["indptr"][t]), int(sh["indptr"][t + 1])
                out[sh["indices"][a:b].astype(np.int64) + off] += sh["data"][a:b]
        return out


# --------------------------------------------------------------------------- text: a corpus served by serve-retrieval

PASSAGES, OFFSETS, TOKENIZER_VOCAB = "passages.jsonl", "passages.offsets.npy", "vocab.tokenizer.json"


def build_text_index(passages: Iterable[Passage], out_dir: str | os.PathLike, shard_size: int = 1_000_000,
                     k1: float = 0.9, b: float = 0.4, stopwords: str = "en") -> dict:
    """Stream ``passages`` (e.g. :func:`~workbench.data.corpora.iter_flashrag_corpus` over wiki-18) into a sharded
    index with bm25s's tokenizer (``title + text``, as :class:`~workbench.tools.bm25.BM25Search`) and a passage
    store (``passages.jsonl`` plus byte offsets), one shard in memory at a time; returns the metadata."""
    import logging

    from bm25s.tokenization import Tokenizer

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    out = Path(out_dir)
    builder = ShardedBM25Builder(out, 0, k1, b)
    tok = Tokenizer(stopwords=stopwords)
    offsets, pos = [np.zeros(1, dtype=np.int64)], 0
    with open(out / PASSAGES, "wb") as store:
        for chunk in _batched(passages, shard_size):
            ids = tok.tokenize([f"{p.title} {p.text}" for p in chunk], update_vocab=True, return_as="ids",
                               show_progress=False)
            lengths = np.array([len(d) for d in ids], dtype=np.int64)
            flat = np.fromiter((t for d in ids for t in d), dtype=np.int32, count=int(lengths.sum()))
            builder.add_shard(flat, lengths, n_vocab=len(tok.word_to_id))
            lines = [(json.dumps(p.to_dict(), ensure_ascii=False) + "\n").encode("utf-8") for p in chunk]
            store.writelines(lines)
            offsets.append(pos + np.cumsum([len(x) for x in lines], dtype=np.int64))
            pos = int(offsets[-1][-1])
    np.save(out / OFFSETS, np.concatenate(offsets))
    tok.save_vocab(out, TOKENIZER_VOCAB)
    return builder.finish(vocab=tok.get_vocab_dict(), stopwords=stopwords)


def _batched(items: Iterable[Passage], n: int) -> Iterator[list[Passage]]:
    chunk: list[Passage] = []
    for p in items:
        chunk.append(p)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def is_text_index(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory :func:`build_text_index` wrote."""
    p = Path(path)
    return p.is_dir() and (p / META).exists() and (p / PASSAGES).exists()


class ShardedBM25Search:
    """``search(query, k) -> list[Hit]`` over a :func:`build_text_index` directory, memory-mapped: the same hits as
    :class:`~workbench.tools.bm25.BM25Search` over the same passages (scores equal; order of ties may differ)."""

    name = "bm25"

    def __init__(self, path: str | os.PathLike):
        from bm25s.tokenization import Tokenizer

        path = Path(path)
        if not is_text_index(path):
            raise FileNotFoundError(f"{path} is not a sharded BM25 text index (no {META} and {PASSAGES}): build it "
                                    "with `workbench serve-retrieval --corpus FILE --index-dir DIR`")
        self.index = ShardedBM25.load(path)
        self._tok = Tokenizer(stopwords=self.index.meta.get("stopwords", "en"))
        self._tok.load_vocab(path, TOKENIZER_VOCAB)
        self._offsets = np.load(path / OFFSETS, mmap_mode="r")
        self._store = open(path / PASSAGES, "rb")  # noqa: SIM115  (kept open for the searcher's life)
        self._store_lock = threading.Lock()

    def __len__(self) -> int:
        return self.index.n_docs

    def __call__(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int = 5) -> list[list[Hit]]:
        if k <= 0 or not queries:
            return [[] for _ in queries]
        q_ids = self._tok.tokenize([str(q) for q in queries], update_vocab=False, return_as="ids", show_progress=False)
        docs, scores = self.index.search_ids(q_ids, k=int(k))
        return [[Hit.from_passage(self.passage(int(d)), float(s)) for d, s in zip(ds, ss)] for ds, ss in zip(docs, scores)]

    def passage(self, i: int) -> Passage:
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        with self._store_lock:
            self._store.seek(a)
            rec = json.loads(self._store.read(b - a))
        return Passage(**rec)
