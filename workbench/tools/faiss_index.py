"""Dense search over a faiss index file: Search-R1's own ``e5_Flat.index`` over ``wiki-18.jsonl``, or any index whose
row ``i`` embeds passage ``i`` of its corpus.

:class:`FaissSearch` encodes each query with the index's encoder (its query prefix: ``"query: "`` for e5; its pooling:
mean for e5, as Search-R1 encodes; unit length), searches the index and returns ``Hit(id, title, text, score)`` of
the corpus rows it names. Scores are what the index computes: the inner product (cosine for unit vectors) for an
inner-product index, the negative squared distance for an L2 one, so a higher score is always better.

The index is memory-mapped where its type allows (``faiss.IO_FLAG_MMAP_IFC``: the vectors of flat, IVF and HNSW
indexes stay in the file and the page cache, not in the process's own memory), so a 21M-passage index opens in
well under a second and several servers on one machine share its pages; ``mapped`` says whether it was. With a
:class:`~workbench.data.jsonl_corpus.JsonlCorpus` the passages stay in their file too. An IVF index searches the
``nprobe`` lists it was saved with and an HNSW one its ``efSearch``, unless given here.

    >>> s = FaissSearch("e5_Flat.index", JsonlCorpus("wiki-18.jsonl"), load_encoder("/models/e5-base-v2"))  # doctest: +SKIP
    >>> s.search("who wrote hamlet", k=3)[0].title                                                          # doctest: +SKIP
    'Hamlet'
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.core.types import Hit, Passage
from workbench.tools.dense import EncodedSearch, as_encoder

log = logging.getLogger(__name__)


def read_index(path: str | os.PathLike, mmap: bool = True) -> tuple[Any, bool]:
    """``(index, mapped)``: the faiss index at ``path``, memory-mapped read-only when ``mmap`` and its type allows
    (else read into memory, with a warning saying so)."""
    import faiss

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"faiss index not found: {path}")
    if mmap:
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY), True  # faiss >= 1.10
        except RuntimeError as e:  # an index type whose data faiss cannot map
            log.warning("%s cannot be memory-mapped (%s): reading it into memory", path, str(e).splitlines()[0][:200])
    try:
        return faiss.read_index(str(path)), False
    except RuntimeError as e:
        raise ValueError(f"{path} is not a faiss index faiss can read: {str(e).splitlines()[0][:200]}") from None


def metric_name(index: Any) -> str:
    """``ip`` (inner product) or ``l2``, the metric ``index`` scores with."""
    import faiss

    return {faiss.METRIC_INNER_PRODUCT: "ip", faiss.METRIC_L2: "l2"}.get(index.metric_type, str(index.metric_type))


class FaissSearch(EncodedSearch):
    """``search(query, k) -> list[Hit]`` over a faiss index and the corpus its rows embed (see the module docstring).

    Args:
        index: the index file (or a faiss index object).
        passages: row ``i`` of the index is ``passages[i]`` (a list, or a lazy
            :class:`~workbench.data.jsonl_corpus.JsonlCorpus`); their numbers must agree.
        encoder: the model the index was built with (an :class:`~workbench.tools.dense.Encoder`, a path, or None
            for the default MiniLM); its dimension must be the index's.
        mmap: memory-map the index where its type allows.
        nprobe / ef_search: IVF lists / HNSW candidates searched per query (None: as saved in the index).
    """

    name = "dense-faiss"

    def __init__(self, index: Any, passages: Sequence[Passage], encoder: Any = None, *, mmap: bool = True,
                 nprobe: int | None = None, ef_search: int | None = None):
        t0 = time.perf_counter()
        self.path = None if hasattr(index, "search") else Path(index)
        self.index, self.mapped = (index, False) if self.path is None else read_index(self.path, mmap)
        self.load_seconds = time.perf_counter() - t0
        self.passages = passages
        where = self.path or "the index"
        if self.index.ntotal != len(passages):
            raise ValueError(f"{where} holds {self.index.ntotal} vectors but the corpus has {len(passages)} passages: "
                             "give the corpus file the index was built from (row i of the index = passage i)")
        self.encoder = as_encoder(encoder)
        self.check_encoder()
        self._set_search_params(nprobe, ef_search)

    def _set_search_params(self, nprobe: int | None, ef_search: int | None) -> None:
        import faiss

        ivf = faiss.try_extract_index_ivf(self.index)
        if nprobe is not None:
            if ivf is None:
                raise ValueError(f"nprobe is for IVF indexes; {self.path or 'this index'} is {type(self.index).__name__}")
            ivf.nprobe = int(nprobe)
        if ef_search is not None:
            hnsw = getattr(faiss.downcast_index(self.index), "hnsw", None)
            if hnsw is None:
                raise ValueError(f"ef_search is for HNSW indexes; {self.path or 'this index'} is "
                                 f"{type(self.index).__name__}")
            hnsw.efSearch = int(ef_search)

    def check_encoder(self) -> None:
        """A ValueError naming both dimensions when the encoder's vectors do not fit the index."""
        if self.encoder.dim != self.index.d:
            raise ValueError(f"{self.path or 'the index'} holds {self.index.d}-dimensional vectors but the encoder "
                             f"{self.encoder.name} gives {self.encoder.dim}: pass --encoder the model the index was "
                             "built with (Search-R1's e5_Flat.index: intfloat/e5-base-v2)")

    def info(self) -> dict[str, Any]:
        """What is served: file, type, size, metric, whether memory-mapped, load time, encoder."""
        return {"index": str(self.path) if self.path else None, "type": type(self.index).__name__,
                "vectors": int(self.index.ntotal), "dim": int(self.index.d), "metric": metric_name(self.index),
                "mmap": self.mapped, "load_seconds": round(self.load_seconds, 4), "encoder": self.encoder.identity}

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search_by_vector(self, vectors: np.ndarray, k: int = 5) -> list[list[Hit]]:
        """Top-``k`` hits for each query vector (``(Q, dim)``, already encoded)."""
        vectors = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if vectors.shape[1] != self.index.d:
            self.check_encoder()
            raise ValueError(f"query vectors have {vectors.shape[1]} dimensions, the index {self.index.d}")
        k = min(int(k), len(self))
        if k <= 0:
            return [[] for _ in range(len(vectors))]
        scores, rows = self.index.search(vectors, k)
        if metric_name(self.index) == "l2":
            scores = -scores  # higher is better, as for every other searcher
        return [[Hit.from_passage(self.passages[int(r)], float(s)) for r, s in zip(rr, ss) if r >= 0]
                for rr, ss in zip(rows, scores)]
