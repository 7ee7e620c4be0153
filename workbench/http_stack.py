"""The HTTP stack the workbench's servers share: FastAPI apps run by uvicorn in a background thread.

Used by ``workbench serve-retrieval`` (:mod:`workbench.integrations.retrieval_server`) and the
completions server (:mod:`workbench.rollout.server`):

- :class:`ServerThread` runs any ASGI app with uvicorn in a daemon thread on a socket it binds itself
  (port 0 picks a free one, without a bind-then-rebind race; IPv4 or IPv6 hosts such as ``::1``);
- :class:`BodyGuard` is ASGI middleware that rejects a POST body over ``max_bytes`` (413) or not
  UTF-8 (400) before any route sees it, with the error body each server's clients expect.

    >>> with ServerThread(app) as s:              # doctest: +SKIP
    ...     requests.get(s.url + "/health")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

ErrorBody = Callable[[int, str], dict[str, Any]]
"""``error(status, message) -> JSON body`` of an error reply (each server keeps its clients' shape)."""


def json_response(status: int, body: Any) -> Any:
    """A JSON reply through ``json.dumps`` (NaN and infinities kept, as Python clients read them)."""
    import json

    from starlette.responses import Response

    return Response(json.dumps(body), status_code=status, media_type="application/json")


class BodyGuard:
    """ASGI middleware: a POST body over ``max_bytes`` gets 413, one that is not UTF-8 gets 400.

    The declared ``Content-Length`` is checked before reading; a body sent in chunks is cut off as
    soon as it passes the limit. The body read here is handed on to the app unchanged.
    """

    def __init__(self, app: Any, max_bytes: int, error: ErrorBody):
        self.app, self.max_bytes, self.error = app, max_bytes, error

    async def _reply(self, status: int, message: str, scope: Any, receive: Any, send: Any) -> None:
        await json_response(status, self.error(status, message))(scope, receive, send)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reply(413, f"request body of {int(declared)} bytes is over {self.max_bytes}", scope, receive,
                              send)
            return
        chunks, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > self.max_bytes:
                await self._reply(413, f"request body of more than {self.max_bytes} bytes", scope, receive, send)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
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
                 graceful_s: int = 10):
        import uvicorn

        self.sock = bind_socket(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=graceful_s))
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
