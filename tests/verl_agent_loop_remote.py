"""Run in ``.venv-verl`` by ``tests/test_verl_agent_loop.py``: our agent loop with ``retrieval_url`` (its tools call a
``workbench serve-retrieval``) against the same loop building its tools in-process (``corpus: world``).

``python tests/verl_agent_loop_remote.py OUT.json``

verl's ``RLHFDataset`` reads the exported parquet (exported with ``retrieval_url``, so the agent-loop config is
the one ``workbench export verl --retrieval-url`` writes), an ``AgentLoopWorker`` (built without Ray, as in
``verl_agent_loop_parity.py``) instantiates ``WorkbenchAgentLoop`` from it, and a scripted policy (the default
model's tokenizer, no weights: the searches are certain) drives three configurations on the same rows: the
server over loopback HTTP, in-process tools, and a server that is down. ``OUT.json`` holds each row's ids,
mask and tool calls. Top-level imports are stdlib only (pytest's ``--doctest-modules`` imports this file).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def script(examples: list) -> object:
    """Per row: search the first sub-question, then the question, then answer (found from the prompt text)."""

    def turn(text: str, i: int) -> str:
        ex = next(e for e in examples if e.question in text)
        return [f"<search> {ex.decomposition[0]} </search>", f"<search> {ex.question} </search>",
                "<answer> yes </answer>"][min(i, 2)]

    return turn


def run(out_path: str) -> None:
    import asyncio
    import os
    import socket

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
    from verl.protocol import DataProto
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.rollout_trace import RolloutTraceConfig

    from workbench.core.models import load_tokenizer
    from workbench.data.world import load_world
    from workbench.integrations.retrieval_server import RetrievalService, ServerThread, create_app
    from workbench.integrations.verl.agent_loop import BackendServerManager
    from workbench.integrations.verl.config import compose_config
    from workbench.integrations.verl.export import export_verl
    from workbench.rollout.backends.scripted import ScriptedBackend

    method, n = "search_r1", 2
    world = load_world()
    examples = world.split("train")[:n]
    tok = load_tokenizer()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens there once the socket is closed
    result: dict = {"cases": {}}
    with ServerThread(create_app(RetrievalService.from_passages(world.passages, world=world))) as server:
        tmp = Path(tempfile.mkdtemp(prefix="verl-remote-"))
        paths = export_verl(method, "world", tmp, limit=n, retrieval_url=server.url)
        exported = OmegaConf.load(paths["agent_loop"])
        result["exported_entry"] = OmegaConf.to_container(exported[0])
        for case, url in (("remote", server.url), ("local", None), ("down", down)):
            entry = {**OmegaConf.to_container(exported[0]), "max_turns": 3, "max_new_tokens": 64}
            if url is None:
                entry.pop("retrieval_url")
            else:
                entry["retrieval_url"] = url
            cfg_path = tmp / f"agent_loop_{case}.yaml"
            cfg_path.write_text(OmegaConf.to_yaml(OmegaConf.create([entry])))
            cfg = compose_config([
                f"data.train_files={paths['train']}", f"data.val_files={paths['val']}", "data.return_raw_chat=True",
                "data.max_prompt_length=2048", "data.max_response_length=1024",
                f"actor_rollout_ref.model.path={tmp}", "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.temperature=0",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={cfg_path}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=workbench",
            ])
            w = AgentLoopWorker.__new__(AgentLoopWorker)
            w.config, w.teacher_client, w.reward_loop_worker_handles = cfg, None, None
            w.llm_client = BackendServerManager(ScriptedBackend(tok, script(examples)))
            w.rollout_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
            w.dataset_cls, w.tokenizer, w.processor, w.hf_model_type = RLHFDataset, tok, None, "llama"
            w.mm_processor_kwargs, w.distillation_enabled, w.tools = {}, False, []
            for e in OmegaConf.load(cfg_path):
                _agent_loop_registry[e.name] = e
            RolloutTraceConfig.init("workbench", "remote", None, False, None)
            dataset = RLHFDataset([str(paths["train"])], tok, cfg.data)
            batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(n)]))
            out = asyncio.run(w.generate_sequences(batch))
            b, rows = out.batch, []
            for i in range(n):
                rm = b["attention_mask"][i, b["prompts"].shape[1] :].bool()
                traj = out.non_tensor_batch["workbench_trajectory"][i]
                calls = [c for t in traj["turns"] for c in t["tool_calls"]]
                rows.append({"response_ids": b["responses"][i][rm].tolist(),
                             "response_mask": b["response_mask"][i][rm].tolist(),
                             "observations": [t["text"] for t in traj["turns"] if t["kind"] != "policy"],
                             "calls": [{"name": c["name"], "error": c["error"],
                                        "ids": [r.get("id") for r in c["results"]]} for c in calls],
                             "finish_reason": out.non_tensor_batch["workbench"][i]["finish_reason"]})
            result["cases"][case] = rows
        result["server_queries"] = server.server.config.app.state.queue.queries
    Path(out_path).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    run(sys.argv[1])
