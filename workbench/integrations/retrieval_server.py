"""A retrieval server in the field's standard API: Search-R1's ``POST /retrieve``, plus KG and plan endpoints.

Search-R1 (``search_r1/search/retrieval_server.py``), verl's search tool and other peers send::

    POST /retrieve  {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}

and read ``{"result": [[{"document": {"id": ..., "contents": '"Title"\\ntext'}, "score": 1.2}, ...], ...]}``
(one list per query; without ``return_scores`` each item is the document itself; with our ``return_meta`` each
document also has ``title``, ``text`` and ``source``, read by ``workbench.tools.remote``). ``contents`` is
FlashRAG's ``"Title"\\ntext`` so their ``_passages2string`` renders ``Doc 1(Title: "Title") text``.

Richer endpoints over the same data: ``POST /kg`` (``entities``, ``relations``, ``query`` → triples of
the world's graph), ``POST /plan`` (``plan``: an NL-DAG plan text → one record per node, executed over
the multi-source registry), ``GET /health``.

Requests that arrive together are searched in one ``bm25s`` call per round: each ``/retrieve`` queues its
queries; one worker builds a round of up to ``max_batch`` queries by taking ``chunk`` queries from each waiting
request in turn (round-robin), runs a single ``search_batch`` in a thread, and answers each request once all its
chunks are done. So a one-query request joins the next round whatever big requests are queued before it.

Limits, for a server other people (or other people's jobs) can reach: a request may ask for at most
``max_hits`` hits (queries × topk) and get at most ``max_response_bytes`` back (else 422, with the fix); its
body must arrive within ``read_timeout_s`` (408) and connections with no request in progress close after
``idle_timeout_s``, and so does one that stops reading its reply for ``write_timeout_s`` (``workbench.util.http_stack``);
unfinished bodies share ``max_buffered_bytes`` with at most ``max_client_bytes`` per client address, outside a
small allowance per request, so stalled uploads are refused (503) before anyone's small request is. Fields are
typed strictly (``"topk": "3"`` or ``true`` is a 422, and so is a query over ``MAX_QUERY_CHARS``); every error,
FastAPI's own included, is ``{"error": message}``. With ``api_key`` every request needs
``Authorization: Bearer <key>`` (401, before its body is read) but a body-less ``GET /health``, which then
answers only ``{"status": "ok"}``; ``workbench serve-retrieval`` refuses a non-loopback ``--host``
without ``--allow-remote`` and a key. The ``/docs``, ``/redoc`` and ``/openapi.json`` pages are off unless
``docs=True``. Responses are encoded off the event loop, one row at a time.

    >>> app = create_app(RetrievalService.from_passages(passages))     # doctest: +SKIP
    >>> serve_forever(app, "127.0.0.1", 8000)                          # doctest: +SKIP
"""


import asyncio
import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.core.types import Hit, Passage
from workbench.util.http_stack import (  # noqa: F401 - ServerThread and serve_forever re-exported
    IDLE_TIMEOUT_S,
    READ_TIMEOUT_S,
    BearerAuth,
    BodyGuard,
    ServerThread,
    authorized,
    serve_forever,
)
from workbench.util.textsafe import clean_text

log = logging.getLogger(__name__)

#: Upper bounds a request may ask for (larger → 422 with a message).
MAX_TOPK = 100
MAX_QUERIES = 1024
MAX_QUERY_CHARS = 4096
MAX_HITS = 10_240
"""Hits one request may ask for, queries × topk (1,024 queries × topk 10, or 102 × 100): 1,024 × 100 took seconds
and 20–50 MB of JSON, and a round-robin round is only as fair as its requests are bounded."""
MAX_RESPONSE_BYTES = 16 << 20
MAX_BODY_BYTES = 8 << 20
MAX_BUFFERED_BYTES = 64 << 20
"""Unfinished request bodies held at once, over all connections (a real request is a few KB)."""
MAX_CLIENT_BYTES = 8 << 20
"""Of them, what one client address may hold (past each request's small allowance)."""
INLINE_HITS = 256
"""Results up to this many hits are encoded on the event loop (a thread hop costs more than they do)."""


def document(h: Hit | Passage) -> dict[str, str]:
    """A FlashRAG / Search-R1 corpus record: ``{"id", "contents"}`` with contents ``"Title"\\ntext``."""
    title = str(h.title).replace('"', '""')
    return {"id": str(h.id), "contents": f'"{title}"\n{h.text}' if title else str(h.text)}


@dataclass
class RetrievalService:
    """What the server searches: a ``search`` callable (BM25 or dense), and optional KG and plan tools."""

    search: Any
    """``search(query, k) -> list[Hit]``; ``search.search_batch(queries, k)`` is used when present."""
    n_passages: int
    retriever: str = "bm25"
    kg: Any = None
    plan: Any = None

    @classmethod
    def from_passages(cls, passages: Sequence[Passage], retriever: str = "bm25", *, world: Any = None,
                      encoder: Any = None, kg: bool = True, plan: bool = True) -> "RetrievalService":
        """Index ``passages`` with the toolbox's own builders (the same tools eval and train use)."""
        from workbench.tools.toolbox import TOOL_KINDS, ToolContext, make_searcher

        passages = list(passages)
        ctx = ToolContext(world=world, corpus=passages, retriever=retriever, encoder=encoder)
        kg_tool = TOOL_KINDS["kg"].build(ctx) if kg and TOOL_KINDS["kg"].available(ctx) else None
        plan_tool = TOOL_KINDS["plan"].build(ctx) if plan and TOOL_KINDS["plan"].available(ctx) else None
        return cls(make_searcher(passages, retriever, encoder), len(passages), retriever, kg_tool, plan_tool)

    def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        batch = getattr(self.search, "search_batch", None)
        if batch is not None:
            return batch(queries, k)
        return [self.search(q, k) for q in queries]


@dataclass(eq=False)
class _Job:
    """One request's queries: ``taken`` of them are in a round already; ``hits`` fill in as rounds finish."""

    queries: list[str]
    k: int
    fut: asyncio.Future
    taken: int = 0
    hits: list[list[Hit]] = field(default_factory=list)


class BatchQueue:
    """Searches concurrent ``/retrieve`` requests in shared rounds, fairly (see the module docstring).

    Args:
        max_batch: queries per ``search_batch`` call (one round).
        chunk: queries a request puts in a round per turn of the round-robin.
    """

    def __init__(self, service: RetrievalService, max_batch: int = 256, chunk: int = 32):
        if max_batch < 1 or chunk < 1:
            raise ValueError(f"BatchQueue: max_batch and chunk must be >= 1, got {max_batch} and {chunk}")
        self.service, self.max_batch, self.chunk = service, max_batch, chunk
        self._pending: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0  # number of search_batch calls, for tests and /health
        self.queries = 0

    async def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        loop = asyncio.get_running_loop()
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        job = _Job(list(queries), k, loop.create_future())
        self._pending.append(job)
        self._wake.set()
        return await job.fut  # cancelled when the client leaves: its remaining chunks are dropped

    def next_round(self) -> list[tuple[_Job, int, int]]:
        """``(job, start, end)`` slices of up to ``max_batch`` queries: ``chunk`` from each waiting request in turn;
        a request with queries left goes to the back of the line."""
        parts, n = [], 0
        while self._pending and n < self.max_batch:
            job = self._pending.popleft()
            if job.fut.done():  # the client left, or an earlier round failed it
                continue
            take = min(self.chunk, len(job.queries) - job.taken, self.max_batch - n)
            parts.append((job, job.taken, job.taken + take))
            job.taken += take
            n += take
            if job.taken < len(job.queries):
                self._pending.append(job)
        return parts

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(0)  # let requests that arrived in the same tick enqueue
            parts = self.next_round()
            if not parts:
                continue
            queries = [q for job, a, b in parts for q in job.queries[a:b]]
            k = max(job.k for job, _, _ in parts)
            try:
                hits = await loop.run_in_executor(None, self.service.search_batch, queries, k)
            except Exception as e:  # a failing search fails these requests, not the server
                log.exception("search_batch failed")
                for job, _, _ in parts:
                    if not job.fut.done():
                        job.fut.set_exception(e)
                continue
            self.batches += 1
            self.queries += len(queries)
            i = 0
            for job, a, b in parts:
                job.hits.extend(h[: job.k] for h in hits[i : i + b - a])
                i += b - a
                if b == len(job.queries) and not job.fut.done():
                    job.fut.set_result(job.hits)


def encode_result(rows: list[list[Hit]], scores: bool, meta: bool, max_bytes: int) -> bytes | None:
    """``{"result": [...]}`` as JSON bytes, one row at a time (other threads and the event loop run between
    rows); None as soon as it would pass ``max_bytes``."""
    def doc(h: Hit) -> dict[str, Any]:
        d = document(h)
        return {**d, "title": h.title, "text": h.text, "source": h.source} if meta else d

    out, n = [b'{"result": ['], 12
    for i, row in enumerate(rows):
        items = [{"document": doc(h), "score": float(h.score)} for h in row] if scores else [doc(h) for h in row]
        b = (b"," if i else b"") + json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        n += len(b)
        if n > max_bytes:
            return None
        out.append(b)
    out.append(b"]}")
    return b"".join(out)


def create_app(service: RetrievalService, *, default_topk: int = 3, max_topk: int = MAX_TOPK,
               max_queries: int = MAX_QUERIES, max_batch: int = 256, max_body_bytes: int = MAX_BODY_BYTES,
               max_hits: int = MAX_HITS, max_response_bytes: int = MAX_RESPONSE_BYTES, api_key: str | None = None,
               docs: bool = False, read_timeout_s: float | None = READ_TIMEOUT_S,
               max_buffered_bytes: int | None = MAX_BUFFERED_BYTES,
               max_client_bytes: int | None = MAX_CLIENT_BYTES) -> Any:
    """The FastAPI app. Bad requests get 4xx with ``{"error": message}`` (422 for missing or mistyped fields)."""
    from typing import Annotated

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def short(text: str) -> str:  # a validator, not a max_length: pydantic's refuses text with lone surrogates
        if len(text) > MAX_QUERY_CHARS:
            raise ValueError(f"{len(text)} characters is over this server's {MAX_QUERY_CHARS} per query: shorten it")
        return text

    Query = Annotated[str, AfterValidator(short)]

    class Strict(BaseModel):
        """No coercion: ``"3"`` is not a topk, ``"yes"`` not a boolean."""

        model_config = ConfigDict(strict=True)

    class QueryRequest(Strict):
        """Search-R1's request: ``queries``, ``topk`` (None: the server's default), ``return_scores``."""

        queries: list[Query] = Field(min_length=1, max_length=max_queries)
        topk: int | None = Field(default=None, ge=1, le=max_topk)
        return_scores: bool = False
        return_meta: bool = False
        """Ours: each document also carries ``title``, ``text`` and ``source`` (``workbench.tools.remote``)."""

    class KGRequest(Strict):
        entities: list[Query] = Field(default_factory=list, max_length=64)
        relations: list[Query] = Field(default_factory=list, max_length=64)
        query: Query = ""

    class PlanRequest(Strict):
        plan: str = Field(min_length=1, max_length=16 * MAX_QUERY_CHARS)

    pages = {} if docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="workbench retrieval server", version="1", **pages)
    queue = BatchQueue(service, max_batch=max_batch)
    app.state.queue = queue
    limits = {"max_topk": max_topk, "max_queries": max_queries, "max_hits": max_hits,
              "max_response_bytes": max_response_bytes, "max_body_bytes": max_body_bytes,
              "read_timeout_s": read_timeout_s, "max_client_bytes": max_client_bytes}

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors) or "invalid request"
        kind = request.headers.get("content-type", "")
        if "json" not in kind.lower():
            msg = f"send the body as JSON with Content-Type: application/json (got {kind or 'none'!r}); {msg}"
        return JSONResponse({"error": msg, "detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """FastAPI's own errors (a body it cannot parse, such as JSON nested too deep or an integer of thousands of
        digits; an unknown path or method) in the server's shape."""
        msg = str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in msg:
            msg = "the request body could not be parsed as JSON (nested too deep, or a number too long?)"
        elif msg in ("Not Found", "Method Not Allowed"):  # routing's own, not a route's HTTPException
            msg = f"no route {request.method} {request.url.path}: the endpoints are POST /retrieve, /kg, /plan and " \
                  "GET /health"
        return JSONResponse({"error": msg}, status_code=exc.status_code, headers=exc.headers)

    error = lambda status, msg: {"error": msg}  # noqa: E731 - the shape Search-R1 clients read
    app.add_middleware(BodyGuard, max_bytes=max_body_bytes, error=error, read_timeout_s=read_timeout_s,
                       max_buffered_bytes=max_buffered_bytes, max_client_bytes=max_client_bytes)
    if api_key:  # outermost: checked before a body is read
        app.add_middleware(BearerAuth, api_key=api_key, error=error)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        if not authorized(request.scope):  # without the key: only that the server is up
            return {"status": "ok"}
        return {"status": "ok", "passages": service.n_passages, "retriever": service.retriever,
                "kg": service.kg is not None, "plan": service.plan is not None, "batches": queue.batches,
                "queries": queue.queries, "auth": bool(api_key), "limits": limits,
                **({"index": service.search.info()} if callable(getattr(service.search, "info", None)) else {})}

    @app.post("/retrieve")
    async def retrieve(req: QueryRequest) -> Any:
        k = req.topk or default_topk
        if len(req.queries) * k > max_hits:
            return JSONResponse({"error": f"{len(req.queries)} queries x topk {k} = {len(req.queries) * k} hits is "
                                 f"over this server's {max_hits} per request: split the queries into requests of at "
                                 f"most {max(1, max_hits // k)}, or ask for a smaller topk"}, status_code=422)
        queries = [clean_text(q) for q in req.queries]
        try:
            hits = await queue.search(queries, k)
        except Exception as e:  # the search failed (logged by the queue): say why, keep the connection usable
            return JSONResponse({"error": f"search failed: {type(e).__name__}: {e}"}, status_code=500)
        encode = (hits, req.return_scores, req.return_meta, max_response_bytes)
        body = encode_result(*encode) if len(hits) * k <= INLINE_HITS else \
            await asyncio.get_running_loop().run_in_executor(None, encode_result, *encode)
        if body is None:
            return JSONResponse({"error": f"the result is over this server's {max_response_bytes} bytes per response: "
                                 "ask for fewer queries or a smaller topk per request"}, status_code=422)
        return Response(body, media_type="application/json")

    @app.post("/kg")
    async def kg(req: KGRequest) -> dict[str, Any]:
        if service.kg is None:
            raise HTTPException(404, "no knowledge graph is loaded (serve the world, or pass a KG)")
        triples = await asyncio.get_running_loop().run_in_executor(
            None, lambda: service.kg([clean_text(e) for e in req.entities], [clean_text(r) for r in req.relations],
                                     clean_text(req.query)))
        return {"result": [t.to_dict() if hasattr(t, "to_dict") else t for t in triples]}

    @app.post("/plan")
    async def plan(req: PlanRequest) -> dict[str, Any]:
        if service.plan is None:
            raise HTTPException(404, "no plan tool (it needs a passage corpus)")
        text = clean_text(req.plan)
        try:
            service.plan.validate(text)
        except ValueError as e:
            raise HTTPException(422, f"invalid plan: {e}") from e
        records = await asyncio.get_running_loop().run_in_executor(None, service.plan, text)
        return {"result": records}

    return app


def load_service(corpus: str | None = None, retriever: str = "bm25", *, limit: int | None = None,
                 encoder: Any = None, index_dir: str | None = None, shard_size: int = 1_000_000,
                 index: str | None = None) -> "RetrievalService":
    """The world (default: passages and graph) or a corpus file (FlashRAG JSONL or any :func:`load_corpus` layout).

    ``index_dir`` (or a ``corpus`` that is such a directory): a sharded, memory-mapped BM25 index
    (:mod:`workbench.tools.bm25_sharded`, for wiki-18's 21M passages), built there from ``corpus`` the first time.
    ``index``: a faiss index of the corpus (``retriever="dense"``; Search-R1's ``e5_Flat.index`` with ``wiki-18.jsonl``
    and ``encoder`` e5), memory-mapped, the corpus read on demand (:func:`faiss_service`).
    """
    from workbench.tools.bm25_sharded import is_text_index

    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit}: the number of passages to serve must be >= 1 (or leave it out for all)")
    if index is not None:
        if index_dir is not None:
            raise ValueError("--index (a faiss index) and --index-dir (a sharded BM25 index) are two retrievers: "
                             "give one")
        if limit is not None:
            raise ValueError("--limit cannot cut a faiss index (its rows are the whole corpus): drop --limit")
        return faiss_service(corpus, index, retriever, encoder=encoder)
    if index_dir is not None or (corpus and is_text_index(corpus)):
        return sharded_service(corpus, retriever, index_dir=index_dir, limit=limit, shard_size=shard_size)
    if corpus is None or corpus == "world":
        from workbench.data.world import load_world

        world = load_world()
        passages = list(world.passages)[:limit] if limit else list(world.passages)
        return RetrievalService.from_passages(passages, retriever, world=world, encoder=encoder)
    from workbench.data.corpora import load_corpus

    return RetrievalService.from_passages(load_corpus(corpus, limit=limit), retriever, encoder=encoder)


def sharded_service(corpus: str | None, retriever: str = "bm25", *, index_dir: str | None = None,
                    limit: int | None = None, shard_size: int = 1_000_000) -> "RetrievalService":
    """BM25 over a sharded index directory (no /kg or /plan: those need the passages in memory)."""
    import itertools
    import json
    from pathlib import Path

    from workbench.tools.bm25_sharded import ShardedBM25Search, build_text_index, is_text_index

    if retriever != "bm25":
        raise ValueError(f"--index-dir is a BM25 index; --retriever {retriever} cannot use it (drop one of them)")
    path = Path(index_dir or str(corpus))
    if path.exists() and not path.is_dir():
        raise ValueError(f"--index-dir {path} is a file, not a directory: give the folder of a sharded BM25 index, or a "
                         "new folder to build one in (with --corpus FILE)")
    if not is_text_index(path):
        if corpus is None or corpus == "world":
            from workbench.data.world import load_world

            passages: Any = iter(load_world().passages)
        else:
            from workbench.data.corpora import iter_flashrag_corpus, load_corpus

            if not Path(corpus).is_file():
                raise FileNotFoundError(f"--corpus {corpus}: no such file (a FlashRAG JSONL corpus to index in "
                                        f"{path})")
            with open(corpus, encoding="utf-8-sig") as f:  # FlashRAG JSONL streams; other layouts load whole
                first = f.readline()
            try:
                streams = "contents" in json.loads(first)
            except (ValueError, TypeError, RecursionError):  # a first line in another layout: load_corpus names it
                streams = False
            passages = iter_flashrag_corpus(corpus) if streams else iter(load_corpus(corpus))
        log.warning("building a sharded BM25 index of %s in %s", corpus or "world", path)
        build_text_index(itertools.islice(passages, limit), path, shard_size=shard_size)
    search = ShardedBM25Search(path)
    return RetrievalService(search, len(search), "bm25-sharded")


def faiss_service(corpus: str | None, index: str, retriever: str = "dense", *, encoder: Any = None) -> "RetrievalService":
    """Dense search over the faiss ``index`` of ``corpus`` (:class:`~workbench.tools.faiss_index.FaissSearch`): a JSONL
    file read on demand (:class:`~workbench.data.jsonl_corpus.JsonlCorpus`), another layout loaded, or the world's
    passages (then with ``/kg``). No ``/plan``: its per-source searches would need the corpus indexed again."""
    from workbench.tools.faiss_index import FaissSearch

    if retriever != "dense":
        raise ValueError(f"--index {index} is a dense (faiss) index; --retriever is {retriever!r}: use --retriever dense")
    world = None
    if corpus is None or corpus == "world":
        from workbench.data.world import load_world

        world = load_world()
        passages: Any = list(world.passages)
    else:
        from workbench.data.jsonl_corpus import open_corpus

        passages = open_corpus(corpus)
    search = FaissSearch(index, passages, encoder)
    log.warning("faiss index %s: %s", index, search.info())
    kg = None
    if world is not None:
        from workbench.tools.toolbox import TOOL_KINDS, ToolContext

        kg = TOOL_KINDS["kg"].build(ToolContext(world=world))
    return RetrievalService(search, len(search), "dense-faiss", kg, None)
