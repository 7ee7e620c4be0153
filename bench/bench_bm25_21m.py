"""BM25 at wiki-18 scale (21M passages, Search-R1's corpus): a sharded, memory-mapped index
(``workbench.tools.bm25_sharded``) over synthetic text; build time, size on disk, memory and query latency.

The corpus is drawn shard by shard, never held whole: each passage has Poisson(100) words (wiki-18's passages
are 100 words) drawn from a Zipfian vocabulary (rank r has probability ≈ ∝ r^-s, s = 1.07, ``--vocab`` terms,
2M by default); the ``--stopwords`` most frequent ranks are dropped, as bm25s's English tokenizer drops stopwords.
A shard's generator is seeded by (seed, shard), so the corpus is the same at every size. Queries are 3–8 distinct
terms of a random passage (question words co-occur in the passage that answers them; frequent content terms,
with long postings, are picked as often as they occur).

Measured: build time and peak RSS (``ru_maxrss``: the process never holds more than one shard), index size on
disk, RSS after loading with mmap cold (the index's pages dropped from the page cache first with
``posix_fadvise(DONTNEED)``) and warm, p50/p99 latency of single queries cold (first pass) and warm (second pass),
and RSS during queries (``RssAnon``: the score accumulator; ``RssFile``: index pages mapped in).

    .venv/bin/python bench/bench_bm25_21m.py --passages 2000000 --out /tmp/bm25-2m
    .venv/bin/python bench/bench_bm25_21m.py --out /tmp/bm25-21m --reuse     # query an index built before
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import time
from pathlib import Path

import numpy as np

from workbench.tools.bm25_sharded import META, ShardedBM25, ShardedBM25Builder


def rss() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process in GiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(val.split()[0]) / 2**20
    return out


def zipf_ranks(rng: np.random.Generator, n: int, s: float, n_ranks: int) -> np.ndarray:
    """``n`` ranks in [1, n_ranks], P(r) ≈ ∝ r^-s: the inverse CDF of the continuous power law on [1, n_ranks + 1),
    floored (in float32: 10x faster than ``rng.zipf``; off from the discrete law only in the first few ranks,
    which are stopwords here)."""
    a = np.float32((n_ranks + 1) ** (1 - s) - 1)
    x = np.power(a * rng.random(n, dtype=np.float32) + np.float32(1), np.float32(1 / (1 - s)))
    return np.clip(x, 1, n_ranks).astype(np.int32)


def make_shard(seed: int, shard: int, n_docs: int, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """Content-term ids (int32, stopwords dropped) and per-passage lengths of one shard, drawn in chunks."""
    rng = np.random.default_rng([seed, shard])
    ids, lens = [], []
    for start in range(0, n_docs, 100_000):
        m = min(100_000, n_docs - start)
        words = np.clip(rng.poisson(args.words, m), 20, 4 * args.words)
        ranks = zipf_ranks(rng, int(words.sum()), args.zipf, args.vocab + args.stopwords)
        keep = ranks > args.stopwords
        lens.append(np.add.reduceat(keep.astype(np.int64), np.concatenate(([0], np.cumsum(words)[:-1]))))
        ids.append((ranks[keep] - args.stopwords - 1).astype(np.int32))
    return np.concatenate(ids), np.concatenate(lens)


def drop_page_cache(path: Path) -> None:
    os.sync()
    for f in path.rglob("*.npy"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def time_queries(index: ShardedBM25, queries: list[np.ndarray], k: int) -> tuple[np.ndarray, dict[str, float]]:
    lat, peak = [], {"VmRSS": 0.0, "RssAnon": 0.0, "RssFile": 0.0}
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        index.search_ids([q], k=k)
        lat.append(time.perf_counter() - t0)
        if i % 20 == 0:
            peak = {key: max(v, rss()[key]) for key, v in peak.items()}
    return np.array(lat) * 1000, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=21_000_000, help="corpus size (default: wiki-18's 21M)")
    ap.add_argument("--shard-size", type=int, default=1_000_000, help="passages per shard")
    ap.add_argument("--vocab", type=int, default=2_000_000, help="content terms in the Zipfian vocabulary")
    ap.add_argument("--stopwords", type=int, default=200, help="most frequent ranks dropped as stopwords")
    ap.add_argument("--zipf", type=float, default=1.07, help="Zipf exponent s")
    ap.add_argument("--words", type=int, default=100, help="mean words per passage (before stopwords)")
    ap.add_argument("--queries", type=int, default=300, help="queries timed (3-8 terms each)")
    ap.add_argument("--k", type=int, default=3, help="top-k per query (Search-R1's default is 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/workbench-bm25-21m", help="index directory (tens of GB at 21M)")
    ap.add_argument("--reuse", action="store_true", help="query the index already in --out (no build)")
    ap.add_argument("--keep", action="store_true", help="keep the index afterwards (default: delete it)")
    args = ap.parse_args()
    out = Path(args.out)
    free = shutil.disk_usage(out.parent if not out.exists() else out).free / 2**30
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.2f}; {free:.0f} GiB free under {out.parent}")

    # queries: 3-8 distinct terms of passages of shard 0 (drawn again here: the generator is seeded per shard)
    rng = np.random.default_rng(args.seed + 1)
    ids0, lens0 = make_shard(args.seed, 0, min(args.shard_size, args.passages, 20_000), args)
    docs0 = np.split(ids0, np.cumsum(lens0)[:-1])
    queries = []
    while len(queries) < args.queries:
        d = np.unique(docs0[int(rng.integers(len(docs0)))])
        if len(d) >= 3:
            queries.append(rng.choice(d, size=min(len(d), int(rng.integers(3, 9))), replace=False))

    build_s = build_peak = None
    if not (args.reuse and (out / META).exists()):
        if out.exists():
            shutil.rmtree(out)
        t0 = time.perf_counter()
        builder = ShardedBM25Builder(out, args.vocab)
        gen_s = 0.0
        for shard, start in enumerate(range(0, args.passages, args.shard_size)):
            t1 = time.perf_counter()
            ids, lens = make_shard(args.seed, shard, min(args.shard_size, args.passages - start), args)
            gen_s += time.perf_counter() - t1
            builder.add_shard(ids, lens)
            del ids, lens
            print(f"  shard {shard}: {start + args.shard_size if start + args.shard_size < args.passages else args.passages:,}"
                  f" passages so far, {time.perf_counter() - t0:.0f}s", flush=True)
        meta = builder.finish()
        build_s = time.perf_counter() - t0
        build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # before any query maps index pages
        print(f"built {meta['n_docs']:,} passages in {build_s:.0f}s (drawing the synthetic text: {gen_s:.0f}s); "
              f"avg {meta['avg_doc_len']:.1f} terms/passage; peak RSS {build_peak:.2f} GiB", flush=True)
    size = disk_bytes(out) / 2**30

    drop_page_cache(out)
    before = rss()
    t0 = time.perf_counter()
    index = ShardedBM25.load(out, mmap=True)
    load_s = time.perf_counter() - t0
    after_load = rss()
    cold, cold_peak = time_queries(index, queries, args.k)
    warm, warm_peak = time_queries(index, queries, args.k)
    after = rss()
    n_terms = np.array([len(q) for q in queries])
    postings = [sum(int(sh["indptr"][t + 1] - sh["indptr"][t]) for sh in index.shards for t in q) for q in queries[:50]]
    row = {
        "passages": index.n_docs, "shards": len(index.shards), "vocab": args.vocab, "k": args.k,
        "build_s": build_s, "build_peak_rss_gib": build_peak,
        "index_gib": size, "load_s": load_s, "rss_before_load_gib": before["VmRSS"],
        "rss_after_load_cold_gib": after_load["VmRSS"], "rss_after_queries_warm_gib": after["VmRSS"],
        "rss_anon_during_queries_gib": warm_peak["RssAnon"], "rss_file_during_queries_gib": warm_peak["RssFile"],
        "cold_p50_ms": float(np.percentile(cold, 50)), "cold_p99_ms": float(np.percentile(cold, 99)),
        "warm_p50_ms": float(np.percentile(warm, 50)), "warm_p99_ms": float(np.percentile(warm, 99)),
        "query_terms_mean": float(n_terms.mean()), "postings_per_query_median": float(np.median(postings)),
        "load_avg": os.getloadavg()[0],
    }
    print("| " + " | ".join(row) + " |")
    print("|" + "---|" * len(row))
    print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    print(json.dumps(row))
    if not args.keep:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
