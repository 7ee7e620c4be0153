"""End to end with the real default model: the search agent on the world, the demo, the notebook."""

from __future__ import annotations

import json

import pytest

from workbench.core.trajectory import OBSERVATION, POLICY
from workbench.eval.runner import evaluate
from workbench.methods import get_protocol
from workbench.rollout.engine import RolloutConfig
from workbench.storage.runs import open_run
from workbench.tools.base import Toolbox
from workbench.tools.bm25 import BM25Search

pytestmark = pytest.mark.slow


def test_real_model_search_agent_on_world(world, hf_backend, tmp_path):
    examples = world.split("dev")[:3]
    toolbox = Toolbox({"search": BM25Search(world.passages)})
    cfg = RolloutConfig(group_size=2, max_turns=3, max_new_tokens=48, temperature=1.0, seed=11)
    res = evaluate("search_r1", examples, hf_backend, toolbox, cfg, progress=False)
    assert len(res.trajectories) == 6 and len(res.rows) == 6
    tok = hf_backend.tokenizer
    ok_reasons = {"answer", "eos", "max_turns", "budget"}
    for t in res.trajectories:
        assert t.finish_reason in ok_reasons
        assert t.turns and t.turns[0].kind == POLICY
        assert len(t.token_ids) == len(t.loss_mask)
        for turn in t.turns:
            if turn.kind == OBSERVATION:
                assert turn.token_ids == tok.encode(turn.text, add_special_tokens=False)
                assert turn.tool_calls or "invalid" in turn.text
            else:
                assert len(turn.logprobs) == len(turn.token_ids) and all(lp <= 0 for lp in turn.logprobs)
                assert turn.text == tok.decode(turn.token_ids, skip_special_tokens=False)
    for row in res.rows:
        assert 0.0 <= row["f1"] <= 1.0 and row["em"] <= row["cem"] + 1e-9
    assert 0 <= res.summary["valid_actions"] <= 1


def test_demo_writes_a_run_and_executes_the_notebook(tmp_path, capsys, monkeypatch):
    """`make demo`'s whole chain on a small budget: the CLI, the eval of the four methods, the inspector notebook
    executed into the run and the static dashboard. The demo's other notebooks run on a demo run in the regression
    suite (tests/test_regress_suite.py), which also checks the parameters the demo passes each of them."""
    from workbench.apps import demo
    from workbench.apps.cli import main

    monkeypatch.setattr(demo, "DEMO_NOTEBOOKS", {k: v for k, v in demo.DEMO_NOTEBOOKS.items()
                                                  if k == "01_trajectory_inspector"})
    rc = main(["demo", "--limit", "2", "--group-size", "2", "--out", str(tmp_path), "--max-new-tokens", "32",
               "--max-turns", "2"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "cover-EM" in printed and "search_r1" in printed and "direct" in printed
    (run_path,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = open_run(run_path)
    for f in ("config.json", "trajectories.parquet", "metrics.json", "examples.jsonl"):
        assert (run.path / f).exists(), f
    metrics = run.metrics()
    # the KG method too, and the search agent with the shipped SFT adapter beside it
    assert set(metrics["methods"]) == {"direct", "search_r1", "search_r1+lora", "dynasearcher"}
    assert metrics["methods"]["direct"]["n"] == 4 and metrics["methods"]["direct"]["n_searches"] == 0
    assert run.config["eval"]["adapter"].endswith("data/adapters/search_r1-sft-grpo")
    assert run.config["methods"]["search_r1"]["protocol"]["observation_mode"] == "chat"  # the layout it learned
    assert len(run.trajectories()) == 16  # 2 questions x 2 samples x 4 methods
    assert metrics["notebooks"]["01_trajectory_inspector"]["status"] == "ok" and (run.path / "dashboard.html").exists()
    nb_dir = run.path / "notebooks" / "01_trajectory_inspector"
    nb_metrics = json.loads((nb_dir / "metrics.json").read_text())
    assert nb_metrics["n_trajectories"] == 16
    assert nb_metrics["direct.n_searches"] == 0.0
    assert (nb_dir / "metrics_by_method.html").exists()
    executed = json.loads((run.path / "notebooks" / "01_trajectory_inspector.ipynb").read_text())
    assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code")


def test_protocol_prompt_fits_the_model_context(tokenizer):
    from workbench.data.example import Example
    from workbench.rollout.engine import build_prompt_ids

    ids = build_prompt_ids(get_protocol("search_r1"), tokenizer, Example("q", "Who?", []))
    assert 100 < len(ids) < 1024
