"""Run in ``.venv-vllm`` by ``tests/test_vllm_backend.py``: our vLLM backend through real multi-turn rollouts.

``python tests/vllm_agreement.py OUT.json [MAX_NEW_TOKENS]``

One ``VLLMBackend`` (vLLM's offline ``LLM``, fp32 on a CPU, LoRA enabled) on the default model runs
``workbench.rollout.engine.rollout`` (token ids in, sampled ids and their logprobs out, the protocol's stop
strings, the search tool's observations between turns) on the world's first training questions, greedily:
with no adapter and with ``data/adapters/search_r1-sft`` served from a scratch folder; then, after that folder was
overwritten with ``search_r1-sft-grpo`` (a trainer saving its next version in place), a sampled group of ``GROUP`` on
the first question: the backend must then serve the new weights (a new ``LoRARequest`` id), not vLLM's cached copy
of the old.
Each trajectory's ids, mask, logprobs and finish reason go to ``OUT.json``, with the seconds each part took;
the test recomputes them with the HF backend and the trainer's fp32 logprobs in the main environment.
Top-level imports are stdlib only: pytest's ``--doctest-modules`` imports this file in the main environment.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = {"sft": ROOT / "data/adapters/search_r1-sft", "grpo": ROOT / "data/adapters/search_r1-sft-grpo"}
N_QUESTIONS, MAX_TURNS, MAX_NEW_TOKENS, GROUP = 2, 2, 48, 2
PROTOCOL_KWARGS = {"observation_mode": "chat"}


def record(traj) -> dict:
    return {"example_id": traj.example_id, "prompt_ids": traj.prompt_ids, "response_ids": traj.response_ids,
            "response_mask": traj.response_loss_mask, "logprobs": traj.response_logprobs,
            "finish_reason": traj.finish_reason, "n_searches": traj.n_searches, "answer": traj.answer,
            "n_policy_turns": len(traj.policy_turns)}


def run(out_path: str, max_new_tokens: int = MAX_NEW_TOKENS) -> None:
    import os

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: these rows need a few MB
    import vllm

    from workbench.data.world import load_world
    from workbench.methods import get_method
    from workbench.rollout.backends.vllm import VLLMBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.toolbox import build_toolbox

    world = load_world()
    proto = get_method("search_r1").get_protocol(**PROTOCOL_KWARGS)
    toolbox = build_toolbox(proto, world)
    examples = world.split("train")[:N_QUESTIONS]
    t0 = time.perf_counter()
    backend = VLLMBackend(dtype="float32", enable_lora=True, max_lora_rank=16, enforce_eager=True,
                          max_model_len=2048, seed=0)  # on a CPU its worker runs in the engine's process ("uni")
    result: dict = {"vllm": vllm.__version__, "load_s": time.perf_counter() - t0, "cases": {}, "seconds": {},
                    "protocol_kwargs": PROTOCOL_KWARGS, "max_turns": MAX_TURNS,
                    "max_new_tokens": max_new_tokens, "examples": [e.id for e in examples]}
    greedy = RolloutConfig(max_turns=MAX_TURNS, max_new_tokens=max_new_tokens, temperature=0.0, max_total_tokens=2048)

    def case(name: str, cfg: RolloutConfig, exs=examples) -> None:
        t = time.perf_counter()
        trajs = rollout(exs, proto, toolbox, backend, cfg, progress=False)
        result["seconds"][name] = time.perf_counter() - t
        result["cases"][name] = [record(tr) for tr in trajs]

    case("base", greedy)
    served = Path(tempfile.mkdtemp(prefix="vllm-lora-")) / "adapter"
    shutil.copytree(ADAPTERS["sft"], served)
    backend.set_adapter(served, name="policy")
    case("sft", greedy)
    # the trainer writes its next version into the same folder; set_adapter hands vLLM a new id for it. A sampled
    # group on it: its logprobs tell the new adapter from the old one by 4-5 orders of magnitude
    shutil.rmtree(served)
    shutil.copytree(ADAPTERS["grpo"], served)
    backend.set_adapter(served, name="policy")
    result["lora_ids"] = backend._lora_id
    sampled = RolloutConfig(max_turns=MAX_TURNS, max_new_tokens=max_new_tokens, temperature=1.0, seed=7,
                            group_size=GROUP, max_total_tokens=2048)
    case("grpo_sampled", sampled, examples[:1])
    Path(out_path).write_text(json.dumps(result, default=str))


if __name__ == "__main__":  # vLLM starts its engine in a child process: the entry point must be guarded
    run(sys.argv[1], *(int(x) for x in sys.argv[2:]))
