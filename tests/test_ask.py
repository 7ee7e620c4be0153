"""``workbench ask``: one question, its turns streamed as they happen, saved as a one-trajectory run.

Scripted model turns check the streaming (each policy turn is handed over before its tool runs), the steps shown,
the run written and opened by the inspector, and the three places a question can search (the world, a corpus file, a
retrieval server); the command line runs the real default model with the shipped adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workbench.apps import cli
from workbench.core.trajectory import POLICY
from workbench.core.types import Hit, Passage
from workbench.data.example import Example
from workbench.eval.adapters import TRAINED_ADAPTER
from workbench.eval.ask import Asker, Step, _config, format_step, turn_steps
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox

QUESTION = "Who founded Treimveex Textiles?"
SCRIPT = ["<think>I should look it up.</think>\n<search> Treimveex Textiles founder </search>",
          "<answer> Firnith Stullith Truxach </answer>"]


def test_the_engine_hands_over_each_turn_before_its_tool_runs(tokenizer):
    from workbench.methods import get_protocol

    seen: list[tuple[str, str]] = []

    def search(query: str, k: int = 3):
        seen.append(("tool", query))
        return [Hit("p1", "Treimveex Textiles", "Treimveex Textiles was founded by Firnith Stullith Truxach.", 2.0)]

    trajs = rollout([Example("q1", QUESTION, ["Firnith Stullith Truxach"])], get_protocol("search_r1"),
                    Toolbox({"search": search}), ScriptedBackend(tokenizer, SCRIPT), RolloutConfig(max_turns=3),
                    progress=False, on_turn=lambda traj, turn: seen.append((turn.kind, traj.id)))
    assert [k for k, _ in seen] == ["policy", "tool", "observation", "policy"]
    assert len(trajs[0].turns) == 3 and trajs[0].answer == "Firnith Stullith Truxach"


def test_steps_of_a_turn():
    from workbench.core.trajectory import OBSERVATION, Turn
    from workbench.core.types import ToolCall

    policy = Turn(POLICY, SCRIPT[0], [1], [0.0], "stop", {"kind": "search", "payload": "Treimveex founder"})
    assert [(s.kind, s.text) for s in turn_steps(policy)] == [("thought", "I should look it up."),
                                                              ("search", "Treimveex founder")]
    call = ToolCall("search", {"query": "x"}, [Hit("p1", "T", "text", 1.5).to_dict()], latency_s=0.002)
    (found,) = turn_steps(Turn(OBSERVATION, "<information>...</information>", [2], tool_calls=[call]))
    assert found.kind == "passages" and found.text == "1 passage(s)" and found.hits[0].title == "T"
    failed = ToolCall("search", {"query": "x"}, error="timed out")
    assert turn_steps(Turn(OBSERVATION, "x", [2], tool_calls=[failed]))[0].kind == "error"
    bad = Turn(POLICY, "hmm", [1], [0.0], "eos", {"kind": "invalid", "reason": "no tag"})
    assert [(s.kind, s.text) for s in turn_steps(bad)] == [("invalid", "no tag")]
    assert "1. T [1.500] text" in format_step(found) and "found" in format_step(found)


def test_ask_streams_and_writes_a_run_the_inspector_opens(tokenizer, tmp_path):
    from widgets.inspector import trajectory_inspector

    steps: list[Step] = []
    done = Asker(ScriptedBackend(tokenizer, SCRIPT)).ask(QUESTION, "search_r1", answers=["Firnith Stullith Truxach"],
                                                          on_step=steps.append, out=tmp_path)
    assert [s.kind for s in steps] == ["thought", "search", "passages", "answer"]
    assert steps[2].hits and steps[2].hits[0].title == "Treimveex Textiles"  # BM25 over the world's passages
    run = done.run
    assert run.complete and run.config["kind"] == "ask"
    assert run.config["question"] == QUESTION and run.config["method"] == "search_r1"
    (traj,) = run.trajectories()
    assert traj.answer == "Firnith Stullith Truxach" and traj.question == QUESTION
    assert run.metrics()["methods"]["search_r1"]["cem"] == 1.0  # a gold answer was given: scored
    ins = trajectory_inspector(str(run.path)).inspector
    assert len(ins.trajectories) == 1


def test_the_model_load_is_said_before_it_starts(tokenizer, tmp_path, monkeypatch):
    """The first question loads the model (about a minute on a CPU): a line saying so reaches the caller (the Ask
    tab's status, the CLI) before the load begins, not only once it is over; the second question loads nothing."""
    from workbench.eval import runner

    heard: list[str] = []
    said_before_load: list[bool] = []

    def load_backend(cfg):
        said_before_load.append(any(m.startswith("[model] loading") for m in heard))
        return ScriptedBackend(tokenizer, SCRIPT * 2), None, "scripted model"

    monkeypatch.setattr(runner, "load_backend", load_backend)
    asker = Asker()
    asker.ask(QUESTION, "search_r1", out=tmp_path, log=heard.append)
    assert said_before_load == [True]
    loading = [m for m in heard if m.startswith("[model] loading")]
    assert len(loading) == 1 and "once" in loading[0] and "minute" in loading[0]
    heard.clear()
    asker.ask(QUESTION, "search_r1", out=tmp_path, log=heard.append)
    assert said_before_load == [True] and not any(m.startswith("[model]") for m in heard)


def test_ask_searches_a_corpus_file_or_a_retrieval_server(tokenizer, tmp_path):
    from workbench.integrations.retrieval_server import RetrievalService, create_app
    from workbench.util.http_stack import ServerThread

    passages = [Passage("a", "Treimveex Textiles", "Treimveex Textiles was founded by Ada Quist in 1915."),
                Passage("b", "Ulmbridge", "Ulmbridge is a town in Ostrevia.")]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "contents": f'"{p.title}"\n{p.text}'}) + "\n" for p in passages))
    asker = Asker(ScriptedBackend(tokenizer, lambda prompt, turn: SCRIPT[min(turn, 1)]))
    found = []
    for where in ({"corpus": str(corpus)}, "server"):
        steps: list[Step] = []
        if where == "server":
            with ServerThread(create_app(RetrievalService.from_passages(passages))) as s:
                done = asker.ask(QUESTION, "search_r1", on_step=steps.append, out=tmp_path, retrieval_url=s.url)
        else:
            done = asker.ask(QUESTION, "search_r1", on_step=steps.append, out=tmp_path, **where)
        found.append([(h.id, h.title) for s in steps for h in s.hits])
        assert done.run.config["corpus"] == (str(corpus) if where != "server" else "world")
    assert found[0] == found[1] and found[0][0] == ("a", "Treimveex Textiles")


def test_the_default_is_the_trained_agent_and_bad_questions_are_refused(tokenizer, tmp_path, capsys):
    if (TRAINED_ADAPTER / "adapter_model.safetensors").exists():
        cfg, _ = _config(QUESTION, "search_r1+lora", {})
        assert cfg.adapter == str(TRAINED_ADAPTER) and cfg.entries[0].trained
        assert cfg.protocol_kwargs == {"observation_mode": "chat"}  # the layout it was trained on
    assert _config(QUESTION, "search_r1", {"protocol_kwargs": {}})[0].protocol_kwargs == {}  # given: kept
    asker = Asker(ScriptedBackend(tokenizer, SCRIPT))
    for method, options, says in (("search_r1", {}, "the question is empty"), ("search_r1,direct", {}, "one method"),
                                  ("search_r1", {"corpus": "per-question"}, "no paragraphs of its own"),
                                  ("search-r1", {}, "unknown method")):
        with pytest.raises(ValueError, match=says):
            asker.ask("" if says.startswith("the question") else QUESTION, method, out=tmp_path, **options)
    assert cli.main(["ask", QUESTION, "--method", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown method 'nope'" in capsys.readouterr().err


def _readme_ask() -> tuple[str, str]:
    """The question and gold answer of the README's ``workbench ask`` example."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (q, a), = re.findall(r'`workbench ask "([^"]+)" --answer (\w+)`', readme)
    return q, a


def test_cli_asks_the_trained_agent_with_the_real_model(tmp_path, capsys, one_thread):
    """The README's own example, as a user types it: the shipped adapter searches twice and answers it right."""
    if not (TRAINED_ADAPTER / "adapter_model.safetensors").exists():
        pytest.skip(f"no trained adapter at {TRAINED_ADAPTER}")
    question, gold = _readme_ask()
    assert cli.main(["ask", question, "--out", str(tmp_path), "--answer", gold, "--answer", "Noone"]) == 0
    out = capsys.readouterr().out
    assert f"Q: {question}\n" in out and "\n  search " in out and "\n  found " in out and "\nanswer: " in out
    # the gold answers given: the verdict printed, the same the run stores
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    cem = float(pd.read_parquet(run_dir / "trajectories.parquet")["cem"].iloc[0])
    assert f"\nverdict: {'correct' if cem == 1 else 'wrong'} (cover-EM {cem:g}, F1 " in out
    assert "correct means cover-EM = 1" in out and f"gold: {gold} | Noone)" in out
    assert cem == 1, f"the README's ask example is answered wrong by the shipped adapter:\n{out}"
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["kind"] == "ask" and cfg["method"] == "search_r1+lora" and cfg["adapter"] == str(TRAINED_ADAPTER)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "complete"
