"""OpenAIBackend against the local completions server (real model) and against scripted fake servers.

The fake-server tests need no model: a character-level tokenizer stand-in (one id per byte, id
0 is EOS) and small ``http.server`` handlers that fail on purpose.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workbench.rollout.backends import OpenAIBackend, SamplingParams
from workbench.rollout.backends.base import Backend, Generation, encode_chat
from workbench.rollout.server import serve


class CharTok:
    """One id per character (ord), id 0 is EOS; enough of a tokenizer for the HTTP paths."""

    eos_token_id = 0
    unk_token_id = None

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))

    def convert_tokens_to_ids(self, token):
        return None

    def __len__(self):
        return 256


class EchoBackend(Backend):
    """Continues each prompt with its own ids reversed (then EOS); honours limits and stop strings."""

    name = "echo"

    def __init__(self, delay_s=0.0, fail=False):
        self.tokenizer = CharTok()
        self.delay_s, self.fail = delay_s, fail
        self.calls: list[int] = []

    def generate(self, prompts, params, max_new_tokens=None):
        self.calls.append(len(prompts))
        time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("model exploded")
        limits = max_new_tokens or [params.max_new_tokens] * len(prompts)
        out = []
        for p, lim in zip(prompts, limits):
            ids, reason, stop = [], "eos", None
            for t in list(reversed(p)) + [0]:
                if len(ids) >= lim:
                    reason = "length"
                    break
                ids.append(t)
                text = self.tokenizer.decode(ids)
                stop = next((s for s in params.stop if s in text), None)
                if stop:
                    reason = "stop"
                    break
            out.append(Generation(ids, [-0.5 - 0.25 * k for k in range(len(ids))], reason, stop_string=stop))
        return out


# --------------------------------------------------------------------------- fake servers


class FakeServer:
    """Answers POST /v1/completions with ``handler(request_no, body) -> (status, payload, headers)``.

    ``payload`` is a dict (sent as JSON) or bytes (sent raw); a handler may sleep.
    """

    def __init__(self, handler):
        self.handler, self.bodies, self.inflight, self.max_inflight = handler, [], 0, 0
        self.lock = threading.Lock()
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.bodies.append(body)
                    n = len(fake.bodies)
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                try:
                    status, payload, headers = fake.handler(n, body)
                finally:
                    with fake.lock:
                        fake.inflight -= 1
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"  # no /v1: the backend appends it

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server():
    servers = []

    def make(handler):
        s = FakeServer(handler)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def ok(ids, lps=None, finish="length", stop_reason=None, token_ids_field=False, as_ids=True):
    lps = lps if lps is not None else [-1.0] * len(ids)
    choice = {"index": 0, "text": "".join(chr(i) for i in ids), "finish_reason": finish, "stop_reason": stop_reason,
              "logprobs": {"tokens": [f"token_id:{i}" if as_ids else chr(i) for i in ids], "token_logprobs": lps}}
    if token_ids_field:
        choice["token_ids"] = ids
    return 200, {"choices": [choice]}, None


def client(url, **kw):
    kw.setdefault("backoff_s", 0.01)
    return OpenAIBackend(url, "m", CharTok(), **kw)


P = SamplingParams(max_new_tokens=4, temperature=0.0)


def test_request_body_carries_ids_limits_and_per_prompt_seeds(fake_server):
    srv = fake_server(lambda n, body: ok([104, 105]))
    gens = client(srv.url, concurrency=1).generate([[1, 2], [3]], SamplingParams(max_new_tokens=9, seed=7,
                                                                                  stop=("</s>",)), [5, 9])
    assert [g.token_ids for g in gens] == [[104, 105]] * 2
    b0, b1 = srv.bodies
    assert (b0["prompt"], b0["max_tokens"], b0["seed"]) == ([1, 2], 5, 7)
    assert (b1["prompt"], b1["max_tokens"], b1["seed"]) == ([3], 9, 8)  # seed + i: group members differ
    assert b0["model"] == "m" and b0["stop"] == ["</s>"] and b0["logprobs"] == 1
    assert b0["return_tokens_as_token_ids"] is True and b0["skip_special_tokens"] is False
    assert b0["include_stop_str_in_output"] is True


def test_retries_500_then_succeeds(fake_server):
    srv = fake_server(lambda n, body: ok([65, 66], [-0.1, -0.2]) if n > 2 else (500, {"error": {"message": "busy"}}, None))
    g = client(srv.url, max_retries=3).generate([[1]], P)[0]
    assert g.finish_reason == "length" and g.token_ids == [65, 66] and g.logprobs == [-0.1, -0.2]
    assert g.meta["attempts"] == 3 and len(srv.bodies) == 3


def test_429_is_retried(fake_server):
    srv = fake_server(lambda n, body: ok([65]) if n > 1 else (429, {"error": "slow down"}, {"Retry-After": "0"}))
    g = client(srv.url).generate([[1]], P)[0]
    assert g.token_ids == [65] and g.meta["attempts"] == 2


def test_retry_after_is_waited_for(fake_server):
    srv = fake_server(lambda n, body: ok([65]) if n > 1 else (503, {"error": "busy"}, {"Retry-After": "0.4"}))
    t0 = time.perf_counter()
    g = client(srv.url).generate([[1]], P)[0]  # backoff 0.01 s: the server's 0.4 s is longer
    assert g.token_ids == [65] and g.meta["attempts"] == 2 and time.perf_counter() - t0 >= 0.35


def test_a_local_server_is_reached_past_a_proxy_from_the_environment(fake_server, monkeypatch):
    srv = fake_server(lambda n, body: ok([65]))
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert client(srv.url, max_retries=0).generate([[1]], P)[0].token_ids == [65]


def test_persistent_500_is_recorded_not_raised(fake_server):
    srv = fake_server(lambda n, body: (503, {"error": {"message": "overloaded"}}, None))
    g = client(srv.url, max_retries=2).generate([[1]], P)[0]
    assert g.finish_reason == "error" and "HTTP 503" in g.error and "overloaded" in g.error
    assert "3 attempts" in g.error and len(srv.bodies) == 3


def test_client_error_is_not_retried(fake_server):
    srv = fake_server(lambda n, body: (400, {"error": {"message": "max_tokens too large"}}, None))
    g = client(srv.url, max_retries=3).generate([[1]], P)[0]
    assert g.finish_reason == "error" and "max_tokens too large" in g.error and len(srv.bodies) == 1


def test_timeout_is_retried_then_recorded(fake_server):
    def slow(n, body):
        time.sleep(1.0)
        return ok([65])

    srv = fake_server(slow)
    g = client(srv.url, timeout_s=0.2, max_retries=1).generate([[1]], P)[0]
    assert g.finish_reason == "error" and "timeout" in g.error and g.meta["attempts"] == 2
    assert len(srv.bodies) == 2


def test_garbage_json_is_retried_then_recorded(fake_server):
    srv = fake_server(lambda n, body: (200, b"<html>gateway hiccup", None))
    g = client(srv.url, max_retries=2).generate([[1]], P)[0]
    assert g.finish_reason == "error" and "malformed JSON" in g.error and len(srv.bodies) == 3


@pytest.mark.parametrize(
    "reply, needle",
    [
        ({"choices": []}, "malformed reply"),
        ({"choices": [{"logprobs": {"tokens": ["token_id:1"], "token_logprobs": [-1, -2]}}]}, "1 token ids but 2"),
        ({"choices": [{"logprobs": {"tokens": ["token_id:x"], "token_logprobs": [-1]}}]}, "malformed token ids"),
        ({"choices": [{"finish_reason": "length", "logprobs": {"tokens": ["token_id:1"], "token_logprobs": ["?"]}}]},
         "unexpected reply"),
        ({"choices": ["text"]}, "unexpected reply"),
    ],
)
def test_malformed_replies_become_errors(fake_server, reply, needle):
    srv = fake_server(lambda n, body: (200, reply, None))
    gens = client(srv.url, max_retries=0).generate([[1], [2]], P)
    assert [g.finish_reason for g in gens] == ["error", "error"] and needle in gens[0].error


def test_connection_refused_is_recorded():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    g = client(f"http://127.0.0.1:{port}/v1", max_retries=1).generate([[1]], P)[0]
    assert g.finish_reason == "error" and "connection error" in g.error and g.meta["attempts"] == 2


def test_one_failing_prompt_does_not_stop_the_batch(fake_server):
    srv = fake_server(lambda n, body: (500, {"error": "bad prompt"}, None) if 99 in body["prompt"]
                      else ok([body["prompt"][0] + 60]))
    gens = client(srv.url, max_retries=1, concurrency=3).generate([[5], [99], [7]], P)
    assert [g.finish_reason for g in gens] == ["length", "error", "length"]
    assert gens[0].token_ids == [65] and gens[2].token_ids == [67]  # order kept


def test_requests_run_concurrently_up_to_the_limit(fake_server):
    def slow(n, body):
        time.sleep(0.25)
        return ok([65])

    srv = fake_server(slow)
    gens = client(srv.url, concurrency=4).generate([[i + 1] for i in range(8)], P)
    assert all(g.token_ids == [65] for g in gens)
    assert 2 <= srv.max_inflight <= 4


@pytest.mark.parametrize(
    "reply, expect",
    [
        (ok([65, 66], finish="stop", stop_reason="B"), ("stop", "B")),
        (ok([65, 0], finish="stop"), ("eos", None)),  # EOS id returned, stop_reason null
        (ok([65, 0], finish="length"), ("eos", None)),  # the last sampled id is EOS
        (ok([65, 66], finish="length"), ("length", None)),
        (ok([65, 66], finish="stop", stop_reason=2), ("eos", None)),  # a stop token id
        (ok([65, 66], finish="stop"), ("eos", None)),  # server ended at EOS without returning it
        (ok([65, 66], finish="abort"), ("error", None)),
    ],
)
def test_finish_reason_mapping(fake_server, reply, expect):
    srv = fake_server(lambda n, body: reply)
    g = client(srv.url, max_retries=0).generate([[1]], P)[0]
    assert (g.finish_reason, g.stop_string) == expect


def test_token_ids_field_wins_and_token_strings_fall_back(fake_server):
    srv = fake_server(lambda n, body: ok([72, 73], token_ids_field=True, as_ids=False))
    g = client(srv.url).generate([[1]], P)[0]
    assert g.token_ids == [72, 73] and "exact_ids" not in g.meta
    srv2 = fake_server(lambda n, body: ok([72, 73], as_ids=False))  # token strings only: mapped, flagged
    g2 = client(srv2.url).generate([[1]], P)[0]
    assert g2.token_ids == [72, 73] and g2.meta["exact_ids"] is False


def test_missing_logprobs_give_nan_and_a_flag(fake_server):
    srv = fake_server(lambda n, body: (200, {"choices": [{"text": "hi", "finish_reason": "length"}]}, None))
    g = client(srv.url).generate([[1]], P)[0]
    assert g.token_ids == [104, 105] and all(math.isnan(x) for x in g.logprobs)
    assert g.meta["logprobs"] is False and g.meta["exact_ids"] is False


def test_zero_limit_sends_nothing(fake_server):
    srv = fake_server(lambda n, body: ok([65]))
    g = client(srv.url).generate([[1]], P, [0])[0]
    assert g.finish_reason == "length" and g.token_ids == [] and srv.bodies == []


def test_backend_validates_its_arguments():
    with pytest.raises(ValueError, match="concurrency"):
        OpenAIBackend("http://127.0.0.1:1", "m", CharTok(), concurrency=0)
    assert OpenAIBackend("http://127.0.0.1:1/", "m", CharTok()).base_url == "http://127.0.0.1:1/v1"
    assert OpenAIBackend("http://127.0.0.1:1/v1", "m", CharTok()).base_url == "http://127.0.0.1:1/v1"


# --------------------------------------------------------------------------- the local server (no model)


def post(url, body, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "/completions", data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def echo_server():
    started = []

    def start(backend=None, **kw):
        backend = backend or EchoBackend()
        srv, url = serve(backend, model_name="echo", **kw)
        started.append(srv)
        return srv, url, backend

    yield start
    for s in started:
        s.stop()


def test_server_refuses_non_loopback_hosts():
    with pytest.raises(ValueError, match="allow_remote"):
        serve(EchoBackend(), host="0.0.0.0")


def test_server_completions_shape(echo_server):
    srv, url, _ = echo_server()
    status, r = post(url, {"model": "echo", "prompt": [72, 73], "max_tokens": 8, "logprobs": 1,
                           "return_token_ids": True})
    assert status == 200
    (c,) = r["choices"]
    assert c["token_ids"] == [73, 72, 0] and c["finish_reason"] == "stop" and c["stop_reason"] is None
    assert c["logprobs"]["tokens"] == ["token_id:73", "token_id:72", "token_id:0"]
    assert c["logprobs"]["token_logprobs"] == [-0.5, -0.75, -1.0]
    assert c["text"] == "IH"  # special tokens skipped by default
    assert r["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    with urllib.request.urlopen(url + "/models", timeout=10) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["echo"]


def test_server_text_prompts_batches_and_stop_strings(echo_server):
    srv, url, _ = echo_server()
    status, r = post(url, {"prompt": ["abc", "xyz"], "max_tokens": 2, "stop": "b"})
    assert status == 200 and [c["index"] for c in r["choices"]] == [0, 1]
    a, x = r["choices"]
    assert (a["finish_reason"], a["stop_reason"], a["text"]) == ("stop", "b", "c")  # stop string cut from text
    assert (x["finish_reason"], x["text"]) == ("length", "zy")
    _, r = post(url, {"prompt": "abc", "max_tokens": 5, "stop": ["b"], "include_stop_str_in_output": True})
    assert r["choices"][0]["text"] == "cb"


@pytest.mark.parametrize(
    "body, status, needle",
    [
        (b"{not json", 400, "not valid JSON"),
        ({"prompt": [1, 999]}, 400, "[0, 256)"),
        ({"prompt": []}, 400, "non-empty"),
        ({"prompt": [1], "max_tokens": -1}, 400, "max_tokens"),
        ({"prompt": [1], "temperature": -1}, 400, "temperature"),
        ({"prompt": [1], "n": 2}, 400, "n=1"),
        ({"prompt": [1], "stream": True}, 400, "stream"),
        ({"prompt": [1], "model": "gpt-9"}, 404, "serves 'echo'"),
    ],
)
def test_server_rejects_bad_requests(echo_server, body, status, needle):
    _, url, backend = echo_server()
    got, r = post(url, body)
    assert got == status and needle in r["error"]["message"]
    assert backend.calls == []


def test_server_api_key(echo_server):
    _, url, _ = echo_server(api_key="sekret")
    assert post(url, {"prompt": [65]})[0] == 401
    assert post(url, {"prompt": [65]}, key="sekret")[0] == 200
    g = OpenAIBackend(url, "echo", CharTok(), api_key="sekret").generate([[65]], P)[0]
    assert g.token_ids == [65, 0]


def test_server_backend_failure_is_500_and_recorded_by_the_client(echo_server):
    _, url, backend = echo_server(EchoBackend(fail=True))
    status, r = post(url, {"prompt": [65]})
    assert status == 500 and "model exploded" in r["error"]["message"]
    g = OpenAIBackend(url, "echo", CharTok(), max_retries=1, backoff_s=0.01).generate([[65]], P)[0]
    assert g.finish_reason == "error" and "model exploded" in g.error


def test_server_batches_concurrent_requests(echo_server):
    srv, url, backend = echo_server(EchoBackend(delay_s=0.2))
    prompts = [[65 + i, 97 + i] for i in range(8)]
    gens = OpenAIBackend(url, "echo", CharTok(), concurrency=8).generate(prompts, SamplingParams(max_new_tokens=8))
    assert [g.token_ids for g in gens] == [[p[1], p[0], 0] for p in prompts]
    assert all(g.finish_reason == "eos" for g in gens)
    assert sum(backend.calls) == 8 and len(backend.calls) < 8 and srv.batcher.stats["largest_batch"] >= 2


# --------------------------------------------------------------------------- the real model through the server


@pytest.fixture(scope="module")
def model_server(policy):
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    direct = HFBackend(model, tok, prefix_cache=False)
    srv, url = serve(HFBackend(model, tok, prefix_cache=False), model_name="smollm2-135m")
    yield direct, url
    srv.stop()


@pytest.mark.slow
def test_real_model_round_trip_is_exact(model_server):
    direct, url = model_server
    tok = direct.tokenizer
    remote = OpenAIBackend(url, "smollm2-135m", tok, concurrency=1)
    prompt = encode_chat(tok, "What is 2+2?")
    p = SamplingParams(max_new_tokens=6, temperature=0.0)
    (g,) = remote.generate([prompt], p)
    (ref,) = direct.generate([prompt], p)
    assert len(g.token_ids) == 6 and g.finish_reason == ref.finish_reason
    assert g.token_ids == ref.token_ids and g.logprobs == ref.logprobs  # exact, through JSON
    assert "exact_ids" not in g.meta and g.meta["attempts"] == 1


@pytest.mark.slow
def test_real_model_stop_string_and_concurrency(model_server):
    direct, url = model_server
    tok = direct.tokenizer
    prompts = [encode_chat(tok, q) for q in ("Name a colour.", "What is 2+2?", "Name a colour.")]
    p = SamplingParams(max_new_tokens=6, temperature=0.0, stop=(" is",))
    ref = direct.generate(prompts, p)
    assert ref[0].finish_reason == "stop" and ref[0].stop_string == " is"  # "The colour is ..."
    got = OpenAIBackend(url, "smollm2-135m", tok, concurrency=3).generate(prompts, p)
    for r, g in zip(ref, got):
        assert g.token_ids == r.token_ids and (g.finish_reason, g.stop_string) == (r.finish_reason, r.stop_string)
        assert max(abs(a - b) for a, b in zip(g.logprobs, r.logprobs)) < 1e-3  # batched with padding
    assert tok.decode(got[0].token_ids).endswith(" is")


# --------------------------------------------------------------------------- the engine over HTTP (tokenizer only)


def test_multi_turn_rollout_over_http_matches_the_direct_backend(tokenizer):
    """A scripted policy behind the server: the trajectories' ids equal those of calling it directly."""
    from workbench.core.types import Hit
    from workbench.data.example import Example
    from workbench.methods import get_protocol
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.base import Toolbox

    script = ["<search> Tarnholm Mills founder </search>", "<answer> Ada Quist </answer>"]
    tools = Toolbox({"search": lambda q, k=3: [Hit("p1", "Tarnholm Mills", "It was founded by Ada Quist.", 1.0)]})
    ex = [Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"])]
    proto, cfg = get_protocol("search_r1"), RolloutConfig(group_size=2, temperature=0.0)
    direct = rollout(ex, proto, tools, ScriptedBackend(tokenizer, script, logprob=-0.25), cfg, progress=False)
    srv, url = serve(ScriptedBackend(tokenizer, script, logprob=-0.25), model_name="scripted")
    try:
        remote = rollout(ex, proto, tools, OpenAIBackend(url, "scripted", tokenizer), cfg, progress=False)
    finally:
        srv.stop()
    for d, r in zip(direct, remote):
        assert r.finish_reason == d.finish_reason == "answer" and r.answer == "Ada Quist"
        assert r.token_ids == d.token_ids and r.loss_mask == d.loss_mask
        assert r.response_logprobs == d.response_logprobs and not r.meta.get("errors")
