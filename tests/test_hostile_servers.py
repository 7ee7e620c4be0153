"""Hostile clients against the two HTTP servers (loopback only, bounded): stalled uploads that must not starve
other clients, unauthenticated bodies on the open health path, clients that ask and never read, strictly typed
fields, FastAPI's own errors in the server's shape; and the completions server's limits (uploads, max_tokens,
prompts per request, adapter paths, a remote bind without a key)."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from workbench.core.types import Passage  # noqa: E402
from workbench.integrations.retrieval_server import RetrievalService, ServerThread, create_app  # noqa: E402

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"passage {i} about Ulm and Ostrevia " + "word " * 40) for i in range(50)]
KEY = "test-key-0123"


def raw(url: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connecting, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((host, int(port)))
    return sock


def stalled_upload(url: str, path: str = "/retrieve", declared: int = 2 << 20, sent: int = (2 << 20) - 15,
                   headers: str = "") -> socket.socket:
    """A POST that declares ``declared`` bytes, sends all but the last (as far as the server reads them) and
    stalls."""
    sock = raw(url)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
            f"Content-Length: {declared}\r\n\r\n").encode()
    sock.settimeout(2)
    try:
        sock.sendall(head + b'{"queries": ["' + b"a" * sent)
    except OSError:  # refused and closed already, or the server stopped reading: either way it stalls
        pass
    return sock


def refused(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server answered with 503 (each is closed)."""
    n = 0
    for sock in socks:
        sock.settimeout(2)
        try:
            n += sock.recv(64).startswith(b"HTTP/1.1 503")
        except OSError:
            pass
        sock.close()
    return n


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def normal_requests(url: str, n: int, headers: dict | None = None) -> tuple[list[int], list[float]]:
    codes, times = [], []
    with httpx.Client(timeout=10, headers=headers) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = c.post(url + "/retrieve", json={"queries": [f"Ulm and Ostrevia {i}"], "topk": 2})
            times.append(time.perf_counter() - t0)
            codes.append(r.status_code)
    return codes, times


def connections(s: ServerThread) -> int:
    return len(s.server.server_state.connections)


def test_stalled_uploads_do_not_starve_small_requests():
    """60 uploads that declare 2 MiB and stall (the probe's: 58 of 69 normal requests got 503): each client address
    holds at most its share, the rest are refused at once, and small requests keep being answered."""
    app = create_app(RetrievalService.from_passages(PASSAGES), read_timeout_s=20)
    with ServerThread(app) as s:
        socks = [stalled_upload(s.url) for _ in range(60)]
        codes, times = normal_requests(s.url, 40)
        assert codes == [200] * 40 and p99(times) < 1.0
        assert refused(socks) == 56  # 8 MiB per address past the allowances: four 2 MiB reservations fit
    # chunked uploads (no length declared) are charged as they arrive, under the same budgets
    app = create_app(RetrievalService.from_passages(PASSAGES), read_timeout_s=20, max_client_bytes=1 << 20)
    with ServerThread(app) as s:
        socks = []
        for _ in range(8):
            sock = raw(s.url)
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + b"40000\r\n" + b"a" * 0x40000 + b"\r\n")
            socks.append(sock)
        codes, _ = normal_requests(s.url, 10)
        assert codes == [200] * 10
        # 1 MiB per address past the 64 KiB allowances: five bodies of 64 + 192 KiB fit, three are refused
        assert refused(socks) == 3


def test_unauthenticated_bodies_on_the_open_path_are_refused_before_reading():
    """With a key, POST /health skipped the key check and its body was buffered: 20 of 20 authenticated requests got
    503. Now only a body-less GET passes without the key."""
    app = create_app(RetrievalService.from_passages(PASSAGES), api_key=KEY, read_timeout_s=20,
                     max_buffered_bytes=4 << 20)
    with ServerThread(app) as s:
        socks = [stalled_upload(s.url, "/health") for _ in range(20)]
        for sock in socks:
            sock.settimeout(2)
            assert sock.recv(64).startswith(b"HTTP/1.1 401")
            sock.close()
        codes, _ = normal_requests(s.url, 20, {"Authorization": f"Bearer {KEY}"})
        assert codes == [200] * 20
        assert httpx.get(s.url + "/health", timeout=10).json() == {"status": "ok"}  # no counters, limits or index


@pytest.mark.parametrize("idle_s", [10.0, 0.5])
def test_a_client_that_never_reads_its_reply_is_let_go(idle_s):
    """30 clients asked for ~5.5 MB each and never read: 29 of 30 connections were held after 45 s (RSS +185 MB).
    Now a reply that has not moved for the write timeout is dropped with its connection, also when the idle timer
    has closed the connection first (a closed transport still waits to send its buffer)."""
    big = [Passage(f"b{i}", f"Big {i}", "Ulm " + "x" * 20_000) for i in range(300)]
    app = create_app(RetrievalService.from_passages(big))
    with ServerThread(app, idle_timeout_s=idle_s, write_timeout_s=1.0) as s:
        body = json.dumps({"queries": ["Ulm"] * 3, "topk": 100}).encode()  # ~6 MB of reply each
        socks = []
        for _ in range(8):
            sock = raw(s.url, rcvbuf=4096)
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            socks.append(sock)
        codes, times = normal_requests(s.url, 10)  # served meanwhile
        assert codes == [200] * 10
        deadline = time.monotonic() + 15
        while connections(s) > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert connections(s) == 0
        for sock in socks:
            sock.close()
        # a slow reader that keeps reading is not cut off: 6 MB read in 64 KB steps over more than the timeout
        sock = raw(s.url, rcvbuf=4096)
        sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got, t0 = b"", time.monotonic()
        sock.settimeout(5)
        while not got.endswith(b"]]}"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            got += chunk
            if time.monotonic() - t0 < 1.5:
                time.sleep(0.02)
        sock.close()
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"]]}") and time.monotonic() - t0 > 1.0


def test_fields_are_typed_strictly_and_every_error_has_the_servers_shape():
    with ServerThread(create_app(RetrievalService.from_passages(PASSAGES))) as s:
        for bad in ({"topk": "3"}, {"topk": True}, {"return_scores": "yes"}, {"return_meta": 1},
                    {"queries": ["x" * 4097]}, {"queries": "Ulm"}):
            r = httpx.post(s.url + "/retrieve", json={"queries": ["Ulm"], **bad}, timeout=10)
            assert r.status_code == 422 and "error" in r.json(), bad
        r = httpx.post(s.url + "/retrieve", json={"queries": ["x" * 4097]}, timeout=10)
        assert "4097 characters is over this server's 4096" in r.json()["error"]
        assert httpx.post(s.url + "/retrieve", json={"queries": ["x" * 4096]}, timeout=10).status_code == 200
        nested = b"[" * 100_000 + b"]" * 100_000
        huge = b'{"queries": ["Ulm"], "topk": ' + b"9" * 5000 + b"}"
        for body in (nested, huge):
            r = httpx.post(s.url + "/retrieve", content=body, headers={"content-type": "application/json"}, timeout=10)
            assert 400 <= r.status_code < 500 and set(r.json()) >= {"error"} and "detail" not in r.json()
        for method, path in (("GET", "/nowhere"), ("GET", "/retrieve"), ("DELETE", "/health")):
            r = httpx.request(method, s.url + path, timeout=10)
            assert r.status_code in (404, 405) and "no route" in r.json()["error"]


# ---------------------------------------------------------------------------- the completions server


class EchoBackend:
    """Answers each prompt with its first id then EOS (one id per byte value)."""

    name = "echo"

    def __init__(self):
        from types import SimpleNamespace

        self.tokenizer = SimpleNamespace(encode=lambda t, **k: [ord(c) % 256 for c in t],
                                         decode=lambda ids, **k: "".join(chr(i) for i in ids), eos_token_id=0,
                                         __len__=lambda: 256)
        self.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048))

    def generate(self, prompts, params, max_new_tokens=None):
        from workbench.rollout.backends.base import Generation

        return [Generation([p[0], 0], [-0.5, -0.5], "eos") for p in prompts]


@pytest.fixture
def completions():
    from workbench.rollout.server import serve

    srv, url = serve(EchoBackend(), model_name="echo")
    yield srv, url
    srv.stop()


def complete(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/completions", json={"model": "echo", **body}, timeout=10)


def test_completions_stalled_uploads_are_capped_per_client(completions):
    """20 stalled 30 MiB uploads grew the server by 620 MB: now one address holds at most 64 MiB of unfinished
    bodies (two such reservations) and the rest are refused on their head, while normal requests go on."""
    srv, url = completions
    base = url.removesuffix("/v1")
    socks = [stalled_upload(base, "/v1/completions", declared=30 << 20, sent=64 << 10) for _ in range(20)]
    for _ in range(10):
        r = complete(url, {"prompt": [65, 66], "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["text"].startswith("A")
    assert refused(socks) == 18


def test_completions_requests_are_bounded(completions):
    _, url = completions
    r = complete(url, {"prompt": [65] * 10, "max_tokens": 10**9})
    assert r.status_code == 400 and "maximum context length is 2048 tokens" in r.json()["error"]["message"]
    assert complete(url, {"prompt": [65] * 10, "max_tokens": 2038}).status_code == 200
    assert complete(url, {"prompt": [65] * 10, "max_tokens": 2039}).status_code == 400
    r = complete(url, {"prompt": [[65]] * 1025, "max_tokens": 1})
    assert r.status_code == 400 and "1025 prompts in one request is over this server's 1024" in r.json()["error"][
        "message"]
    assert complete(url, {"prompt": [[65]] * 1024, "max_tokens": 1}).status_code == 200


def test_completions_remote_bind_needs_a_key():
    import subprocess
    import sys

    from workbench.rollout.server import serve

    with pytest.raises(ValueError, match="allow_remote=True and an api_key"):
        serve(EchoBackend(), host="0.0.0.0", allow_remote=True)
    r = subprocess.run([sys.executable, "-m", "workbench.rollout.server", "--host", "0.0.0.0", "--allow-remote"],
                       capture_output=True, text=True, timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "--api-key" in err[0] and "Traceback" not in r.stderr
    for flags in (["--port", "70000"], ["--port", "-1"], ["--max-model-len", "0"],
                  ["--enable-lora", "--lora-dir", "/no/such/dir"]):
        r = subprocess.run([sys.executable, "-m", "workbench.rollout.server", *flags], capture_output=True, text=True,
                           timeout=120)
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1 and flags[-2] in err[0], (flags, r.stderr)
