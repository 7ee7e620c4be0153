"""Tools backed by ``workbench serve-retrieval`` (``workbench/tools/remote.py``), over real HTTP on loopback:
the same hits, triples, plan records and whole trajectories as the in-process tools on the same corpus, and
every way the server can fail recorded as a failed tool call (never raised)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from workbench.core.trajectory import OBSERVATION  # noqa: E402
from workbench.core.types import Passage  # noqa: E402
from workbench.integrations.retrieval_server import RetrievalService, ServerThread, create_app  # noqa: E402
from workbench.methods import get_protocol  # noqa: E402
from workbench.rollout.backends.scripted import ScriptedBackend  # noqa: E402
from workbench.rollout.engine import RolloutConfig, rollout  # noqa: E402
from workbench.tools.base import Toolbox  # noqa: E402
from workbench.tools.remote import RemoteRetrieval, base_url, remote_toolbox  # noqa: E402
from workbench.tools.toolbox import build_toolbox  # noqa: E402


@pytest.fixture(scope="module")
def served(world):
    app = create_app(RetrievalService.from_passages(world.passages, world=world))
    with ServerThread(app) as s:
        yield s, app


def questions(world, n=20):
    return [e for e in world.split("train")[:n]]


def test_remote_search_returns_the_in_process_hits(world, served):
    s, app = served
    local = build_toolbox(get_protocol("search_r1"), world).tools["search"]
    client = RemoteRetrieval(s.url + "/retrieve")  # Search-R1 configs give the endpoint: accepted
    queries = [e.question for e in questions(world)] + [e.decomposition[0] for e in questions(world) if e.decomposition]
    before = app.state.queue.batches
    remote = client.search_batch(queries, k=5)
    assert app.state.queue.batches == before + 1  # one request, one bm25s call for the whole batch
    expected = local.search_batch(queries, k=5)
    assert remote == expected  # ids, titles, texts, scores and sources, field for field
    assert {h.source for row in remote for h in row} > {"wiki"}  # the world's news / academic sources survive
    assert client.search_batch([], k=3) == [] and client.search_batch(["x"], k=0) == [[]]


def test_remote_kg_returns_the_in_process_triples(world, served):
    s, _ = served
    local = build_toolbox(get_protocol("dynasearcher"), world).tools["kg"]
    client = RemoteRetrieval(s.url)
    for ex in questions(world, 6):
        step = ex.kg_path[0]
        args = {"entities": [step["head"]], "relations": [step["relation"]], "query": ex.question}
        got = client.kg(**args)
        assert got == local(**args) and got
    assert client.kg(entity=ex.kg_path[0]["head"]) == local(entity=ex.kg_path[0]["head"])  # DynaSearcher's keys


def scripts(ex) -> dict[str, list[str]]:
    step = ex.kg_path[0]
    request = json.dumps({"query": ex.question, "entity": [step["head"]], "relation": [step["relation"]]})
    return {
        "search_r1": [f"<search> {ex.decomposition[0]} </search>", f"<search> {ex.question} </search>",
                      "<answer> yes </answer>"],
        "dynasearcher": [f"<think> t </think>\n<search> {request} </search>",
                         "<think> t </think>\n<answer> \\boxed{yes} </answer>"],
        "rsearch_dag": [f"<search>\nNodes:\nA: {ex.decomposition[0]} (General)\nB: {ex.question} (News)\nEdges: A -> B\n"
                        "</search>", "<answer> yes </answer>"],
    }


@pytest.mark.parametrize("name", ["search_r1", "dynasearcher", "rsearch_dag"])
def test_a_trajectory_through_the_server_equals_the_in_process_one(tokenizer, world, served, name):
    s, _ = served
    proto = get_protocol(name)
    exs = questions(world, 3)
    local_tb, remote_tb = build_toolbox(proto, world), remote_toolbox(proto, s.url)
    assert local_tb.names() == remote_tb.names()
    for ex in exs:
        script = scripts(ex)[name]
        local, remote = (rollout([ex], proto, tb, ScriptedBackend(tokenizer, script), RolloutConfig(max_turns=4),
                                 progress=False)[0] for tb in (local_tb, remote_tb))
        assert remote.token_ids == local.token_ids and remote.loss_mask == local.loss_mask
        assert [t.text for t in remote.turns] == [t.text for t in local.turns]
        calls_l = [c for t in local.turns for c in t.tool_calls]
        calls_r = [c for t in remote.turns for c in t.tool_calls]
        assert calls_r and all(c.ok for c in calls_r), [c.error for c in calls_r]
        assert [(c.name, c.results) for c in calls_r] == [(c.name, c.results) for c in calls_l]
        ids = [h["id"] for c in calls_r for h in c.results if "id" in h]
        assert ids or name == "rsearch_dag"  # passage ids travel, so recall-by-id features work
        if name == "rsearch_dag":
            assert any(c.name != "plan" and c.results for c in calls_r)  # the plan's nodes retrieved passages


# --------------------------------------------------------------------------- failures


class Failing:
    def search_batch(self, queries, k):
        raise RuntimeError("index shard missing")

    def __call__(self, query, k=3):
        raise RuntimeError("index shard missing")


def not_json_app():
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve() -> PlainTextResponse:
        return PlainTextResponse("<html>proxy login</html>")

    return app


def wrong_shape_app():
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve() -> dict:
        return {"result": [[{"document": {"contents": "no id"}, "score": 1.0}]]}

    return app


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("case, words", [
    ("down", "unreachable"),
    ("500", "HTTP 500: search failed: RuntimeError: index shard missing"),
    ("not json", "not {\"result\": [...]} JSON"),
    ("wrong shape", "is not {document: {id, contents}, score}"),
    ("404 kg", "HTTP 404: no knowledge graph is loaded"),
])
def test_server_failures_are_recorded_tool_failures(tokenizer, case, words):
    if case == "down":
        app = None
    elif case == "500":
        app = create_app(RetrievalService(Failing(), 1))
    elif case == "not json":
        app = not_json_app()
    elif case == "wrong shape":
        app = wrong_shape_app()
    else:
        app = create_app(RetrievalService.from_passages([Passage("p1", "T", "text")], kg=False))

    def check(url):
        tool = "kg" if case == "404 kg" else "search"
        tb = remote_toolbox(get_protocol("dynasearcher"), url, timeout_s=5)
        call = tb.call(tool, **({"entities": ["T"]} if tool == "kg" else {"query": "q", "k": 3}))
        assert not call.ok and "RemoteToolError" in call.error and words in call.error and url in call.error, call.error
        if tool == "search":  # in a rollout: a failed_tool, the message in the observation, no exception
            from workbench.rewards.features import compute_features

            ex = Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"])
            traj = rollout([ex], get_protocol("search_r1"), tb, ScriptedBackend(tokenizer, ["<search> q </search>",
                           "<answer> x </answer>"]), progress=False)[0]
            assert words in traj.turns[1].text and traj.finish_reason == "answer"
            assert compute_features([traj], [ex], encoder=False, cache=False).iloc[0]["failed_tool"] == 1

    from workbench.data.example import Example

    if app is None:
        check(f"http://127.0.0.1:{free_port()}")
    else:
        with ServerThread(app) as s:
            check(s.url)


def test_timeouts_are_recorded():
    import time

    class Slow:
        def __call__(self, query, k=3):
            time.sleep(1.5)
            return []

    with ServerThread(create_app(RetrievalService(Slow(), 1))) as s:
        call = Toolbox({"search": remote_toolbox(get_protocol("search_r1"), s.url, timeout_s=0.3).tools["search"]}).call(
            "search", query="q", k=3)
    assert not call.ok and "timed out after 0.3s" in call.error


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://x", ""])
def test_bad_urls_name_the_fix(url):
    with pytest.raises(ValueError, match="serve-retrieval"):
        base_url(url)


def test_a_tool_the_server_lacks_is_refused():
    from workbench.tools.remote import remote_tools

    with pytest.raises(ValueError, match="no 'calculator' tool"):
        remote_tools(RemoteRetrieval("http://127.0.0.1:1"), ["search", "calculator"])


def test_export_writes_the_retrieval_url_into_the_agent_loop_config(tmp_path, capsys):
    import yaml

    from workbench.apps.cli import main
    from workbench.integrations.verl.export import export_verl

    paths = export_verl("search_r1", "world", tmp_path / "a", limit=2, retrieval_url="http://127.0.0.1:8000/retrieve")
    entry = yaml.safe_load(paths["agent_loop"].read_text())[0]
    assert entry["retrieval_url"] == "http://127.0.0.1:8000" and entry["method"] == "search_r1"
    tools = yaml.safe_load(paths["tools"].read_text())
    assert tools["tools"][0]["config"]["retrieval_service_url"] == "http://127.0.0.1:8000/retrieve"
    plain = export_verl("search_r1", "world", tmp_path / "b", limit=2)
    assert "retrieval_url" not in yaml.safe_load(plain["agent_loop"].read_text())[0]
    code = main(["export", "verl", "--method", "search_r1", "--limit", "2", "--retrieval-url", "127.0.0.1:8000",
                 "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and "--retrieval-url" not in err and "127.0.0.1:8000" in err and "serve-retrieval" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "c").exists()


def test_eval_with_retrieval_url_rolls_out_through_the_server(tmp_path, tokenizer, world, served):
    """`workbench eval --retrieval-url`: the same trajectories and scores as the index built in process."""
    from workbench.eval.runner import run_eval

    s, app = served

    def script(text, turn):  # search the question's first hop, then answer with the first hit's title
        if turn == 0:
            return f"<search> {text.rsplit('Question:', 1)[-1].split(chr(10))[0][:80]} </search>"
        return f"<answer> {text.split('(Title: ', 1)[-1].split(')', 1)[0] if '(Title: ' in text else 'x'} </answer>"

    runs = {}
    before = app.state.queue.queries
    for label, extra in (("local", {}), ("served", {"retrieval_url": s.url + "/retrieve"})):
        runs[label] = run_eval("search_r1", "world", ScriptedBackend(tokenizer, script), out=tmp_path / label,
                               limit=5, split="dev", progress=False, log=None, **extra)
    assert app.state.queue.queries - before == 5  # one search per question, all through the server
    local, remote = ([[u.text for u in t.turns if u.kind == OBSERVATION] for t in runs[k].trajectories()]
                     for k in ("local", "served"))
    assert local == remote and all(len(o) == 1 and "Title" in o[0] for o in remote)
    scores = [runs[k].metrics()["methods"]["search_r1"] for k in ("local", "served")]
    assert all(scores[0][m] == scores[1][m] for m in ("em", "f1", "cem", "n_searches"))
    server = runs["served"].config["retrieval_server"]
    assert server["url"] == s.url and server["passages"] == len(world.passages)


def test_eval_with_a_bad_retrieval_url_is_one_clear_error_before_the_model_loads(capsys, tmp_path):
    from workbench.apps.cli import main

    for argv, expected in (
        (["--retrieval-url", "http://127.0.0.1:9"], "serve-retrieval"),  # nothing listens on port 9
        (["--retrieval-url", "127.0.0.1:8000"], "not http(s)://host:port"),
        (["--retrieval-url", "http://127.0.0.1:9", "--corpus", "per-question"], "per-question"),
    ):
        code = main(["eval", "--method", "search_r1", "--limit", "2", "--model", "no-such-model",
                     "--out", str(tmp_path), *argv])
        err = capsys.readouterr().err
        assert code != 0 and expected in err and "Traceback" not in err, (argv, err)
    assert not list(tmp_path.iterdir())  # nothing written


def test_eval_with_retrieval_url_refuses_a_tool_the_server_lacks(tmp_path, tokenizer):
    from workbench.eval.runner import run_eval

    plain = create_app(RetrievalService.from_passages([Passage(id="p0", title="A", text="a b c")]))
    with ServerThread(plain) as s:
        with pytest.raises(ValueError, match="'kg' tool.*has none"):
            run_eval("dynasearcher", "world", ScriptedBackend(tokenizer, ["<answer> x </answer>"]),
                     out=tmp_path, limit=1, split="dev", progress=False, log=None, retrieval_url=s.url)


def test_verls_agent_loop_sends_the_api_key():
    """``WorkbenchAgentLoop``'s ``retrieval_api_key`` (or ``$WORKBENCH_RETRIEVAL_API_KEY`` in the worker) reaches a
    keyed ``serve-retrieval``; without it the searches are failed tool calls naming the key."""
    from tests.verl_env import STAMP, VERL_PYTHON, run_in_verl

    if not (VERL_PYTHON.exists() and STAMP.exists()):
        pytest.skip("needs verl's own environment .venv-verl (build it with `make verl-env`)")
    code = """
import json, os
from workbench.integrations.retrieval_server import RetrievalService, ServerThread, create_app
from workbench.integrations.verl.agent_loop import _protocol_and_toolbox
from workbench.core.types import Passage
app = create_app(RetrievalService.from_passages([Passage("p1", "Ulm", "The Ulm river.")], kg=False, plan=False),
                 api_key="verl-key")
out = {}
with ServerThread(app) as s:
    for case, key in (("config", "verl-key"), ("none", None)):
        _, tb = _protocol_and_toolbox("search_r1", None, "world", "bm25", s.url, key)
        call = tb.call("search", query="Ulm", k=1)
        out[case] = [call.ok, call.error]
    os.environ["WORKBENCH_RETRIEVAL_API_KEY"] = "verl-key"
    _protocol_and_toolbox.cache_clear()
    _, tb = _protocol_and_toolbox("search_r1", None, "world", "bm25", s.url, None)
    out["env"] = [tb.call("search", query="Ulm", k=1).ok, None]
print(json.dumps(out))
"""
    proc = run_in_verl(["-c", code], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["config"][0] and out["env"][0]
    assert not out["none"][0] and "401" in out["none"][1] and "WORKBENCH_RETRIEVAL_API_KEY" in out["none"][1]
