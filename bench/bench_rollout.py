"""Rollout throughput of the HF backend on this machine: one batched call for 8 prompts vs the same 8 one by one.

The prompts are real agent prompts: the ``search_r1`` protocol's chat messages (system prompt,
the few-shot demonstration, the question) over dev questions of the default synthetic world,
encoded with the policy's chat template, as the engine builds them at turn 0. Two workloads:

- ``group``: one question 8 times (a GRPO group: identical prompts, sampled continuations);
- ``distinct``: 8 different dev questions (prompts of different lengths, left-padded).

Each workload is generated three ways with the same prompts, sampling settings and token limit:
``sequential`` (8 calls of 1 prompt), ``batched`` (1 call of 8; with ``--concat-cache`` also ``concat``,
the same call decoding into transformers' concatenating cache, as it decoded before the preallocated buffers) and ``http`` (the same backend
behind ``workbench.rollout.server``, reached through ``OpenAIBackend`` with 8 requests in
flight, which the server batches). Tokens/s counts generated tokens; sampled lengths differ
between the ways (different random draws; EOS ends a row early), so compare rates, not times.
Each way runs ``--repeats`` times, interleaved with the others so that load from other jobs on a
shared machine hits all of them alike; the table shows the median run and the spread of the
rates. ``cpu s`` is the process's CPU time (with one torch thread, close to the work done).

**Bound.** Beside each row, the time this machine needs at least for the same work (``bound tok/s``, and
``of bound`` = achieved / bound): each prefill at the measured fp32 matmul peak (its FLOPs:
:mod:`workbench.rl.flops`), and each decode step at the slower of its FLOPs at that peak and its bytes
(every weight matrix read once, plus the rows' keys/values) at the measured read bandwidth (``torch.sum``
over 256 MiB). The sequential way prefills each call's prompt (a longer cached sequence is not a prefix of
it); the batched way prefills the group's shared prompt once.

    .venv/bin/python bench/bench_rollout.py
    .venv/bin/python bench/bench_rollout.py --max-new-tokens 32 --repeats 1 --workloads group --no-http
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from workbench.data.world import load_world
from workbench.methods import get_protocol
from workbench.rollout.backends import OpenAIBackend, SamplingParams
from workbench.rollout.backends.base import encode_chat
from workbench.rollout.backends.hf import HFBackend
from workbench.rollout.server import serve

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_matmul_peak import measure_bandwidth, measure_peak  # noqa: E402


def make_prompts(tok, workload: str, n: int) -> list[list[int]]:
    protocol = get_protocol("search_r1")
    dev = load_world().split("dev")
    examples = [dev[0]] * n if workload == "group" else dev[:n]
    return [encode_chat(tok, protocol.messages(ex)) for ex in examples]


def bound_seconds(backend: HFBackend, prompt_len: float, prefills: int, rows: int, steps: float, peak: float,
                  bw: float) -> float:
    """Least time for ``prefills`` prefills of ``prompt_len`` tokens and ``steps`` decode steps of ``rows`` rows
    (see the module docstring): FLOPs at ``peak``, bytes at ``bw``."""
    from workbench.rl.flops import causal_pairs, forward_flops, model_shape

    shape = model_shape(backend.model)
    weights = (shape.body_params + shape.head_params) * next(backend.model.parameters()).element_size()
    P = int(prompt_len)
    total = prefills * forward_flops(shape, P, causal_pairs(P), 1) / peak  # logits of the last position only
    for s in range(int(round(steps))):
        ctx = P + s
        flops = rows * forward_flops(shape, 1, ctx + 1, 1)
        nbytes = weights + rows * ctx * backend.kv_bytes_per_token
        total += max(flops / peak, nbytes / bw)
    return total


def way_bound(backend: HFBackend, prompts: list[list[int]], way: str, steps: float, args: argparse.Namespace) -> float:
    """Least seconds for a way's work: ``sequential`` prefills every prompt and decodes one row at a time; the
    batched ways prefill each distinct prompt once and decode all rows together (``steps`` per row)."""
    bw, peak = args.bandwidth, args.peak
    if way == "sequential":
        return sum(bound_seconds(backend, len(p), 1, 1, steps, peak, bw) for p in prompts)
    mean = sum(map(len, prompts)) / len(prompts)
    prefill = sum(bound_seconds(backend, len(p), 1, 0, 0, peak, bw) for p in {tuple(p): p for p in prompts}.values())
    return prefill + bound_seconds(backend, mean, 0, len(prompts), steps, peak, bw)


def _with_concat_cache(backend: HFBackend, fn):
    """``fn()`` with transformers' concatenating DynamicCache (``preallocate=False``): the decode before the preallocated buffers."""
    backend.preallocate = False
    try:
        return fn()
    finally:
        backend.preallocate = True


def run_workload(backend: HFBackend, url: str | None, workload: str, args: argparse.Namespace) -> list[dict]:
    """Time each way ``args.repeats`` times, interleaved (load drifts on a shared machine); keep the median."""
    prompts = make_prompts(backend.tokenizer, workload, args.n)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    ways = {
        "sequential": lambda: [backend.generate([p], params)[0] for p in prompts],
        "batched": lambda: backend.generate(prompts, params),
    }
    if args.concat_cache:
        ways["concat"] = lambda: _with_concat_cache(backend, lambda: backend.generate(prompts, params))
    if url:
        client = OpenAIBackend(url, "bench", backend.tokenizer, concurrency=args.n, timeout_s=3600)
        ways["http"] = lambda: client.generate(prompts, params)
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for rep in range(args.repeats):
        order = list(ways)[rep % len(ways):] + list(ways)[: rep % len(ways)]
        for way in order:
            backend.clear_cache()
            t0, c0 = time.perf_counter(), time.process_time()
            gens = ways[way]()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            errors = [g.error for g in gens if g.finish_reason == "error"]
            if errors:
                raise RuntimeError(f"{workload}/{way}: {errors[0]}")
            n_tok = sum(len(g.token_ids) for g in gens)
            runs[way].append({"generated": n_tok, "seconds": wall, "cpu_s": cpu, "tok_s": n_tok / wall,
                              "cpu_tok_s": n_tok / cpu})
            b = way_bound(backend, prompts, way, n_tok / len(prompts), args)
            runs[way][-1]["bound_tok_s"] = n_tok / b
    rows = []
    for way, rs in runs.items():
        med = sorted(rs, key=lambda r: r["tok_s"])[len(rs) // 2]
        rows.append({"workload": workload, "way": way, "prompts": len(prompts),
                     "prompt_tokens": sum(map(len, prompts)) / len(prompts), **med,
                     "spread": (min(r["tok_s"] for r in rs), max(r["tok_s"] for r in rs))})
    seq = rows[0]["tok_s"]
    for r in rows:
        r["ratio"] = r["tok_s"] / seq
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="alias, local path or HF id (default: the workbench default model)")
    ap.add_argument("--n", type=int, default=8, help="prompts per workload (the group size)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workloads", nargs="+", default=["group", "distinct"], choices=["group", "distinct"])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per way (interleaved); the median is shown")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared CPU, OpenMP threads that lose their core stall every op)")
    ap.add_argument("--no-http", action="store_true", help="skip the server + OpenAIBackend row")
    ap.add_argument("--concat-cache", action="store_true",
                    help="also a 'concat' row: the batched call with transformers' concatenating cache (the old decode)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one batched call of the first workload (torch.profiler: time per op)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.peak, args.bandwidth = measure_peak(args.threads), measure_bandwidth()

    t0 = time.perf_counter()
    backend = HFBackend.from_pretrained(args.model, device="cpu")
    load_s = time.perf_counter() - t0
    backend.generate([backend.tokenizer.encode("warm up")], SamplingParams(max_new_tokens=4, temperature=0.0))
    server, url = (None, None) if args.no_http else serve(backend, model_name="bench")
    print(f"# {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), load average {os.getloadavg()[0]:.1f} "
          f"at start; model loaded in {load_s:.1f}s")
    print(f"# fp32 matmul peak {args.peak / 1e9:.1f} GFLOP/s, read bandwidth {args.bandwidth / 1e9:.1f} GB/s "
          f"({torch.get_num_threads()} thread(s)): the bound's roofs")
    print(f"# {args.n} prompts, max_new_tokens={args.max_new_tokens}, temperature={args.temperature}, seed={args.seed}")
    rows = []
    try:
        for workload in args.workloads:
            rows += run_workload(backend, url, workload, args)
    finally:
        if server is not None:
            server.stop()
    print(f"{'workload':<9} {'way':<11} {'prompts':>7} {'prompt tok':>10} {'generated':>9} {'seconds':>8} "
          f"{'tok/s':>7} {'(min-max)':>12} {'vs seq':>7} {'cpu s':>7} {'tok/cpu-s':>9} {'bound tok/s':>11} {'of bound':>8}")
    for r in rows:
        lo, hi = r["spread"]
        print(f"{r['workload']:<9} {r['way']:<11} {r['prompts']:>7} {r['prompt_tokens']:>10.0f} {r['generated']:>9} "
              f"{r['seconds']:>8.1f} {r['tok_s']:>7.1f} {f'({lo:.1f}-{hi:.1f})':>12} {r['ratio']:>6.2f}x "
              f"{r['cpu_s']:>7.1f} {r['cpu_tok_s']:>9.1f} {r['bound_tok_s']:>11.1f} {r['tok_s'] / r['bound_tok_s']:>7.0%}")
    print(f"# load average {os.getloadavg()[0]:.1f} at end")
    if args.profile:
        profile_batched(backend, args)


def profile_batched(backend: HFBackend, args: argparse.Namespace) -> None:
    """Where one batched call's time goes: the top operators by self CPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    prompts = make_prompts(backend.tokenizer, args.workloads[0], args.n)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    backend.clear_cache()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        backend.generate(prompts, params)
    print(f"# profile of one batched call ({args.workloads[0]}), by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
