"""The HTTP stack the workbench's servers share: FastAPI apps run by uvicorn in a background thread.

Used by ``workbench serve-retrieval`` (:mod:`workbench.integrations.retrieval_server`) and the
completions server (:mod:`workbench.rollout.server`):

- :class:`ServerThread` runs any ASGI app with uvicorn in a daemon thread on a socket it binds itself
  (port 0 picks a free one, without a bind-then-rebind race; IPv4 or IPv6 hosts such as ``::1``);
  :func:`serve_forever` does the same in the foreground (``workbench serve-retrieval``);
- a connection that has not sent a whole request head within ``idle_timeout_s`` of opening (or of its
  last response) is closed, and so is one whose reply has not moved for ``write_timeout_s`` (a client that
  asked and does not read) (:func:`timed_protocol`; uvicorn alone keeps both forever); a request head over
  :data:`MAX_HEAD_BYTES` or with more than :data:`MAX_HEADERS` fields gets 431 and the connection is closed
  (uvicorn's httptools parser has no limit of its own);
- :class:`BodyGuard` is ASGI middleware that rejects a POST body over ``max_bytes`` (413) or not
  UTF-8 (400) before any route sees it, with the error body each server's clients expect; a body not
  received within ``read_timeout_s`` gets 408; unfinished bodies share a budget with a cap per client
  address, and each request's first ``small_body_bytes`` come from a pool of their own, so stalled big
  uploads get 503 without starving anyone's small requests (each of these replies closes the connection);
- :class:`BearerAuth` is ASGI middleware that answers 401 unless ``Authorization: Bearer <key>`` matches, before
  any body is read; only body-less GET/HEAD requests to its open paths pass without the key (marked unauthorized
  for the route, which then says only that it is up).

    >>> with ServerThread(app) as s:              # doctest: +SKIP
    ...     requests.get(s.url + "/health")
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

ErrorBody = Callable[[int, str], dict[str, Any]]
"""``error(status, message) -> JSON body`` of an error reply (each server keeps its clients' shape)."""

IDLE_TIMEOUT_S = 10.0
"""Default seconds a connection may stay open with no request in progress (uvicorn's keep-alive is 5 s)."""
READ_TIMEOUT_S = 30.0
"""Default seconds a request's body has to arrive in, once its head has."""
WRITE_TIMEOUT_S = 15.0
"""Default seconds a reply may sit in the send buffer without the client reading any of it."""
SMALL_BODY_BYTES = 64 << 10
"""Bytes of each request body drawn from the small-body pool, outside the per-client budget (a real request is a
few KB, so it is never refused because others hold big unfinished uploads)."""
MAX_HEAD_BYTES = 32 << 10
"""Bytes a request head (request line and header fields) may have: a real client sends well under 2 KB."""
MAX_HEADERS = 100
"""Header fields a request may carry."""
AUTHORIZED = "workbench.authorized"
"""Scope key :class:`BearerAuth` sets: False on an open path reached without the key."""
LOOPBACK_NAMES = ("localhost",)

try:  # the unsent bytes of a socket's send queue (Linux: SIOCOUTQ, which is TIOCOUTQ)
    import fcntl
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):
    _OUTQ = None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1).

    >>> is_loopback("127.0.0.2"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Any:
    """A JSON reply through ``json.dumps`` (NaN and infinities kept, as Python clients read them)."""
    import json

    from starlette.responses import Response

    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <api_key>`` (else 401, with
    ``WWW-Authenticate: Bearer``; the key is compared in constant time), except a body-less GET or HEAD of one of
    ``open_paths``, which passes with ``scope[AUTHORIZED]`` telling the route whether the key came. The 401 closes the
    connection, so an unread body is never read."""

    def __init__(self, app: Any, api_key: str, error: ErrorBody, open_paths: tuple[str, ...] = ("/health",)):
        if not api_key:
            raise ValueError("BearerAuth needs a non-empty api_key")
        self.app, self.key, self.error, self.open_paths = app, api_key.encode("utf-8"), error, open_paths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
            ok = scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)
            if not ok and not (scope["path"].rstrip("/") in self.open_paths and scope["method"] in ("GET", "HEAD")
                               and not has_body(headers)):
                msg = "missing or wrong API key: send the header Authorization: Bearer <key>"
                await json_response(401, self.error(401, msg), {"www-authenticate": "Bearer", "connection": "close"})(
                    scope, receive, send)
                return
            scope = {**scope, AUTHORIZED: ok}
        await self.app(scope, receive, send)


def has_body(headers: dict[bytes, bytes]) -> bool:
    """Whether a request head announces a body (a non-zero ``Content-Length`` or any ``Transfer-Encoding``)."""
    return headers.get(b"content-length", b"0").strip() not in (b"0", b"") or b"transfer-encoding" in headers


def authorized(scope: Any) -> bool:
    """False only for a request :class:`BearerAuth` let through to an open path without the key."""
    return bool(scope.get(AUTHORIZED, True))


class BodyGuard:
    """ASGI middleware: a POST body over ``max_bytes`` gets 413, one that is not UTF-8 gets 400.

    The declared ``Content-Length`` is checked before reading; a body sent in chunks is cut off as
    soon as it passes the limit. A body not received whole within ``read_timeout_s`` gets 408.

    Unfinished bodies are held under two budgets, so no client can starve another. Each request's first
    ``small_body_bytes`` come from a small-body pool (``max_buffered_bytes`` in all); bytes past them from
    the shared budget (``max_buffered_bytes``) with at most ``max_client_bytes`` per client address. A body
    that declares its length reserves it whole when its head arrives, so a crowd of stalled uploads is
    refused at once instead of after each has sent most of itself. A request whose body does not fit gets
    503. These three replies close the connection. The body read here is handed on to the app unchanged.
    """

    def __init__(self, app: Any, max_bytes: int, error: ErrorBody, read_timeout_s: float | None = READ_TIMEOUT_S,
                 max_buffered_bytes: int | None = None, max_client_bytes: int | None = None,
                 small_body_bytes: int = SMALL_BODY_BYTES):
        self.app, self.max_bytes, self.error = app, max_bytes, error
        self.read_timeout_s, self.max_buffered_bytes = read_timeout_s, max_buffered_bytes
        if max_client_bytes is None and max_buffered_bytes is not None:
            max_client_bytes = max_buffered_bytes // 4
        self.max_client_bytes, self.small_body_bytes = max_client_bytes, small_body_bytes
        self.buffered = 0
        """Bytes past each request's small allowance, held or reserved by unfinished bodies (all clients)."""
        self.small = 0
        """Bytes held or reserved under the small allowances."""
        self.clients: dict[str, int] = {}
        """``self.buffered`` by client address."""

    async def _reply(self, status: int, message: str, scope: Any, receive: Any, send: Any, close: bool = False) -> None:
        await json_response(status, self.error(status, message), {"connection": "close"} if close else None)(
            scope, receive, send)

    def _charge(self, client: str, small: int, big: int) -> str | None:
        """Take ``small`` bytes from the small pool and ``big`` from the shared and the client's budgets; a message
        naming the budget instead when one would overflow (nothing taken)."""
        if self.max_buffered_bytes is not None:
            if small and self.small + small > self.max_buffered_bytes:
                return f"the server holds {self.max_buffered_bytes} bytes of unfinished small request bodies"
            if big and self.buffered + big > self.max_buffered_bytes:
                return f"the server holds {self.max_buffered_bytes} bytes of unfinished request bodies"
        if big and self.max_client_bytes is not None and self.clients.get(client, 0) + big > self.max_client_bytes:
            return f"this client holds {self.max_client_bytes} bytes of unfinished request bodies"
        self.small += small
        if big:
            self.buffered += big
            self.clients[client] = self.clients.get(client, 0) + big
        return None

    def _release(self, client: str, small: int, big: int) -> None:
        self.small -= small
        if big:
            self.buffered -= big
            left = self.clients.get(client, 0) - big
            if left > 0:
                self.clients[client] = left
            else:
                self.clients.pop(client, None)

    async def _read(self, scope: Any, receive: Any, send: Any, declared: int | None) -> bytes | None:
        """The whole body, or None after replying with an error (or when the client left).

        The read timeout is one timer per request that cancels this task while it still waits for the body
        (``asyncio.wait_for`` around each ``receive()`` costs a task per chunk)."""
        client = (scope.get("client") or ("?",))[0]
        small = big = 0  # what this request holds under each budget
        if declared:
            small, big = min(declared, self.small_body_bytes), max(0, declared - self.small_body_bytes)
            refused = self._charge(client, small, big)
            if refused:
                await self._reply(503, f"{refused}: retry later", scope, receive, send, close=True)
                return None
        chunks, n, reading, expired = [], 0, True, False
        task = asyncio.current_task()

        def expire() -> None:
            nonlocal expired
            if reading and task is not None:
                expired = True
                task.cancel()

        timer = None if self.read_timeout_s is None else \
            asyncio.get_running_loop().call_later(self.read_timeout_s, expire)
        try:
            while True:
                try:
                    msg = await receive()
                except asyncio.CancelledError:
                    if not expired:
                        raise
                    reading = False
                    if hasattr(task, "uncancel"):  # Python >= 3.11: this cancellation is handled here
                        task.uncancel()
                    await self._reply(408, f"the request body did not arrive within {self.read_timeout_s:g} s "
                                      f"({n} bytes came)", scope, receive, send, close=True)
                    return None
                if msg["type"] == "http.disconnect":
                    return None
                chunk = msg.get("body", b"")
                n += len(chunk)
                if n > self.max_bytes or (declared is not None and n > declared):
                    reading = False
                    await self._reply(413, f"request body of more than {declared or self.max_bytes} bytes", scope,
                                      receive, send, close=True)
                    return None
                if n > small + big:  # a body sent in chunks: charged as it comes
                    more_small = max(0, min(n, self.small_body_bytes) - small)
                    refused = self._charge(client, more_small, n - small - more_small - big)
                    if refused:
                        reading = False
                        await self._reply(503, f"{refused}: retry later", scope, receive, send, close=True)
                        return None
                    small, big = small + more_small, n - small - more_small
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    reading = False
                    return b"".join(chunks)
        finally:
            reading = False
            if timer is not None:
                timer.cancel()
            self._release(client, small, big)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            too_big = head_too_big(scope["headers"])
            if too_big:
                await self._reply(431, too_big, scope, receive, send, close=True)
                return
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared_raw = dict(scope["headers"]).get(b"content-length")
        declared = int(declared_raw) if declared_raw is not None and declared_raw.isdigit() else None
        if declared is not None and declared > self.max_bytes:
            await self._reply(413, f"request body of {declared} bytes is over {self.max_bytes}", scope, receive,
                              send, close=True)
            return
        body = await self._read(scope, receive, send, declared)
        if body is None:
            return
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            await self._reply(400, f"the request body is not UTF-8 ({e.reason} at byte {e.start})", scope, receive,
                              send)
            return
        done = False

        async def replay() -> dict[str, Any]:
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then wait for the disconnect, as the server would

        await self.app(scope, replay, send)


def head_too_big(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request head of ``headers`` is refused (431), or None: more than :data:`MAX_HEADERS` fields, or over
    :data:`MAX_HEAD_BYTES` of them.

    >>> head_too_big([(b"host", b"x")]) is None, head_too_big([(b"x-a", b"b")] * 101)
    (True, 'the request has 101 header fields; at most 100 are read')
    """
    if len(headers) > MAX_HEADERS:
        return f"the request has {len(headers)} header fields; at most {MAX_HEADERS} are read"
    size = sum(len(k) + len(v) + 4 for k, v in headers)
    if size > MAX_HEAD_BYTES:
        return f"the request's header fields hold {size} bytes; at most {MAX_HEAD_BYTES} are read"
    return None


def _refuse_head(transport: Any, n: int) -> None:
    """Answer 431 to a request head still unfinished after ``n`` bytes, then close (the parser never saw it whole, so
    no ASGI app can answer). The JSON body carries both shapes the servers' clients read: OpenAI's ``error`` object
    and FastAPI's ``detail``."""
    text = f"the request head is over {MAX_HEAD_BYTES} bytes ({n} came without its end)"
    msg = json.dumps({"error": {"message": text, "type": "invalid_request_error", "code": 431},
                      "detail": text}).encode()
    transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                    b"connection: close\r\ncontent-length: " + str(len(msg)).encode() + b"\r\n\r\n" + msg)
    transport.close()


def timed_protocol(idle_timeout_s: float, write_timeout_s: float | None = WRITE_TIMEOUT_S) -> type:
    """uvicorn's HTTP protocol class, closing a connection whose request head has not arrived whole within
    ``idle_timeout_s`` of its opening or of its previous response (a silent or slow-header client), and one whose
    unsent reply has not shrunk for ``write_timeout_s`` (a client that does not read).

    uvicorn arms its keep-alive timer only after a response and disarms it on the next byte received, so a
    connection that never sends a request, or sends its head a byte at a time, would stay open for good.
    Both of uvicorn's protocols (httptools and h11) set ``self.cycle`` when a request head is complete.
    A reply is written to the transport whole, which calls ``pause_writing`` while its buffer is over the
    high-water mark; a reader that keeps reading, however slowly, shrinks it and is left alone, one that
    stopped is aborted (the buffer is dropped, and the request's task ends on the lost connection).
    The bytes of a head not yet complete are counted: past :data:`MAX_HEAD_BYTES` the client gets 431 and the
    connection closes (httptools would keep every header it is sent).
    """
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class TimedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _write_timer: Any = None
        _head_of: Any = None  # the last request whose head was complete (None: none yet)
        _head_bytes = 0  # bytes received since it was answered, its successor's head not yet complete

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if cycle is not self._head_of:  # a new head came whole: count afresh once it is answered
                self._head_of, self._head_bytes = cycle, 0
            elif (cycle is None or cycle.response_complete) and self.transport is not None \
                    and not self.transport.is_closing():
                self._head_bytes += len(data)  # no request in progress: these bytes are the next one's head
                if self._head_bytes > MAX_HEAD_BYTES:
                    _refuse_head(self.transport, self._head_bytes)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            cycle = self.cycle  # the request in progress when armed: None, or the one just answered

            def expire() -> None:
                if self.cycle is cycle and self.transport is not None and not self.transport.is_closing():
                    self.transport.close()

            self.loop.call_later(idle_timeout_s, expire)

        def pause_writing(self) -> None:
            super().pause_writing()
            if write_timeout_s is not None and self._write_timer is None:
                self._watch_writes(self._unsent())

        def _unsent(self) -> int:
            """Bytes of reply not yet taken by the client: the transport's buffer plus, where the OS tells, the
            socket's send queue (on loopback it holds megabytes, so a reader can drain it while the buffer stands)."""
            n = self.transport.get_write_buffer_size()
            sock = self.transport.get_extra_info("socket")
            if sock is not None and _OUTQ is not None:
                try:
                    n += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
                except OSError:
                    pass
            return n

        def _watch_writes(self, before: int) -> None:
            def check() -> None:  # also once closing: a closed transport waits for its buffer to be sent
                self._write_timer = None
                transport = self.transport
                if transport is None or not (self.flow.write_paused or transport.get_write_buffer_size()):
                    return
                now = self._unsent()
                if now >= before:
                    transport.abort()
                else:
                    self._watch_writes(now)

            self._write_timer = self.loop.call_later(write_timeout_s, check)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

    return TimedHTTPProtocol


def uvicorn_server(app: Any, idle_timeout_s: float = IDLE_TIMEOUT_S, graceful_s: int = 10,
                   write_timeout_s: float | None = WRITE_TIMEOUT_S) -> Any:
    """A ``uvicorn.Server`` for ``app`` with the idle and write timeouts above (no access log)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=graceful_s,
                                         http=timed_protocol(idle_timeout_s, write_timeout_s),
                                         timeout_keep_alive=max(1, round(idle_timeout_s))))


def bind_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (IPv6 when ``host`` has a colon); port 0 picks a free one."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class ServerThread:
    """Run an ASGI app with uvicorn in a background thread: ``with ServerThread(app) as s: s.url``.

    The socket is bound in the constructor (an address in use raises ``OSError`` there); ``start()``
    returns once uvicorn accepts connections, ``stop()`` lets in-flight requests finish (up to
    ``graceful_s``) and joins the thread.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "uvicorn",
                 graceful_s: int = 10, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 write_timeout_s: float | None = WRITE_TIMEOUT_S):
        self.sock = bind_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn_server(app, idle_timeout_s, graceful_s, write_timeout_s)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name=name, daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() - t0 > timeout_s:
                self.server.should_exit = True
                self.sock.close()
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(timeout=timeout_s)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_forever(app: Any, host: str, port: int, *, idle_timeout_s: float = IDLE_TIMEOUT_S,
                  write_timeout_s: float | None = WRITE_TIMEOUT_S, on_bound: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` in the foreground until Ctrl-C; ``on_bound(url)`` is called once the socket is bound (with the
    real port when ``port`` is 0). A port in use (or any bind error) is a ValueError naming the address and the fix."""
    try:
        sock = bind_socket(host, port)
    except OSError as e:
        raise ValueError(f"cannot listen on {host}:{port} ({e.strerror or e}): pick another --port (0 = any free "
                         "port) or --host") from None
    sock.listen(2048)  # connections queue from now on (uvicorn's backlog), so the URL logged below answers
    bound = sock.getsockname()[1]
    if on_bound is not None:
        on_bound(f"http://{f'[{host}]' if ':' in host else host}:{bound}")
    try:
        uvicorn_server(app, idle_timeout_s, write_timeout_s=write_timeout_s).run(sockets=[sock])
    finally:
        sock.close()
