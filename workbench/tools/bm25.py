"""BM25 search over a passage corpus with ``bm25s`` (DSPO's retriever).

>>> from workbench.core.types import Passage
>>> s = BM25Search([Passage("1", "Paris", "Paris is the capital of France."),
...                 Passage("2", "Berlin", "Berlin is the capital of Germany.")])
>>> [h.title for h in s.search("capital of Germany", k=1)]
['Berlin']
"""

from __future__ import annotations

import numpy as np

from workbench.core.types import Hit, Passage


class BM25Search:
    """A bm25s index over ``title + text`` of each passage.

    Call it like a function: ``search(query, k) -> list[Hit]``. Passages that share no
    term with the query are not returned (so ``k`` is an upper bound).
    """

    name = "bm25"

    def __init__(self, passages: list[Passage], k1: float = 0.9, b: float = 0.4, stopwords: str | None = "en"):
        import logging

        import bm25s
        from bm25s.tokenization import Tokenizer

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets its own logger to DEBUG

        if not passages:
            raise ValueError("BM25Search needs at least one passage (the corpus is empty)")
        self.passages = list(passages)
        # k1=0.9, b=0.4: Pyserini's BM25 defaults, which Search-R1 / FlashRAG use.
        self._tok = Tokenizer(stopwords=stopwords)
        ids = self._tok.tokenize(
            [f"{p.title} {p.text}" for p in self.passages], update_vocab=True, return_as="ids", show_progress=False
        )
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        self._bm25.index(ids, show_progress=False)

    def __len__(self) -> int:
        return len(self.passages)

    def __call__(self, query: str, k: int = 5) -> list[Hit]:
        return self.search(query, k)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int = 5) -> list[list[Hit]]:
        if k <= 0 or not queries:
            return [[] for _ in queries]
        k = min(int(k), len(self.passages))
        q_ids = self._tok.tokenize([str(q) for q in queries], update_vocab=False, return_as="ids", show_progress=False)
        docs, scores = self._bm25.retrieve(q_ids, k=k, show_progress=False, n_threads=1)
        out: list[list[Hit]] = []
        for row_docs, row_scores in zip(np.asarray(docs), np.asarray(scores)):
            out.append([Hit.from_passage(self.passages[int(d)], float(s)) for d, s in zip(row_docs, row_scores) if s > 0])
        return out
