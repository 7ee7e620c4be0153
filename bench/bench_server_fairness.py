"""A short request that arrives while a long one runs, on the real model: how long it waits, and what cutting the long
request into calls costs it.

The completions server (``workbench.rollout.server``) in this process over the HF backend of the default model. The
long request is 32 prompts x ``max_tokens`` 200 at temperature 1 (a story prompt, so rows run long); the short one,
sent ``--delay`` seconds after the long one started, is 1 prompt x 1 token. Each ``--max-call-tokens`` setting (0:
requests are never cut, the server's behaviour before the cut existed) runs the long request alone, then with the short
one arriving, ``--repeats`` times, interleaved; the table shows medians. Both settings run in the same process on the
same model, so the ratios hold on a busy machine where the seconds do not.

    .venv/bin/python bench/bench_server_fairness.py
    .venv/bin/python bench/bench_server_fairness.py --settings 0,1024,2048,4096 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time

import httpx

PROMPT = "Write a long story about a lighthouse keeper who finds a map in a bottle. Once upon a time,"


def cpu_flags() -> str:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return platform.processor() or "unknown"
    keep = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    return " ".join(f for f in keep if f in flags) or "no avx2"


def post(url: str, body: dict) -> tuple[float, dict]:
    t = time.perf_counter()
    r = httpx.post(url + "/completions", json={"model": "bench", **body}, timeout=3600)
    r.raise_for_status()
    return time.perf_counter() - t, r.json()


def one(url: str, long_body: dict, short: bool, delay: float) -> dict:
    out: dict = {}

    def run_long() -> None:
        out["long_s"], reply = post(url, long_body)
        out["tokens"] = reply["usage"]["completion_tokens"]

    th = threading.Thread(target=run_long)
    th.start()
    if short:
        time.sleep(delay)
        out["short_s"], _ = post(url, {"prompt": "Hello", "max_tokens": 1, "temperature": 0})
    th.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default="0,2048", help="max_call_tokens values, comma-separated (0: never cut)")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--delay", type=float, default=1.0, help="seconds between the long request and the short one")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    settings = [int(s) for s in args.settings.split(",")]

    from workbench.util.threads import apply_threads

    threads = apply_threads(args.threads)
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.server import serve

    backend = HFBackend.from_pretrained(None, device="cpu")
    servers = {s: serve(backend, model_name="bench", max_call_tokens=s) for s in settings}
    long_body = {"prompt": [PROMPT] * args.rows, "max_tokens": args.max_tokens, "temperature": 1.0, "seed": 0}
    post(servers[settings[0]][1], {"prompt": "Hi", "max_tokens": 4})  # warm-up
    res: dict[int, list[dict]] = {s: [] for s in settings}
    try:
        for _ in range(args.repeats):
            for s in settings:
                url = servers[s][1]
                alone = one(url, long_body, short=False, delay=0)
                both = one(url, long_body, short=True, delay=args.delay)
                res[s].append({"alone_s": alone["long_s"], "tokens": alone["tokens"], "long_s": both["long_s"],
                               "short_s": both["short_s"]})
    finally:
        for srv, _ in servers.values():
            srv.stop()

    med = {s: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for s, rows in res.items()}
    base = med[settings[0]]
    print(f"\n{time.strftime('%Y-%m-%d')} · {platform.node()} · CPU flags: {cpu_flags()} · torch threads {threads} · "
          f"long request {args.rows} x {args.max_tokens} tokens (T = 1), short 1 x 1, sent {args.delay} s after; "
          f"median of {args.repeats}\n")
    print("| max_call_tokens | long alone (s) | tokens | long beside the short (s) | the short waited (s) | "
          f"long alone vs {settings[0]} | short's wait vs {settings[0]} |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in settings:
        m = med[s]
        print(f"| {s} | {m['alone_s']:.1f} | {m['tokens']:.0f} | {m['long_s']:.1f} | {m['short_s']:.2f} | "
              f"{m['alone_s'] / base['alone_s']:.2f}x | {m['short_s'] / base['short_s']:.2f}x |")


if __name__ == "__main__":
    main()
