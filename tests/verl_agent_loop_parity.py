"""Run in ``.venv-verl`` by ``tests/test_verl_agent_loop.py``: verl's own classes drive our agent loop.

``python tests/verl_agent_loop_parity.py OUT.json [MAX_NEW_TOKENS]``

The exported parquet is read by verl's ``RLHFDataset`` and collated into a ``DataProto`` by verl's
``collate_fn``; an ``AgentLoopWorker``, built by its own constructor (no Ray: the worker class itself, with
the default model's converted directory as ``actor_rollout_ref.model.path``, so verl loads its tokenizer and
config), loads our agent-loop config file into verl's registry, instantiates ``WorkbenchAgentLoop``
through Hydra, runs it and pads the outputs with its own ``_agent_loop_postprocess`` / ``_postprocess``.
Generation goes through :class:`BackendServerManager` over our HF backend on the default model.

Two references that are not our engine: verl's own prompt ids (its dataset and tokenizer), and verl's own
``logprobs_from_logits`` over a plain forward pass of the padded batch verl built (what its actor computes
as the old log-probs), against the rollout log-probs the loop returned. The same examples also go through
``workbench.rollout.engine.rollout``; everything is written to ``OUT.json`` for the test to compare: greedy
on the world's first two training questions (the second searches twice with the default model), and sampled
with a fixed seed on the first. Top-level imports are stdlib only: pytest's ``--doctest-modules`` imports
this file in the main environment too.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def verl_rows(out: dict, n: int, examples: list) -> list[dict]:
    """Unpadded prompt / response / mask of each row of verl's output ``DataProto``, and what the trajectory in its
    ``extra_fields`` gives back: its response ids and our features (computed from it, as a reward worker would)."""
    from workbench.core.trajectory import Trajectory
    from workbench.rewards.features import compute_features

    b = out.batch
    rows = []
    for i in range(n):
        pm = b["attention_mask"][i, : b["prompts"].shape[1]].bool()
        rm = b["attention_mask"][i, b["prompts"].shape[1] :].bool()
        rows.append({"prompt_ids": b["prompts"][i][pm].tolist(), "response_ids": b["responses"][i][rm].tolist(),
                     "response_mask": b["response_mask"][i][rm].tolist(),
                     "logprobs": b["rollout_log_probs"][i][rm].tolist() if "rollout_log_probs" in b.keys() else None,
                     "workbench": out.non_tensor_batch["workbench"][i]})
        traj = Trajectory.from_dict(out.non_tensor_batch["workbench_trajectory"][i])
        feats = compute_features([traj], [examples[i]], encoder=False, cache=False).iloc[0]
        rows[-1]["extras"] = {"response_ids": traj.response_ids, "n_searches": int(feats["n_searches"]),
                              "f1": None if feats["f1"] != feats["f1"] else float(feats["f1"])}
    return rows


def verl_logprob_gaps(out, model, temperature: float) -> list[float]:
    """Per row, the largest gap on policy tokens between the loop's ``rollout_log_probs`` and verl's own
    ``logprobs_from_logits`` over one forward pass of the padded ``input_ids`` / ``attention_mask`` /
    ``position_ids`` verl built (the actor's old-log-prob computation, without FSDP)."""
    import torch
    from verl.utils.torch_functional import logprobs_from_logits

    b = out.batch
    n_prompt = b["prompts"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
    logits = logits[:, n_prompt - 1 : -1] / (temperature or 1.0)  # the positions that predict each response token
    verl_lps = logprobs_from_logits(logits, b["responses"])
    mask = b["response_mask"].bool()
    return [float((verl_lps[i][mask[i]] - b["rollout_log_probs"][i][mask[i]]).abs().max()) for i in range(len(mask))]


def run(out_path: str, max_new_tokens: int = 96) -> None:
    import asyncio
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from workbench.core.models import load_policy, resolve_model_path
    from workbench.data.world import load_world
    from workbench.integrations.verl.agent_loop import BackendServerManager
    from workbench.integrations.verl.config import compose_config
    from workbench.integrations.verl.export import export_verl
    from workbench.methods import get_method
    from workbench.rewards.features import compute_features
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.tools.toolbox import build_toolbox

    # verl pads every row to max_prompt_length + max_response_length: 512 + 768 holds these rows (longest prompt
    # 344 tokens, longest response 484) and keeps the forward over the padded batch small
    method, max_turns, response_length = "search_r1", 3, 768
    tmp = Path(tempfile.mkdtemp(prefix="verl-parity-"))
    paths = export_verl(method, "world", tmp, limit=2)
    model, tok = load_policy()
    backend = HFBackend(model, tok, prefix_cache=False)
    world = load_world()
    proto = get_method(method).get_protocol()
    toolbox = build_toolbox(proto, world)
    result: dict = {"cases": {}}
    for case, temperature, seed, n in (("greedy", 0.0, None, 2), ("sampled", 1.0, 7, 1)):
        entry = {"name": "workbench", "_target_": "workbench.integrations.verl.agent_loop.WorkbenchAgentLoop",
                 "method": method, "max_turns": max_turns, "max_new_tokens": max_new_tokens, "seed": seed}
        (tmp / "agent_loop.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create([entry])))
        cfg = compose_config([
            f"data.train_files={paths['train']}", f"data.val_files={paths['val']}", "data.return_raw_chat=True",
            "data.max_prompt_length=512", f"data.max_response_length={response_length}",
            f"actor_rollout_ref.model.path={resolve_model_path()}", "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.temperature={temperature}",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp / 'agent_loop.yaml'}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=workbench",
        ])
        # verl's worker through its own constructor (it registers our loop from the config file, loads the
        # model directory's tokenizer and config, and initialises rollout tracing)
        w = AgentLoopWorker(cfg, BackendServerManager(backend))
        assert w.dataset_cls is RLHFDataset and w.hf_model_type == "llama"

        dataset = w.dataset_cls([str(paths["train"])], w.tokenizer, cfg.data)
        batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(n)]))
        out = asyncio.run(w.generate_sequences(batch))
        examples = world.split("train")[:n]
        rows = verl_rows(out, n, examples)
        # verl's own prompt: its dataset's chat messages through its tokenizer's chat template
        verl_prompts = [w.tokenizer.apply_chat_template(list(dataset[i]["raw_prompt"]), add_generation_prompt=True,
                                                        tokenize=True, return_dict=False) for i in range(n)]
        gaps = verl_logprob_gaps(out, model, temperature)

        rcfg = RolloutConfig(max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=temperature,
                             seed=seed, max_total_tokens=10**6)
        engine = []
        for ex in examples:  # one call per example, as the loop makes one call per trajectory
            traj = rollout([ex], proto, toolbox, backend, rcfg, progress=False)[0]
            engine.append({"prompt_ids": traj.prompt_ids, "response_ids": traj.response_ids,
                           "response_mask": traj.response_loss_mask, "logprobs": traj.response_logprobs,
                           "n_searches": traj.n_searches,
                           "n_policy_turns": len(traj.policy_turns), "finish_reason": traj.finish_reason,
                           "answer": traj.answer, "flags": traj.flags,
                           "f1": compute_features([traj], [ex], encoder=False, cache=False).iloc[0]["f1"]})
        result["cases"][case] = {"verl": rows, "engine": engine, "verl_prompt_ids": verl_prompts,
                                 "verl_logprob_gaps": gaps,
                                 "registry": dict(_agent_loop_registry["workbench"]),
                                 "sampling_params": w.llm_client.calls[0][1] if w.llm_client.calls else None}
    result["dataset_columns"] = sorted(dataset.dataframe.column_names) if hasattr(dataset.dataframe, "column_names") else []
    Path(out_path).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    run(sys.argv[1], *(int(x) for x in sys.argv[2:]))
