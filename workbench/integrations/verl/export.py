"""``workbench export verl``: a method as verl inputs — dataset parquet, reward module, launch script.

- ``train.parquet`` / ``val.parquet``: the columns verl's ``RLHFDataset`` reads: ``prompt`` (chat
  messages from the method's protocol: system prompt, demonstrations, question), ``data_source``,
  ``ability``, ``reward_model`` (``{"style": "rule", "ground_truth": {"target": answers}}``, Search-R1's
  form) and ``extra_info`` (everything our features read: ``example_id``, ``question``, ``hops``,
  ``supporting_titles``, ``supporting_ids``, ``decomposition``, ``sources``, ``qtype``, ``split``, ``index``).
- ``reward.py``: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` for
  ``custom_reward_function.path`` (:mod:`workbench.integrations.verl.reward`).
- ``run_<method>.sh``: ``python3 -m verl.trainer.main_ppo`` with the method's ``paper`` values and
  optimizer preset as Hydra overrides (:func:`verl_overrides`). Not yet run on GPUs.
- ``agent_loop.yaml``: verl's agent-loop config naming :class:`~.agent_loop.WorkbenchAgentLoop` with the method
  and corpus (the launch script sets it as the default agent loop); with ``retrieval_url`` its tools call that
  ``workbench serve-retrieval`` instead of each rollout worker indexing the corpus.
- ``search_tool_config.yaml``: verl's own search tool pointed at ``workbench serve-retrieval`` (the alternative:
  verl's ``tool_agent`` loop with its own tool-call grammar instead of the method's protocol).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

ABILITY = "fact-reasoning"  # Search-R1's nq_search.py
RETRIEVAL_URL = "http://127.0.0.1:8000/retrieve"

#: LossConfig.kl_estimator → verl's kl_loss_type (verl/trainer/ppo/core_algos.py kl_penalty).
KL_TYPES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def verl_row(example: Any, protocol: Any, data_source: str, split: str, index: int) -> dict[str, Any]:
    """One row of verl's dataset parquet for ``example``."""
    return {
        "data_source": data_source,
        "prompt": protocol.messages(example),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": {"target": list(example.answers)}},
        "extra_info": {
            "example_id": str(example.id), "question": example.question, "split": split, "index": index,
            "hops": example.hops, "qtype": example.qtype,
            "supporting_titles": list(example.supporting_titles), "supporting_ids": list(example.supporting_ids),
            "decomposition": list(example.decomposition), "sources": list(example.sources),
            "answers": list(example.answers),
        },
    }


def example_from_verl(extra_info: Any, ground_truth: Any = None, data_source: str | None = None) -> Any:
    """The :class:`~workbench.data.example.Example` of a verl row (the inverse of :func:`verl_row`).

    Rows without our extras (Search-R1's parquet: ``extra_info`` has only ``split`` and ``index``) give an
    example with the question and answers only; ``ground_truth`` is ``{"target": [...]}`` or a list or a string.
    """
    from workbench.data.example import Example

    info = dict(extra_info or {})
    gt = ground_truth.get("target", ground_truth.get("ground_truth")) if hasattr(ground_truth, "get") else ground_truth
    answers = info.get("answers")
    if answers is None or len(answers) == 0:
        answers = [gt] if isinstance(gt, str) else list(gt if gt is not None else [])

    def strs(key: str) -> list[str]:
        v = info.get(key)
        return [str(x) for x in v] if v is not None and not isinstance(v, str) else []

    hops = info.get("hops")
    return Example(
        id=str(info.get("example_id", info.get("index", ""))), question=str(info.get("question") or ""),
        answers=[str(a) for a in answers], dataset=str(data_source or "verl"), split=str(info.get("split") or ""),
        hops=int(hops) if hops is not None and hops == hops else None, qtype=info.get("qtype"),
        decomposition=strs("decomposition"), supporting_ids=strs("supporting_ids"),
        supporting_titles=strs("supporting_titles"), sources=strs("sources"),
    )


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def loss_config(method: Any) -> tuple[Any, str]:
    """The method's optimizer preset with its overrides, and a note when the overrides do not validate."""
    from workbench.rl.config import get_loss_config

    try:
        return get_loss_config(method.optimizer, **dict(method.optimizer_overrides)), ""
    except ValueError as e:
        return get_loss_config(method.optimizer), f"optimizer_overrides {dict(method.optimizer_overrides)} not applied: {e}"


def verl_overrides(method: Any, out: Path, *, model: str = "Qwen/Qwen2.5-3B-Instruct") -> tuple[list[str], list[str]]:
    """``(hydra overrides, notes)``: the method's ``paper`` values and optimizer preset as verl keys.

    Notes name what has no verl key (e.g. a KL schedule) or was left at verl's default.
    """
    from workbench.rl.advantages import canonical_adv_norm

    paper = dict(method.paper)
    cfg, note = loss_config(method)
    notes = [note] if note else []
    o: list[str] = [
        f"data.train_files={out / 'train.parquet'}", f"data.val_files={out / 'val.parquet'}",
        "data.prompt_key=prompt", "data.return_raw_chat=True",
        f"custom_reward_function.path={out / 'reward.py'}", "custom_reward_function.name=compute_score",
        f"actor_rollout_ref.model.path={model}",
    ]
    adv = canonical_adv_norm(cfg.adv_norm)
    if adv == "group_std":
        o.append("algorithm.adv_estimator=grpo")
    elif adv == "group_mean":
        o += ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False"]  # Dr. GRPO
    elif adv == "reinforce_pp":
        o.append("algorithm.adv_estimator=reinforce_plus_plus_baseline")
    else:
        o.append("algorithm.adv_estimator=grpo")
        notes.append(f"advantage {cfg.adv_norm!r} has no verl estimator: grpo used")
    if cfg.surrogate == "sequence":
        o.append("actor_rollout_ref.actor.policy_loss.loss_mode=gspo")  # sequence-level ratio (GSPO / DSPO)
    elif cfg.surrogate == "dual_clip":
        o.append(f"actor_rollout_ref.actor.clip_ratio_c={cfg.clip_ratio_c}")
    o += [f"actor_rollout_ref.actor.clip_ratio_low={paper.get('eps_low', cfg.eps_low)}",
          f"actor_rollout_ref.actor.clip_ratio_high={paper.get('eps_high', cfg.eps_high)}",
          f"actor_rollout_ref.actor.loss_agg_mode={cfg.agg}",
          f"actor_rollout_ref.actor.ppo_epochs={cfg.ppo_epochs}"]
    kl = float(paper.get("kl_loss_coef", paper.get("kl_coef", cfg.kl_coef)))
    if kl > 0:
        o += ["actor_rollout_ref.actor.use_kl_loss=True", f"actor_rollout_ref.actor.kl_loss_coef={kl}",
              f"actor_rollout_ref.actor.kl_loss_type={KL_TYPES.get(cfg.kl_estimator, 'low_var_kl')}"]
    else:
        o.append("actor_rollout_ref.actor.use_kl_loss=False")
    o.append("algorithm.use_kl_in_reward=False")
    if cfg.kl_coef_end is not None or paper.get("kl_coef_end") is not None:
        notes.append(f"KL anneal to {paper.get('kl_coef_end', cfg.kl_coef_end)} has no verl key: constant β used")
    if cfg.dynamic_filter:  # DAPO dynamic sampling: verl >= 0.9's main_ppo (v1 trainer) reads algorithm.filter_groups
        o += ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=reward",
              f"algorithm.filter_groups.max_num_gen_batches={cfg.filter_max_rounds}"]
    if "lr" in paper:
        o.append(f"actor_rollout_ref.actor.optim.lr={paper['lr']}")
    group = paper.get("group_size") or cfg.group_size or dict(method.train).get("group_size")
    if group:
        o.append(f"actor_rollout_ref.rollout.n={group}")
    for key, verl_key in (("temperature", "actor_rollout_ref.rollout.temperature"),
                          ("top_p", "actor_rollout_ref.rollout.top_p"),
                          ("max_response_length", "data.max_response_length")):
        if key in paper:
            o.append(f"{verl_key}={paper[key]}")
    batch = paper.get("train_batch_size") or paper.get("batch_size") or paper.get("effective_batch_size")
    if batch:
        o.append(f"data.train_batch_size={batch}")
    if "epochs" in paper:
        o.append(f"trainer.total_epochs={paper['epochs']}")
    if "steps" in paper:
        o.append(f"trainer.total_training_steps={paper['steps']}")
    turns = paper.get("max_turns") or paper.get("max_searches")
    # our agent loop (agent_loop.py) runs the method's protocol and toolbox; search_tool_config.yaml is the
    # alternative: verl's own tool_agent loop calling `workbench serve-retrieval`
    o += ["actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.mode=async",
          "actor_rollout_ref.rollout.multi_turn.enable=True",
          f"actor_rollout_ref.rollout.agent.agent_loop_config_path={out / 'agent_loop.yaml'}",
          "actor_rollout_ref.rollout.agent.default_agent_loop=workbench"]
    if turns:
        o.append(f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={int(turns) + 1}")  # searches + answer
    else:
        notes.append("the paper gives no turn limit: verl's max_assistant_turns left unset")
    o += [f"trainer.rollout_data_dir={out / 'rollouts'}", f"trainer.validation_data_dir={out / 'validation'}",
          "trainer.logger=['console','file']", "trainer.project_name=workbench", f"trainer.experiment_name={method.name}"]
    return o, notes


def launch_script(method: Any, out: Path, model: str) -> str:
    overrides, notes = verl_overrides(method, out, model=model)
    lines = [
        "#!/usr/bin/env bash",
        f"# verl launch for {method.name}: {method.title} ({method.citation})",
        "# Generated by `workbench export verl`. NOT YET RUN ON GPUs: a starting point, check it against your verl.",
        "# 1. workbench serve-retrieval --corpus <corpus> --port 8000 &   (Search-R1's /retrieve API)",
        "# 2. bash this script (extra Hydra overrides go on the command line: trainer.n_gpus_per_node=8 ...)",
        f"# 3. workbench import verl {out} --method {method.name}   (rollouts/, validation/, metrics.jsonl)",
        *(f"# note: {n}" for n in notes),
        "set -euo pipefail",
        f"export WORKBENCH_METHOD={shlex.quote(method.name)}",
        f"export VERL_FILE_LOGGER_PATH={shlex.quote(str(out / 'metrics.jsonl'))}  # trainer.logger 'file': one JSON line per step",
        "python3 -m verl.trainer.main_ppo \\",
        *(f"    {shlex.quote(x)} \\" for x in overrides),
        f'    "$@" 2>&1 | tee {shlex.quote(str(out / "train.log"))}',
        "",
    ]
    return "\n".join(lines)


AGENT_LOOP_CONFIG = """# verl agent loop (actor_rollout_ref.rollout.agent.agent_loop_config_path): the method's protocol and toolbox
# (workbench.integrations.verl.agent_loop). Each rollout worker builds its own index of the corpus, unless
# retrieval_url names a `workbench serve-retrieval` its tools call instead.
- name: workbench
  _target_: workbench.integrations.verl.agent_loop.WorkbenchAgentLoop
  method: {method}
  corpus: {corpus}
"""

REWARD_MODULE = '''"""verl reward for the workbench method {method!r} (generated by `workbench export verl`).

Use as custom_reward_function.path=<this file>, custom_reward_function.name=compute_score.
Never raises: missing features score NaN with the reason logged (workbench.integrations.verl.reward).
"""

METHOD = {method!r}
CORPUS = {corpus!r}
_score = None


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    global _score
    if _score is None:
        from workbench.integrations.verl.reward import make_compute_score

        _score = make_compute_score(METHOD, corpus=CORPUS)
    return _score(data_source, solution_str, ground_truth, extra_info, **kwargs)
'''

TOOL_CONFIG = """# verl's own search tool (Search-R1-like) pointed at `workbench serve-retrieval`.
tools:
  - class_name: verl.tools.search_tool.SearchTool
    config:
      retrieval_service_url: {url}
      num_workers: 120
      rate_limit: 120
      timeout: 30
      type: native
    tool_schema:
      type: function
      function:
        name: search
        description: Searches the corpus for relevant passages.
        parameters:
          type: object
          properties:
            query_list:
              type: array
              items:
                type: string
              description: A list of search queries.
          required:
            - query_list
"""


def dataset_examples(dataset: str, split: str | None, limit: int | None) -> tuple[list[Any], list[Any], str]:
    """``(train, val, source)`` examples of ``dataset`` (``world`` or a dataset name / file), as ``export verl`` and
    ``train --engine trl`` choose them."""
    if str(dataset).lower() == "world":
        from workbench.data.world import load_world

        world = load_world()
        train, val = world.split(split or "train"), world.split("dev")
        return train[:limit] if limit else train, val[:limit] if limit else val, "world"
    from workbench.data.loaders import load_dataset

    train = load_dataset(dataset, split=split, limit=limit)
    if not train:
        raise ValueError(f"dataset {dataset!r} has no questions")
    return train, [], train[0].dataset


def check_export_dir(out: Path, method: str) -> None:
    """``out`` may take ``method``'s export: it holds none yet, or one of the same method (written again). An export of
    another method there is an error naming the folder: the two would share train.parquet, export.json and the
    dumps ``workbench import verl`` reads back, each method's files mixed with the other's."""
    manifest = out / "export.json"
    if not manifest.exists():
        return
    from workbench.util.io import read_json

    try:
        there = read_json(manifest, 1 << 20, "verl export manifest")
    except (OSError, ValueError) as e:
        raise ValueError(f"--out {out}: it holds an export.json that does not read ({e}); give a folder of its own "
                         f"for each export (e.g. exports/{method})") from None
    other = there.get("method") if isinstance(there, dict) else None
    if other != method:
        raise ValueError(f"--out {out} holds the export of method {other!r}; give each method a folder of its own "
                         f"(e.g. --out {out.parent / method}), or remove that export first")


def export_verl(method: str, dataset: str = "world", out: str | Path = "exports", *, split: str | None = None,
                val_dataset: str | None = None, limit: int | None = None, corpus: str = "world",
                model: str = "Qwen/Qwen2.5-3B-Instruct", retrieval_url: str | None = None) -> dict[str, Path]:
    """Write the verl inputs of ``method`` on ``dataset`` into ``out``; returns ``{what: path}``.

    ``retrieval_url``: a ``workbench serve-retrieval`` (``http://host:port``) the agent loop's tools call; also the
    URL in ``search_tool_config.yaml`` (default there: ``RETRIEVAL_URL``).
    """
    from workbench.methods import get_method
    from workbench.tools.remote import base_url

    server = base_url(retrieval_url) if retrieval_url else None

    m = get_method(method)
    if m.reward is None:
        raise ValueError(f"method {method!r} is a baseline with no reward preset: nothing to train with verl")
    out = Path(out).resolve()
    check_export_dir(out, m.name)
    out.mkdir(parents=True, exist_ok=True)
    proto = m.get_protocol()
    train, val, source = dataset_examples(dataset, split, limit)
    if val_dataset is not None:
        val, _, _ = dataset_examples(val_dataset, None, limit)
    paths = {"train": write_parquet([verl_row(e, proto, source, "train", i) for i, e in enumerate(train)],
                                    out / "train.parquet")}
    paths["val"] = write_parquet([verl_row(e, proto, source, "val", i) for i, e in enumerate(val or train[:64])],
                                 out / "val.parquet")
    (out / "reward.py").write_text(REWARD_MODULE.format(method=m.name, corpus=corpus))
    paths["reward"] = out / "reward.py"
    loop_config = AGENT_LOOP_CONFIG.format(method=json.dumps(m.name), corpus=json.dumps(corpus))
    if server:
        loop_config += f"  retrieval_url: {json.dumps(server)}  # tools call this server; corpus unused by the loop\n"
    (out / "agent_loop.yaml").write_text(loop_config)
    paths["agent_loop"] = out / "agent_loop.yaml"
    (out / "search_tool_config.yaml").write_text(TOOL_CONFIG.format(url=f"{server}/retrieve" if server else RETRIEVAL_URL))
    paths["tools"] = out / "search_tool_config.yaml"
    script = out / f"run_{m.name}.sh"
    script.write_text(launch_script(m, out, model))
    script.chmod(0o755)
    paths["launch"] = script
    (out / "export.json").write_text(json.dumps({"method": m.name, "dataset": str(dataset), "split": split,
                                                 "corpus": corpus, "n_train": len(train), "protocol": m.protocol.name,
                                                 "reward": m.reward.name, "optimizer": m.optimizer}, indent=1))
    return paths
