"""BM25 speed: ``BM25Search`` (bm25s) against ``rank_bm25.BM25Okapi`` on the same synthetic corpus.

The corpus is pseudo-words drawn with Zipfian frequencies (rank r has probability ∝ 1/r^s), in
passages of 40–120 words (wiki18 passages are 100 words); queries are 3–7 words taken from a
random passage. For each size it times indexing, one-query-at-a-time search (how a rollout calls
the tool) and, for bm25s, one batched call. rank_bm25 scores every document in Python per query,
so only ``--rank-queries`` of its queries are timed and rates are per query.

    .venv/bin/python bench/bench_bm25.py                      # 10k and 100k passages
    .venv/bin/python bench/bench_bm25.py --sizes 2000 --queries 50 --rank-queries 10
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from workbench.core.types import Passage
from workbench.tools.bm25 import BM25Search

SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def make_vocab(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct pseudo-words of 1–4 syllables."""
    words: dict[str, None] = {}
    while len(words) < n:
        k = int(rng.integers(1, 5))
        words["".join(rng.choice(SYLLABLES, size=k))] = None
    return list(words)


def make_corpus(n: int, vocab: list[str], zipf_s: float, rng: np.random.Generator) -> list[Passage]:
    p = 1.0 / np.arange(1, len(vocab) + 1) ** zipf_s
    p /= p.sum()
    lengths = rng.integers(40, 121, size=n)
    tokens = rng.choice(len(vocab), size=int(lengths.sum()), p=p)
    words = np.asarray(vocab, dtype=object)
    out, start = [], 0
    for i, length in enumerate(lengths):
        out.append(Passage(str(i), f"{words[tokens[start]]} {i}", " ".join(words[tokens[start : start + length]])))
        start += length
    return out


def make_queries(passages: list[Passage], n: int, rng: np.random.Generator) -> list[str]:
    out = []
    for _ in range(n):
        words = passages[int(rng.integers(len(passages)))].text.split()
        out.append(" ".join(rng.choice(words, size=int(rng.integers(3, 8)), replace=False)))
    return out


def bench_size(n: int, args: argparse.Namespace, vocab: list[str], rng: np.random.Generator) -> list[dict]:
    passages = make_corpus(n, vocab, args.zipf, rng)
    queries = make_queries(passages, args.queries, rng)
    rows = []

    t0 = time.perf_counter()
    bm = BM25Search(passages)
    index_s = time.perf_counter() - t0
    bm.search(queries[0], args.k)  # warm-up
    t0 = time.perf_counter()
    for q in queries:
        bm.search(q, args.k)
    single_qps = len(queries) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    bm.search_batch(queries, args.k)
    batch_qps = len(queries) / (time.perf_counter() - t0)

    from rank_bm25 import BM25Okapi

    t0 = time.perf_counter()
    okapi = BM25Okapi([f"{p.title} {p.text}".lower().split() for p in passages], k1=0.9, b=0.4)
    rank_index_s = time.perf_counter() - t0
    rq = queries[: args.rank_queries or max(10, min(len(queries), 2_000_000 // n))]
    t0 = time.perf_counter()
    for q in rq:
        scores = okapi.get_scores(q.lower().split())
        top = np.argpartition(-scores, args.k)[: args.k]
        top[np.argsort(-scores[top])]
    rank_qps = len(rq) / (time.perf_counter() - t0)

    rows.append(dict(n=n, engine="rank_bm25 BM25Okapi", index_s=rank_index_s, timed=len(rq), qps=rank_qps, ratio=1.0))
    rows.append(
        dict(
            n=n,
            engine="bm25s, one query/call",
            index_s=index_s,
            timed=len(queries),
            qps=single_qps,
            ratio=single_qps / rank_qps,
        )
    )
    rows.append(
        dict(
            n=n,
            engine="bm25s, one batched call",
            index_s=index_s,
            timed=len(queries),
            qps=batch_qps,
            ratio=batch_qps / rank_qps,
        )
    )
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes (passages)")
    ap.add_argument("--queries", type=int, default=500, help="queries timed for bm25s")
    ap.add_argument(
        "--rank-queries",
        type=int,
        default=None,
        help="queries timed for rank_bm25, which is slow (default: 2,000,000 / passages, at least 10)",
    )
    ap.add_argument("--k", type=int, default=10, help="hits per query")
    ap.add_argument("--vocab", type=int, default=50_000, help="vocabulary size")
    ap.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of word frequencies")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    vocab = make_vocab(args.vocab, rng)
    rows = [r for n in args.sizes for r in bench_size(n, args, vocab, rng)]

    print(
        f"BM25 benchmark ({platform.machine()}, {platform.python_version()}), k={args.k}, Zipf s={args.zipf}, vocab={args.vocab}"
    )
    print(
        f"| {'passages':>8} | {'engine':<24} | {'index s':>8} | {'queries':>7} | {'queries/s':>9} | {'ms/query':>8} | {'× rank_bm25':>11} |"
    )
    print(f"|{'-' * 10}|{'-' * 26}|{'-' * 10}|{'-' * 9}|{'-' * 11}|{'-' * 10}|{'-' * 13}|")
    for r in rows:
        print(
            f"| {r['n']:>8} | {r['engine']:<24} | {r['index_s']:>8.2f} | {r['timed']:>7} | {r['qps']:>9.1f} | "
            f"{1000 / r['qps']:>8.2f} | {r['ratio']:>11.1f} |"
        )
    return rows


if __name__ == "__main__":
    main()
