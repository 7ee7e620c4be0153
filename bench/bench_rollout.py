"""Rollout throughput of the HF backend on this machine: one batched call for 8 prompts vs the same 8 one by one.

The prompts are real agent prompts: the ``search_r1`` protocol's chat messages (system prompt,
the few-shot demonstration, the question) over dev questions of the default synthetic world,
encoded with the policy's chat template, as the engine builds them at turn 0. Two workloads:

- ``group``: one question 8 times (a GRPO group: identical prompts, sampled continuations);
- ``distinct``: 8 different dev questions (prompts of different lengths, left-padded).

Each workload is generated three ways with the same prompts, sampling settings and token limit:
``sequential`` (8 calls of 1 prompt), ``batched`` (1 call of 8) and ``http`` (the same backend
behind ``workbench.rollout.server``, reached through ``OpenAIBackend`` with 8 requests in
flight, which the server batches). Tokens/s counts generated tokens; sampled lengths differ
between the ways (different random draws; EOS ends a row early), so compare rates, not times.
Each way runs ``--repeats`` times, interleaved with the others so that load from other jobs on a
shared machine hits all of them alike; the table shows the median run and the spread of the
rates. ``cpu s`` is the process's CPU time (with one torch thread, close to the work done).

    .venv/bin/python bench/bench_rollout.py
    .venv/bin/python bench/bench_rollout.py --max-new-tokens 32 --repeats 1 --workloads group --no-http
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from workbench.data.world import load_world
from workbench.protocols import get_protocol
from workbench.rollout.backends import OpenAIBackend, SamplingParams
from workbench.rollout.backends.base import encode_chat
from workbench.rollout.backends.hf import HFBackend
from workbench.rollout.server import serve


def make_prompts(tok, workload: str, n: int) -> list[list[int]]:
    protocol = get_protocol("search_r1")
    dev = load_world().split("dev")
    examples = [dev[0]] * n if workload == "group" else dev[:n]
    return [encode_chat(tok, protocol.messages(ex)) for ex in examples]


def run_workload(backend: HFBackend, url: str | None, workload: str, args: argparse.Namespace) -> list[dict]:
    """Time each way ``args.repeats`` times, interleaved (load drifts on a shared machine); keep the median."""
    prompts = make_prompts(backend.tokenizer, workload, args.n)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    ways = {
        "sequential": lambda: [backend.generate([p], params)[0] for p in prompts],
        "batched": lambda: backend.generate(prompts, params),
    }
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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    backend = HFBackend.from_pretrained(args.model, device="cpu")
    load_s = time.perf_counter() - t0
    backend.generate([backend.tokenizer.encode("warm up")], SamplingParams(max_new_tokens=4, temperature=0.0))
    server, url = (None, None) if args.no_http else serve(backend, model_name="bench")
    print(f"# {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), load average {os.getloadavg()[0]:.1f} "
          f"at start; model loaded in {load_s:.1f}s")
    print(f"# {args.n} prompts, max_new_tokens={args.max_new_tokens}, temperature={args.temperature}, seed={args.seed}")
    rows = []
    try:
        for workload in args.workloads:
            rows += run_workload(backend, url, workload, args)
    finally:
        if server is not None:
            server.stop()
    print(f"{'workload':<9} {'way':<11} {'prompts':>7} {'prompt tok':>10} {'generated':>9} {'seconds':>8} "
          f"{'tok/s':>7} {'(min-max)':>12} {'vs seq':>7} {'cpu s':>7} {'tok/cpu-s':>9}")
    for r in rows:
        lo, hi = r["spread"]
        print(f"{r['workload']:<9} {r['way']:<11} {r['prompts']:>7} {r['prompt_tokens']:>10.0f} {r['generated']:>9} "
              f"{r['seconds']:>8.1f} {r['tok_s']:>7.1f} {f'({lo:.1f}-{hi:.1f})':>12} {r['ratio']:>6.2f}x "
              f"{r['cpu_s']:>7.1f} {r['cpu_tok_s']:>9.1f}")
    print(f"# load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
