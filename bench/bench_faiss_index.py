"""Start time and memory of a faiss index served as Search-R1's e5_Flat.index is: 1M passages, synthetic.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_faiss_index.py --n 1000000 --dim 768 --dir /tmp/faiss-1m

Builds once in ``--dir`` (kept for reruns): ``flat.index``, an ``IndexFlatIP`` of ``--n`` random unit vectors of
``--dim`` dimensions (e5-base-v2's 768; no text is encoded: the vectors are random, which costs a flat index nothing
in realism since it scans every row anyway), and ``corpus.jsonl``, ``--n`` FlashRAG lines of ~100 words (wiki-18's
passage size). Then, in a fresh process per row, opens them the way ``serve-retrieval --index`` does
(:class:`~workbench.tools.faiss_index.FaissSearch` over a :class:`~workbench.data.jsonl_corpus.JsonlCorpus`, the
query encoder a random-initialised BERT-base, e5-base-v2's architecture) and reports the seconds to open each part,
the process's resident memory (anonymous: its own; file: mapped pages, the page cache's) after opening and after 20
single-query searches, and the search latency. Rows: the index memory-mapped (the default) or read into memory
(``mmap=False``), the corpus's line offsets found (first start) or read from the cache (later starts).
Prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORDS = ("river city museum founded century village school history station bridge county album war king born "
         "company church island film district railway population team league party music novel castle").split()


def build(folder: Path, n: int, dim: int, chunk: int = 100_000) -> None:
    import faiss

    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "flat.index").exists():
        t0 = time.perf_counter()
        index, rng = faiss.IndexFlatIP(dim), np.random.default_rng(0)
        for start in range(0, n, chunk):
            x = rng.standard_normal((min(chunk, n - start), dim), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            index.add(x)
        faiss.write_index(index, str(folder / "flat.index"))
        print(f"built flat.index: {n} x {dim} in {time.perf_counter() - t0:.1f}s "
              f"({(folder / 'flat.index').stat().st_size / 2**30:.2f} GiB)", file=sys.stderr)
    if not (folder / "corpus.jsonl").exists():
        t0, rng = time.perf_counter(), np.random.default_rng(1)
        with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
            for start in range(0, n, chunk):
                words = rng.integers(0, len(WORDS), size=(min(chunk, n - start), 100))
                f.writelines(json.dumps({"id": str(start + i), "contents": f'"Passage {start + i}"\n'
                                         + " ".join(WORDS[w] for w in row)}) + "\n" for i, row in enumerate(words))
        print(f"built corpus.jsonl in {time.perf_counter() - t0:.1f}s "
              f"({(folder / 'corpus.jsonl').stat().st_size / 2**30:.2f} GiB)", file=sys.stderr)
    model = folder / "bert-base-random"
    if not model.exists():
        import torch
        from transformers import AutoTokenizer, BertConfig, BertModel

        from workbench.tools.dense import default_encoder_path

        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(default_encoder_path())
        BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=dim)).save_pretrained(model)
        tok.save_pretrained(model)


def memory(mapped: Path | None = None) -> dict[str, float]:
    """MiB of the process's resident memory: total, anonymous, file-backed, and (``mapped``) of that file's mapping."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    if mapped is not None:
        kb, inside = 0, False
        for line in Path("/proc/self/smaps").read_text().splitlines():
            if line[:1].isdigit() or line[:1] in "abcdef" and "-" in line.split(" ", 1)[0]:
                inside = line.rstrip().endswith(str(mapped))
            elif inside and line.startswith("Rss:"):
                kb += int(line.split()[1])
        out["index"] = kb / 1024
    return out


class _Dim:
    """Stands in for the encoder while the index opens (its dimension is all FaissSearch checks)."""

    def __init__(self, d: int):
        self.d = d

    def get_embedding_dimension(self) -> int:
        return self.d

    def encode(self, texts, **kw):
        raise RuntimeError("not an encoder")


def measure(folder: Path, mmap: bool, queries: int) -> dict:
    """One start of the server's searcher in this (fresh) process: corpus, index, then the query encoder."""
    import faiss

    from workbench.data.jsonl_corpus import JsonlCorpus
    from workbench.tools.dense import Encoder
    from workbench.tools.faiss_index import FaissSearch

    path = (folder / "flat.index").resolve()
    d = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY).d  # the header only
    m0 = memory(path)
    t0 = time.perf_counter()
    corpus = JsonlCorpus(folder / "corpus.jsonl")
    t_corpus = time.perf_counter() - t0
    t0 = time.perf_counter()
    search = FaissSearch(path, corpus, _Dim(d), mmap=mmap)
    t_index = time.perf_counter() - t0
    m1 = memory(path)
    t0 = time.perf_counter()
    search.encoder = Encoder(str(folder / "bert-base-random"), pooling="mean")
    search.check_encoder()  # loads it
    t_encoder = time.perf_counter() - t0
    lat = []
    for i in range(queries):
        t0 = time.perf_counter()
        hits = search.search(f"who founded the {WORDS[i % len(WORDS)]} museum", k=3)
        lat.append(time.perf_counter() - t0)
    assert len(hits) == 3 and hits[0].title.startswith("Passage")
    return {"mmap": search.mapped, "corpus_s": t_corpus, "encoder_s": t_encoder, "index_s": t_index,
            "rss0": m0, "rss_open": m1, "rss_search": memory(path), "first_query_s": lat[0],
            "query_p50_s": float(np.median(lat[1:] or lat)), "n": len(corpus)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--dir", default="/tmp/faiss-1m")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--one", choices=("mmap", "memory"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = Path(args.dir)
    if args.one:
        print(json.dumps(measure(folder, args.one == "mmap", args.queries)))
        return
    build(folder, args.n, args.dim)
    from workbench.data.jsonl_corpus import offsets_path

    rows = []
    for label, mode, cold_offsets in (("mmap, first start", "mmap", True), ("mmap", "mmap", False),
                                      ("read into memory", "memory", False)):
        if cold_offsets:  # the first start finds the corpus's line offsets; later ones read them from the cache
            offsets_path(folder / "corpus.jsonl").unlink(missing_ok=True)
        out = subprocess.run([sys.executable, __file__, "--dir", str(folder), "--queries", str(args.queries),
                              "--one", mode], capture_output=True, text=True, check=True, env=os.environ)
        rows.append((label, json.loads(out.stdout.strip().splitlines()[-1])))
    load = os.getloadavg()
    print(f"\n{rows[0][1]['n']:,} passages x {args.dim} dims (flat.index {(folder / 'flat.index').stat().st_size / 2**30:.2f}"
          f" GiB, corpus.jsonl {(folder / 'corpus.jsonl').stat().st_size / 2**30:.2f} GiB); load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n")
    print("| start | corpus open s | index open ms | memory added by both: anon / index pages MiB | encoder load s | "
          "first query s | query p50 s | after the queries: anon / index pages MiB |")
    print("|---|---:|---:|---|---:|---:|---:|---|")
    for label, r in rows:
        z, o, s = r["rss0"], r["rss_open"], r["rss_search"]
        print(f"| {label} | {r['corpus_s']:.2f} | {1000 * r['index_s']:.1f} | {o['RssAnon'] - z['RssAnon']:.0f} / "
              f"{o['index']:.0f} | {r['encoder_s']:.1f} | {r['first_query_s']:.2f} | {r['query_p50_s']:.3f} | "
              f"{s['RssAnon'] - z['RssAnon']:.0f} / {s['index']:.0f} |")


if __name__ == "__main__":
    main()
