"""The completions server's HTTP layer (FastAPI + uvicorn, ``workbench.util.http_stack``) over real loopback HTTP:
body limits, error shapes, routing, the key check, IPv6, batching past the threadpool, a free event loop
while the backend works, shutdown and the CLI. Behaviour of the completions themselves:
``tests/test_backends_http.py``."""

from __future__ import annotations

import http.client
import json
import math
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from workbench.rollout import server as server_mod
from workbench.rollout.backends import OpenAIBackend, SamplingParams
from workbench.rollout.backends.base import Backend, Generation
from workbench.rollout.server import serve


class ByteTok:
    """One id per byte value, id 0 is EOS."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))

    def __len__(self):
        return 256


class CountingBackend(Backend):
    """Answers each prompt with its first id then EOS; records each ``generate`` call's batch size.

    With ``gate`` set, ``generate`` waits until the test opens it (``started`` is set on entry).
    """

    name = "count"

    def __init__(self, gate: threading.Event | None = None, logprob: float = -0.5):
        self.tokenizer = ByteTok()
        self.gate, self.logprob = gate, logprob
        self.started = threading.Event()
        self.calls: list[int] = []

    def generate(self, prompts, params, max_new_tokens=None):
        self.calls.append(len(prompts))
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        return [Generation([p[0], 0], [self.logprob, self.logprob], "eos") for p in prompts]


@pytest.fixture
def start():
    servers = []

    def go(backend=None, **kw):
        backend = backend or CountingBackend()
        srv, url = serve(backend, model_name="count", **kw)
        servers.append(srv)
        return srv, url, backend

    yield go
    for s in servers:
        s.stop()


def request(url: str, path: str, body: bytes | dict | None = None, method: str | None = None,
            headers: dict | None = None) -> tuple[int, bytes, str]:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})},
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def openai_error(raw: bytes, status: int) -> str:
    """The message of an OpenAI-style error body (and check its shape)."""
    err = json.loads(raw)["error"]
    assert err["code"] == status and isinstance(err["type"], str)
    return err["message"]


def test_body_over_the_limit_is_413_declared_or_chunked(start, monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_BODY_BYTES", 64)
    _, url, backend = start()
    status, raw, _ = request(url, "/completions", {"prompt": [65] * 40})
    assert status == 413 and "over 64" in openai_error(raw, 413)
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    # no Content-Length: a chunked body, sent in one write (the server answers 413 and closes as soon as the body
    # passes the limit; a client still writing its last chunks then would only see a broken pipe)
    chunks = [b'{"prompt": [', b"65, " * 30, b"65]}"]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + body)
        r = http.client.HTTPResponse(sock)
        r.begin()
        assert r.status == 413 and "more than 64" in openai_error(r.read(), 413)
    assert request(url, "/completions", {"prompt": [65]})[0] == 200  # a small body still goes through
    assert backend.calls == [1]


def test_non_utf8_empty_and_non_object_bodies_are_400(start):
    _, url, backend = start()
    status, raw, _ = request(url, "/completions", b'{"prompt": "\xff\xfe"}')
    assert status == 400 and "not UTF-8" in openai_error(raw, 400)
    status, raw, _ = request(url, "/completions", b"", method="POST")
    assert status == 400 and "got 0" in openai_error(raw, 400)
    status, raw, _ = request(url, "/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in openai_error(raw, 400)
    assert backend.calls == []


def test_routes_trailing_slashes_and_unknown_paths(start):
    _, url, _ = start()
    base = url.removesuffix("/v1")
    status, raw, ctype = request(base, "/models/")
    assert status == 200 and ctype.startswith("application/json") and json.loads(raw)["data"][0]["id"] == "count"
    assert request(url, "/completions/", {"prompt": [66]})[0] == 200
    status, raw, _ = request(base, "/health")
    assert status == 200 and json.loads(raw)["requests"] == 1
    status, raw, _ = request(url, "/embeddings", {"input": "x"})
    assert status == 404 and "no route POST /v1/embeddings" in openai_error(raw, 404)
    status, raw, _ = request(url, "/completions")  # GET on a POST route: 404 like any unknown route
    assert status == 404 and "no route GET" in openai_error(raw, 404)
    assert request(base, "/docs")[0] == 404  # no FastAPI docs pages


@pytest.fixture(scope="module")
def tiny_backend(tiny_model):
    """The HF backend over the random-init model of the default architecture: its real tokenizer and chat
    template, a forward pass of a fraction of the real model's cost."""
    from workbench.core.models import load_policy
    from workbench.rollout.backends.hf import HFBackend

    model, tok = load_policy(tiny_model, device="cpu")
    return HFBackend(model, tok)


CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Where is Vravmouth?"},
        {"role": "assistant", "content": "<search>Vravmouth</search>"},
        {"role": "user", "content": [{"type": "text", "text": "<information>a port</information>"}]}]


def test_chat_messages_are_the_chat_template_prompt_and_answer_as_its_completion(start, tiny_backend):
    from workbench.rollout.backends.base import encode_chat

    _, url, _ = start(tiny_backend)
    body = {"messages": CHAT, "max_completion_tokens": 6, "temperature": 0, "logprobs": True,
            "return_token_ids": True}
    status, raw, _ = request(url, "/chat/completions", body)
    assert status == 200, raw
    reply = json.loads(raw)
    (choice,) = reply["choices"]
    flat = [{**m, "content": m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]} for m in CHAT]
    ids = encode_chat(tiny_backend.tokenizer, flat)
    assert reply["object"] == "chat.completion" and choice["prompt_token_ids"] == ids
    assert reply["usage"]["prompt_tokens"] == len(ids) and 1 <= reply["usage"]["completion_tokens"] <= 6
    # the same prompt ids as a completion, greedy: the same tokens, the same text
    status, raw, _ = request(url, "/completions", {"prompt": ids, "max_tokens": 6, "temperature": 0, "logprobs": 0,
                                                  "return_token_ids": True})
    plain = json.loads(raw)["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": plain["text"]}
    assert choice["token_ids"] == plain["token_ids"] and choice["finish_reason"] == plain["finish_reason"]
    lps = [c["logprob"] for c in choice["logprobs"]["content"]]
    assert lps == pytest.approx(plain["logprobs"]["token_logprobs"]) and len(lps) == len(choice["token_ids"])
    # without logprobs asked, none come back; a null assistant content is an empty turn
    body = {"messages": [*CHAT[:2], {"role": "assistant", "content": None}, CHAT[1]], "max_tokens": 2}
    status, raw, _ = request(url.removesuffix("/v1"), "/chat/completions", body)  # the route without /v1 too
    assert status == 200 and json.loads(raw)["choices"][0]["logprobs"] is None


@pytest.mark.parametrize(("body", "says"), [
    ({"messages": CHAT, "tools": [{"type": "function", "function": {"name": "search"}}]}, "tools is not supported"),
    ({"messages": CHAT, "response_format": {"type": "json_object"}}, "response_format is not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content: only text parts"),
    ({"messages": [{"role": "tool", "content": "hit", "tool_call_id": "1"}]}, "messages[0].role must be one of"),
    ({"messages": [CHAT[1], {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]},
     "messages[1] carries tool_calls"),
    ({"messages": [CHAT[1], "hello"]}, "messages[1] must be an object"),
    ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content must be a string"),
    ({"messages": []}, "messages must be a non-empty list"),
    ({"messages": CHAT, "prompt": "x"}, "carries messages, not prompt"),
    ({"messages": CHAT, "logprobs": 3}, "logprobs must be true or false"),
    ({"messages": CHAT, "top_logprobs": 5}, "top_logprobs 5 is not supported"),
    ({"messages": CHAT, "max_tokens": 4, "max_completion_tokens": 5}, "max_tokens and max_completion_tokens differ"),
    ({"messages": CHAT, "stream": True}, "stream=true is not supported"),
])
def test_chat_requests_the_server_cannot_serve_are_400_naming_the_field(start, body, says):
    _, url, backend = start()
    status, raw, _ = request(url, "/chat/completions", body)
    assert status == 400 and says in openai_error(raw, 400)
    assert backend.calls == []


def test_api_key_is_checked_before_routing(start):
    _, url, _ = start(api_key="sekret")
    for path, body in (("/completions", {"prompt": [65]}), ("/nowhere", None), ("/models", None)):
        status, raw, _ = request(url, path, body)
        assert status == 401 and "API key" in openai_error(raw, 401)
    assert request(url, "/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert request(url, "/models", headers={"Authorization": "Bearer sekret"})[0] == 200
    assert request(url, "/models", headers={"Authorization": "bearer sekret"})[0] == 200  # the scheme's case is free
    assert request(url, "/models/", headers={"Authorization": "Bearer sekret"})[0] == 200  # a trailing slash too
    assert json.loads(request(url, "/models")[1])["error"]["type"] == "authentication_error"


def test_many_concurrent_requests_are_one_batch_beyond_the_threadpool(start):
    """48 requests in flight (more than the 40 threads of Starlette's threadpool) make one generate call."""
    n = 48
    srv, url, backend = start(max_batch=n, batch_window_s=20.0)  # the batch fires when all n are queued
    results: list[int] = []
    threads = [threading.Thread(target=lambda i=i: results.append(request(url, "/completions", {"prompt": [i + 1]})[0]))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [200] * n and backend.calls == [n]
    assert srv.batcher.stats == {"requests": n, "batches": 1, "largest_batch": n, "split_requests": 0, "preempted": 0}


def test_eight_clients_through_openai_backend_are_one_batch(start):
    srv, url, backend = start(max_batch=8, batch_window_s=20.0)
    gens = OpenAIBackend(url, "count", ByteTok(), concurrency=8).generate([[i + 1] for i in range(8)],
                                                                           SamplingParams(max_new_tokens=4))
    assert [g.token_ids for g in gens] == [[i + 1, 0] for i in range(8)] and backend.calls == [8]


def test_the_event_loop_answers_while_the_backend_generates(start):
    gate = threading.Event()
    _, url, backend = start(CountingBackend(gate), batch_window_s=0.0)
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(request(url, "/completions", {"prompt": [65]})[0]))
    t.start()
    try:
        assert backend.started.wait(30)
        status, raw, _ = request(url.removesuffix("/v1"), "/health")  # answered while generate() is blocked
        assert status == 200 and json.loads(raw)["batches"] == 1 and t.is_alive() and out == []
    finally:
        gate.set()
    t.join(30)
    assert out == [200]


def test_nan_logprobs_reach_the_client(start):
    _, url, _ = start(CountingBackend(logprob=math.nan))
    status, raw, _ = request(url, "/completions", {"prompt": [65], "logprobs": 1})
    assert status == 200 and all(math.isnan(x) for x in json.loads(raw)["choices"][0]["logprobs"]["token_logprobs"])


def test_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    srv, url = serve(CountingBackend(), host="::1", model_name="count")
    try:
        assert url.startswith("http://[::1]:") and url.endswith("/v1")
        assert request(url, "/completions", {"prompt": [70]})[0] == 200
    finally:
        srv.stop()


def test_port_in_use_raises_and_stop_is_idempotent():
    srv, url = serve(CountingBackend(), model_name="count")
    port = srv.server_address[1]
    with pytest.raises(OSError):
        serve(CountingBackend(), port=port)
    with srv:
        assert request(url, "/models")[0] == 200
    srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/models", timeout=5)


def test_cli_help_and_bad_host():
    r = subprocess.run([sys.executable, "-m", "workbench.rollout.server", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "--enable-lora" in r.stdout and "--api-key" in r.stdout
    r = subprocess.run([sys.executable, "-m", "workbench.rollout.server", "--host", "0.0.0.0"], capture_output=True,
                       text=True, timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "--allow-remote" in err[0]
