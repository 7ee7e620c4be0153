"""The verl agent loop (``workbench/integrations/verl/agent_loop.py``) driven by verl's own classes in ``.venv-verl``.

``tests/verl_agent_loop_parity.py`` runs there: verl's ``RLHFDataset`` reads the exported parquet, an
``AgentLoopWorker`` built by its own constructor instantiates our loop from the exported agent-loop config and
pads its outputs, and a server-manager stand-in generates with our HF backend on the default model. Here the
result is compared with verl's own prompt encoding and log-probs (its dataset, tokenizer and
``logprobs_from_logits`` over the batch it padded), and with ``workbench.rollout.engine.rollout`` on the same
questions: same prompt ids, response ids, response mask and logprobs, greedy and with a fixed sampling seed.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.verl_env import requires_verl_env, run_in_verl

pytestmark = [pytest.mark.slow, requires_verl_env]


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl-loop") / "parity.json"
    proc = run_in_verl(["tests/verl_agent_loop_parity.py", str(out), "64"], timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", ["greedy", "sampled"])
def test_verl_loop_ids_and_mask_equal_the_engines(parity, case):
    c = parity["cases"][case]
    assert len(c["verl"]) == len(c["engine"]) >= 1
    for v, e in zip(c["verl"], c["engine"]):
        assert v["prompt_ids"] == e["prompt_ids"]
        assert v["response_ids"] == e["response_ids"]
        assert v["response_mask"] == e["response_mask"]
        assert v["workbench"]["n_searches"] == e["n_searches"]
        assert v["workbench"]["finish_reason"] == e["finish_reason"]
        assert v["workbench"]["flags"] == e["flags"]
        # the trajectory in extra_fields is the same rollout, and our features compute from it
        assert v["extras"]["response_ids"] == e["response_ids"] and v["extras"]["n_searches"] == e["n_searches"]
        assert v["extras"]["f1"] == (None if e["f1"] is None or e["f1"] != e["f1"] else e["f1"])
        # sampled logprobs travel as verl's rollout_log_probs (0 on observation tokens, as the engine's)
        assert all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5) for a, b in zip(v["logprobs"], e["logprobs"]))


@pytest.mark.parametrize("case", ["greedy", "sampled"])
def test_against_verls_own_prompt_and_logprobs(parity, case):
    """Not our engine against itself: the prompt ids are what verl's dataset and tokenizer make of the exported
    chat, and the rollout log-probs are what verl's ``logprobs_from_logits`` gives over a forward pass of the
    padded batch verl built (its actor's old log-probs) on every policy token."""
    c = parity["cases"][case]
    assert [v["prompt_ids"] for v in c["verl"]] == c["verl_prompt_ids"]
    assert len(c["verl_logprob_gaps"]) == len(c["verl"]) and max(c["verl_logprob_gaps"]) < 2e-3, c["verl_logprob_gaps"]


def test_the_compared_rollout_is_multi_turn_with_masked_observations(parity):
    rows = parity["cases"]["greedy"]["engine"]
    multi = [r for r in rows if r["n_searches"] >= 1 and r["n_policy_turns"] >= 2]
    assert multi, "no compared trajectory searched: the parity check would not cover observations"
    assert any(0 in r["response_mask"] and 1 in r["response_mask"] for r in multi)


def test_loop_sends_the_protocols_stops_and_per_turn_limits(parity):
    greedy, sampled = parity["cases"]["greedy"], parity["cases"]["sampled"]
    sp = greedy["sampling_params"]
    assert sp["stop"] == ["</search>", "</answer>"] and sp["max_tokens"] == 64
    assert sp["include_stop_str_in_output"] is True and sp["temperature"] == 0
    from workbench.data.world import load_world
    from workbench.rollout.engine import sample_seed

    first = load_world().split("train")[0]  # the engine's seed of the question's turn 0, sample 0
    assert sampled["sampling_params"]["seed"] == sample_seed(7, first.id, 0, 0)
    assert greedy["registry"]["_target_"] == "workbench.integrations.verl.agent_loop.WorkbenchAgentLoop"


# --------------------------------------------------------------------------- retrieval_url: tools over HTTP


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl-remote") / "remote.json"
    proc = run_in_verl(["tests/verl_agent_loop_remote.py", str(out)], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_loop_with_retrieval_url_equals_the_in_process_tools(remote):
    entry = remote["exported_entry"]  # what `workbench export verl --retrieval-url` writes
    assert entry["retrieval_url"].startswith("http://127.0.0.1:") and entry["method"] == "search_r1"
    got, want = remote["cases"]["remote"], remote["cases"]["local"]
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g == w  # ids, mask, observation texts, tool calls with passage ids, finish reason
        assert len(g["calls"]) == 2 and all(c["error"] is None and c["ids"] for c in g["calls"])
    assert remote["server_queries"] == 4  # every search of the remote case went to the server


def test_loop_with_a_server_that_is_down_records_failed_searches(remote):
    for row in remote["cases"]["down"]:
        assert row["finish_reason"] == "answer" and len(row["calls"]) == 2
        assert all("unreachable" in c["error"] and "serve-retrieval" in c["error"] for c in row["calls"])
        assert all("Search failed" in o for o in row["observations"])
