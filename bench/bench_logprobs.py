"""Logprobs of sampled tokens: chunked selective log-softmax against the naive full log-softmax.

For each vocabulary size, synthetic final hidden states ``(B, T, H)`` (with gradient, as the
transformer body would give) go through a frozen ``lm_head`` weight ``(V, H)`` (the LoRA case)
and the logprob of a random target per position is computed, then ``backward()``:

- ``naive``: ``log_softmax(h @ W.T)`` in float32 over the whole ``(B, T, V)`` tensor, then gather
  (what ``model(...).logits.log_softmax(-1).gather(...)`` does);
- ``fused``: :func:`workbench.rl.policy.selective_logprobs` with an ``nn.Linear`` head (what
  ``LoRAPolicy.logprobs`` uses): ``chunk_size`` positions at a time, a hand-written backward
  that recomputes each chunk's logits;
- ``checkpoint``: the same function with a generic callable head (used for soft-capped heads or
  with entropy): each chunk checkpointed, backward recomputes it through autograd.

Each variant runs in its own subprocess; peak memory is the process's peak RSS during the
forward + backward (``VmHWM`` in ``/proc/self/status``, reset through ``/proc/self/clear_refs``
just before) minus its RSS just before (inputs allocated, torch loaded, one tiny warm-up call
made). Workers run with glibc's
``MALLOC_MMAP_THRESHOLD_=65536`` so that freed large buffers go back to the OS and peak RSS
tracks live tensors (without it, freed chunk buffers stay in the heap and inflate the chunked
variants' RSS; ``--default-malloc`` shows that). Time is the median forward + backward wall
time over ``--repeats`` runs after one warm-up. Each variant's logprobs and gradient are
compared with the first variant's (naive by default).

    .venv/bin/python bench/bench_logprobs.py                       # vocab 49,152 (H 576) and 151,936 (H 896)
    .venv/bin/python bench/bench_logprobs.py --vocab 49152 --hidden 576 --seq 256 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

VARIANTS = ("naive", "fused", "checkpoint")


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def _peak_rss_mb() -> float:
    try:
        return _status_mb("VmHWM")
    except (OSError, KeyError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(variant: str, V: int, H: int, B: int, T: int, chunk: int, repeats: int, seed: int) -> dict:
    from workbench.rl.policy import selective_logprobs

    g = torch.Generator().manual_seed(seed)
    h0 = torch.randn(B, T, H, generator=g)
    W = torch.randn(V, H, generator=g).mul_(H**-0.5)  # frozen lm_head (in place: no temporary copy)
    tgt = torch.randint(0, V, (B, T), generator=g)

    def run(h0, W, tgt):
        h = h0.clone().requires_grad_(True)
        b, t, _ = h.shape
        if variant == "naive":
            lp = torch.log_softmax((h @ W.T).float(), dim=-1).gather(-1, tgt[..., None]).squeeze(-1)
        else:
            head = torch.nn.Linear(W.shape[1], W.shape[0], bias=False)
            head.weight = torch.nn.Parameter(W, requires_grad=False)
            if variant == "checkpoint":
                head = head.forward  # a plain callable: the generic, checkpointed path
            lp = selective_logprobs(h.reshape(b * t, -1), head, tgt.reshape(-1), chunk_size=chunk).reshape(b, t)
        lp.sum().backward()
        return lp.detach(), h.grad

    run(h0[:1, :8], W[:64], tgt[:1, :8] % 64)  # tiny warm-up: lazy imports and allocator set-up are not the variant's
    _reset_peak()
    before = peak = _rss_mb()
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        lp, grad = run(h0, W, tgt)
        if i > 0:
            times.append(time.perf_counter() - t0)
        if i == 0:
            peak = _peak_rss_mb()  # the peak mark only grows: the first run's peak is the variant's peak
    return {"variant": variant, "V": V, "H": H, "chunk": chunk if variant != "naive" else None,
            "peak_mb": peak - before, "seconds": statistics.median(times),
            "lp_sum": float(lp.double().sum()), "grad_norm": float(grad.double().norm()), "lp_head": lp[0, :4].tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--vocab", type=int, nargs="+", default=[49152, 151936], help="vocabulary sizes")
    ap.add_argument("--hidden", type=int, nargs="+", default=[576, 896], help="hidden size per vocabulary (same count)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs after one warm-up")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--default-malloc", action="store_true",
                    help="do not set MALLOC_MMAP_THRESHOLD_ in the workers (peak RSS then includes glibc heap fragmentation)")
    ap.add_argument("--worker", nargs=2, metavar=("VARIANT", "V_H"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        V, H = map(int, a.worker[1].split("x"))
        print(json.dumps(worker(a.worker[0], V, H, a.batch, a.seq, a.chunk_size, a.repeats, a.seed)))
        return
    if len(a.hidden) != len(a.vocab):
        ap.error("--hidden needs one value per --vocab value")

    print(f"# {platform.machine()} {platform.processor() or ''} torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"B={a.batch} T={a.seq} chunk={a.chunk_size}, forward+backward, lm_head frozen")
    print(f"{'vocab':>8} {'H':>5} {'variant':>10} {'logits f32 MB':>14} {'peak MB':>9} {'seconds':>8}  check")
    for V, H in zip(a.vocab, a.hidden):
        rows = []
        for variant in a.variants:
            cmd = [sys.executable, __file__, "--worker", variant, f"{V}x{H}", "--batch", str(a.batch), "--seq", str(a.seq),
                   "--chunk-size", str(a.chunk_size), "--repeats", str(a.repeats), "--seed", str(a.seed)]
            env = dict(os.environ)
            if not a.default_malloc:
                env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                print(f"{V:>8} {H:>5} {variant:>10}  FAILED (rc {out.returncode}): {out.stderr.strip()[-300:]}")
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        logits_mb = a.batch * a.seq * V * 4 / 2**20
        for r in rows:
            r0 = rows[0]  # differences against the first variant run (naive by default)
            check = "" if r is r0 else (
                f"vs {r0['variant']}: lp sum rel diff {abs(r0['lp_sum'] - r['lp_sum']) / abs(r0['lp_sum']):.1e}, "
                f"grad norm rel diff {abs(r0['grad_norm'] - r['grad_norm']) / r0['grad_norm']:.1e}")
            print(f"{V:>8} {H:>5} {r['variant']:>10} {logits_mb:>14.0f} {r['peak_mb']:>9.0f} {r['seconds']:>8.2f}  {check}")


if __name__ == "__main__":
    main()
