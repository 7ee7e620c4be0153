"""The retrieval server over loopback HTTP vs calling the BM25 tool in-process, at 1, 8 and 64 concurrent clients.

Corpus: ``--passages`` synthetic passages (``bench_bm25``'s Zipfian pseudo-words, 40–120 words each);
queries: 3–7 words from random passages; ``topk`` 3 (Search-R1). The server runs in a subprocess
(uvicorn, 127.0.0.1, a free port) so client and server do not share a GIL; each client sends one
query per request (how a rollout worker calls it) and the server coalesces concurrent requests
into one ``bm25s`` call. In-process rows call ``BM25Search.search`` one query at a time and, for
reference, ``search_batch`` with 64 queries per call. Every loop is bounded (``--requests`` per level).

    .venv/bin/python bench/bench_retrieval_server.py                      # 100k passages
    .venv/bin/python bench/bench_retrieval_server.py --passages 5000 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_bm25 import make_corpus, make_queries, make_vocab  # noqa: E402


def corpus(n: int, seed: int):
    rng = np.random.default_rng(seed)
    vocab = make_vocab(50_000, rng)
    passages = make_corpus(n, vocab, 1.1, rng)
    return passages, make_queries(passages, 4096, rng)


def serve(n: int, seed: int, port: int) -> None:
    import uvicorn

    from workbench.integrations.retrieval_server import RetrievalService, create_app

    passages, _ = corpus(n, seed)
    app = create_app(RetrievalService.from_passages(passages, kg=False, plan=False))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


async def client_level(url: str, queries: list[str], concurrency: int, n_requests: int) -> tuple[float, list[float]]:
    import httpx

    lat: list[float] = []
    it = iter(range(n_requests))

    async def worker(c: httpx.AsyncClient) -> None:
        for i in it:
            t0 = time.perf_counter()
            r = await c.post(url, json={"queries": [queries[i % len(queries)]], "topk": 3, "return_scores": True})
            r.raise_for_status()
            lat.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as c:
        await c.post(url, json={"queries": ["warm up"], "topk": 3})
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return wall, lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=640, help="requests per concurrency level")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hostile", action="store_true", help="the hostile probes against `workbench serve-retrieval "
                    "--corpus world` instead: a burst of --burst requests, a small query behind two huge ones, "
                    "--held unfinished bodies (server RSS), --idle idle connections")
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--burst-repeats", type=int, default=3)
    ap.add_argument("--held", type=int, default=60)
    ap.add_argument("--idle", type=int, default=1100)
    ap.add_argument("--watch-s", type=float, default=60.0, help="how long to watch held and idle connections")
    ap.add_argument("--api-key", default=None, help="bearer token the probes send")
    ap.add_argument("--crowd", action="store_true", help="with --hostile: only the crowd probe (a normal client "
                    "beside 60 stalled uploads and 30 clients that never read)")
    ap.add_argument("--server-args", default="", help="extra serve-retrieval flags, e.g. '--read-timeout 10'")
    args = ap.parse_args()
    if args.hostile:
        hostile(args)
        return
    if args.serve is not None:
        serve(args.passages, args.seed, args.serve)
        return

    from workbench.tools.bm25 import BM25Search

    t0 = time.perf_counter()
    passages, queries = corpus(args.passages, args.seed)
    t_corpus = time.perf_counter() - t0
    t0 = time.perf_counter()
    tool = BM25Search(passages)
    t_index = time.perf_counter() - t0
    rows = []
    n = min(args.requests, len(queries))
    lat = []
    t0 = time.perf_counter()
    for q in queries[:n]:
        t1 = time.perf_counter()
        tool.search(q, 3)
        lat.append(time.perf_counter() - t1)
    wall = time.perf_counter() - t0
    rows.append(("in-process search()", 1, n / wall, pct(lat, 50), pct(lat, 99)))
    lat, t0 = [], time.perf_counter()
    for i in range(0, n, 64):
        t1 = time.perf_counter()
        tool.search_batch(queries[i : i + 64], 3)
        lat.append(time.perf_counter() - t1)
    wall = time.perf_counter() - t0
    rows.append(("in-process search_batch(64)", 1, n / wall, pct(lat, 50), pct(lat, 99)))
    del tool

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen([sys.executable, __file__, "--passages", str(args.passages), "--seed", str(args.seed),
                             "--serve", str(port)], env=env)
    try:
        import httpx

        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.5)
        for c in [int(x) for x in args.concurrency.split(",")]:
            before = httpx.get(url + "/health").json()
            wall, lat = asyncio.run(client_level(url + "/retrieve", queries, c, n))
            after = httpx.get(url + "/health").json()
            batches = after["batches"] - before["batches"] - 1  # minus the warm-up
            rows.append((f"HTTP /retrieve ({n / max(batches, 1):.1f} q/batch)", c, n / wall, pct(lat, 50),
                         pct(lat, 99)))
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    print(f"\n{args.passages:,} passages (corpus {t_corpus:.1f}s, index {t_index:.1f}s), {n} requests per row, "
          f"topk 3; {platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"| {'path':<36} | clients | queries/s | p50 ms | p99 ms |")
    print(f"|{'-' * 38}|---------|-----------|--------|--------|")
    for name, c, qps, p50, p99 in rows:
        print(f"| {name:<36} | {c:>7} | {qps:>9.0f} | {p50:>6.2f} | {p99:>6.1f} |")


# --------------------------------------------------------------------------- hostile probes


def start_cli_server(port: int, extra: list[str]) -> subprocess.Popen:
    """``workbench serve-retrieval --corpus world`` (its defaults: timeouts and caps on) in a subprocess."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.Popen([sys.executable, "-m", "workbench.apps.cli", "serve-retrieval", "--corpus", "world", "--port",
                             str(port), *extra], env=env)


def wait_healthy(url: str, proc: subprocess.Popen, headers: dict[str, str]) -> dict:
    import httpx

    deadline = time.monotonic() + 600
    while True:
        try:
            r = httpx.get(url + "/health", timeout=2, headers=headers)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.5)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def raw_post(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, int]:
    """One HTTP/1.1 POST on a fresh connection with asyncio streams (a client far lighter than httpx, so the burst
    measures the server): ``(status, body bytes)``."""
    reader, writer = await asyncio.open_connection(host, port)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    n = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    data = await reader.readexactly(n)
    writer.close()
    return status, len(data)


async def burst(url: str, queries: list[str], n: int, headers: dict[str, str]) -> tuple[list[float], dict[int, int]]:
    """``n`` single-query requests at once, each on its own connection: latencies and status counts."""
    import json
    from urllib.parse import urlsplit

    u = urlsplit(url)
    lat: list[float] = []
    status: dict = {}

    async def one(i: int) -> None:
        body = json.dumps({"queries": [queries[i % len(queries)]], "topk": 3}).encode()
        t0 = time.perf_counter()
        try:
            code, _ = await raw_post(u.hostname, u.port, "/retrieve", body, headers)
        except (OSError, asyncio.IncompleteReadError) as e:
            code = type(e).__name__
        status[code] = status.get(code, 0) + 1
        lat.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(i) for i in range(n)))
    return lat, status


async def small_behind_big(url: str, queries: list[str], big_q: int, big_k: int, headers: dict[str, str]) -> dict:
    """A one-query request alone (median of 10), then 50 ms after two ``big_q`` x ``big_k`` requests."""
    import httpx

    async with httpx.AsyncClient(timeout=300, headers=headers) as c:
        alone = []
        for q in queries[:10]:
            t0 = time.perf_counter()
            (await c.post(url + "/retrieve", json={"queries": [q], "topk": 3})).raise_for_status()
            alone.append(time.perf_counter() - t0)

        async def big(offset: int) -> tuple[int, int, float]:
            t0 = time.perf_counter()
            body = {"queries": [queries[(offset + i) % len(queries)] for i in range(big_q)], "topk": big_k}
            r = await c.post(url + "/retrieve", json=body)
            return r.status_code, len(r.content), time.perf_counter() - t0

        async def small() -> float:
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            (await c.post(url + "/retrieve", json={"queries": [queries[-1]], "topk": 3})).raise_for_status()
            return time.perf_counter() - t0

        b1, b2, s = await asyncio.gather(big(0), big(1000), small())
    return {"alone_ms": float(np.median(alone)) * 1e3, "behind_ms": s * 1e3, "big": [b1, b2]}


def watch_closed(socks: list[socket.socket], watch_s: float) -> tuple[int, float | None]:
    """Poll until the server has answered or closed every socket (or ``watch_s`` passed): (still open, seconds)."""
    import select

    poll = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    t0 = time.monotonic()
    while by_fd and time.monotonic() - t0 < watch_s:
        for fd, _ in poll.poll(500):
            try:
                data = by_fd[fd].recv(65536)
            except OSError:
                data = b""
            if not data or data.startswith(b"HTTP/"):
                poll.unregister(fd)
                del by_fd[fd]
    return len(by_fd), (time.monotonic() - t0 if not by_fd else None)


def held_bodies(host: str, port: int, pid: int, n: int, size: int, watch_s: float) -> dict:
    """``n`` connections each declare a ``size``-byte body, send all but 1 KiB of it, and stop."""
    before = rss_mb(pid)
    socks = []
    chunk = b'{"queries": ["' + b"a" * (1 << 16)
    for _ in range(n):
        s = socket.create_connection((host, port))
        s.settimeout(10)
        try:
            s.sendall(f"POST /retrieve HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {size}\r\n\r\n".encode())
            sent = 0
            while sent < size - 1024:
                k = min(len(chunk), size - 1024 - sent)
                s.sendall(chunk[:k])
                sent += k
        except OSError:  # the server refused the body and closed
            pass
        socks.append(s)
    time.sleep(1.0)
    held = rss_mb(pid)
    still, secs = watch_closed(socks, watch_s)
    after = rss_mb(pid)
    for s in socks:
        s.close()
    return {"rss_before_mb": before, "rss_held_mb": held, "rss_after_mb": after, "still_open": still,
            "all_answered_or_closed_s": secs}


def idle_connections(host: str, port: int, n: int, watch_s: float) -> dict:
    """``n`` connections that send nothing: how long until the server has closed them all."""
    socks = [socket.create_connection((host, port)) for _ in range(n)]
    still, secs = watch_closed(socks, watch_s)
    for s in socks:
        s.close()
    return {"n": n, "still_open": still, "all_closed_s": secs}


def server_connections(pid: int, port: int) -> int:
    """Established TCP connections process ``pid`` holds on local ``port`` (Linux: its socket inodes matched
    against ``/proc/net/tcp*``). A client that never reads cannot tell from its side that the server let go."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "01" and cols[9] in inodes:
                    n += 1
    return n


def watch_server_connections(pid: int, port: int, watch_s: float) -> tuple[int, float | None]:
    """Poll until the server holds no connection on ``port`` (or ``watch_s`` passed): (still held, seconds)."""
    t0 = time.monotonic()
    while True:
        still = server_connections(pid, port)
        if not still or time.monotonic() - t0 > watch_s:
            return still, (time.monotonic() - t0 if not still else None)
        time.sleep(0.5)


def crowd(host: str, port: int, pid: int, queries: list[str], headers: dict[str, str], stalled: int,
          non_readers: int, normal: int, watch_s: float) -> dict:
    """A normal client's latency while ``stalled`` uploads (2 MiB declared, all but the last byte sent) and
    ``non_readers`` clients that ask for ~5 MB each and never read are connected; then how long the server keeps
    the non-readers."""
    import json as _json

    import httpx

    before = rss_mb(pid)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    ups, refused = [], 0
    for _ in range(stalled):
        s = socket.create_connection((host, port))
        s.settimeout(2)
        try:
            s.sendall(f"POST /retrieve HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
                      f"Content-Length: {2 << 20}\r\n\r\n".encode() + b'{"queries": ["' + b"a" * ((2 << 20) - 15))
        except OSError:
            refused += 1
        ups.append(s)
    body = _json.dumps({"queries": queries[:1024], "topk": 10, "return_meta": True}).encode()
    readers = []
    for _ in range(non_readers):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, port))
        s.sendall(f"POST /retrieve HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        readers.append(s)
    time.sleep(1.0)
    held = rss_mb(pid)
    lat, status = [], {}
    with httpx.Client(timeout=10, headers=headers) as c:
        for i in range(normal):
            t0 = time.perf_counter()
            r = c.post(f"http://{host}:{port}/retrieve", json={"queries": [queries[i % len(queries)]], "topk": 3})
            lat.append(time.perf_counter() - t0)
            status[r.status_code] = status.get(r.status_code, 0) + 1
    for s in ups:
        s.close()
    still, secs = watch_server_connections(pid, port, watch_s)
    after = rss_mb(pid)
    for s in readers:
        s.close()
    return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "status": status, "rss_before_mb": before,
            "rss_held_mb": held, "rss_after_mb": after, "uploads_refused_while_sending": refused,
            "non_readers_open": still, "non_readers_closed_s": secs}


def hostile(args: argparse.Namespace) -> None:
    from workbench.data.world import load_world

    rng = np.random.default_rng(args.seed)
    passages = [p for p in load_world().passages if len(p.text.split()) >= 8]
    queries = make_queries(passages, 4096, rng)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    extra = args.server_args.split() if args.server_args else []
    proc = start_cli_server(port, extra)
    url = f"http://127.0.0.1:{port}"
    try:
        health = wait_healthy(url, proc, headers)
        limits = health.get("limits") or {}
        max_body = int(limits.get("max_body_bytes", 8 << 20))
        max_hits = int(limits.get("max_hits", 1024 * 100))
        big_q, big_k = 1024, min(100, int(limits.get("max_topk", 100)))
        while big_q * big_k > max_hits:  # the biggest request the server accepts
            big_k = max(1, max_hits // big_q) if big_k > 1 else big_k
            if big_q * big_k > max_hits:
                big_q //= 2
        rss0 = rss_mb(proc.pid)
        print(f"\nhostile probes, world corpus, {platform.machine()} {os.cpu_count()} cores, load "
              f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}; server args: {' '.join(extra) or '(defaults)'}")
        print(f"server RSS at start {rss0:.0f} MB; limits {limits or '(none reported)'}", flush=True)
        for _ in range(args.burst_repeats):
            cpu0, t0 = cpu_s(proc.pid), time.perf_counter()
            lat, status = asyncio.run(burst(url, queries, args.burst, headers))
            wall, cpu = time.perf_counter() - t0, cpu_s(proc.pid) - cpu0
            print(f"{args.burst} concurrent one-query requests: p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms, "
                  f"statuses {status}; {wall:.1f} s wall, server CPU {cpu:.1f} s", flush=True)
        behind = asyncio.run(small_behind_big(url, queries, big_q, big_k, headers))
        print(f"small query alone {behind['alone_ms']:.0f} ms; behind two {big_q} x topk {big_k} requests "
              f"{behind['behind_ms']:.0f} ms (big: {behind['big']} = status, bytes, s)", flush=True)
        if (big_q, big_k) != (1024, 100):
            over = asyncio.run(small_behind_big(url, queries, 1024, 100, headers))
            print(f"two 1024 x topk 100 requests (over the cap): {over['big']}; small behind them "
                  f"{over['behind_ms']:.0f} ms", flush=True)
        if args.crowd:
            c = crowd("127.0.0.1", port, proc.pid, queries, headers, 60, 30, 200, args.watch_s)
            print(f"normal client (200 requests) beside 60 stalled 2 MiB uploads and 30 non-readers: p50 "
                  f"{c['p50_ms']:.0f} ms, p99 {c['p99_ms']:.0f} ms, statuses {c['status']}; uploads refused while "
                  f"sending {c['uploads_refused_while_sending']}; RSS {c['rss_before_mb']:.0f} -> {c['rss_held_mb']:.0f} "
                  f"-> {c['rss_after_mb']:.0f} MB; non-readers still open after {args.watch_s:.0f} s: "
                  f"{c['non_readers_open']} (all closed after {c['non_readers_closed_s']} s)", flush=True)
            return
        held = held_bodies("127.0.0.1", port, proc.pid, args.held, max_body - 1, args.watch_s)
        print(f"{args.held} held bodies of {max_body - 1:,} bytes: RSS {held['rss_before_mb']:.0f} -> "
              f"{held['rss_held_mb']:.0f} MB held -> {held['rss_after_mb']:.0f} MB after; still open after "
              f"{args.watch_s:.0f} s: {held['still_open']} (all answered/closed after "
              f"{held['all_answered_or_closed_s']} s)", flush=True)
        idle = idle_connections("127.0.0.1", port, args.idle, args.watch_s)
        print(f"{idle['n']} idle connections: still open after {args.watch_s:.0f} s: {idle['still_open']} "
              f"(all closed after {idle['all_closed_s']} s)", flush=True)
        print(f"server RSS at the end {rss_mb(proc.pid):.0f} MB; alive: {proc.poll() is None}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)

if __name__ == "__main__":
    main()
