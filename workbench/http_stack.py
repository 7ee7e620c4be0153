"""The HTTP stack the workbench's servers share: FastAPI apps run by uvicorn in a background thread.

Used by ``workbench serve-retrieval`` (:mod:`workbench.integrations.retrieval_server`) and the
completions server (:mod:`workbench.rollout.server`):

- :class:`ServerThread` runs any ASGI app with uvicorn in a daemon thread on a socket it binds itself
  (port 0 picks a free one, without a bind-then-rebind race; IPv4 or IPv6 hosts such as ``::1``);
  :func:`serve_forever` does the same in the foreground (``workbench serve-retrieval``);
- a connection that has not sent a whole request head within ``idle_timeout_s`` of opening (or of its
  last response) is closed (:func:`timed_protocol`; uvicorn alone keeps a silent connection forever);
- :class:`BodyGuard` is ASGI middleware that rejects a POST body over ``max_bytes`` (413) or not
  UTF-8 (400) before any route sees it, with the error body each server's clients expect; a body not
  received within ``read_timeout_s`` gets 408, and past ``max_buffered_bytes`` of unfinished bodies
  over all connections a new one gets 503 (each of these replies closes the connection);
- :class:`BearerAuth` is ASGI middleware that answers 401 unless ``Authorization: Bearer <key>`` matches.

    >>> with ServerThread(app) as s:              # doctest: +SKIP
    ...     requests.get(s.url + "/health")
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import socket
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
LOOPBACK_NAMES = ("localhost",)


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
    """ASGI middleware: every HTTP request but ``open_paths`` needs ``Authorization: Bearer <api_key>`` (else 401,
    with ``WWW-Authenticate: Bearer``; the key is compared in constant time). The reply closes the connection, so
    an unread body is never read."""

    def __init__(self, app: Any, api_key: str, error: ErrorBody, open_paths: tuple[str, ...] = ("/health",)):
        if not api_key:
            raise ValueError("BearerAuth needs a non-empty api_key")
        self.app, self.key, self.error, self.open_paths = app, api_key.encode("utf-8"), error, open_paths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") not in self.open_paths:
            scheme, _, token = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
                msg = "missing or wrong API key: send the header Authorization: Bearer <key>"
                await json_response(401, self.error(401, msg), {"www-authenticate": "Bearer", "connection": "close"})(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyGuard:
    """ASGI middleware: a POST body over ``max_bytes`` gets 413, one that is not UTF-8 gets 400.

    The declared ``Content-Length`` is checked before reading; a body sent in chunks is cut off as
    soon as it passes the limit. A body not received whole within ``read_timeout_s`` gets 408; while
    unfinished bodies hold more than ``max_buffered_bytes`` together (all requests of this app), the
    request whose chunk passes it gets 503. These three replies close the connection. The body read
    here is handed on to the app unchanged.
    """

    def __init__(self, app: Any, max_bytes: int, error: ErrorBody, read_timeout_s: float | None = READ_TIMEOUT_S,
                 max_buffered_bytes: int | None = None):
        self.app, self.max_bytes, self.error = app, max_bytes, error
        self.read_timeout_s, self.max_buffered_bytes = read_timeout_s, max_buffered_bytes
        self.buffered = 0
        """Bytes of request bodies read and not yet handed on (or refused), over all requests."""

    async def _reply(self, status: int, message: str, scope: Any, receive: Any, send: Any, close: bool = False) -> None:
        await json_response(status, self.error(status, message), {"connection": "close"} if close else None)(
            scope, receive, send)

    async def _read(self, scope: Any, receive: Any, send: Any) -> bytes | None:
        """The whole body, or None after replying with an error (or when the client left).

        The read timeout is one timer per request that cancels this task while it still waits for the body
        (``asyncio.wait_for`` around each ``receive()`` costs a task per chunk)."""
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
                self.buffered += len(chunk)
                if n > self.max_bytes:
                    reading = False
                    await self._reply(413, f"request body of more than {self.max_bytes} bytes", scope, receive, send,
                                      close=True)
                    return None
                if self.max_buffered_bytes is not None and self.buffered > self.max_buffered_bytes:
                    reading = False
                    await self._reply(503, f"the server holds {self.max_buffered_bytes} bytes of unfinished request "
                                      "bodies: retry later", scope, receive, send, close=True)
                    return None
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    reading = False
                    return b"".join(chunks)
        finally:
            reading = False
            if timer is not None:
                timer.cancel()
            self.buffered -= n

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reply(413, f"request body of {int(declared)} bytes is over {self.max_bytes}", scope, receive,
                              send, close=True)
            return
        body = await self._read(scope, receive, send)
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


def timed_protocol(idle_timeout_s: float) -> type:
    """uvicorn's HTTP protocol class, closing a connection whose request head has not arrived whole within
    ``idle_timeout_s`` of its opening or of its previous response (a silent or slow-header client).

    uvicorn arms its keep-alive timer only after a response and disarms it on the next byte received, so a
    connection that never sends a request, or sends its head a byte at a time, would stay open for good.
    Both of uvicorn's protocols (httptools and h11) set ``self.cycle`` when a request head is complete.
    """
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class TimedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
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

    return TimedHTTPProtocol


def uvicorn_server(app: Any, idle_timeout_s: float = IDLE_TIMEOUT_S, graceful_s: int = 10) -> Any:
    """A ``uvicorn.Server`` for ``app`` with the idle timeouts above (no access log)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=graceful_s,
                                         http=timed_protocol(idle_timeout_s),
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
                 graceful_s: int = 10, idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.sock = bind_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn_server(app, idle_timeout_s, graceful_s)
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
                  on_bound: Callable[[str], None] | None = None) -> None:
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
        uvicorn_server(app, idle_timeout_s).run(sockets=[sock])
    finally:
        sock.close()
