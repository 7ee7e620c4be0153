"""Sampling one token per row: ``torch.multinomial`` against the backends' inverse-CDF sampler.

Each decode step of a sampled rollout draws one token per row from the softmax over the vocabulary (SmolLM2's
49,152 tokens) and keeps its logprob. ``torch.multinomial(probs, 1)`` on a CPU draws one exponential per vocabulary
entry and row; :func:`workbench.rollout.backends.hf.draw` draws one uniform per row and finds it in the row's
cumulative sums. For each row count: the median seconds of a whole step's sampling over ``--repeats`` calls on the
same logits (random, scaled so a softmax at temperature 0.4 is as peaked as the demo's): ``multinomial`` is the
backends' ``_sample`` as it was (log-softmax, softmax, ``torch.multinomial``, gather), ``inverse CDF`` the
``_sample`` they run now with one generator for the call, beside it with a generator per row (the engine's row
seeds: one uniform drawn per row from its own generator); then how closely each sampler's draws follow the
probabilities (total variation distance between the draws' frequencies and the probabilities, over ``--draws`` draws
of a 64-token distribution; both should sit at the sampling noise, ~sqrt(64 / draws) / 2).

    .venv/bin/python bench/bench_sampling.py                 # rows 1, 3, 6, 8, 24, 1 thread
    .venv/bin/python bench/bench_sampling.py --rows 8 --threads 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from workbench.rollout.backends.hf import _sample, draw


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _sample_multinomial(logits: torch.Tensor, temperature: float, gen: torch.Generator):
    logp = torch.log_softmax(logits, dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)


def _tv(samples: torch.Tensor, probs: torch.Tensor) -> float:
    freq = torch.bincount(samples, minlength=probs.numel()).double() / samples.numel()
    return float((freq - probs.double()).abs().sum() / 2)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,3,6,8,24", help="row counts, comma-separated (default: %(default)s)")
    ap.add_argument("--vocab", type=int, default=49152, help="vocabulary size (default: SmolLM2's %(default)s)")
    ap.add_argument("--temperature", type=float, default=0.4, help="softmax temperature (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=50, help="timed calls per sampler and row count (default: %(default)s)")
    ap.add_argument("--draws", type=int, default=200_000, help="draws for the agreement check (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    out: dict = {"machine": platform.processor() or platform.machine(), "threads": args.threads, "rows": []}
    print(f"vocab {args.vocab}, temperature {args.temperature}, {args.threads} thread(s), median of {args.repeats}")
    print(f"{'rows':>5} {'multinomial ms':>15} {'inverse CDF ms':>15} {'ratio':>7} {'a generator per row ms':>23}")
    for rows in (int(r) for r in args.rows.split(",")):
        logits = torch.randn(rows, args.vocab, generator=g) * 3
        per_row = [torch.Generator().manual_seed(r) for r in range(rows)]  # the engine's row seeds
        a = _median_s(lambda x=logits: _sample_multinomial(x, args.temperature, g), args.repeats)
        b = _median_s(lambda x=logits: _sample(x, args.temperature, 1.0, g), args.repeats)
        c = _median_s(lambda x=logits, gens=per_row: _sample(x, args.temperature, 1.0, gens), args.repeats)
        out["rows"].append({"rows": rows, "multinomial_ms": a * 1e3, "inverse_cdf_ms": b * 1e3, "ratio": a / b,
                            "per_row_generators_ms": c * 1e3})
        print(f"{rows:>5} {a * 1e3:>15.2f} {b * 1e3:>15.2f} {a / b:>6.1f}x {c * 1e3:>23.2f}")
    small = torch.softmax(torch.randn(64, generator=g), -1)
    many = small.expand(args.draws, -1)
    tv_m = _tv(torch.multinomial(many, 1, generator=g).squeeze(-1), small)
    tv_d = _tv(draw(many.clone(), g), small)
    noise = (64 / args.draws) ** 0.5 / 2
    out.update(tv_multinomial=tv_m, tv_inverse_cdf=tv_d, tv_noise=noise, draws=args.draws)
    print(f"total variation from the probabilities over {args.draws:,} draws of 64 tokens: multinomial {tv_m:.4f}, "
          f"inverse CDF {tv_d:.4f} (sampling noise ~{noise:.4f})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
