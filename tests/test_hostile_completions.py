"""Hostile completions requests (loopback only, bounded): sampling fields out of range are a 400 naming the field and
its range, never a 500 from deep in the sampler; JSON nested too deep is a 400; the work of one request (prompts x
max_tokens) is capped; and a short request queued beside long ones is generated before them, not with them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from tests.test_hostile_servers import EchoBackend, complete, completions  # noqa: E402,F401 - `completions` is a fixture
from workbench.rollout.backends.base import Generation, SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def sampling(tiny_model):
    """The completions server over the HF backend of the random-init tiny model: a backend that really samples."""
    from workbench.core.models import load_policy
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.server import serve

    model, tok = load_policy(tiny_model, device="cpu")
    srv, url = serve(HFBackend(model, tok), model_name="echo")  # `complete` names this model
    yield url
    srv.stop()


def _error(r: httpx.Response) -> str:
    return r.json()["error"]["message"]


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("temperature", float("nan"), "temperature must be a number in [0, 100]"),  # was a 500 (NaN probabilities)
    ("temperature", float("inf"), "temperature must be a number in [0, 100]"),  # was accepted: uniform sampling
    ("temperature", -0.5, "temperature must be a number in [0, 100]"),
    ("temperature", 101, "temperature must be a number in [0, 100]"),
    ("temperature", "0.7", "temperature must be a number in [0, 100]"),  # was read as 0.7
    ("temperature", True, "temperature must be a number in [0, 100]"),
    ("top_p", float("nan"), "top_p must be a number in (0, 1]"),
    ("top_p", "0.5", "top_p must be a number in (0, 1]"),
    ("top_p", 0, "top_p must be a number in (0, 1]"),
    ("seed", 2**70, "seed must be an integer in [0, 2**63 - 1]"),  # was a 500 (torch's generator overflowed)
    ("seed", -1, "seed must be an integer in [0, 2**63 - 1]"),
    ("seed", 1.5, "seed must be an integer in [0, 2**63 - 1]"),
])
def test_sampling_fields_out_of_range_are_400(sampling, field, value, needle):
    body = json.dumps({"model": "echo", "prompt": [1, 2, 3], "max_tokens": 2, field: value})  # NaN, Infinity as such
    r = httpx.post(sampling + "/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400 and needle in _error(r), r.text


def test_sampling_fields_at_their_bounds_are_served(sampling):
    greedy = complete(sampling, {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0, "return_token_ids": True})
    assert greedy.status_code == 200
    # a tiny positive temperature is greedy (vLLM's rule), not a division that overflows: was a 500
    tiny = complete(sampling, {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 1e-300, "return_token_ids": True})
    assert tiny.status_code == 200, tiny.text
    assert tiny.json()["choices"][0]["token_ids"] == greedy.json()["choices"][0]["token_ids"]
    for body in ({"temperature": 100, "top_p": 1e-9}, {"temperature": 0.5, "seed": 2**63 - 1}, {"seed": 0}):
        r = complete(sampling, {"prompt": [1, 2, 3], "max_tokens": 2, **body})
        assert r.status_code == 200, (body, r.text)


def test_sampling_params_refuse_what_no_backend_can_sample():
    for t in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
            SamplingParams(temperature=t)
    assert SamplingParams(temperature=1e-300).temperature == 0.0
    assert SamplingParams(temperature=1e-5).temperature == 1e-5


def test_json_nested_too_deep_is_400(completions):  # noqa: F811 - the fixture
    _, url = completions
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"):
        r = httpx.post(url + "/completions", content=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 400 and "nested too deep" in _error(r), r.text
    assert complete(url, {"prompt": [65], "max_tokens": 1}).status_code == 200


def test_the_work_of_one_request_is_capped(completions):  # noqa: F811 - the fixture
    from workbench.rollout.server import MAX_REQUEST_TOKENS

    _, url = completions
    assert MAX_REQUEST_TOKENS == 65536
    r = complete(url, {"prompt": [[65]] * 64, "max_tokens": 1025})  # 65,600: was allowed (1,024 x 2,047 was)
    assert r.status_code == 400, r.text
    msg = _error(r)
    assert "64 prompts x max_tokens 1025 = 65,600 tokens" in msg and "65,536" in msg and "--max-request-tokens" in msg
    assert complete(url, {"prompt": [[65]] * 64, "max_tokens": 1024}).status_code == 200


def test_the_server_flags_are_checked():
    from workbench.rollout.server import serve

    with pytest.raises(ValueError, match="max_request_tokens must be >= 1"):
        serve(EchoBackend(), max_request_tokens=0)
    with pytest.raises(ValueError, match="max_call_tokens must be >= 0"):
        serve(EchoBackend(), max_call_tokens=-1)
    r = subprocess.run([sys.executable, "-m", "workbench.rollout.server", "--max-request-tokens", "0"],
                       capture_output=True, text=True, timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "--max-request-tokens 0" in err[0], r.stderr


class PacedBackend(EchoBackend):
    """The echo backend at the pace of a CPU decoder: a call takes ``per_token_s`` x rows x its longest limit, and
    each call's prompts (their first ids) and seed are recorded."""

    def __init__(self, per_token_s: float = 2e-4):
        super().__init__()
        self.per_token_s = per_token_s
        self.calls: list[tuple[list[int], int | None]] = []
        self.started = threading.Event()

    def generate(self, prompts, params, max_new_tokens=None):
        self.calls.append(([p[0] for p in prompts], params.seed))
        self.started.set()
        time.sleep(self.per_token_s * len(prompts) * max(max_new_tokens or [params.max_new_tokens]))
        return [Generation([p[0], 0], [-0.5, -0.5], "eos") for p in prompts]


def test_a_short_request_queued_beside_long_ones_is_generated_first():
    """Queued behind a running call, a 1-token request and a 32 x 200 one with the same sampling settings were one
    call of 200 decode steps (the short one waited for all of them): now calls go by length class, shortest first."""
    from workbench.rollout.server import serve

    backend = PacedBackend(per_token_s=2e-4)  # 32 prompts x 200 tokens: 1.3 s a call
    srv, url = serve(backend, model_name="echo", max_call_tokens=0)  # length classes alone: requests are not cut
    big = {"prompt": [[100 + i] for i in range(32)], "max_tokens": 200}
    try:
        replies: dict = {}
        first = threading.Thread(target=lambda: replies.update(first=complete(url, big)))
        first.start()
        assert backend.started.wait(10)  # the first long request is being generated: the next two queue
        second = threading.Thread(target=lambda: replies.update(second=complete(url, big)))
        second.start()
        time.sleep(0.1)
        replies["short"] = complete(url, {"prompt": [[65]], "max_tokens": 1})
        order = [ids for ids, _ in backend.calls]
        first.join(30)
        second.join(30)
    finally:
        srv.stop()
    assert all(r.status_code == 200 for r in replies.values()) and len(replies) == 3
    assert [c["text"][0] for c in replies["second"].json()["choices"]] == [chr(100 + i) for i in range(32)]
    # answered before the second long request was generated: after the call that was running, not after two
    assert order == [[100 + i for i in range(32)], [65], [100 + i for i in range(32)]][: len(order)]
    assert [ids for ids, _ in backend.calls] == [[100 + i for i in range(32)], [65], [100 + i for i in range(32)]]


def test_a_short_request_arriving_during_a_long_one_waits_for_one_of_its_calls():
    """A 1-token request that arrived while a 32 x 200 request ran waited for all of it (79.4 s on the real model):
    the long request is now cut into calls of at most max_call_tokens rows x steps (10 rows here), the newcomer goes
    after the call that was running, and the long request's replies come back whole and in order."""
    from workbench.rollout.server import serve

    backend = PacedBackend(per_token_s=2e-4)  # a 10-row call of 200 steps: 0.4 s
    srv, url = serve(backend, model_name="echo", max_call_tokens=2048)
    big = {"prompt": [[100 + i] for i in range(32)], "max_tokens": 200}
    try:
        replies: dict = {}
        first = threading.Thread(target=lambda: replies.update(big=complete(url, big)))
        first.start()
        assert backend.started.wait(10)
        t0 = time.perf_counter()
        replies["short"] = complete(url, {"prompt": [[65]], "max_tokens": 1})
        waited = time.perf_counter() - t0
        first.join(30)
        health = httpx.get(url.removesuffix("/v1") + "/health", timeout=10).json()
    finally:
        srv.stop()
    assert replies["big"].status_code == 200 and replies["short"].status_code == 200
    assert [c["text"][0] for c in replies["big"].json()["choices"]] == [chr(100 + i) for i in range(32)]
    order = [ids for ids, _ in backend.calls]
    rows = [100 + i for i in range(32)]
    assert order == [rows[:10], [65], rows[10:20], rows[20:30], rows[30:]]
    assert waited < 1.0, f"the short request waited {waited:.2f} s: more than the one 0.4 s call it arrived during"
    assert health["split_requests"] == 1 and health["requests"] == 2 and health["preempted"] == 1


def test_a_stream_of_short_requests_cannot_starve_a_long_one():
    """Newcomers go before a cut request's next call only every other call: the oldest waiting call goes after a
    call that jumped ahead of it, so the long request moves on while short ones keep arriving."""
    from workbench.rollout.server import _Batcher

    backend = PacedBackend(per_token_s=5e-4)  # a 4-row call of 100 steps: 0.2 s
    batcher = _Batcher(backend, max_batch=64, window_s=0.0, max_call_tokens=400)
    try:
        p = SamplingParams(max_new_tokens=100)
        long = batcher.enqueue([[100 + i] for i in range(12)], p, [100] * 12)
        assert backend.started.wait(10)
        shorts = []
        while not long.done():  # a short request always waiting
            shorts.append(batcher.enqueue([[65]], SamplingParams(max_new_tokens=1), [1]))
            time.sleep(0.05)
            if len(shorts) > 200:
                break
        assert long.done() and [g.token_ids[0] for g in long.result()] == [100 + i for i in range(12)]
        for f in shorts:
            f.result(timeout=10)
    finally:
        batcher.close()
    starts = [i for i, (ids, _) in enumerate(backend.calls) if ids[0] >= 100]
    assert len(starts) == 3 and all(b - a <= 2 for a, b in zip(starts, starts[1:])), [ids for ids, _ in backend.calls]


def test_a_seeded_request_cut_into_calls_draws_new_samples_in_each():
    """A call samples from one generator: the calls a seeded request is cut into get seeds derived from it and their
    first row, so a group of equal prompts does not repeat the first call's samples, and the request replays."""
    from workbench.rollout.server import serve

    backend = PacedBackend(per_token_s=0)
    srv, url = serve(backend, model_name="echo", max_call_tokens=8 * 4)
    try:
        body = {"prompt": [[70]] * 16, "max_tokens": 4, "temperature": 1.0, "seed": 7}
        assert complete(url, body).status_code == 200 and complete(url, body).status_code == 200
    finally:
        srv.stop()
    seeds = [seed for _, seed in backend.calls]
    assert len(seeds) == 4 and seeds[0] == 7 and seeds[1] != 7 and seeds[:2] == seeds[2:], seeds


def test_small_requests_that_arrive_together_still_share_a_call():
    from workbench.rollout.server import serve

    backend = PacedBackend(per_token_s=0)
    srv, url = serve(backend, model_name="echo", batch_window_s=0.2)
    try:
        replies: list = []
        threads = [threading.Thread(target=lambda i=i: replies.append(complete(url, {"prompt": [[70 + i]],
                                                                                       "max_tokens": 4})))
                   for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
    finally:
        srv.stop()
    assert sorted(json.loads(r.text)["choices"][0]["text"][0] for r in replies) == [chr(70 + i) for i in range(8)]
    assert len(backend.calls) < 8  # small requests that arrive together are still batched
