"""This machine's fp32 matmul peak (torch.matmul of large square matrices), 1 thread and all threads:
the roof the trainer's achieved FLOP/s is compared with (``bench/bench_update.py``, ``metrics.jsonl``'s
``update_flops_per_s``); and its read bandwidth (``measure_bandwidth``), the decode benches' other roof.

    .venv/bin/python bench/bench_matmul_peak.py [--n 2048] [--reps 5]

Prints one table; the best of ``reps`` timed products after a warm-up (a shared machine's load only
lowers it).
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def measure_peak(threads: int, n: int = 2048, reps: int = 5) -> float:
    """Best FLOP/s of ``torch.matmul`` on ``n × n`` float32 matrices with ``threads`` torch threads."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, n, generator=g)
        torch.matmul(a, b)  # warm-up
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
        return 2.0 * n**3 / best
    finally:
        torch.set_num_threads(old)


def measure_bandwidth(mib: int = 256, reps: int = 5) -> float:
    """Best read bandwidth in bytes/s of ``torch.sum`` over ``mib`` MiB of float32 (one pass per rep)."""
    import torch

    x = torch.ones(mib << 18)
    x.sum()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="matrix side (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=5, help="timed products per setting (default: %(default)s)")
    args = ap.parse_args()
    import torch

    cores = os.cpu_count() or 1
    print(f"{time.strftime('%Y-%m-%d')} · {platform.machine()} · {cores} cores · torch {torch.__version__} · "
          f"load {os.getloadavg()[0]:.1f}")
    print("| threads | fp32 matmul GFLOP/s |\n|---:|---:|")
    for t in sorted({1, cores}):
        print(f"| {t} | {measure_peak(t, args.n, args.reps) / 1e9:.1f} |")


if __name__ == "__main__":
    main()
