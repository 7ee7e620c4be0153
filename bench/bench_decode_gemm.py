"""Why batched decoding on this CPU stops short of its bound: the decode step's matrix products at 1-8 rows.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_decode_gemm.py [--model smollm2-135m] [--rows 1,2,4,8]

A decode step multiplies every weight matrix of the model by the rows being decoded (1 for a sequential
rollout, up to the group size for a batched one). The weights (540 MB for the default model) do not fit in
the last-level cache, so each product streams its matrix from memory: at 1-8 rows the step should cost
about the same as at 1 row, bounded by the read bandwidth. This bench times each of the model's weight
shapes the way a decode step meets them — a different copy of the matrix on every call, so none is
cache-resident — with three CPU kernels:

- ``linear``: ``F.linear(x, W)``, what the model runs (MKL sgemm / gemv);
- ``W@x.T``: ``torch.mm(W, x.T).T``, the same product with the big matrix as the left operand;
- ``mkldnn``: a oneDNN inner product on the weight reordered once (``torch.utils.mkldnn.to_mkldnn``).

It prints milliseconds per product, the bandwidth each reaches (matrix bytes / time) beside the read
bandwidth measured in the same run, and the model's whole decode step (each shape times its count per
layer) at each row count: the ratio "8 rows / 1 row" is the most a batched group of 8 can gain over
decoding one sequence at a time from the products alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.mkldnn  # noqa: F401  (registers torch.utils.mkldnn)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_matmul_peak import measure_bandwidth  # noqa: E402


def best_ms(fn, reps: int = 5, inner: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best * 1e3


def model_shapes(model: str) -> tuple[list[tuple[str, int, int, int]], int]:
    """(name, out, in, count per decode step) of each weight shape, and the layer count."""
    from transformers import AutoConfig

    from workbench.core.models import resolve_model_path

    cfg = AutoConfig.from_pretrained(resolve_model_path(model))
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * hd
    q = cfg.num_attention_heads * hd
    return [("lm head", cfg.vocab_size, h, 1), ("q / o proj", q, h, 2 * layers), ("k / v proj", kv, h, 2 * layers),
            ("gate / up proj", inter, h, 2 * layers), ("down proj", h, inter, layers)], layers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--copies-mib", type=int, default=256, help="bytes of distinct copies per shape (> the cache)")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    bw = measure_bandwidth(512, reps=3) / 1e9
    print(f"read bandwidth (sum over 512 MiB): {bw:.1f} GB/s")
    shapes, _ = model_shapes(args.model)
    kernels = ("linear", "W@x.T", "mkldnn")
    step = {(k, m): 0.0 for k in kernels for m in rows}
    print("\n| weight | out × in | per step | rows | " + " | ".join(f"{k} ms (GB/s)" for k in kernels) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(kernels))
    for name, n_out, n_in, count in shapes:
        mb = n_out * n_in * 4
        copies = max(2, args.copies_mib * 2**20 // mb)
        ws = [torch.randn(n_out, n_in) for _ in range(copies)]
        mk = []
        for w in ws:
            lin = torch.nn.Linear(n_in, n_out, bias=False)
            lin.weight.data = w
            mk.append(torch.utils.mkldnn.to_mkldnn(lin))
        for m in rows:
            x = torch.randn(m, n_in)
            fns = {
                "linear": lambda x=x, ws=ws: [F.linear(x, w) for w in ws],
                "W@x.T": lambda x=x, ws=ws: [torch.mm(w, x.t()).t() for w in ws],
                "mkldnn": lambda x=x, mk=mk: [lin(x.to_mkldnn()).to_dense() for lin in mk],
            }
            cells = []
            for k in kernels:
                ms = best_ms(fns[k], reps=3, inner=1) / copies
                step[(k, m)] += ms * count
                cells.append(f"{ms:.3f} ({mb / ms / 1e6:.1f})")
            print(f"| {name} | {n_out} × {n_in} | {count} | {m} | " + " | ".join(cells) + " |", flush=True)
    print("\nthe model's decode step, products only (ms), and the gain of a batch over one row at a time:")
    print("| kernel | " + " | ".join(f"{m} row(s)" for m in rows) + f" | {rows[-1]} rows / 1 row: tokens per product-second |")
    print("|---|" + "---:|" * (len(rows) + 1))
    for k in kernels:
        gain = rows[-1] * step[(k, rows[0])] / step[(k, rows[-1])] if rows[0] == 1 else float("nan")
        print(f"| {k} | " + " | ".join(f"{step[(k, m)]:.1f}" for m in rows) + f" | {gain:.2f}× |")
    total_mb = sum(n_out * n_in * 4 * count for _, n_out, n_in, count in shapes) / 1e6
    print(f"\nbound at the read bandwidth: {total_mb:.0f} MB of weights per step / {bw:.1f} GB/s = {total_mb / bw:.1f} ms")


if __name__ == "__main__":
    main()
