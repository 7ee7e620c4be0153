"""Request heads are bounded on every server (loopback only, bounded in time): the retrieval and completions servers
(uvicorn) answer 431 to a head over ``MAX_HEAD_BYTES`` or with more than ``MAX_HEADERS`` fields, and the served
dashboard (tornado) closes a connection whose head does not arrive whole in time, as the other two do."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from tests.test_hostile_servers import PASSAGES, completions, raw  # noqa: E402,F401 - `completions` is a fixture
from workbench.integrations.retrieval_server import RetrievalService, ServerThread, create_app  # noqa: E402
from workbench.util import http_stack  # noqa: E402


@pytest.fixture(scope="module")
def retrieval():
    with ServerThread(create_app(RetrievalService.from_passages(PASSAGES))) as s:
        yield s.url


def _base(fixture) -> str:
    """The server's root URL from its fixture (the completions fixture gives ``(server, url + "/v1")``)."""
    return fixture if isinstance(fixture, str) else fixture[1].removesuffix("/v1")


def _status(sock: socket.socket, timeout: float = 10) -> bytes:
    """The status line the server sent on ``sock`` (b"" when it closed without a reply)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data.split(b"\r\n")[0]


def _endless_head(url: str, total: int) -> tuple[bytes | None, int]:
    """Send a GET whose one header field never ends, 8 KB at a time up to ``total`` bytes, looking for a reply after
    each: what the server sent (b"" when it closed without a word, None when it never reacted) and how many bytes
    were sent by then."""
    sock = raw(url)
    sent = 0
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        while sent < total:
            sock.settimeout(0.05)
            try:
                return sock.recv(4096).split(b"\r\n")[0], sent
            except TimeoutError:
                pass
            except OSError:
                return b"", sent
            sock.settimeout(5)
            try:
                sock.sendall(b"a" * 8192)
            except OSError:  # the server closed: read what it said
                return _status(sock, 2), sent
            sent += 8192
        return None, sent
    finally:
        sock.close()


def _many_headers(url: str, n: int) -> bytes:
    sock = raw(url)
    try:
        fields = "".join(f"X-F{i}: v\r\n" for i in range(n))
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\n{fields}Connection: close\r\n\r\n".encode())
        return _status(sock)
    finally:
        sock.close()


@pytest.mark.parametrize("server", ["retrieval", "completions"])
def test_a_head_without_end_gets_431_before_a_megabyte(server, request):
    url = _base(request.getfixturevalue(server))
    status, sent = _endless_head(url, 1 << 20)
    assert status is not None and status.startswith(b"HTTP/1.1 431"), (status, sent)
    assert sent <= http_stack.MAX_HEAD_BYTES + (64 << 10)  # refused as it passed the limit


@pytest.mark.parametrize("server", ["retrieval", "completions"])
def test_too_many_header_fields_get_431_and_a_normal_head_passes(server, request):
    url = _base(request.getfixturevalue(server))
    assert _many_headers(url, http_stack.MAX_HEADERS + 50).startswith(b"HTTP/1.1 431")
    assert _many_headers(url, 40).startswith(b"HTTP/1.1 200")
    with httpx.Client(timeout=10) as c:  # and the server still answers as before
        assert c.get(url + "/health").status_code == 200


def test_head_limits_are_reported_in_one_line():
    fields = [(b"x-a", b"b" * 1000)] * 40
    assert http_stack.head_too_big(fields) == (f"the request's header fields hold {40 * 1007} bytes; at most "
                                               f"{http_stack.MAX_HEAD_BYTES} are read")


# --------------------------------------------------------------------------- the served dashboard (tornado)


@pytest.fixture()
def dashboard(tmp_path, monkeypatch):
    from tests.test_dashboard_hostile import _serve
    from workbench.dashboard import app as dash

    monkeypatch.setitem(dash.HTTP_LIMITS, "idle_connection_timeout", 1.0)
    server, port = _serve("127.0.0.1", tmp_path)
    try:
        yield port
    finally:
        server.stop()


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading whatever it sent), or None if still open after ``seconds``."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_the_dashboard_closes_slow_and_silent_connections(dashboard):
    port = dashboard
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head that never ends, a byte now and then
        t0 = time.monotonic()
        closed = None
        while closed is None and time.monotonic() - t0 < 8:
            try:
                slow.sendall(b"X")
            except OSError:
                closed = time.monotonic() - t0
                break
            closed = _closed_within(slow, 0.3)
        assert closed is not None and closed < 6, "a head sent a byte at a time kept its connection"
        assert _closed_within(silent, 6) is not None, "a connection that sends nothing stayed open"
    finally:
        silent.close()
        slow.close()
    with httpx.Client(timeout=60) as c:  # a whole request is answered as before
        assert c.get(f"http://127.0.0.1:{port}/").status_code == 200


def test_the_dashboard_refuses_a_head_over_the_limit(dashboard):
    """tornado closes the connection without a reply once a head passes ``max_header_size``."""
    status, sent = _endless_head(f"http://127.0.0.1:{dashboard}", 1 << 20)
    assert status == b"" and sent <= http_stack.MAX_HEAD_BYTES + (64 << 10), (status, sent)
