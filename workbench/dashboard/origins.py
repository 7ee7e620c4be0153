"""Which requests the served dashboard answers: those of its own pages.

The dashboard has no authentication. What keeps another web site's page, open in the same browser, from reading it
is what the browser says in each request:

- ``Origin`` (sent with every websocket handshake and every cross-site request) must name a page of this server: the
  address it is served on and its port; on a loopback bind also ``localhost``, ``127.0.0.1`` and ``[::1]`` on that
  port; on any other bind also this machine's name (and, bound on every address, the address the connection came in
  on); and the origins the caller adds (a proxy's, say);
- on a loopback bind ``Host`` must be one of those too: a page whose name the attacker's DNS points at 127.0.0.1
  (DNS rebinding) is same-origin to the browser and sends no ``Origin`` with its reads, but its ``Host`` is its own.

Every other request gets 403 before bokeh sees it: :func:`refuse_foreign` puts :class:`ForeignRequest` first in the
server's routing. Bokeh's own websocket allowlist cannot hold an IPv6 origin (``[::1]:5006`` is an "invalid host"), so
the dashboard leaves that one open and this check decides, the same way on every bind.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from tornado.httputil import HTTPServerRequest
from tornado.routing import Matcher, Rule
from tornado.web import RequestHandler

from workbench.util.http_stack import is_loopback

log = logging.getLogger(__name__)

#: The port an origin without one means, by scheme (a ``Host`` header has none: 80).
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "": 80}
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def canonical_host(host: str) -> str:
    """``host`` lower-cased, without brackets or a trailing dot; an IP address in its short form (an IPv4-mapped IPv6
    address as IPv4).

    >>> canonical_host("[0:0:0:0:0:0:0:1]"), canonical_host("LocalHost."), canonical_host("::ffff:10.0.0.1")
    ('::1', 'localhost', '10.0.0.1')
    """
    host = host.strip().strip("[]").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def parse_origin(text: str, port: int | None = None) -> tuple[str, int] | None:
    """``(host, port)`` of an origin (``http://[::1]:5006``), a ``Host`` header or a ``host:port``; None when it names
    no host (``null``, ``file://``) or its port is not a number. Without a port: ``port`` for a bare name where given,
    else the scheme's (80 without a scheme).

    >>> parse_origin("http://[::1]:5006"), parse_origin("https://Dash.example"), parse_origin("box", 5006)
    (('::1', 5006), ('dash.example', 443), ('box', 5006))
    >>> parse_origin("null"), parse_origin("http://a:b"), parse_origin("chrome-extension://x")
    (None, None, None)
    """
    text = text.strip()
    parts = urlsplit(text if "//" in text else f"//{text}")
    try:
        host, given = parts.hostname, parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    if not host or host == "null":
        return None
    if given is None:
        given = port if port is not None and not parts.scheme else DEFAULT_PORTS.get(parts.scheme)
    return None if given is None else (canonical_host(host), given)


def _any_address(host: str) -> bool:
    """True for a bind on every address (``0.0.0.0``, ``::``, or none named)."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _local_address(request: HTTPServerRequest) -> str | None:
    """The address of this machine that the request's connection came in on (None where tornado does not say)."""
    try:
        return str(request.connection.stream.socket.getsockname()[0])  # type: ignore[union-attr]
    except (AttributeError, OSError, IndexError, TypeError):
        return None


class ForeignRequest(Matcher):
    """Matches a request that is not from a page of the dashboard served at ``host:port`` (the module docstring says
    which those are); ``extra``: more origins to accept (``https://dash.example.org``, ``name:port``; a bare name
    means ``port``). A malformed ``extra`` is a ValueError here, before anything is served."""

    def __init__(self, host: str, port: int, extra: Iterable[str] = ()):
        self.port = port
        self.any_address = _any_address(host)
        self.check_host = is_loopback(host)  # elsewhere the names it is reached by are not known
        names = {canonical_host(host)} if not self.any_address else set()
        if self.check_host or self.any_address:
            names.update(LOOPBACK)
        if not self.check_host:
            names.add(canonical_host(socket.gethostname()))
        allowed = {(n, port) for n in names}
        for e in extra:
            origin = parse_origin(e, port)
            if origin is None:
                raise ValueError(f"allowed origin {e!r} is not an origin such as http://host:port")
            allowed.add(origin)
        self.allowed = frozenset(allowed)

    def refusal(self, request: HTTPServerRequest) -> str | None:
        """Why ``request`` is refused, or None for a request of the dashboard's own pages."""
        allowed = self.allowed
        if self.any_address and (local := _local_address(request)):
            allowed = allowed | {(canonical_host(local), self.port)}
        origin = request.headers.get("Origin")
        if origin is not None and parse_origin(origin) not in allowed:
            return f"Origin {origin[:200]!r} is not a page of this dashboard"
        host = request.headers.get("Host", "")
        if self.check_host and parse_origin(host) not in allowed:
            return f"Host {host[:200]!r} is not this dashboard's address"
        return None

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        return {} if self.refusal(request) else None


class Refused(RequestHandler):
    """403 for a request :class:`ForeignRequest` matched; the reason goes to the log, not to the client."""

    def initialize(self, why: Callable[[HTTPServerRequest], str | None]) -> None:
        self.why = why

    def prepare(self) -> None:
        log.warning("refused %s %r: %s", self.request.method, self.request.path[:200], self.why(self.request))
        self.set_status(403)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("403: this dashboard answers the pages it serves only\n")


class UnknownComponent(Matcher):
    """Matches ``/components/<module>/...`` (Panel's resources of a component class) naming a module that is not
    loaded: Panel would import whatever the URL names (``..`` made it raise, a 500)."""

    PREFIX = "/components/"

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        import sys
        from urllib.parse import unquote

        path = request.path or ""
        if not path.startswith(self.PREFIX):
            return None
        module = unquote(path[len(self.PREFIX):]).split("/", 1)[0]
        return None if module in sys.modules else {}


class NotFound(RequestHandler):
    def prepare(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("404: no such component\n")


def refuse_foreign(tornado_app: Any, matcher: ForeignRequest) -> None:
    """Put ``matcher`` first in the routing of ``tornado_app`` (a ``tornado.web.Application``, such as bokeh's server
    app): every request it matches gets :class:`Refused`, whatever its path, before any other handler sees it. Then a
    component resource of a module that is not loaded gets 404 (:class:`UnknownComponent`)."""
    tornado_app.default_router.rules.insert(0, Rule(UnknownComponent(), NotFound))
    tornado_app.default_router.rules.insert(0, Rule(matcher, Refused, {"why": matcher.refusal}))


def _not_bokehs_wildcard_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Host wildcard")


@contextmanager
def bokeh_wildcard_quiet() -> Iterator[None]:
    """Inside: bokeh's warning that its ``*`` websocket allowlist lets every origin in is left out (a server that
    :func:`refuse_foreign` guards checks every origin before bokeh does)."""
    logger = logging.getLogger("bokeh.server.util")
    logger.addFilter(_not_bokehs_wildcard_warning)
    try:
        yield
    finally:
        logger.removeFilter(_not_bokehs_wildcard_warning)
