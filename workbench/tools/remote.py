"""Tools backed by a running ``workbench serve-retrieval``: the same ``Hit`` / ``Triple`` results over HTTP.

When many rollout workers (verl's agent loops, several ``workbench eval`` processes) share one corpus, each
building its own BM25 index costs memory and start-up time; instead they call one retrieval server.
:class:`RemoteRetrieval` is the client of its endpoints (one HTTP request per call, one kept-alive
``httpx`` session): ``POST /retrieve`` (Search-R1's shape; with ``return_meta`` the server also sends each
passage's ``title``, ``text`` and ``source``, so the hits equal the in-process searcher's field for field,
passage ids included), ``POST /kg`` and ``POST /plan``. :func:`remote_toolbox` builds the toolbox a
protocol declares from it.

A server started with an API key (``serve-retrieval --allow-remote``) wants ``Authorization: Bearer <key>``: the
client sends ``api_key``, by default ``$WORKBENCH_RETRIEVAL_API_KEY`` (an environment variable, so the key is not
written into run configs or shown in ``ps``).

A failed request (server down, timeout, HTTP error, a body that is not the expected JSON) raises
:class:`RemoteToolError` with the URL and the cause; the ``Toolbox`` records it as the tool call's
``error`` (a ``failed_tool`` in the features), as for any in-process tool failure. The only retry is one
resend when a kept-alive connection turns out to have been closed by the server.

    >>> tb = remote_toolbox(get_protocol("search_r1"), "http://127.0.0.1:8000")   # doctest: +SKIP
    >>> tb.call("search", query="who founded Tarnholm Mills", k=3).hits()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from workbench.core.types import Hit, Triple
from workbench.tools.base import Toolbox

REMOTE_KINDS = ("search", "kg", "plan")
API_KEY_ENV = "WORKBENCH_RETRIEVAL_API_KEY"
"""The environment variable the clients read the server's API key from (``serve-retrieval`` reads it too)."""


class RemoteToolError(RuntimeError):
    """A retrieval-server call that failed; the message names the URL and the cause."""


def base_url(url: str) -> str:
    """The server's root from ``http://host:port`` or its ``/retrieve`` endpoint (as Search-R1 configs give it).

    >>> base_url("http://127.0.0.1:8000/retrieve/")
    'http://127.0.0.1:8000'
    """
    url = str(url).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"retrieval URL {url!r} is not http(s)://host:port: start `workbench serve-retrieval` "
                         "and pass its address, e.g. http://127.0.0.1:8000")
    return url[: -len("/retrieve")] if url.endswith("/retrieve") else url


class RemoteRetrieval:
    """Client of one ``workbench serve-retrieval`` (see the module docstring).

    Args:
        url: ``http://host:port`` (a trailing ``/retrieve`` is accepted).
        timeout_s: per request; under the ``Toolbox``'s own timeout (30 s) so the client's message is the one recorded.
        api_key: the server's bearer token (default ``$WORKBENCH_RETRIEVAL_API_KEY``; none if unset).
    """

    def __init__(self, url: str, timeout_s: float = 20.0, api_key: str | None = None):
        import httpx

        self.url = base_url(url)
        self.timeout_s = float(timeout_s)
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self._client = httpx.Client(timeout=self.timeout_s, headers={"Authorization": f"Bearer {key}"} if key else None)

    def close(self) -> None:
        self._client.close()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """``POST url+path`` with a JSON body; the response's ``result``, or :class:`RemoteToolError`."""
        import httpx

        where = f"retrieval server {self.url}{path}"
        try:
            try:
                r = self._client.post(self.url + path, json=body)
            except (httpx.RemoteProtocolError, httpx.ReadError):  # a kept-alive connection the server had closed
                r = self._client.post(self.url + path, json=body)
        except httpx.TimeoutException as e:
            raise RemoteToolError(f"{where} timed out after {self.timeout_s:g}s ({type(e).__name__})") from None
        except httpx.HTTPError as e:
            raise RemoteToolError(f"{where} unreachable ({type(e).__name__}: {e}): is `workbench serve-retrieval` "
                                  "running there?") from None
        try:
            data = r.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            data = None
        if r.status_code != 200:
            msg = (data.get("error") or data.get("detail")) if isinstance(data, dict) else None
            msg = msg or r.text[:200] or r.reason_phrase
            if r.status_code == 401:
                msg += f" (set ${API_KEY_ENV} to the key the server was started with)"
            raise RemoteToolError(f"{where} answered HTTP {r.status_code}: {msg}")
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise RemoteToolError(f"{where} answered with a body that is not {{\"result\": [...]}} JSON: "
                                  f"{r.text[:120]!r}")
        return data["result"]

    def health(self) -> dict[str, Any]:
        import httpx

        try:
            return self._client.get(self.url + "/health").json()
        except (httpx.HTTPError, ValueError) as e:
            raise RemoteToolError(f"retrieval server {self.url}/health: {type(e).__name__}: {e}") from None

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        """One ``/retrieve`` request for all ``queries``; ``Hit`` objects as the in-process searcher returns."""
        queries = [str(q) for q in queries]
        if k <= 0 or not queries:
            return [[] for _ in queries]
        rows = self.post("/retrieve", {"queries": queries, "topk": int(k), "return_scores": True,
                                       "return_meta": True})
        if len(rows) != len(queries):
            raise RemoteToolError(f"retrieval server {self.url}/retrieve returned {len(rows)} result lists for "
                                  f"{len(queries)} queries")
        try:
            return [[_hit(item) for item in row] for row in rows]
        except (KeyError, TypeError, ValueError) as e:
            raise RemoteToolError(f"retrieval server {self.url}/retrieve: a result is not "
                                  f"{{document: {{id, contents}}, score}} ({type(e).__name__}: {e})") from None

    def kg(self, entities: Any = None, relations: Any = None, query: Any = "", *, entity: Any = None,
           relation: Any = None) -> list[Triple]:
        """``/kg``: the in-process KG tool's signature (DynaSearcher's ``entity=`` / ``relation=`` too)."""
        ents = entities if entities is not None else entity
        rels = relations if relations is not None else relation
        rows = self.post("/kg", {"entities": _names(ents), "relations": _names(rels), "query": str(query or "")})
        try:
            return [Triple(**{k: v for k, v in r.items() if k in Triple.__dataclass_fields__}) for r in rows]
        except (AttributeError, TypeError) as e:
            raise RemoteToolError(f"retrieval server {self.url}/kg: a result is not a triple ({e})") from None

    def plan(self, plan: str) -> list[dict[str, Any]]:
        """``/plan``: one record per node, as :class:`~workbench.tools.plan.PlanTool` returns."""
        return self.post("/plan", {"plan": str(plan)})


def _names(x: Any) -> list[str]:
    if x is None:
        return []
    if isinstance(x, (str, int, float)):
        return [str(x)]
    return [str(i) for i in x if isinstance(i, (str, int, float)) and not isinstance(i, bool)]


def _hit(item: dict[str, Any]) -> Hit:
    from workbench.data.corpora import parse_flashrag_contents

    doc = item["document"] if "document" in item else item
    if "text" in doc:
        title, text = doc.get("title", ""), doc["text"]
    else:  # a plain Search-R1 server: FlashRAG's "Title"\ntext
        title, text = parse_flashrag_contents(doc["contents"])
    return Hit(id=str(doc["id"]), title=str(title), text=str(text), score=float(item.get("score", 0.0)),
               source=str(doc.get("source", "wiki")))


class RemoteSearch:
    """The ``search`` tool over a server: ``search(query, k) -> list[Hit]``, ``search_batch`` in one request."""

    name = "remote"

    def __init__(self, client: RemoteRetrieval):
        self.client = client

    def __call__(self, query: str, k: int = 5) -> list[Hit]:
        return self.client.search_batch([query], k)[0]

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self(query, k)

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        return self.client.search_batch(queries, k)


def remote_tools(client: RemoteRetrieval, kinds: Sequence[str]) -> dict[str, Any]:
    """``{kind: tool}`` for ``kinds`` (``search``, ``kg``, ``plan``) over ``client``."""
    bad = [k for k in kinds if k not in REMOTE_KINDS]
    if bad:
        raise ValueError(f"the retrieval server has no {bad[0]!r} tool (it serves {', '.join(REMOTE_KINDS)}): "
                         "build that tool in-process (corpus=) instead")
    make = {"search": lambda: RemoteSearch(client), "kg": lambda: client.kg, "plan": lambda: client.plan}
    return {k: make[k]() for k in kinds}


def remote_toolbox(protocol: Any, url: str, timeout_s: float = 20.0, api_key: str | None = None) -> Toolbox:
    """The tools ``protocol`` declares, served by the retrieval server at ``url``."""
    from workbench.tools.toolbox import required_tools

    return Toolbox(remote_tools(RemoteRetrieval(url, timeout_s=timeout_s, api_key=api_key), required_tools(protocol)))


def check_server(url: str, needs: dict[str, Sequence[str]], api_key: str | None = None) -> dict[str, Any]:
    """The ``/health`` of the retrieval server at ``url``, after checking it serves every tool in ``needs``
    (``{method: tools it calls}``) and, when it wants an API key, that the client's key is accepted; a ValueError
    naming the method, the tool (or the key) and the fix if not."""
    client = RemoteRetrieval(url, timeout_s=10.0, api_key=api_key)
    try:
        health = client.health()
        if isinstance(health, dict) and (health.get("auth") or set(health) == {"status"}):
            # a key is wanted (a bare {"status": "ok"} is what the server tells a client without it): 401 here, not at
            # the first search
            client.post("/retrieve", {"queries": ["health check"], "topk": 1})
    except RemoteToolError as e:
        hint = "" if "HTTP 401" in str(e) else (": start `workbench serve-retrieval --corpus FILE --port PORT` and pass "
                                                "its address, or drop --retrieval-url to build the index here")
        raise ValueError(f"{e}{hint}") from None
    finally:
        client.close()
    if not isinstance(health, dict) or health.get("status") != "ok":
        raise ValueError(f"{url}/health answered {str(health)[:120]!r}, not a workbench serve-retrieval: check the address")
    for method, tools in needs.items():
        for tool in tools:
            if tool not in REMOTE_KINDS:
                raise ValueError(f"method {method!r} needs the {tool!r} tool, which a retrieval server does not serve "
                                 f"(it serves {', '.join(REMOTE_KINDS)}): drop --retrieval-url or the method")
            if tool != "search" and not health.get(tool):
                raise ValueError(f"method {method!r} needs the {tool!r} tool, but the server at {url} has none (it "
                                 "serves the kg and plan tools only with --corpus world): drop --retrieval-url or the method")
    return health
