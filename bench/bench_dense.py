"""Dense search speed: chromadb HNSW (``DenseSearch``) against exact numpy search (``ExactDenseSearch``).

Part 1, index latency: ``--n`` random unit vectors of ``--dim`` dimensions stand in for passage
embeddings (encoding 100k passages on a small CPU takes too long): ``--data random`` is isotropic
Gaussian (the hardest case for HNSW), ``--data lowrank`` lies near a 32-dim subspace (closer to
real sentence embeddings). Queries are a random passage's vector plus noise (a paraphrase). Both
indexes get the same vectors through ``embeddings=`` and are queried one vector at a time with
``search_by_vector``; the table gives build time, p50/p99 latency, recall@k against the exact
top-k, and how often the top hit is the passage the query was made from.

Part 2, encoder throughput: the default encoder (all-MiniLM-L6-v2) on ``--encode-n`` real-length
passages (the wiki18 sample from ``data/samples`` cycled, or synthetic 100-word text) and the
latency of encoding one short query.

    .venv/bin/python bench/bench_dense.py                       # 100k vectors, 2,000 passages encoded
    .venv/bin/python bench/bench_dense.py --n 20000 --queries 100 --skip-encoder
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time

import numpy as np

from workbench.core.types import Passage
from workbench.tools.dense import DenseSearch, ExactDenseSearch, chroma_client, load_encoder, passage_text


def _latencies_ms(
    index, queries: np.ndarray, k: int, anchor_ids: np.ndarray
) -> tuple[np.ndarray, list[set[str]], float]:
    """Per-query latency (ms), the top-k id sets, and the share of queries whose top hit is their anchor."""
    index.search_by_vector(queries[:1], k)  # warm-up
    lat, tops, anchor_hits = [], [], 0
    for q, a in zip(queries, anchor_ids):
        t0 = time.perf_counter()
        hits = index.search_by_vector(q[None, :], k)[0]
        lat.append((time.perf_counter() - t0) * 1000)
        tops.append({h.id for h in hits})
        anchor_hits += bool(hits) and hits[0].id == str(a)
    return np.asarray(lat), tops, anchor_hits / len(queries)


def bench_index(args: argparse.Namespace) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    if args.data == "random":
        vecs = rng.normal(size=(args.n, args.dim)).astype(np.float32)
    else:  # near a 32-dim subspace, plus a little isotropic noise
        basis = rng.normal(size=(32, args.dim)).astype(np.float32)
        vecs = rng.normal(size=(args.n, 32)).astype(np.float32) @ basis
        vecs += 0.2 * np.sqrt(32) * rng.normal(size=vecs.shape).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    passages = [Passage(str(i), f"t{i}", f"passage {i}") for i in range(args.n)]
    anchor_ids = rng.integers(args.n, size=args.queries)
    anchors = vecs[anchor_ids]
    queries = anchors + rng.normal(scale=args.noise / np.sqrt(args.dim), size=anchors.shape).astype(np.float32)

    chroma_client(tempfile.gettempdir() + "/wb-bench-warmup")  # keep chromadb's slow import out of the build time
    rows = []
    t0 = time.perf_counter()
    exact = ExactDenseSearch(passages, encoder=_NoEncoder(), embeddings=vecs, progress=False)
    exact_build = time.perf_counter() - t0
    exact_lat, exact_top, exact_anchor = _latencies_ms(exact, queries, args.k, anchor_ids)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        hnsw_cfg = {k: v for k, v in (("ef_search", args.ef_search), ("max_neighbors", args.max_neighbors)) if v}
        hnsw = DenseSearch(
            passages, encoder=_NoEncoder(), embeddings=vecs, persist_dir=tmp, progress=args.progress, hnsw=hnsw_cfg
        )
        hnsw_build = time.perf_counter() - t0
        hnsw_lat, hnsw_top, hnsw_anchor = _latencies_ms(hnsw, queries, args.k, anchor_ids)
    recall = float(np.mean([len(a & b) / args.k for a, b in zip(hnsw_top, exact_top)]))
    rows.append(dict(index="exact numpy", build_s=exact_build, lat=exact_lat, recall=1.0, anchor=exact_anchor))
    rows.append(dict(index="chromadb HNSW", build_s=hnsw_build, lat=hnsw_lat, recall=recall, anchor=hnsw_anchor))
    return rows


class _NoEncoder:
    """Stands in for a model when every vector is given (nothing is ever encoded)."""

    name = "bench-random-vectors"

    def encode(self, texts, **kwargs):
        raise AssertionError("the index benchmark encodes nothing")


def bench_encoder(args: argparse.Namespace) -> dict:
    from workbench.util.paths import samples_dir

    texts: list[str] = []
    sample = samples_dir() / "wiki18_corpus.flashrag.sample.jsonl"
    if sample.is_file():
        from workbench.data.loaders import load_flashrag_corpus

        texts = [passage_text(p) for p in load_flashrag_corpus(sample)]
        source = "wiki18 sample passages"
    else:
        rng = np.random.default_rng(args.seed)
        words = "the of and in a to was is for on as by with he at from his an were are which this also be".split()
        texts = [" ".join(rng.choice(words, size=100)) for _ in range(200)]
        source = "synthetic 100-word passages"
    texts = (texts * (args.encode_n // len(texts) + 1))[: args.encode_n]
    t0 = time.perf_counter()
    enc = load_encoder()
    load_s = time.perf_counter() - t0
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    enc.encode(texts[:8], kind="passage")  # warm-up
    t0 = time.perf_counter()
    enc.encode(texts, kind="passage", batch_size=args.batch_size)
    pps = len(texts) / (time.perf_counter() - t0)
    qlat = []
    for i in range(50):
        t0 = time.perf_counter()
        enc.encode([f"who directed the film number {i}?"], kind="query")
        qlat.append((time.perf_counter() - t0) * 1000)
    return dict(
        threads=torch.get_num_threads(),
        source=source,
        n=len(texts),
        words=float(np.mean([len(t.split()) for t in texts])),
        load_s=load_s,
        pps=pps,
        q_p50=float(np.percentile(qlat, 50)),
        q_p99=float(np.percentile(qlat, 99)),
    )


def print_index_table(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        f"Dense benchmark ({platform.machine()}, {platform.python_version()}): {args.n} {args.data} vectors × {args.dim}, "
        f"k={args.k}, {args.queries} single-vector queries (noise {args.noise}), "
        f"HNSW ef_search={args.ef_search or 100} M={args.max_neighbors or 16}"
    )
    exact_p50 = float(np.percentile(rows[0]["lat"], 50))
    print(
        f"| {'index':<14} | {'build s':>8} | {'p50 ms':>7} | {'p99 ms':>7} | {'p50 × faster':>12} | {'recall@k':>8} | {'top1=anchor':>11} |"
    )
    print(f"|{'-' * 16}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 14}|{'-' * 10}|{'-' * 13}|")
    for r in rows:
        p50, p99 = np.percentile(r["lat"], 50), np.percentile(r["lat"], 99)
        print(
            f"| {r['index']:<14} | {r['build_s']:>8.2f} | {p50:>7.2f} | {p99:>7.2f} | {exact_p50 / p50:>12.1f} | {r['recall']:>8.3f} | {r['anchor']:>11.3f} |"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=100_000, help="indexed vectors")
    ap.add_argument("--dim", type=int, default=384, help="vector dimension (MiniLM: 384)")
    ap.add_argument("--queries", type=int, default=300, help="queries timed per index")
    ap.add_argument("--k", type=int, default=10, help="hits per query")
    ap.add_argument("--data", choices=["random", "lowrank"], default="random", help="shape of the synthetic vectors")
    ap.add_argument("--noise", type=float, default=0.3, help="query = passage vector + noise of about this norm")
    ap.add_argument("--ef-search", type=int, default=None, help="HNSW ef_search (chroma default 100)")
    ap.add_argument("--max-neighbors", type=int, default=None, help="HNSW M (chroma default 16)")
    ap.add_argument("--encode-n", type=int, default=2000, help="passages encoded for the throughput part")
    ap.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads for the encoder part")
    ap.add_argument("--skip-encoder", action="store_true", help="only the index part")
    ap.add_argument("--skip-index", action="store_true", help="only the encoder part")
    ap.add_argument("--progress", action="store_true", help="show the index build progress bar")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rows = [] if args.skip_index else bench_index(args)
    enc = None if args.skip_encoder else bench_encoder(args)

    if rows:
        print_index_table(rows, args)
    if enc:
        print(
            f"Encoder all-MiniLM-L6-v2 ({enc['threads']} torch threads): {enc['n']} {enc['source']} (mean {enc['words']:.0f} "
            f"words), batch {args.batch_size}: {enc['pps']:.0f} passages/s; one short query: p50 {enc['q_p50']:.1f} ms, "
            f"p99 {enc['q_p99']:.1f} ms; load {enc['load_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
