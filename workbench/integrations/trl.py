"""TRL's ``GRPOTrainer`` with the workbench's multi-turn engine: a rollout function, its dataset and its config.

What TRL 1.16 allows (read in ``trl/trainer/grpo_trainer.py``):

- ``GRPOTrainer(..., rollout_func=f)`` calls ``f(prompts, trainer)`` once per generation batch with this process's
  prompts, raw (chat messages are not templated). TRL's ``RepeatSampler`` has already repeated each prompt
  ``num_generations`` times, consecutively, so ``f`` returns one completion per prompt it is given.
- ``f`` returns a dict of per-completion lists: ``prompt_ids``, ``completion_ids`` and ``logprobs`` (required);
  ``env_mask`` (1 = model token, 0 = environment token) is popped and used as TRL's ``tool_mask``, which multiplies
  the loss mask: observation tokens stay visible to the model but get no loss, as in our own trainer. Every other
  key is forwarded to the reward functions as a column, one value per completion.
- It needs no vLLM: with ``use_vllm=False`` TRL only calls ``f``. (With ``use_vllm=True`` TRL syncs the weights
  to its vLLM engine before calling ``f``; :class:`RolloutFunc` still generates with its own backend, by default
  our HF backend over the trainer's model: a vLLM-backed rollout is not provided here.) The hook is marked
  experimental by TRL: a ``UserWarning`` unless ``TRL_EXPERIMENTAL_SILENCE=1``.

:class:`RolloutFunc` is that ``f`` over our engine (:func:`workbench.rollout.engine.rollout`, the same code as
``workbench eval`` / ``train`` and the verl agent loop): each prompt is encoded once with the chat template,
generated turn by turn with the protocol's stop strings, parsed, acted on with the toolbox, and each observation
is appended as ids, so ``completion_ids`` are the policy tokens as sampled plus the observation tokens, with
``env_mask`` 0 on the observations and ``logprobs`` 0.0 there. The trajectory itself goes out as the column
``workbench_trajectory`` (``Trajectory.to_dict()``: turns, actions, passage ids, flags, timings): the reward
functions of :func:`to_trl` score it as it is, so they give the Rubric's numbers on the
same trajectories (nothing is rebuilt from the decoded text).

Sampling temperature and top-p come from the trainer's ``GRPOConfig`` (TRL divides the logits by
``args.temperature`` when it recomputes log-probs, so they must match). Completions end at the protocol's stop
string (``</answer>``), not at EOS, so ``mask_truncated_completions=True`` would drop all of them: it is refused,
and TRL's ``completions/clipped_ratio`` counts such completions as clipped. Longer completions than
``max_completion_length`` are cut there (as the verl agent loop cuts at ``response_length``).

:class:`RunRecorder` (a ``TrainerCallback``: ``GRPOTrainer(..., callbacks=[RunRecorder(rollout_func, rubric)])``)
writes the TRL run down as a workbench train run, per step, so the inspector, the reward playground and the dashboard
open it; ``report_to`` copies it into experiment trackers as ``workbench train --report-to`` does.

Tested on CPU (a real ``GRPOTrainer`` step with LoRA on the default model; ids and masks equal the engine's);
not yet run on GPUs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from transformers import TrainerCallback

from workbench.core.trajectory import Trajectory
from workbench.data.example import Example
from workbench.protocols.base import Protocol
from workbench.rewards.from_text import Completion, TextScorer, as_passage_index, configured_rubric, missing_message
from workbench.rewards.rubric import RewardTable, Rubric
from workbench.rl.advantages import FilterStats
from workbench.rl.steplog import StepBatch, finalize_run, step_row, write_step
from workbench.rl.trackers import Trackers, tracker_names
from workbench.rollout.backends.base import Backend, encode_chat
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.storage.runs import Run
from workbench.tools.base import Toolbox

#: The column that carries each completion's trajectory to the reward functions (read by ``to_trl``).
TRAJECTORY_KEY = "workbench_trajectory"


# ============================================================================= dataset


def trl_row(example: Example, protocol: Protocol) -> dict[str, Any]:
    """One dataset row for ``GRPOTrainer``: ``prompt`` (the protocol's chat messages, as the engine renders them)
    and the columns ``to_trl``'s reward functions read (answers, question, hops, supporting titles / ids...)."""
    return {
        "prompt": protocol.messages(example), "id": str(example.id), "question": example.question,
        "answers": list(example.answers), "hops": example.hops, "qtype": example.qtype,
        "supporting_titles": list(example.supporting_titles), "supporting_ids": list(example.supporting_ids),
        "sources": list(example.sources),
    }


def trl_dataset(examples: Sequence[Example], protocol: Protocol) -> Any:
    """A ``datasets.Dataset`` of :func:`trl_row` rows (``pip install -e '.[trl]'``)."""
    from datasets import Dataset

    return Dataset.from_list([trl_row(ex, protocol) for ex in examples])


# ============================================================================= rollout function


def _messages(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Sequence) and all(isinstance(m, Mapping) for m in prompt):
        return [dict(m) for m in prompt]
    raise TypeError(f"TRL rollout: a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")


def _prompt_key(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in messages], ensure_ascii=False,
                      default=str)


@contextlib.contextmanager
def _generating(model: Any) -> Iterator[None]:
    """The model in eval mode while it generates (no LoRA dropout), its training mode restored afterwards."""
    was = bool(getattr(model, "training", False))
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def rollout_output(trajs: Sequence[Trajectory], max_completion_length: int | None = None,
                   filler_id: int = 0) -> dict[str, list[Any]]:
    """Finished trajectories as TRL's rollout-function output (one entry per trajectory, in order).

    ``completion_ids`` = every turn's ids (policy tokens as sampled, observation tokens as encoded), ``env_mask`` 1 on
    policy tokens and 0 on observations, ``logprobs`` the sampling log-probs (0.0 on observations); all cut at
    ``max_completion_length``. A trajectory with no response token (a backend error before its first token) gets
    one ``filler_id`` token with mask 0: TRL needs a non-empty completion; its trajectory records the error.
    """
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                 TRAJECTORY_KEY: []}
    cut = slice(None, max_completion_length)
    for t in trajs:
        ids, mask, lps = t.response_ids[cut], t.response_loss_mask[cut], t.response_logprobs[cut]
        if not ids:
            ids, mask, lps = [int(filler_id)], [0], [0.0]
        out["prompt_ids"].append(list(t.prompt_ids))
        out["completion_ids"].append(ids)
        out["env_mask"].append(mask)
        out["logprobs"].append([float(x) for x in lps])
        out[TRAJECTORY_KEY].append(t.to_dict())
    return out


class RolloutFunc:
    """TRL's ``rollout_func`` over the workbench engine (see the module docstring for TRL's contract).

    Args:
        protocol: the protocol (its prompts' parse / act / render and stop strings).
        toolbox: the tools it calls.
        config: turns and token budgets (``max_turns``, ``max_new_tokens``, ``max_total_tokens``) and the sampling
            seed; with a trainer, temperature and top-p come from its ``GRPOConfig`` and the seed is offset by the
            global step (``None``: unseeded).
        backend: the generation backend; None: our HF backend over the trainer's (unwrapped, LoRA-wrapped) model,
            built on the first call. Without a trainer (tests, notebooks) a backend is required.
        examples: the dataset's examples, so each prompt is matched to its :class:`Example` (its question is what
            a protocol's own retrieval searches). A prompt not among them gets an example with the last user
            message as its question and no answers (rewards read the answers from the dataset columns anyway).
    """

    def __init__(self, protocol: Protocol, toolbox: Toolbox, *, config: RolloutConfig | None = None,
                 backend: Backend | None = None, examples: Sequence[Example] = ()):
        self.protocol, self.toolbox = protocol, toolbox
        self.config = config or RolloutConfig()
        if self.config.group_size != 1:
            raise ValueError(f"TRL rollout: RolloutConfig.group_size={self.config.group_size}; leave it at 1 "
                             "(TRL repeats each prompt num_generations times before calling the rollout function)")
        self.backend = backend
        self.examples = {_prompt_key(protocol.messages(ex)): ex for ex in examples}
        self._trainer_backend: tuple[int, Backend] | None = None
        self.calls = 0
        """How many times it ran (one per generation batch)."""
        self.last_trajectories: list[Trajectory] = []
        """The trajectories of the last call (for a notebook or a test to inspect)."""
        self.listeners: list[Callable[[list[Trajectory], float], None]] = []
        """Called after each call with its trajectories and seconds (:class:`RunRecorder` writes them down)."""

    def __call__(self, prompts: Sequence[Any], trainer: Any = None) -> dict[str, list[Any]]:
        args = getattr(trainer, "args", None)
        if args is not None and getattr(args, "mask_truncated_completions", False):
            raise ValueError("TRL rollout: GRPOConfig(mask_truncated_completions=True) would drop every completion "
                             "(they end at the protocol's stop string, not at EOS); set it to False and bound "
                             "completions with RolloutConfig's max_turns / max_new_tokens instead")
        backend = self._backend(trainer)
        tok = backend.tokenizer
        msgs = [_messages(p) for p in prompts]
        examples = [self._example(m) for m in msgs]
        prompt_ids = [encode_chat(tok, m) for m in msgs]
        cfg, limit = self._config(args, trainer, prompt_ids)
        model = getattr(backend, "model", None)
        t0 = time.perf_counter()
        with _generating(model) if trainer is not None and model is not None else contextlib.nullcontext():
            trajs = rollout(examples, self.protocol, self.toolbox, backend, cfg, progress=False,
                            meta={"trainer": "trl"}, prompt_ids=prompt_ids)
        member: Counter[str] = Counter()
        for t in trajs:  # TRL repeated each prompt: number the members of each group
            t.sample_idx = member[t.example_id]
            t.id = f"{t.example_id}#{t.sample_idx}"
            member[t.example_id] += 1
        self.calls += 1
        self.last_trajectories = trajs
        for listener in self.listeners:
            listener(trajs, time.perf_counter() - t0)
        pad = getattr(tok, "pad_token_id", None)
        return rollout_output(trajs, limit, pad if pad is not None else min(backend.eos_token_ids() or {0}))

    def _backend(self, trainer: Any) -> Backend:
        if self.backend is not None:
            return self.backend
        if trainer is None:
            raise ValueError("TRL rollout: no backend; pass backend= or call it with the trainer (TRL passes itself)")
        from workbench.rollout.backends.hf import HFBackend

        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._trainer_backend is None or self._trainer_backend[0] != id(model):
            # the prefix cache is cleared at the end of every rollout (weights change between steps)
            self._trainer_backend = (id(model), HFBackend(model, trainer.processing_class))
        return self._trainer_backend[1]

    def _example(self, messages: list[dict[str, Any]]) -> Example:
        key = _prompt_key(messages)
        ex = self.examples.get(key)
        if ex is not None:
            return ex
        question = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
        return Example(id="prompt-" + hashlib.sha1(key.encode()).hexdigest()[:12], question=question, answers=[],
                       dataset="trl")

    def _config(self, args: Any, trainer: Any, prompt_ids: list[list[int]]) -> tuple[RolloutConfig, int | None]:
        """This call's rollout config and completion cut: the trainer's sampling and length limit on top."""
        cfg = self.config
        if args is None:
            return cfg, None
        limit = getattr(args, "max_completion_length", None)
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        total = min(cfg.max_total_tokens, max(map(len, prompt_ids), default=0) + limit) if limit else cfg.max_total_tokens
        return dataclasses.replace(
            cfg, max_total_tokens=total, temperature=float(args.temperature),
            top_p=float(getattr(args, "top_p", 1.0) or 1.0), seed=None if cfg.seed is None else cfg.seed + step,
        ), limit


def make_rollout_func(method: str | None = None, *, protocol: str | Protocol | None = None,
                      toolbox: Toolbox | None = None, corpus: str = "world", retriever: str = "bm25",
                      backend: Backend | None = None, config: RolloutConfig | None = None,
                      examples: Sequence[Example] = ()) -> RolloutFunc:
    """A :class:`RolloutFunc` for a method (its protocol with its arguments) or a protocol name / instance.

    ``toolbox``: the tools (default: built for the protocol over ``corpus``: ``world`` or a corpus file, with
    ``retriever`` ``bm25`` or ``dense``). ``config``: default ``RolloutConfig(max_turns=<the paper's max_turns>)``.
    """
    from workbench.methods import get_protocol

    paper: Mapping[str, Any] = {}
    if method is not None:
        from workbench.methods import get_method

        m = get_method(method)
        proto, paper = m.get_protocol(), m.paper
    elif protocol is not None:
        proto = get_protocol(protocol)
    else:
        raise ValueError("make_rollout_func needs a method or protocol= (`workbench methods` lists them)")
    if toolbox is None:
        from workbench.tools.toolbox import build_toolbox

        if corpus == "world":
            from workbench.data.world import load_world

            toolbox = build_toolbox(proto, load_world(), retriever=retriever)
        else:
            from workbench.data.corpora import load_corpus

            toolbox = build_toolbox(proto, passages=load_corpus(corpus), retriever=retriever)
    if config is None:
        turns = paper.get("max_turns")
        config = RolloutConfig(max_turns=int(turns)) if turns else RolloutConfig()
    return RolloutFunc(proto, toolbox, config=config, backend=backend, examples=examples)


# ============================================================================= the run TRL trains, as a workbench run

#: TRL's log names that the workbench trainer logs under another name (metrics.jsonl), so the curves of both line
#: up; every number TRL logs is also kept as ``trl/<its name>``.
TRL_METRICS = {"loss": "loss", "kl": "kl", "entropy": "entropy", "grad_norm": "grad_norm", "learning_rate": "lr",
               "clip_ratio/region_mean": "clip_frac"}


def trl_metrics(logs: Mapping[str, Any]) -> dict[str, float]:
    """A TRL log (``GRPOTrainer.log``'s dict) as metrics.jsonl entries: :data:`TRL_METRICS` under our names, every
    number as ``trl/<name>``; TRL's evaluation logs (``eval_*``) keep their names.

    >>> trl_metrics({"loss": 0.5, "rewards/r_em/mean": 1.0, "eval_reward": 0.25, "epoch": "x"})
    {'loss': 0.5, 'trl/loss': 0.5, 'trl/rewards/r_em/mean': 1.0, 'eval_reward': 0.25}
    """
    out: dict[str, float] = {}
    for k, v in logs.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            continue
        if k.startswith("eval_"):
            out[k] = float(v)
            continue
        if k in TRL_METRICS:
            out[TRL_METRICS[k]] = float(v)
        out[f"trl/{k}"] = float(v)
    return out


class RunRecorder(TrainerCallback):
    """A ``GRPOTrainer`` run with our :class:`RolloutFunc` written down as a workbench run of kind ``train`` (source
    ``trl``), which the inspector, the reward playground and the dashboard open like one of ``workbench train``'s.

    Per optimizer step (TRL's ``global_step``): ``steps/<step>.trajectories.parquet`` and ``.features.parquet`` (every
    trajectory the rollout function produced for it, with its features, the rubric's ``reward`` and
    ``reward_<component>``; ``kept`` True, ``advantage`` NaN: TRL computes its advantages from all its reward
    functions) and a ``metrics.jsonl`` row with the workbench trainer's names (reward mean/std per component, cover-EM,
    searches, response length, seconds per phase; TRL's loss, KL, entropy, grad norm, lr and clip fraction;
    and every number TRL logs as ``trl/<name>``). At the end: ``trajectories.parquet`` / ``features.parquet`` joined,
    ``metrics.json``, ``examples.jsonl``, the LoRA adapter in ``adapter/`` (a PEFT model) and the completion marker.
    ``report_to`` sends the rows, the config and each step's completions to the experiment trackers
    (:mod:`workbench.rl.trackers`), as ``workbench train --report-to`` does. Only the main process writes (its
    rollouts: under data parallel, the other processes' trajectories are not recorded).

    Args:
        rollout_func: the trainer's rollout function (the recorder listens to it).
        rubric: the reward the trainer's reward functions compute (``to_trl(rubric, ...)``): re-scored here on the
            same trajectories with ``feature_kwargs`` (give the same ``encoder`` / ``cache`` / judges as ``to_trl``).
        run: a :class:`Run` to write into, or the runs root a new run is created in at the start of training.
        name: the label in a new run's id (default ``trl-<protocol>``).
        config: more entries for ``config.json`` (the method, the model...).
        report_to: a ``--report-to`` value (checked now: a library not installed is named before training).
    """

    def __init__(self, rollout_func: RolloutFunc, rubric: Rubric, *, run: Run | str | os.PathLike | None = None,
                 name: str | None = None, config: Mapping[str, Any] | None = None, report_to: str = "none",
                 feature_kwargs: Mapping[str, Any] | None = None):
        self.rf, self.rubric = rollout_func, rubric
        self._target, self.name, self.extra = run, name, dict(config or {})
        self.report_to = ",".join(tracker_names(report_to)) or "none"
        self.feature_kwargs = dict(feature_kwargs or {})
        self.run: Run | None = None
        self.trackers = Trackers("none")
        self._pending: list[tuple[list[Trajectory], float]] = []
        self._step: tuple[dict[str, Any], StepBatch | None] | None = None  # written when TRL logs it
        self._examples: dict[str, Example] = {}
        self._summary: dict[str, Any] = {}
        self._t0 = time.perf_counter()
        rollout_func.listeners.append(self._collect)

    # ------------------------------------------------------------------ TRL's hooks
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        model = kwargs.get("model")
        cfg = {"source": "trl", "kind": "train", "protocol": self.rf.protocol.name, "reward": self.rubric.name,
               "preset": getattr(args, "loss_type", None) or "grpo",
               "model": getattr(getattr(model, "config", None), "_name_or_path", None),
               "protocol_config": self.rf.protocol.config(), "rollout": self.rf.config.to_dict(),
               "report_to": self.report_to, **self.extra,
               "trl": json.loads(json.dumps(args.to_dict(), default=str))}
        if isinstance(self._target, Run):
            self.run = self._target
            self.run.update_config(**cfg)
        else:
            self.run = Run.create(self._target, kind="train", name=self.name or f"trl-{self.rf.protocol.name}",
                                  config=cfg)
        self._examples = {ex.id: ex for ex in self.rf.examples.values()}
        self.run.write_examples(list(self._examples.values()))
        self.trackers = Trackers(self.report_to, self.run)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is None:
            return
        self._write()  # a step TRL did not log (logging_steps > 1)
        seconds = time.perf_counter() - self._t0
        if not self._pending:  # no new rollouts for this step (TRL reuses a generation batch): TRL's numbers only
            self._step = ({"step": state.global_step, "time_step_s": seconds}, None)
            return
        sb = self._step_batch(state.global_step)
        self._step = (step_row(sb, {}, seconds, state.global_step, 1), sb)

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if self.run is None or not logs:
            return
        if "train_runtime" in logs:  # the end-of-training summary: into metrics.json
            self._summary = dict(logs)
            return
        if self._step is not None and self._step[0]["step"] == state.global_step:
            self._step[0].update(trl_metrics(logs))
            self._write()
        else:  # a log of no step of ours (an evaluation)
            row = {"step": state.global_step, **trl_metrics(logs)}
            self.run.append_step_metrics(row)
            self.trackers.log_row(row)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is None:
            return
        self._write()
        self.run.write_examples(list(self._examples.values()))  # with the prompts no example matched
        model = kwargs.get("model")
        if model is not None and hasattr(model, "peft_config"):
            model.save_pretrained(str(self.run.path / "adapter"))
        names = SimpleNamespace(**{k: self.run.config.get(k) for k in ("preset", "reward", "protocol")})
        summary = finalize_run(self.run, names, state.global_step)  # what it reads of a TrainConfig
        self.run.write_metrics({**summary, "source": "trl", "trl": self._summary})
        self.trackers.close()
        self.run.mark_complete(source="trl", steps=state.global_step)

    # ------------------------------------------------------------------ the steps
    def _collect(self, trajs: list[Trajectory], seconds: float) -> None:
        if self.run is not None:
            self._pending.append((list(trajs), seconds))

    def _step_batch(self, step: int) -> StepBatch:
        """The rollouts since the last step, scored with the rubric, as the workbench trainer's :class:`StepBatch`."""
        from workbench.rewards.features import compute_features

        trajs = [t for ts, _ in self._pending for t in ts]
        secs = sum(s for _, s in self._pending)
        self._pending.clear()
        for t in trajs:  # a prompt outside the dataset: its example, without answers, as the rollout made it
            self._examples.setdefault(t.example_id, Example(id=t.example_id, question=t.question, answers=[],
                                                            dataset="trl"))
        t0 = time.perf_counter()
        features = compute_features(trajs, self._examples, **self.feature_kwargs)
        table = self.rubric(features)
        features["step"], features["round"] = step, 0
        features["reward"] = rewards = np.asarray(table.total, dtype=np.float64)
        for comp in table.components:
            features[f"reward_{comp}"] = table.values[comp]
        features["kept"], features["advantage"] = True, math.nan
        for t, r in zip(trajs, rewards):
            t.meta.update(step=step, reward=float(r), advantage=math.nan, kept=True)
        groups: dict[str, list[float]] = {}
        for g, r in zip(features["group_id"], rewards):
            groups.setdefault(str(g), []).append(float(r))
        mixed = sum(len({r for r in rs if r == r}) > 1 for rs in groups.values()) / max(1, len(groups))
        stats = FilterStats(target=len(groups), rounds=1, generated=len(groups), generated_trajectories=len(trajs),
                            kept=len(groups))
        return StepBatch(trajs, rewards, np.full(len(trajs), math.nan), trajs, features, table, stats, mixed,
                         {"rollout": secs, "reward": time.perf_counter() - t0}, int(np.isnan(rewards).sum()))

    def _write(self) -> None:
        if self._step is None:
            return
        (row, sb), self._step = self._step, None
        if sb is None:
            self.run.append_step_metrics(row)
            self.trackers.log_row(row)
        else:
            write_step(self.run, row["step"], sb, row)
            self.trackers.log_step(row, sb.generated, sb.features, self._examples.values())


# ============================================================================= GRPOConfig from a method

#: LossConfig.agg → TRL's loss_type (trl/trainer/grpo_config.py).
LOSS_TYPES = {"seq-mean-token-mean": "grpo", "token-mean": "dapo", "seq-mean-token-sum-norm": "dr_grpo"}


def grpo_config_kwargs(method: str) -> tuple[dict[str, Any], list[str]]:
    """``(GRPOConfig keyword arguments, notes)``: the method's ``paper`` values and optimizer preset as TRL fields.

    Notes name what TRL has no field for (e.g. dynamic sampling, a KL schedule) or what was left at TRL's default.
    """
    from workbench.integrations.verl.export import loss_config  # pure Python: no verl import
    from workbench.methods import get_method
    from workbench.rl.advantages import canonical_adv_norm

    m = get_method(method)
    if m.optimizer is None:
        raise ValueError(f"method {method!r} declares no optimizer preset (a baseline): it has no training recipe")
    paper = dict(m.paper)
    cfg, note = loss_config(m)
    notes = [note] if note else []
    kw: dict[str, Any] = {"epsilon": float(paper.get("eps_low", paper.get("clip", cfg.eps_low))),
                          "epsilon_high": float(paper.get("eps_high", paper.get("clip", cfg.eps_high))),
                          "beta": float(paper.get("kl_loss_coef", paper.get("kl_coef", cfg.kl_coef))),
                          "temperature": float(paper.get("temperature", 1.0))}
    if cfg.agg in LOSS_TYPES:
        kw["loss_type"] = LOSS_TYPES[cfg.agg]
    else:
        notes.append(f"loss aggregation {cfg.agg!r} has no TRL loss_type: TRL's default used")
    adv = canonical_adv_norm(cfg.adv_norm)
    scale = {"group_std": "group", "group_mean": "none", "reinforce_pp": "batch"}  # REINFORCE++: batch std
    if adv in scale:
        kw["scale_rewards"] = scale[adv]
    else:
        notes.append(f"advantage {cfg.adv_norm!r} has no TRL scale_rewards: 'group' used")
    if cfg.surrogate == "sequence":
        kw["importance_sampling_level"] = "sequence"  # GSPO / DSPO
    if "lr" in paper:
        kw["learning_rate"] = float(paper["lr"])
    group = paper.get("group_size") or cfg.group_size
    if group:
        kw["num_generations"] = int(group)
    if cfg.dynamic_filter:
        notes.append("dynamic sampling (DAPO filter) has no GRPOTrainer field: not applied")
    if cfg.kl_coef_end is not None or paper.get("kl_coef_end") is not None:
        notes.append("KL anneal has no GRPOConfig field: constant beta used")
    return kw, notes


# ----------------------------------------------------------------------------- reward functions

_EXAMPLE_KEYS = ("answers", "golden_answers", "answer", "ground_truth", "target", "solution", "gold", "hops", "qtype",
                 "supporting_ids", "supporting_titles", "sources", "question", "id", "meta")


def _prompt_question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for m in reversed(list(prompt)):
            if isinstance(m, Mapping) and m.get("role") == "user":
                return str(m.get("content") or "")
    return ""


def to_trl(
    rubric: Rubric, protocol: Protocol, *, split: bool = True, on_missing: str = "raise",
    weights: Mapping[str, float] | None = None, judges: Sequence[Any] = (), evidence_model: Any = None,
    encoder: Any = None, cache: Any = True, passages: Any = None, **params: Any,
) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """TRL ``GRPOTrainer`` reward functions and their weights for a Rubric (a preset's: ``workbench.methods.get_preset``),
    whose completions ``protocol`` parses (``params`` and ``weights`` go over the rubric's).

    ``split=True``: one function per component (TRL logs each under its ``__name__``),
    with the rubric's weights (0 = logged only), so TRL's weighted sum is the rubric total.
    ``split=False``: one function returning the total, weight 1.

    A NaN in a rewarded component raises (``on_missing="raise"``, the default: TRL's
    ``nansum`` would otherwise silently drop it); ``on_missing="none"`` returns None for it
    (TRL's "not applicable"). Weight-0 components return None when NaN.

    ``passages``: the corpus the rollouts searched, so rendered passages resolve to their ids
    (the same features as on stored trajectories; see :func:`trajectory_from_text`).

    Each function is called as ``f(prompts=..., completions=..., **dataset_columns)`` (``GRPOTrainer(reward_funcs=
    funcs, args=GRPOConfig(reward_weights=weights))``) and returns one float per completion; completions are strings
    or lists of messages. Gold answers come from the dataset column ``answers`` (or ``golden_answers`` / ``answer``
    / ``ground_truth`` / ``solution``), hops and supporting passages from ``hops`` / ``supporting_titles`` /
    ``supporting_ids``, the question from ``question`` (else the last user message of the prompt).

    With this module's rollout function (:class:`RolloutFunc`), each completion's trajectory arrives as the column
    ``workbench_trajectory``: it is scored as it is (turns, passage ids, flags), not rebuilt from text
    (:meth:`~workbench.rewards.from_text.TextScorer.score_trajectories`).
    """
    if on_missing not in ("raise", "none"):
        raise ValueError(f"on_missing must be 'raise' or 'none', got {on_missing!r}")
    rubric = configured_rubric(rubric, weights, params)
    scorer = TextScorer(rubric, protocol, {"judges": judges, "evidence_model": evidence_model, "encoder": encoder,
                                           "cache": cache, "passages": as_passage_index(passages)})

    def table_for(prompts: Sequence[Any], completions: Sequence[Completion], kwargs: Mapping[str, Any]) -> RewardTable:
        n = len(completions)
        cols = {k: list(v) for k, v in kwargs.items() if k in _EXAMPLE_KEYS and isinstance(v, (list, tuple, np.ndarray))}
        examples = [{k: v[i] for k, v in cols.items() if len(v) == n} for i in range(n)]
        if not any(any(k in e for k in _EXAMPLE_KEYS[:7]) for e in examples):
            raise ValueError(
                "TRL reward: no gold answers among the dataset columns passed to the reward function "
                f"(looked for {', '.join(_EXAMPLE_KEYS[:7])}; got {', '.join(sorted(kwargs)) or 'none'})"
            )
        trajs = kwargs.get("workbench_trajectory")
        if trajs is not None and len(trajs) == n:  # from our TRL rollout function: score the trajectories themselves
            return scorer.score_trajectories(trajs, examples)
        questions = [str(e.get("question") or _prompt_question(p)) for e, p in zip(examples, prompts)]
        return scorer.score(completions, examples, questions)

    def make(name: str, weight: float) -> Callable[..., list[float | None]]:
        def reward(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> list[float | None]:
            table = table_for(prompts, completions, kwargs)
            vals = table.frame[name].to_numpy()
            bad = [i for i, v in enumerate(vals) if math.isnan(v)]
            if bad and weight != 0 and on_missing == "raise":
                raise ValueError(missing_message(rubric, table, name, bad))
            return [None if math.isnan(v) else float(v) for v in vals]

        reward.__name__ = reward.__qualname__ = f"{rubric.name}_{name}"
        reward.__doc__ = f"{rubric.name} reward component {name!r} (TRL signature)."
        return reward

    if split:
        return [make(n, w) for n, w in rubric.weights.items()], list(rubric.weights.values())
    return [make("total", 1.0)], [1.0]
