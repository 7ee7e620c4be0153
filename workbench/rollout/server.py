"""A local OpenAI-compatible completions server over any ``Backend``.

``serve(backend)`` starts a FastAPI app under uvicorn in a background thread (the HTTP stack of
``workbench serve-retrieval``: :mod:`workbench.util.http_stack`) with

- ``POST /v1/completions``: ``prompt`` as token ids (``[1, 2, 3]``), text, or a list of either;
  ``max_tokens`` (default 16), ``temperature``, ``top_p``, ``stop``, ``seed``, ``logprobs``,
  and the vLLM extras ``return_tokens_as_token_ids``, ``return_token_ids``,
  ``skip_special_tokens``, ``include_stop_str_in_output``. The reply has ``choices[].text``,
  ``finish_reason`` (``stop`` / ``length``), ``stop_reason`` (the stop string, else null),
  ``logprobs.tokens`` (``"token_id:N"`` in token-id mode, else token strings) and
  ``logprobs.token_logprobs``, ``token_ids`` when asked, and ``usage``;
- ``POST /v1/chat/completions``: ``messages`` (``system`` / ``user`` / ``assistant`` turns, text content: a string or
  ``text`` parts) rendered with the model's chat template (``encode_chat``, the prompt the rollout engine builds),
  then generated as a completion with the same settings and checks (``max_completion_tokens`` is ``max_tokens``;
  ``logprobs`` is a bool); the reply has ``choices[].message`` (``role``, ``content``), ``finish_reason``,
  ``stop_reason``, ``logprobs.content`` when asked, and ``usage``. Tool calls, ``response_format`` and streaming are
  refused with a 400 naming the field: verifiers' harnesses and other chat clients talk to the model through it;
- ``GET /v1/models`` and ``GET /health``;
- with ``enable_lora=True`` (``--enable-lora``), vLLM's runtime LoRA API: ``POST /v1/load_lora_adapter``
  (``{"lora_name", "lora_path"}``: a PEFT directory under ``lora_dir``, ``--lora-dir``, loaded onto the HF model), ``POST
  /v1/unload_lora_adapter`` (``{"lora_name"}``), and completions with ``model=<lora_name>``
  (:mod:`workbench.rollout.lora_serving`). The trainer's ``rollout_backend="openai"`` uses it.

It is the CPU test double of a real inference server: on GPUs, serve the model with vLLM
(``vllm serve MODEL --return-tokens-as-token-ids [--enable-lora]``) or SGLang
(``python -m sglang.launch_server --model-path MODEL``) and point ``OpenAIBackend`` / ``TrainConfig.server``
there. The HTTP tests and benchmarks point ``OpenAIBackend`` at this one, and it is a way to share one
model between processes. Errors are OpenAI's ``{"error": {"message", "type", "code"}}`` (a body over
``MAX_BODY_BYTES``: 413; a wrong or missing ``api_key``: 401, checked before routing and before any body is read).
Limits as the retrieval server's (:mod:`workbench.util.http_stack`): unfinished bodies share ``MAX_BUFFERED_BYTES`` with
at most ``MAX_CLIENT_BYTES`` per client address, replies a client does not read are dropped; a request carries at
most ``MAX_PROMPTS`` prompts, each prompt plus ``max_tokens`` fits ``max_model_len`` (400 otherwise, as vLLM) and
prompts x ``max_tokens`` is at most ``max_request_tokens``; ``temperature`` is a finite number in
[0, ``MAX_TEMPERATURE``] (below ``GREEDY_BELOW``: greedy, as vLLM), ``top_p`` in (0, 1], ``seed`` in
[0, 2**63 - 1]; JSON nested too deep to read is a 400; a non-loopback bind needs an ``api_key``.

Requests that arrive together are batched: one worker thread collects the requests queued within
``batch_window_s`` (up to ``max_batch`` prompts), groups them by sampling settings and length class (``max_tokens``
within a factor of two) and makes one ``backend.generate`` call per group, the shortest groups first, so the backend is
only ever called from that thread and a short request queued beside a long one is not held for the long one's
length. A call takes at most ``max_call_tokens`` rows x decode steps: a longer request is cut into calls of fewer rows,
and a request that arrives while one of them runs goes before the rest (after it, the oldest waiting call goes next,
so a stream of short requests cannot starve a long one). Calls are not preempted mid-way, so a newcomer waits for at
most one call; ``max_request_tokens`` bounds how much one request may ask for. A request waits on that thread's
future (not on a threadpool thread), so any number of them can share a batch. Greedy results are exact; a seeded
sampled call uses the seed of its first request (a request's later calls a seed derived from it and the row), so
seeded sampling over HTTP is reproducible only when requests are batched the same way.

    python -m workbench.rollout.server --model smollm2-135m --port 8000 [--enable-lora]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import queue
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # at module level: FastAPI resolves the routes' string annotations here

from workbench.rollout.backends.base import (
    ERROR,
    GREEDY_BELOW,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    encode_chat,
)
from workbench.rollout.backends.openai import TOKEN_ID_PREFIX
from workbench.rollout.lora_serving import AdapterError, LoRAAdapters
from workbench.util.http_stack import BearerAuth, BodyGuard, ServerThread, is_loopback, json_response
from workbench.util.textsafe import clean_text

if TYPE_CHECKING:
    from starlette.types import ASGIApp

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 << 20
MAX_BUFFERED_BYTES = 128 << 20
"""Unfinished request bodies held at once, over all connections."""
MAX_CLIENT_BYTES = 64 << 20
"""Of them, what one client address may hold."""
MAX_PROMPTS = 1024
"""Prompts one request may carry."""
DEFAULT_MAX_MODEL_LEN = 32768
"""Prompt plus completion tokens when the model does not say (``max_position_embeddings``)."""
MAX_REQUEST_TOKENS = 65536
"""Default of ``max_request_tokens`` (``--max-request-tokens``): prompts x ``max_tokens`` one request may ask for."""
MAX_TEMPERATURE = 100.0
"""The largest ``temperature`` a request may ask for (OpenAI's is 2; vLLM has none): past it sampling is uniform in
all but name."""
MAX_SEED = 2**63 - 1
"""The largest ``seed`` (vLLM's: a signed 64-bit integer; seeds are >= 0 here)."""
MAX_MESSAGES = 1024
"""Chat messages one ``/v1/chat/completions`` request may carry."""
CHAT_ROLES = ("system", "user", "assistant")
"""The roles a chat message may take (tool turns are not served: this server runs no tool calls)."""
#: Chat fields this server does not serve; a request that sets one (not null, not empty) gets a 400 naming it.
CHAT_UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "response_format", "audio", "modalities",
                    "prediction")
MAX_CALL_TOKENS = 2048
"""Default of ``max_call_tokens`` (``--max-call-tokens``): rows x decode steps one ``backend.generate`` call takes; a
longer request is cut into calls of fewer rows, and requests that arrive meanwhile go between them."""

class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class _Job:
    prompts: list[list[int]]
    params: SamplingParams
    limits: list[int]
    future: Future
    adapter: str | None = None
    gens: list[Generation | None] = field(default_factory=list)  # filled row by row as the job's calls finish
    left: int = 0  # rows not yet generated

    def __post_init__(self) -> None:
        self.gens, self.left = [None] * len(self.prompts), len(self.prompts)


@dataclass
class _Call:
    """One ``backend.generate`` call: rows ``lo:hi`` of each of its jobs; ``seq`` is the round they arrived in."""
    parts: list[tuple[_Job, int, int]]
    seq: int

    @property
    def length(self) -> int:
        return max(n for j, lo, hi in self.parts for n in j.limits[lo:hi])


def _chunk_seed(seed: int, row: int) -> int:
    """The seed of a call that starts at row ``row`` of a seeded request: a call draws from one generator, so the
    request's later calls must not reuse the first one's stream (a group of equal prompts would repeat its samples)."""
    return seed if row == 0 else (seed * 0x9E3779B97F4A7C15 + row) % (MAX_SEED + 1)


class _Batcher:
    """One worker thread that batches queued requests into ``backend.generate`` calls of at most ``max_call_tokens``
    rows x decode steps, so a request that arrives while a long one runs waits for one of its calls, not all."""

    def __init__(self, backend: Backend, max_batch: int, window_s: float, adapters: LoRAAdapters | None = None,
                 max_call_tokens: int = MAX_CALL_TOKENS):
        self.backend, self.max_batch, self.window_s = backend, max_batch, window_s
        self.adapters = adapters
        self.max_call_tokens = max_call_tokens
        self.stats = {"requests": 0, "batches": 0, "largest_batch": 0, "split_requests": 0, "preempted": 0}
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="completion-batcher", daemon=True)
        self._thread.start()

    def enqueue(self, prompts: list[list[int]], params: SamplingParams, limits: list[int],
                adapter: str | None = None) -> Future:
        """Queue a request; the future resolves to its generations (or the batch's exception)."""
        fut: Future = Future()
        self._q.put(_Job(prompts, params, limits, fut, adapter))
        return fut

    def submit(self, prompts: list[list[int]], params: SamplingParams, limits: list[int],
               adapter: str | None = None) -> list[Generation]:
        """Queue a request and wait for its generations."""
        return self.enqueue(prompts, params, limits, adapter).result()

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=30)

    @staticmethod
    def groups(jobs: list[_Job]) -> list[list[_Job]]:
        """``jobs`` in ``generate`` calls: one per adapter, sampling settings and length class (the longest limit's
        power of two: a 1-token request is not decoded for as long as a 200-token one beside it), the shortest first.

        >>> p = SamplingParams()
        >>> jobs = [_Job([[1]] * 32, p, [200] * 32, Future()), _Job([[2]], p, [1], Future()), _Job([[3]], p, [150], Future())]
        >>> [[len(j.prompts) for j in g] for g in _Batcher.groups(jobs)]
        [[1], [32, 1]]
        """
        groups: dict[tuple, list[_Job]] = {}
        for j in jobs:
            key = (j.adapter, j.params.temperature, j.params.top_p, j.params.stop, max(j.limits).bit_length())
            groups.setdefault(key, []).append(j)
        return sorted(groups.values(), key=lambda g: max(max(j.limits) for j in g))

    def calls(self, jobs: list[_Job], seq: int = 0) -> list[_Call]:
        """:meth:`groups` cut into calls of at most ``max_call_tokens`` rows x the group's longest limit (at least
        one row a call; ``max_call_tokens=0``: a group is one call), the shortest first.

        >>> b = _Batcher.__new__(_Batcher); b.max_call_tokens = 2048
        >>> p = SamplingParams()
        >>> [[(lo, hi) for _, lo, hi in c.parts] for c in b.calls([_Job([[1]] * 32, p, [200] * 32, Future())])]
        [[(0, 10)], [(10, 20)], [(20, 30)], [(30, 32)]]
        """
        out: list[_Call] = []
        for group in self.groups(jobs):
            longest = max(max(j.limits) for j in group)
            rows = max(1, self.max_call_tokens // longest) if self.max_call_tokens else sum(len(j.prompts) for j in group)
            parts: list[tuple[_Job, int, int]] = []
            room = rows
            for j in group:
                lo = 0
                while lo < len(j.prompts):
                    hi = min(len(j.prompts), lo + room)
                    parts.append((j, lo, hi))
                    room -= hi - lo
                    lo = hi
                    if room == 0:
                        out.append(_Call(parts, seq))
                        parts, room = [], rows
            if parts:
                out.append(_Call(parts, seq))
        return out

    def _collect(self, first: _Job | None, wait: bool) -> tuple[list[_Job], bool]:
        """The jobs queued now (``wait``: also those arriving within ``window_s`` of ``first``), up to ``max_batch``
        prompts, and whether the server is closing."""
        jobs = [first] if first is not None else []
        n = sum(len(j.prompts) for j in jobs)
        deadline = time.monotonic() + (self.window_s if wait else 0.0)
        while n < self.max_batch:
            try:
                nxt = self._q.get(timeout=max(deadline - time.monotonic(), 0.0)) if wait else self._q.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                return jobs, True
            jobs.append(nxt)
            n += len(nxt.prompts)
        return jobs, False

    def _run(self) -> None:
        closing = False
        while not closing:
            job = self._q.get()
            if job is None:
                break
            jobs, closing = self._collect(job, wait=True)
            seq = 0
            pending = self.calls(jobs, seq)
            jumped = False
            while pending:
                # the shortest call first; but after one that went ahead of an older call, the oldest, so a stream
                # of short requests cannot starve a long one
                i = min(range(len(pending)), key=lambda k: pending[k].seq) if jumped else 0
                call = pending.pop(i)
                jumped = any(c.seq < call.seq for c in pending)
                self.stats["preempted"] += jumped
                self._generate(call)
                if pending and not closing:  # requests that arrived during the call join the line
                    new, closing = self._collect(None, wait=False)
                    if new:
                        seq += 1
                        pending = sorted(pending + self.calls(new, seq), key=lambda c: c.length)
        while True:  # requests that raced the shutdown fail instead of waiting forever
            try:
                job = self._q.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                _fail(job.future, RuntimeError("the completion server is shutting down"))

    def _generate(self, call: _Call) -> None:
        parts = [(j, lo, hi) for j, lo, hi in call.parts if not j.future.done()]  # a client that left cancelled it
        if not parts:
            return
        prompts = [p for j, lo, hi in parts for p in j.prompts[lo:hi]]
        limits = [n for j, lo, hi in parts for n in j.limits[lo:hi]]
        first, row = parts[0][0], parts[0][1]
        params = replace(first.params, max_new_tokens=max(limits))
        if params.seed is not None:
            params = replace(params, seed=_chunk_seed(params.seed, row))
        self.stats["requests"] += sum(lo == 0 for _, lo, _ in parts)
        self.stats["split_requests"] += sum(lo == 0 and hi < len(j.prompts) for j, lo, hi in parts)
        self.stats["batches"] += 1
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(prompts))
        try:
            with self.adapters.active(first.adapter) if self.adapters is not None else nullcontext():
                gens = self.backend.generate(prompts, params, limits)
            if len(gens) != len(prompts):
                raise RuntimeError(f"backend returned {len(gens)} generations for {len(prompts)} prompts")
        except Exception as e:  # reported to every waiting request as an HTTP 500
            for j, _, _ in parts:
                _fail(j.future, e)
            return
        i = 0
        for j, lo, hi in parts:
            j.gens[lo:hi] = gens[i : i + hi - lo]
            j.left -= hi - lo
            i += hi - lo
            if j.left == 0 and not j.future.done():
                j.future.set_result(j.gens)


def _fail(fut: Future, e: BaseException) -> None:
    if not fut.done():  # a client that left cancelled it
        fut.set_exception(e)


class CompletionServer:
    """The running server (uvicorn in a background thread); ``stop()`` shuts it down (also on leaving a ``with``)."""

    def __init__(self, addr: tuple[str, int], backend: Backend, model_name: str, api_key: str | None,
                 max_batch: int, batch_window_s: float, return_tokens_as_token_ids: bool,
                 adapters: LoRAAdapters | None = None, max_model_len: int = DEFAULT_MAX_MODEL_LEN,
                 max_request_tokens: int = MAX_REQUEST_TOKENS, max_call_tokens: int = MAX_CALL_TOKENS):
        self.backend = backend
        self.model_name = model_name
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.max_request_tokens = max_request_tokens
        self.return_tokens_as_token_ids = return_tokens_as_token_ids
        self.adapters = adapters
        self.http = ServerThread(create_app(self), *addr, name="completion-server")  # binds: OSError if in use
        self.server_address = (addr[0], self.http.port)
        self.batcher = _Batcher(backend, max_batch, batch_window_s, adapters, max_call_tokens)

    def start(self) -> None:
        self.http.start()

    def stop(self) -> None:
        self.http.stop()
        self.batcher.close()

    def __enter__(self) -> CompletionServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    model_name: str | None = None,
    allow_remote: bool = False,
    api_key: str | None = None,
    max_batch: int = 64,
    batch_window_s: float = 0.02,
    return_tokens_as_token_ids: bool = True,
    enable_lora: bool = False,
    max_loras: int = 8,
    lora_dir: str | None = None,
    max_model_len: int | None = None,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
    max_call_tokens: int = MAX_CALL_TOKENS,
) -> tuple[CompletionServer, str]:
    """Serve ``backend`` over HTTP in a background thread; returns ``(server, base_url)``.

    Args:
        backend: any ``Backend`` (its tokenizer decodes text and encodes text prompts).
        host: the address to bind (IPv4 or IPv6, e.g. ``::1``); anything but a loopback address needs
            ``allow_remote=True`` and an ``api_key`` (the server has no TLS).
        port: 0 picks a free port.
        model_name: the name in ``/v1/models`` that requests must use (default: ``backend.name``).
        api_key: when set, requests need ``Authorization: Bearer <api_key>``.
        max_batch: at most this many prompts per ``backend.generate`` call.
        batch_window_s: how long the worker waits for more requests before generating.
        return_tokens_as_token_ids: default of the per-request flag of the same name (vLLM's
            ``--return-tokens-as-token-ids``): ``logprobs.tokens`` as ``"token_id:N"``.
        enable_lora: serve vLLM's runtime LoRA API (an HF backend only; see the module docstring).
        max_loras: adapters loaded at once.
        lora_dir: the directory adapters may be loaded from (default: the current directory).
        max_model_len: prompt plus completion tokens a request may ask for (default: the model's
            ``max_position_embeddings``, else ``DEFAULT_MAX_MODEL_LEN``).
        max_request_tokens: prompts x ``max_tokens`` a request may ask for (400 past it, naming the limit).
        max_call_tokens: rows x decode steps one ``backend.generate`` call takes (a longer request is cut by rows;
            0: never cut, a request that arrives meanwhile waits for all of it).

    The base URL ends in ``/v1`` (``http://127.0.0.1:PORT/v1``). Call ``server.stop()`` when done.
    """
    if not is_loopback(host) and not (allow_remote and api_key):
        raise ValueError(f"refusing to bind {host!r}: not a loopback address. The server has no TLS; "
                         "pass allow_remote=True and an api_key to serve other machines.")
    if max_batch < 1:
        raise ValueError(f"serve: max_batch must be >= 1, got {max_batch}")
    if batch_window_s < 0:
        raise ValueError(f"serve: batch_window_s must be >= 0, got {batch_window_s}")
    if max_model_len is None:
        config = getattr(getattr(backend, "model", None), "config", None)
        max_model_len = int(getattr(config, "max_position_embeddings", 0) or DEFAULT_MAX_MODEL_LEN)
    for name, v in (("max_model_len", max_model_len), ("max_request_tokens", max_request_tokens)):
        if v < 1:
            raise ValueError(f"serve: {name} must be >= 1, got {v}")
    if max_call_tokens < 0:
        raise ValueError(f"serve: max_call_tokens must be >= 0 (0: never cut a request), got {max_call_tokens}")
    adapters = LoRAAdapters(backend, max_loras, root=lora_dir or ".") if enable_lora else None
    server = CompletionServer((host, port), backend, model_name or backend.name, api_key, max_batch, batch_window_s,
                              return_tokens_as_token_ids, adapters, max_model_len, max_request_tokens,
                              max_call_tokens)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server, server.http.url + "/v1"


# ---------------------------------------------------------------------------- the app


def _error(status: int, message: str, kind: str = "invalid_request_error") -> Any:
    """An OpenAI-style error reply: ``{"error": {"message", "type", "code"}}``."""
    return json_response(status, {"error": {"message": message, "type": kind, "code": status}})


class _Slashes:
    """ASGI layer under the key check: a trailing slash is dropped, so ``/v1/models/`` is ``/v1/models``."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if len(path) > 1 and path.endswith("/"):
                scope = {**scope, "path": path.rstrip("/") or "/"}
        await self.app(scope, receive, send)


def create_app(srv: CompletionServer) -> ASGIApp:
    """The ASGI app of ``srv``: FastAPI routes inside :class:`BodyGuard` (413 / non-UTF-8) inside the key check.

    Generation waits on the batcher's future, not on a thread, so the threadpool (which only parses
    requests and renders replies) does not limit how many requests can be batched together.
    """
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.responses import PlainTextResponse

    app = FastAPI(title="workbench completions server", version="1", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def _no_route(request: Request, exc: HTTPException) -> Any:
        if exc.status_code in (404, 405):
            return _error(404, f"no route {request.method} {request.url.path}", "not_found_error")
        return _error(exc.status_code, str(exc.detail))

    @app.get("/v1/models")
    @app.get("/models")
    async def models() -> Any:
        loras = srv.adapters.names() if srv.adapters is not None else []
        return json_response(200, {"object": "list", "data": [
            {"id": srv.model_name, "object": "model", "created": 0, "owned_by": "workbench"}] + [
            {"id": n, "object": "model", "created": 0, "owned_by": "workbench", "parent": srv.model_name}
            for n in loras]})

    @app.get("/health")
    async def health() -> Any:
        return json_response(200, {"status": "ok", **srv.batcher.stats})

    async def serve(request: Request, prepare: Any, render: Any, what: str) -> Any:
        """One completions request: checked and encoded by ``prepare``, batched, answered by ``render``."""
        try:
            job = await run_in_threadpool(prepare, srv, _read_json(await request.body()))
            try:
                gens = await asyncio.wrap_future(srv.batcher.enqueue(job.prompts, job.params, job.limits, job.adapter))
            except AdapterError as e:  # unloaded between the check and the batch
                raise BadRequest(str(e), e.status) from None
            return json_response(200, await run_in_threadpool(render, srv, job, gens))
        except BadRequest as e:
            return _error(e.status, str(e), "invalid_request_error" if e.status < 500 else "server_error")
        except Exception as e:  # a backend failure: the client may retry
            log.exception("%s failed", what)
            return _error(500, f"{type(e).__name__}: {e}", "server_error")

    @app.post("/v1/completions")
    @app.post("/completions")
    async def completions(request: Request) -> Any:
        return await serve(request, _prepare, _render, "completion")

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await serve(request, _prepare_chat, _render_chat, "chat completion")

    def lora_route(load: bool) -> Any:
        """vLLM's runtime LoRA endpoints; like vLLM, success is a plain-text 200."""

        async def lora(request: Request) -> Any:
            try:
                body = _read_json(await request.body())
                if srv.adapters is None:
                    raise BadRequest("runtime LoRA loading is off: start the server with --enable-lora "
                                     "(serve(enable_lora=True))")
                name = body.get("lora_name")
                if load:
                    await run_in_threadpool(srv.adapters.load, name, body.get("lora_path"))
                else:
                    await run_in_threadpool(srv.adapters.unload, name)
            except BadRequest as e:
                return _error(e.status, str(e))
            except AdapterError as e:
                return _error(e.status, str(e), "invalid_request_error" if e.status != 404 else "not_found_error")
            return PlainTextResponse(f"Success: LoRA adapter '{name}' {'added' if load else 'removed'} successfully.")

        return lora

    app.post("/v1/load_lora_adapter")(lora_route(True))
    app.post("/v1/unload_lora_adapter")(lora_route(False))
    guarded = BodyGuard(app, MAX_BODY_BYTES, lambda status, msg: {"error": {
        "message": msg, "type": "invalid_request_error", "code": status}}, max_buffered_bytes=MAX_BUFFERED_BYTES,
        max_client_bytes=MAX_CLIENT_BYTES)
    app = _Slashes(guarded)
    if not srv.api_key:
        return app
    # the key is checked first, before routing, for every path (constant-time compare: http_stack.BearerAuth)
    return BearerAuth(app, srv.api_key, lambda status, msg: {"error": {
        "message": msg, "type": "authentication_error", "code": status}}, open_paths=())


def _read_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequest(f"request body must be 1..{MAX_BODY_BYTES} bytes of JSON, got 0")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from e
    except RecursionError:  # [[[[...: deeper than Python's reader goes
        raise BadRequest("request body is JSON nested too deep to read: send a flat object") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


# ---------------------------------------------------------------------------- completions


@dataclass
class _Request:
    prompts: list[list[int]]
    params: SamplingParams
    limits: list[int]
    adapter: str | None
    opts: dict[str, bool]


def _prepare(srv: CompletionServer, body: dict[str, Any], prompts: list[list[int]] | None = None) -> _Request:
    """Check a completions request and encode its prompts (in a worker thread: text prompts are tokenized).
    ``prompts``: the ids of a chat request's rendered messages, in place of ``body["prompt"]``."""
    tok = srv.backend.tokenizer
    model = body.get("model")
    loras = srv.adapters.names() if srv.adapters is not None else []
    if model is not None and model != srv.model_name and model not in loras:
        served = ", ".join(repr(m) for m in [srv.model_name, *loras])
        raise BadRequest(f"model {model!r} is not served here; this server serves {served}", 404)
    for flag in ("stream", "echo"):
        if body.get(flag):
            raise BadRequest(f"{flag}=true is not supported by this server")
    if body.get("n", 1) != 1 or body.get("best_of", 1) not in (1, None):
        raise BadRequest("only n=1 is supported")
    if prompts is None:
        prompts = _parse_prompts(body.get("prompt"), tok)
    if len(prompts) > MAX_PROMPTS:
        raise BadRequest(f"{len(prompts)} prompts in one request is over this server's {MAX_PROMPTS}: split them")
    max_tokens = body.get("max_tokens", 16)
    if max_tokens is None:
        max_tokens = 16
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    logprobs = body.get("logprobs")
    if not _is_int(max_tokens) or max_tokens < 0:
        raise BadRequest(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    longest = max(len(p) for p in prompts)
    if longest + max_tokens > srv.max_model_len:
        raise BadRequest(f"this model's maximum context length is {srv.max_model_len} tokens; the request asks for "
                         f"{longest} prompt + {max_tokens} completion tokens: lower max_tokens or shorten the prompt")
    if len(prompts) * max_tokens > srv.max_request_tokens:
        raise BadRequest(f"{len(prompts)} prompts x max_tokens {max_tokens} = {len(prompts) * max_tokens:,} tokens is "
                         f"over this server's {srv.max_request_tokens:,} per request (--max-request-tokens): split the "
                         "prompts over several requests or lower max_tokens")
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise BadRequest(f"stop must be a string or a list of strings, got {stop!r}")
    if logprobs is not None and (not _is_int(logprobs) or logprobs < 0):
        raise BadRequest(f"logprobs must be an integer >= 0 or null, got {logprobs!r}")
    seed = body.get("seed")
    if seed is not None and not (_is_int(seed) and 0 <= seed <= MAX_SEED):
        raise BadRequest(f"seed must be an integer in [0, 2**63 - 1] or null, got {seed!r}")
    temperature, top_p = body.get("temperature"), body.get("top_p")
    temperature = 1.0 if temperature is None else temperature
    top_p = 1.0 if top_p is None else top_p
    if not (_is_number(temperature) and 0 <= temperature <= MAX_TEMPERATURE):  # NaN and the infinities too
        raise BadRequest(f"temperature must be a number in [0, {MAX_TEMPERATURE:g}] (0 = greedy; below "
                         f"{GREEDY_BELOW:g} is greedy too), got {temperature!r}")
    if not (_is_number(top_p) and 0 < top_p <= 1):
        raise BadRequest(f"top_p must be a number in (0, 1], got {top_p!r}")
    params = SamplingParams(max_new_tokens=int(max_tokens), temperature=float(temperature), top_p=float(top_p),
                            stop=tuple(stop), seed=seed)
    as_ids = body.get("return_tokens_as_token_ids")
    opts = {
        "logprobs": logprobs is not None,
        "as_ids": srv.return_tokens_as_token_ids if as_ids is None else bool(as_ids),
        "token_ids": bool(body.get("return_token_ids")),
        "skip_special": bool(body.get("skip_special_tokens", True)),
        "include_stop": bool(body.get("include_stop_str_in_output", False)),
    }
    return _Request(prompts, params, [int(max_tokens)] * len(prompts), model if model in loras else None, opts)


def _prepare_chat(srv: CompletionServer, body: dict[str, Any]) -> _Request:
    """Check a chat request, render its messages with the chat template and check the rest as a completion."""
    for key in CHAT_UNSUPPORTED:
        if body.get(key) not in (None, [], {}, "none", "auto"):
            raise BadRequest(f"{key} is not supported by this server (it serves text turns only): leave it out")
    if "max_completion_tokens" in body:
        if body.get("max_tokens") is not None and body["max_tokens"] != body["max_completion_tokens"]:
            raise BadRequest("max_tokens and max_completion_tokens differ: give one of them")
        body = {**body, "max_tokens": body["max_completion_tokens"]}
    logprobs, top = body.get("logprobs"), body.get("top_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest(f"logprobs must be true or false in a chat request, got {logprobs!r}")
    if top not in (None, 0):
        raise BadRequest(f"top_logprobs {top!r} is not supported by this server: leave it out (or 0)")
    if "prompt" in body:
        raise BadRequest("a chat request carries messages, not prompt: send prompt to /v1/completions")
    messages = _chat_messages(body.get("messages"))
    try:
        ids = encode_chat(srv.backend.tokenizer, messages)
    except Exception as e:  # the template refused the turns (e.g. an order it does not take)
        raise BadRequest(f"the model's chat template cannot render these messages: {type(e).__name__}: {e}") from None
    if not ids:
        raise BadRequest("the messages render to an empty prompt")
    return _prepare(srv, {**body, "logprobs": 0 if logprobs else None}, prompts=[ids])


def _chat_messages(messages: Any) -> list[dict[str, str]]:
    """``messages`` as ``[{"role", "content"}]`` with text content, each problem a 400 naming the message."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {\"role\", \"content\"} objects")
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"{len(messages)} messages in one request is over this server's {MAX_MESSAGES}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object with role and content, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in CHAT_ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}, got {str(role)[:40]!r}")
        if m.get("tool_calls"):
            raise BadRequest(f"messages[{i}] carries tool_calls: this server serves text turns only")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise BadRequest(f"messages[{i}].content: only text parts ({{\"type\": \"text\", \"text\": ...}}) "
                                 "are served")
            content = "".join(p["text"] for p in content)
        elif content is None and role == "assistant":
            content = ""
        elif not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string or a list of text parts, got "
                             f"{type(content).__name__}")
        out.append({"role": role, "content": clean_text(content)})
    return out


def _render_chat(srv: CompletionServer, req: _Request, gens: list[Generation]) -> dict[str, Any]:
    """The OpenAI chat reply for ``req``'s one generation: the completion's choice as an assistant message."""
    reply = _render(srv, req, gens)
    choice = reply["choices"][0]
    logprobs = None
    if choice["logprobs"] is not None:
        tok = srv.backend.tokenizer
        logprobs = {"content": [
            {"token": tok.decode([t], skip_special_tokens=False), "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(gens[0].token_ids, choice["logprobs"]["token_logprobs"])]}
    out = {"index": 0, "message": {"role": "assistant", "content": choice["text"]},
           "finish_reason": choice["finish_reason"], "stop_reason": choice["stop_reason"], "logprobs": logprobs}
    if "token_ids" in choice:
        out["token_ids"], out["prompt_token_ids"] = choice["token_ids"], choice["prompt_token_ids"]
    return {**reply, "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "choices": [out]}


def _render(srv: CompletionServer, req: _Request, gens: list[Generation]) -> dict[str, Any]:
    """The OpenAI reply for ``req``'s generations (in a worker thread: the text is decoded)."""
    failed = [g for g in gens if g.finish_reason == ERROR]
    if failed:
        raise BadRequest(f"backend error: {failed[0].error}", 500)
    tok = srv.backend.tokenizer
    choices = [_choice(i, p, g, tok, req.opts) for i, (p, g) in enumerate(zip(req.prompts, gens))]
    n_prompt, n_out = sum(len(p) for p in req.prompts), sum(len(g.token_ids) for g in gens)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": srv.model_name,
        "choices": choices,
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
    }


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    """A JSON number that is finite (not a bool; ``NaN`` and ``Infinity`` parse but are not numbers a field takes)."""
    return _is_int(x) or (isinstance(x, float) and math.isfinite(x))


def _parse_prompts(prompt: Any, tok: Any) -> list[list[int]]:
    """``[ids]`` / ``"text"`` / ``[[ids], ...]`` / ``["text", ...]`` -> a list of id lists (checked)."""
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        items = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise BadRequest("prompt must be a non-empty string, list of token ids, or list of either")
    try:
        vocab = len(tok)
    except TypeError:
        vocab = None
    out = []
    for p in items:
        if isinstance(p, str):
            ids = [int(t) for t in tok.encode(p)]
        elif isinstance(p, list) and all(_is_int(t) for t in p):
            ids = list(p)
        else:
            raise BadRequest("each prompt must be a string or a list of integer token ids")
        if not ids:
            raise BadRequest("empty prompt")
        if vocab is not None and not all(0 <= t < vocab for t in ids):
            raise BadRequest(f"prompt token ids must be in [0, {vocab})")
        out.append(ids)
    return out


def _choice(index: int, prompt: list[int], g: Generation, tok: Any, opts: dict[str, bool]) -> dict[str, Any]:
    text = tok.decode(g.token_ids, skip_special_tokens=opts["skip_special"])
    if g.finish_reason == STOP and g.stop_string and not opts["include_stop"]:
        cut = text.find(g.stop_string)
        text = text[:cut] if cut >= 0 else text
    choice: dict[str, Any] = {
        "index": index,
        "text": text,
        "finish_reason": "length" if g.finish_reason == LENGTH else "stop",
        "stop_reason": g.stop_string if g.finish_reason == STOP else None,
        "logprobs": None,
    }
    if opts["logprobs"]:
        if opts["as_ids"]:
            tokens = [f"{TOKEN_ID_PREFIX}{t}" for t in g.token_ids]
        else:
            tokens = [tok.decode([t], skip_special_tokens=False) for t in g.token_ids]
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        choice["logprobs"] = {"tokens": tokens, "token_logprobs": [float(x) for x in g.logprobs],
                              "top_logprobs": None, "text_offset": offsets}
    if opts["token_ids"]:
        choice["token_ids"] = list(g.token_ids)
        choice["prompt_token_ids"] = list(prompt)
    return choice


def main(argv: list[str] | None = None) -> None:
    """Serve a model with the HF backend until interrupted."""
    ap = argparse.ArgumentParser(description="Serve a model over OpenAI-compatible /v1/completions and "
                                 "/v1/chat/completions endpoints.")
    ap.add_argument("--model", default=None, help="alias, local path or HF id (default: the workbench default model)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--allow-remote", action="store_true", help="bind a non-loopback host")
    ap.add_argument("--enable-lora", action="store_true",
                    help="serve vLLM's runtime LoRA API: POST /v1/load_lora_adapter, /v1/unload_lora_adapter")
    ap.add_argument("--max-loras", type=int, default=8, help="adapters loaded at once (default: %(default)s)")
    ap.add_argument("--lora-dir", default=".", help="the directory --enable-lora loads adapters from; a lora_path "
                    "outside it is refused (default: the current directory)")
    ap.add_argument("--max-model-len", type=int, default=None, help="prompt plus completion tokens a request may ask "
                    "for (default: the model's max_position_embeddings)")
    ap.add_argument("--max-request-tokens", type=int, default=MAX_REQUEST_TOKENS, help="prompts x max_tokens a request "
                    "may ask for; more is refused with 400 (default: %(default)s)")
    ap.add_argument("--max-call-tokens", type=int, default=MAX_CALL_TOKENS, help="rows x decode steps one generate "
                    "call takes: a longer request is cut by rows, and requests that arrive meanwhile go between its "
                    "calls; 0 never cuts (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: workbench.util.threads' choice)")
    args = ap.parse_args(argv)

    def fail(message: str) -> None:  # one line, before the model loads
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)

    if not is_loopback(args.host) and not (args.allow_remote and args.api_key):
        fail(f"--host {args.host} is not a loopback address; add --allow-remote and --api-key KEY to serve other "
                 "machines (the server has no TLS)")
    if not 0 <= args.port <= 65535:
        fail(f"--port {args.port} is not a TCP port: give 1-65535 (0 picks a free one)")
    for flag, v in (("--max-loras", args.max_loras), ("--max-model-len", args.max_model_len), ("--threads", args.threads),
                    ("--max-request-tokens", args.max_request_tokens)):
        if v is not None and v < 1:
            fail(f"{flag} {v}: give a number >= 1")
    if args.max_call_tokens < 0:
        fail(f"--max-call-tokens {args.max_call_tokens}: give a number >= 0 (0: never cut a request)")
    if args.enable_lora and not os.path.isdir(args.lora_dir):
        fail(f"--lora-dir {args.lora_dir}: not a directory; give the directory the trainer saves adapters under "
                 "(e.g. runs)")
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    from workbench.core.models import DEFAULT_MODEL
    from workbench.rollout.backends.hf import HFBackend

    backend = HFBackend.from_pretrained(args.model, device=args.device)
    try:
        server, url = serve(backend, args.host, args.port, model_name=args.model or DEFAULT_MODEL,
                            allow_remote=args.allow_remote, api_key=args.api_key, enable_lora=args.enable_lora,
                            max_loras=args.max_loras, lora_dir=args.lora_dir, max_model_len=args.max_model_len,
                            max_request_tokens=args.max_request_tokens, max_call_tokens=args.max_call_tokens)
    except OSError as e:
        print(f"error: cannot listen on {args.host} port {args.port}: {e.strerror or e}; pick another --port",
              file=sys.stderr)
        raise SystemExit(2) from None
    print(f"serving {args.model or DEFAULT_MODEL} at {url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
