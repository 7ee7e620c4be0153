"""The completions server's HTTP stack: requests/s and latency at 1 and 8 concurrent clients, with a backend that costs nothing.

The server (``workbench.rollout.server``, or any older copy of it given by ``--old FILE``, e.g.
``git show HEAD~1:workbench/rollout/server.py > /tmp/old_server.py``) runs in a subprocess on
127.0.0.1 so client and server do not share a GIL. Its backend answers every prompt with 16 token ids
at once, so the table measures the HTTP layer, JSON and the batcher's hand-off, not a model. Each client
thread sends one request at a time the way ``OpenAIBackend`` does (urllib, a new connection per request,
64 prompt ids, ``max_tokens`` 16, ``logprobs`` 1, ``return_token_ids``). Rows: each server × batch window
(0 s, and the default 0.02 s, which a lone client waits out on every request) × clients; the servers run
interleaved ``--repeats`` times and the table shows the median run's rate and latencies (``max``: the
slowest request, where a full listen backlog shows as a ~1 s SYN retransmit).

    .venv/bin/python bench/bench_completion_server.py --old /tmp/old_server.py
    .venv/bin/python bench/bench_completion_server.py --requests 200 --repeats 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

NEW_TOKENS = 16


def load_server(path: str | None):
    if path is None:
        from workbench.rollout import server

        return server
    spec = importlib.util.spec_from_file_location("old_completion_server", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def run_server(path: str | None, port: int, window_s: float) -> None:
    """The server process: a zero-cost backend behind ``serve`` until killed."""
    from workbench.rollout.backends.base import Backend, Generation

    class Tok:
        eos_token_id = 0

        def encode(self, text, add_special_tokens=True):
            return [ord(c) % 256 for c in text]

        def decode(self, ids, skip_special_tokens=False):
            return "".join(chr(32 + i % 90) for i in ids)

        def __len__(self):
            return 256

    class Instant(Backend):
        name = "instant"
        tokenizer = Tok()

        def generate(self, prompts, params, max_new_tokens=None):
            limits = max_new_tokens or [params.max_new_tokens] * len(prompts)
            return [Generation([(p[0] + k) % 255 + 1 for k in range(n)], [-0.5] * n, "length") for p, n in
                    zip(prompts, limits)]

    server, url = load_server(path).serve(Instant(), port=port, model_name="instant", batch_window_s=window_s)
    print(url, flush=True)
    while True:
        time.sleep(3600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(path: str | None, window_s: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, __file__, "--serve", "--port", str(port), "--window", str(window_s)]
    if path:
        cmd += ["--old", path]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 120
    while True:
        try:
            with opener.open(url.removesuffix("/v1") + "/health", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the server ({path or 'current'}) did not start") from None
            time.sleep(0.1)


def load(url: str, clients: int, n_requests: int) -> tuple[float, list[float]]:
    """``n_requests`` requests from ``clients`` threads; returns (requests/s, latencies in s)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    lat: list[float] = []
    lock = threading.Lock()
    todo = iter(range(n_requests))

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            body = json.dumps({"model": "instant", "prompt": [(i + k) % 255 + 1 for k in range(64)],
                               "max_tokens": NEW_TOKENS, "logprobs": 1, "seed": i, "return_token_ids": True,
                               "return_tokens_as_token_ids": True, "skip_special_tokens": False}).encode()
            req = urllib.request.Request(url + "/completions", data=body, headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            with opener.open(req, timeout=60) as r:
                out = json.loads(r.read())
            dt = time.perf_counter() - t0
            assert len(out["choices"][0]["token_ids"]) == NEW_TOKENS
            with lock:
                lat.append(dt)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n_requests / (time.perf_counter() - t0), lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", default=None, help="an older server.py to compare with (default: current only)")
    ap.add_argument("--requests", type=int, default=400, help="requests per row and run (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per row (default: %(default)s)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--windows", type=float, nargs="+", default=[0.0, 0.02])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--window", type=float, default=0.02, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        run_server(args.old, args.port, args.window)
        return
    servers = [("FastAPI+uvicorn (now)", None)] + ([("ThreadingHTTPServer (old)", args.old)] if args.old else [])
    runs: dict[tuple, list[tuple[float, list[float]]]] = {}
    for window in args.windows:
        procs: dict[str, tuple[subprocess.Popen, str]] = {}
        try:
            for name, path in servers:
                procs[name] = start(path, window)
            for _name, (_, url) in procs.items():  # warm-up
                load(url, 2, 20)
            for _ in range(args.repeats):
                for clients in args.clients:
                    for name, (_, url) in procs.items():
                        runs.setdefault((name, window, clients), []).append(load(url, clients, args.requests))
        finally:
            for proc, _ in procs.values():
                proc.kill()
                proc.wait()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {os.cpu_count()} CPUs  python {platform.python_version()}"
          f"  load {os.getloadavg()[0]:.2f}  requests/row {args.requests} x {args.repeats}")
    print(f"{'server':<27} {'window s':>8} {'clients':>7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'req/s runs':>20}")
    for (name, window, clients), rs in runs.items():
        rates = [r for r, _ in rs]
        rate, lat = sorted(rs, key=lambda x: x[0])[len(rs) // 2]
        ms = np.asarray(lat) * 1e3
        spread = "/".join(f"{r:.0f}" for r in rates)
        print(f"{name:<27} {window:>8.2f} {clients:>7} {statistics.median(rates):>8.0f} {np.percentile(ms, 50):>7.2f}"
              f" {np.percentile(ms, 99):>7.2f} {ms.max():>7.1f} {spread:>20}")


if __name__ == "__main__":
    main()
