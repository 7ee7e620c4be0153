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

Requests that arrive together are searched in one ``bm25s`` call: each ``/retrieve`` puts its
queries on an asyncio queue; one worker takes everything queued (up to ``max_batch`` queries),
runs a single ``search_batch`` in a thread, and answers each request with its slice.

    >>> app = create_app(RetrievalService.from_passages(passages))     # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)                 # doctest: +SKIP
"""


import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.http_stack import BodyGuard, ServerThread  # noqa: F401 - ServerThread re-exported
from workbench.textsafe import clean_text
from workbench.tools.base import Hit, Passage

log = logging.getLogger(__name__)

#: Upper bounds a request may ask for (larger → 422 with a message).
MAX_TOPK = 100
MAX_QUERIES = 1024
MAX_QUERY_CHARS = 4096


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


class BatchQueue:
    """Coalesces concurrent ``/retrieve`` requests into one ``search_batch`` call per round."""

    def __init__(self, service: RetrievalService, max_batch: int = 256):
        self.service, self.max_batch = service, max_batch
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0  # number of search_batch calls, for tests and /health
        self.queries = 0

    async def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if self._queue is None:
            self._queue = asyncio.Queue()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((queries, k, fut))
        return await fut

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            items = [await self._queue.get()]
            await asyncio.sleep(0)  # let requests that arrived in the same tick enqueue
            n = len(items[0][0])
            while not self._queue.empty() and n < self.max_batch:
                item = self._queue.get_nowait()
                items.append(item)
                n += len(item[0])
            queries = [q for qs, _, _ in items for q in qs]
            k = max(kk for _, kk, _ in items)
            try:
                hits = await loop.run_in_executor(None, self.service.search_batch, queries, k)
            except Exception as e:  # a failing search fails these requests, not the server
                log.exception("search_batch failed")
                for _, _, fut in items:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches += 1
            self.queries += len(queries)
            i = 0
            for qs, kk, fut in items:
                if not fut.done():
                    fut.set_result([h[:kk] for h in hits[i : i + len(qs)]])
                i += len(qs)


def create_app(service: RetrievalService, *, default_topk: int = 3, max_topk: int = MAX_TOPK,
               max_queries: int = MAX_QUERIES, max_batch: int = 256, max_body_bytes: int = 8 << 20) -> Any:
    """The FastAPI app. Bad requests get 4xx with a message (FastAPI's 422 for missing or mistyped fields)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, Field

    class QueryRequest(BaseModel):
        """Search-R1's request: ``queries``, ``topk`` (None: the server's default), ``return_scores``."""

        queries: list[str] = Field(min_length=1, max_length=max_queries)
        topk: int | None = Field(default=None, ge=1, le=max_topk)
        return_scores: bool = False
        return_meta: bool = False
        """Ours: each document also carries ``title``, ``text`` and ``source`` (``workbench.tools.remote``)."""

    class KGRequest(BaseModel):
        entities: list[str] = Field(default_factory=list, max_length=64)
        relations: list[str] = Field(default_factory=list, max_length=64)
        query: str = Field(default="", max_length=MAX_QUERY_CHARS)

    class PlanRequest(BaseModel):
        plan: str = Field(min_length=1, max_length=16 * MAX_QUERY_CHARS)

    app = FastAPI(title="workbench retrieval server", version="1")
    queue = BatchQueue(service, max_batch=max_batch)
    app.state.queue = queue

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors) or "invalid request"
        return JSONResponse({"error": msg, "detail": errors}, status_code=422)

    app.add_middleware(BodyGuard, max_bytes=max_body_bytes, error=lambda status, msg: {"error": msg})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "passages": service.n_passages, "retriever": service.retriever,
                "kg": service.kg is not None, "plan": service.plan is not None, "batches": queue.batches,
                "queries": queue.queries}

    @app.post("/retrieve")
    async def retrieve(req: QueryRequest) -> dict[str, Any]:
        queries = [clean_text(q)[:MAX_QUERY_CHARS] for q in req.queries]
        k = req.topk or default_topk
        try:
            hits = await queue.search(queries, k)
        except Exception as e:  # the search failed (logged by the queue): say why, keep the connection usable
            return JSONResponse({"error": f"search failed: {type(e).__name__}: {e}"}, status_code=500)
        doc = (lambda h: {**document(h), "title": h.title, "text": h.text, "source": h.source}) if req.return_meta \
            else document
        if req.return_scores:
            return {"result": [[{"document": doc(h), "score": float(h.score)} for h in row] for row in hits]}
        return {"result": [[doc(h) for h in row] for row in hits]}

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
                 encoder: Any = None, index_dir: str | None = None, shard_size: int = 1_000_000) -> "RetrievalService":
    """The world (default: passages and graph) or a corpus file (FlashRAG JSONL or any :func:`load_corpus` layout).

    ``index_dir`` (or a ``corpus`` that is such a directory): a sharded, memory-mapped BM25 index
    (:mod:`workbench.tools.bm25_sharded`, for wiki-18's 21M passages), built there from ``corpus`` the first time.
    """
    from workbench.tools.bm25_sharded import is_text_index

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
    if not is_text_index(path):
        if corpus is None or corpus == "world":
            from workbench.data.world import load_world

            passages: Any = iter(load_world().passages)
        else:
            from workbench.data.corpora import iter_flashrag_corpus, load_corpus

            with open(corpus, encoding="utf-8-sig") as f:  # FlashRAG JSONL streams; other layouts load whole
                first = f.readline()
            try:
                streams = "contents" in json.loads(first)
            except (ValueError, TypeError):
                streams = False
            passages = iter_flashrag_corpus(corpus) if streams else iter(load_corpus(corpus))
        log.warning("building a sharded BM25 index of %s in %s", corpus or "world", path)
        build_text_index(itertools.islice(passages, limit), path, shard_size=shard_size)
    search = ShardedBM25Search(path)
    return RetrievalService(search, len(search), "bm25-sharded")
