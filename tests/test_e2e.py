"""End to end with the real default model: the search agent on the world. (`make demo`'s chain is checked in
tests/test_regress_suite.py, on the run the notebook regression suite reads.)"""

from __future__ import annotations

import pytest

from workbench.core.trajectory import OBSERVATION, POLICY
from workbench.eval.runner import evaluate
from workbench.methods import get_protocol
from workbench.rollout.engine import RolloutConfig
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


def test_protocol_prompt_fits_the_model_context(tokenizer):
    from workbench.data.example import Example
    from workbench.rollout.engine import build_prompt_ids

    ids = build_prompt_ids(get_protocol("search_r1"), tokenizer, Example("q", "Who?", []))
    assert 100 < len(ids) < 1024
