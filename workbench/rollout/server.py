"""A local OpenAI-compatible completions server over any ``Backend``.

``serve(backend)`` starts a ``ThreadingHTTPServer`` in a background thread with

- ``POST /v1/completions``: ``prompt`` as token ids (``[1, 2, 3]``), text, or a list of either;
  ``max_tokens`` (default 16), ``temperature``, ``top_p``, ``stop``, ``seed``, ``logprobs``,
  and the vLLM extras ``return_tokens_as_token_ids``, ``return_token_ids``,
  ``skip_special_tokens``, ``include_stop_str_in_output``. The reply has ``choices[].text``,
  ``finish_reason`` (``stop`` / ``length``), ``stop_reason`` (the stop string, else null),
  ``logprobs.tokens`` (``"token_id:N"`` in token-id mode, else token strings) and
  ``logprobs.token_logprobs``, ``token_ids`` when asked, and ``usage``;
- ``GET /v1/models`` and ``GET /health``;
- with ``enable_lora=True`` (``--enable-lora``), vLLM's runtime LoRA API: ``POST /v1/load_lora_adapter``
  (``{"lora_name", "lora_path"}``: a PEFT directory loaded onto the HF model), ``POST
  /v1/unload_lora_adapter`` (``{"lora_name"}``), and completions with ``model=<lora_name>``
  (:mod:`workbench.rollout.lora_serving`). The trainer's ``rollout_backend="openai"`` uses it.

It is what the HTTP tests and benchmarks point ``OpenAIBackend`` at, and a way to share one
model between processes. Requests that arrive together are batched: one worker thread collects
the requests queued within ``batch_window_s`` (up to ``max_batch`` prompts), groups them by
sampling settings and makes one ``backend.generate`` call per group, so the backend is only
ever called from that thread. Greedy results are exact; a seeded sampled batch uses the seed
of its first request, so seeded sampling over HTTP is reproducible only when requests are
batched the same way.

    python -m workbench.rollout.server --model smollm2-135m --port 8000 [--enable-lora]
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from workbench.rollout.backends.base import ERROR, LENGTH, STOP, Backend, Generation, SamplingParams
from workbench.rollout.backends.openai import TOKEN_ID_PREFIX, is_loopback_host
from workbench.rollout.lora_serving import AdapterError, LoRAAdapters

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 << 20


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


class _Batcher:
    """One worker thread that batches queued requests into ``backend.generate`` calls."""

    def __init__(self, backend: Backend, max_batch: int, window_s: float, adapters: LoRAAdapters | None = None):
        self.backend, self.max_batch, self.window_s = backend, max_batch, window_s
        self.adapters = adapters
        self.stats = {"requests": 0, "batches": 0, "largest_batch": 0}
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="completion-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompts: list[list[int]], params: SamplingParams, limits: list[int],
               adapter: str | None = None) -> list[Generation]:
        fut: Future = Future()
        self._q.put(_Job(prompts, params, limits, fut, adapter))
        return fut.result()

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        closing = False
        while not closing:
            job = self._q.get()
            if job is None:
                break
            jobs, n = [job], len(job.prompts)
            deadline = time.monotonic() + self.window_s
            while n < self.max_batch:
                try:
                    nxt = self._q.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                    break
                jobs.append(nxt)
                n += len(nxt.prompts)
            groups: dict[tuple, list[_Job]] = {}
            for j in jobs:
                groups.setdefault((j.adapter, j.params.temperature, j.params.top_p, j.params.stop), []).append(j)
            for group in groups.values():
                self._generate(group)
        while True:  # requests that raced the shutdown fail instead of waiting forever
            try:
                job = self._q.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.future.set_exception(RuntimeError("the completion server is shutting down"))

    def _generate(self, jobs: list[_Job]) -> None:
        prompts = [p for j in jobs for p in j.prompts]
        limits = [n for j in jobs for n in j.limits]
        params = replace(jobs[0].params, max_new_tokens=max(limits))
        self.stats["requests"] += len(jobs)
        self.stats["batches"] += 1
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(prompts))
        try:
            with self.adapters.active(jobs[0].adapter) if self.adapters is not None else nullcontext():
                gens = self.backend.generate(prompts, params, limits)
            if len(gens) != len(prompts):
                raise RuntimeError(f"backend returned {len(gens)} generations for {len(prompts)} prompts")
        except Exception as e:  # reported to every waiting request as an HTTP 500
            for j in jobs:
                j.future.set_exception(e)
            return
        i = 0
        for j in jobs:
            j.future.set_result(gens[i : i + len(j.prompts)])
            i += len(j.prompts)


class CompletionServer(ThreadingHTTPServer):
    """The HTTP server; ``stop()`` shuts it down (also on leaving a ``with`` block)."""

    daemon_threads = True

    def __init__(self, addr: tuple[str, int], backend: Backend, model_name: str, api_key: str | None,
                 max_batch: int, batch_window_s: float, return_tokens_as_token_ids: bool,
                 adapters: LoRAAdapters | None = None):
        self.backend = backend
        self.model_name = model_name
        self.api_key = api_key
        self.return_tokens_as_token_ids = return_tokens_as_token_ids
        self.adapters = adapters
        self.batcher = _Batcher(backend, max_batch, batch_window_s, adapters)
        self._thread: threading.Thread | None = None
        super().__init__(addr, _Handler)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), name="completion-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=30)
            self._thread = None
        self.server_close()
        self.batcher.close()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class _CompletionServer6(CompletionServer):
    address_family = socket.AF_INET6


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
) -> tuple[CompletionServer, str]:
    """Serve ``backend`` over HTTP in a background thread; returns ``(server, base_url)``.

    Args:
        backend: any ``Backend`` (its tokenizer decodes text and encodes text prompts).
        host: the address to bind; anything but a loopback address needs ``allow_remote=True``
            (the server has no TLS and, without ``api_key``, no authentication).
        port: 0 picks a free port.
        model_name: the name in ``/v1/models`` that requests must use (default: ``backend.name``).
        api_key: when set, requests need ``Authorization: Bearer <api_key>``.
        max_batch: at most this many prompts per ``backend.generate`` call.
        batch_window_s: how long the worker waits for more requests before generating.
        return_tokens_as_token_ids: default of the per-request flag of the same name (vLLM's
            ``--return-tokens-as-token-ids``): ``logprobs.tokens`` as ``"token_id:N"``.
        enable_lora: serve vLLM's runtime LoRA API (an HF backend only; see the module docstring).
        max_loras: adapters loaded at once.

    The base URL ends in ``/v1`` (``http://127.0.0.1:PORT/v1``). Call ``server.stop()`` when done.
    """
    if not allow_remote and not is_loopback_host(host):
        raise ValueError(f"refusing to bind {host!r}: not a loopback address. The server has no TLS; "
                         "pass allow_remote=True (and an api_key) to serve other machines.")
    if max_batch < 1:
        raise ValueError(f"serve: max_batch must be >= 1, got {max_batch}")
    if batch_window_s < 0:
        raise ValueError(f"serve: batch_window_s must be >= 0, got {batch_window_s}")
    cls = _CompletionServer6 if ":" in host else CompletionServer
    adapters = LoRAAdapters(backend, max_loras) if enable_lora else None
    server = cls((host, port), backend, model_name or backend.name, api_key, max_batch, batch_window_s,
                 return_tokens_as_token_ids, adapters)
    server.start()
    bound_host, bound_port = server.server_address[:2]
    url_host = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    return server, f"http://{url_host}:{bound_port}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: CompletionServer
    server_version = "workbench-completions/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    # ------------------------------------------------------------------ routing
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            loras = self.server.adapters.names() if self.server.adapters is not None else []
            self._send(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "workbench"}] + [
                {"id": n, "object": "model", "created": 0, "owned_by": "workbench", "parent": self.server.model_name}
                for n in loras]})
        elif path == "/health":
            self._send(200, {"status": "ok", **self.server.batcher.stats})
        else:
            self._error(404, f"no route GET {self.path}", "not_found_error")

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            self._lora(path)
            return
        if path not in ("/v1/completions", "/completions"):
            self._error(404, f"no route POST {self.path}", "not_found_error")
            return
        try:
            body = self._read_json()
            self._send(200, self._completions(body))
        except BadRequest as e:
            self._error(e.status, str(e), "invalid_request_error" if e.status < 500 else "server_error")
        except Exception as e:  # a backend failure: the client may retry
            log.exception("completion failed")
            self._error(500, f"{type(e).__name__}: {e}", "server_error")

    def _lora(self, path: str) -> None:
        """vLLM's runtime LoRA endpoints; like vLLM, success is a plain-text 200."""
        adapters = self.server.adapters
        try:
            body = self._read_json()
            if adapters is None:
                raise BadRequest("runtime LoRA loading is off: start the server with --enable-lora (serve(enable_lora=True))")
            name = body.get("lora_name")
            if path.endswith("/load_lora_adapter"):
                adapters.load(name, body.get("lora_path"))
                msg = f"Success: LoRA adapter '{name}' added successfully."
            else:
                adapters.unload(name)
                msg = f"Success: LoRA adapter '{name}' removed successfully."
        except BadRequest as e:
            self._error(e.status, str(e), "invalid_request_error")
            return
        except AdapterError as e:
            self._error(e.status, str(e), "invalid_request_error" if e.status != 404 else "not_found_error")
            return
        data = msg.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # ------------------------------------------------------------------ completions
    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        srv = self.server
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
        prompts = _parse_prompts(body.get("prompt"), tok)
        max_tokens = body.get("max_tokens", 16)
        if max_tokens is None:
            max_tokens = 16
        stop = body.get("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        logprobs = body.get("logprobs")
        if not _is_int(max_tokens) or max_tokens < 0:
            raise BadRequest(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
            raise BadRequest(f"stop must be a string or a list of strings, got {stop!r}")
        if logprobs is not None and (not _is_int(logprobs) or logprobs < 0):
            raise BadRequest(f"logprobs must be an integer >= 0 or null, got {logprobs!r}")
        seed = body.get("seed")
        if seed is not None and not _is_int(seed):
            raise BadRequest(f"seed must be an integer or null, got {seed!r}")
        try:
            temperature, top_p = body.get("temperature"), body.get("top_p")
            params = SamplingParams(
                max_new_tokens=int(max_tokens),
                temperature=1.0 if temperature is None else float(temperature),
                top_p=1.0 if top_p is None else float(top_p),
                stop=tuple(stop),
                seed=seed,
            )
        except (TypeError, ValueError) as e:
            raise BadRequest(str(e)) from e
        adapter = model if model in loras else None
        try:
            gens = srv.batcher.submit(prompts, params, [int(max_tokens)] * len(prompts), adapter)
        except AdapterError as e:  # unloaded between the check and the batch
            raise BadRequest(str(e), e.status) from None
        failed = [g for g in gens if g.finish_reason == ERROR]
        if failed:
            raise BadRequest(f"backend error: {failed[0].error}", 500)
        as_ids = body.get("return_tokens_as_token_ids")
        opts = {
            "logprobs": logprobs is not None,
            "as_ids": srv.return_tokens_as_token_ids if as_ids is None else bool(as_ids),
            "token_ids": bool(body.get("return_token_ids")),
            "skip_special": bool(body.get("skip_special_tokens", True)),
            "include_stop": bool(body.get("include_stop_str_in_output", False)),
        }
        choices = [_choice(i, p, g, tok, opts) for i, (p, g) in enumerate(zip(prompts, gens))]
        n_prompt, n_out = sum(len(p) for p in prompts), sum(len(g.token_ids) for g in gens)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": srv.model_name,
            "choices": choices,
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
        }

    # ------------------------------------------------------------------ plumbing
    def _authorized(self) -> bool:
        key = self.server.api_key
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self._error(401, "missing or wrong API key (Authorization: Bearer ...)", "authentication_error")
            return False
        return True

    def _read_json(self) -> dict[str, Any]:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError as e:
            raise BadRequest("bad Content-Length") from e
        if n <= 0 or n > MAX_BODY_BYTES:
            raise BadRequest(f"request body must be 1..{MAX_BODY_BYTES} bytes of JSON, got {n}")
        try:
            body = json.loads(self.rfile.read(n))
        except (ValueError, UnicodeDecodeError) as e:
            raise BadRequest(f"request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def _send(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


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
    ap = argparse.ArgumentParser(description="Serve a model over an OpenAI-compatible /v1/completions endpoint.")
    ap.add_argument("--model", default=None, help="alias, local path or HF id (default: the workbench default model)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--allow-remote", action="store_true", help="bind a non-loopback host")
    ap.add_argument("--enable-lora", action="store_true",
                    help="serve vLLM's runtime LoRA API: POST /v1/load_lora_adapter, /v1/unload_lora_adapter")
    ap.add_argument("--max-loras", type=int, default=8, help="adapters loaded at once (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: workbench.threads' choice)")
    args = ap.parse_args(argv)
    from workbench.threads import apply_threads

    apply_threads(args.threads)
    from workbench.models import DEFAULT_MODEL
    from workbench.rollout.backends.hf import HFBackend

    backend = HFBackend.from_pretrained(args.model, device=args.device)
    server, url = serve(backend, args.host, args.port, model_name=args.model or DEFAULT_MODEL,
                        allow_remote=args.allow_remote, api_key=args.api_key, enable_lora=args.enable_lora,
                        max_loras=args.max_loras)
    print(f"serving {args.model or DEFAULT_MODEL} at {url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
