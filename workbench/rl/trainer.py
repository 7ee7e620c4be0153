"""The RL loop: sample → roll out → features → rubric → advantages → filter → update → log.

Every phase is a method of :class:`Trainer` that a notebook can call on its own
(``trainer.collect()`` to look at a batch before updating, ``trainer.update(batch)``...);
``trainer.train()`` runs them for ``TrainConfig.steps`` steps. A run directory holds:

- ``config.json``: the :class:`TrainConfig` (and the world / model it used);
- ``metrics.jsonl``: one row per step (reward mean/std per component, kept-group share,
  clip fraction, KL, entropy, searches per answer, response length, tokens/second, seconds
  per phase) and the held-out evaluation rows (``eval_*``);
- ``steps/<step>.trajectories.parquet`` and ``steps/<step>.features.parquet``: every
  trajectory generated at that step (kept by the dynamic filter or not) with its reward and
  advantage; ``trajectories.parquet`` / ``features.parquet`` join them for the notebooks;
- ``checkpoints/step_<n>/``: the adapter (PEFT safetensors, loadable by ``PeftModel`` and
  vLLM) and the trainer state (optimizer, RNG states, data cursor, reward stage) as safetensors +
  JSON (:mod:`workbench.rl.checkpoint`; nothing is unpickled on resume).

The configuration is :class:`~workbench.rl.train_config.TrainConfig` (names, as ``config.json`` records them);
the objects its names stand for — the protocol, the reward preset, and which expensive features (embeddings,
evidence model, judges) the feature step computes — come resolved as :class:`~workbench.rl.train_config.RunParts`
(``workbench.methods.run_parts(config)``; ``workbench.methods.trainer(config)`` does both).
A trajectory whose reward failed (NaN) is left out of its group's statistics and gets advantage 0;
``n_failed_rewards`` is logged per step, and a step with more than ``max_failed_share`` failed stops.

``Trainer.resume(run_dir)`` continues a killed run from its newest checkpoint; the next step
is the one an uninterrupted run would have taken (every random draw of a step is seeded by
the step number, and the optimizer and data cursor are restored).

Data parallel (``accelerate launch --num_processes N``): see :mod:`workbench.rl.distributed`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workbench.core.trajectory import Trajectory, save_trajectories
from workbench.data.example import Example
from workbench.rl.advantages import FilterStats, compute_advantages, fill_batch, keep_groups
from workbench.rl.batch import RLBatch, build_batch, empty_batch
from workbench.rl.checkpoint import (  # noqa: F401 (re-exported)
    LATEST,
    SELECTION_FILE,
    STATE_FILE,
    checkpoint_dir,
    latest_checkpoint,
    seed_everything,
    selection_note,
)
from workbench.rl.checkpoint import load_checkpoint as _load_checkpoint
from workbench.rl.checkpoint import save_checkpoint as _save_checkpoint
from workbench.rl.data_stream import (  # noqa: F401 (CURRICULA re-exported)
    CURRICULA,
    DataStream,
    carve_validation,
    repeat_by_hops,
    split_examples,
)
from workbench.rl.distributed import all_reduce_grads, all_reduce_sum, maybe_init_distributed
from workbench.rl.health import HEALTH_FILE, Alarm, HealthMonitor, parse_stop_on, read_health, rules_for, step_signals
from workbench.rl.steplog import (  # noqa: F401 (FailedRewardsError re-exported)
    FailedRewardsError,
    StepBatch,
    check_failed_share,
    finalize_run,
    merge_micro_stats,
    missing_encoder,
    nanmean,
    step_row,
    summarize_updates,
    truncate_logs,
    write_step,
)
from workbench.rl.trackers import Trackers
from workbench.rl.train_config import RunParts, TrainConfig, check_parts  # noqa: F401 (re-exported)
from workbench.rl.update import run_update
from workbench.rollout.engine import rollout
from workbench.storage.runs import Run, open_run

if TYPE_CHECKING:
    import pandas as pd

    from workbench.rewards.preset import FeatureNeeds
    from workbench.rewards.rubric import RewardTable, Rubric
    from workbench.rl.policy import LoRAPolicy
    from workbench.tools.base import Toolbox


log = logging.getLogger(__name__)


# ============================================================================= trainer


class Trainer:
    """One training run. See the module docstring for the loop and the run directory.

    Args:
        config: a :class:`TrainConfig`.
        parts: the objects its names stand for (:func:`workbench.methods.run_parts`).
        run: where to write (a Run, a directory or None = a new ``runs/train-...``).
        policy: a ready :class:`~workbench.rl.policy.LoRAPolicy` (default: built from ``config``).
        examples / eval_examples / toolbox: train on your own data instead of the world.
        progress: show progress bars.
    """

    config_class: type[TrainConfig] = TrainConfig
    """The config a run directory's ``config.json`` is read back into (``resume``); subclasses with
    their own config (``SFTTrainer``) set theirs."""

    def __init__(self, config: TrainConfig, parts: RunParts, run: Run | str | os.PathLike | None = None, *,
                 policy: LoRAPolicy | None = None, examples: Sequence[Example] | None = None,
                 eval_examples: Sequence[Example] | None = None, toolbox: Toolbox | None = None, progress: bool = True):
        from workbench.rl.rollout_sync import make_rollout_backend

        self.config = config
        self.parts = parts
        self.staged = check_parts(config, parts)
        self.loss_cfg = config.loss_config()
        self.rank, self.world_size = maybe_init_distributed()
        self.progress = progress and self.rank == 0
        seed_everything(config.seed)  # the same LoRA init on every process (also broadcast below)
        self.protocol = parts.protocol

        world = None
        bench = config.dataset != "world" and examples is None  # a benchmark file's questions, their own paragraphs
        if bench:
            from workbench.data.loaders import load_dataset

            examples = load_dataset(config.dataset, split=config.split)
            if not examples:
                raise ValueError(f"TrainConfig.dataset {config.dataset!r}: no questions")
        elif examples is None or (toolbox is None and config.dataset == "world"):
            from workbench.data.world import load_world

            world = load_world()
        self.world = world
        train, self.eval_examples = split_examples(config, world, examples, eval_examples)
        train, self.val_examples = carve_validation(train, config.val_questions, config.seed)
        shard = repeat_by_hops(train, lambda e: e.hops, config.hop_repeats)[self.rank :: self.world_size]
        self.data = DataStream(shard, seed=config.seed, curriculum=config.curriculum)

        if policy is None:
            from workbench.rl.policy import LoRAPolicy

            policy = LoRAPolicy(config.model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                                target_modules=config.target_modules, device=config.device,
                                init_adapter=config.init_adapter, merge_init=config.init_adapter_merge)
        elif config.init_adapter:  # a given policy starts from the adapter too (merging needs a fresh one)
            if config.init_adapter_merge:
                raise ValueError("TrainConfig.init_adapter_merge needs the Trainer to build the policy (pass no policy=)")
            from workbench.rl.policy import adapter_dir

            policy.load_adapter(adapter_dir(config.init_adapter))
        if hasattr(policy, "set_amp"):  # a LoRAPolicy (tests pass stand-ins)
            policy.set_amp(config.amp)
            if config.gradient_checkpointing and not policy.gradient_checkpointing:
                policy.enable_gradient_checkpointing()
        self.policy = policy
        if self.world_size > 1:  # start in step: every process takes rank 0's adapter
            for p in policy.trainable_parameters():
                torch.distributed.broadcast(p.data, src=0)
        self.tokenizer = policy.tokenizer
        self.backend = make_rollout_backend(config, policy)  # hf | openai | vllm (workbench.rl.rollout_sync)
        if toolbox is None and bench and config.corpus in (None, "pooled", "per-question"):
            toolbox = self._dataset_tools(train)
        if toolbox is None:
            from workbench.tools.toolbox import build_toolbox

            passages = None
            if config.corpus:  # a faiss index's corpus is read on demand (the index's rows point into it)
                from workbench.data.corpora import load_corpus
                from workbench.data.jsonl_corpus import open_corpus

                passages = open_corpus(config.corpus) if config.index else load_corpus(config.corpus)
            toolbox = build_toolbox(self.protocol, world, passages=passages, retriever=config.retriever,
                                    tokenizer=self.tokenizer, encoder=self._search_encoder(), index=config.index)
        self.toolbox = toolbox
        self.optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.step = 0
        """Training steps done."""
        self.opt_step = 0
        """Optimizer steps done (several per training step with mini-batches or epochs)."""
        self.stage = 1
        self._encoder: Any = None
        self._evidence: Any = None
        self._judges: list[Any] | None = None
        self.pad_id = getattr(self.backend, "pad_id", None)
        if self.pad_id is None:
            self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.backend.eos_token_ids() or {0})

        if self.rank == 0:
            cfg = {**config.to_dict(), "kind": "train", "loss": self.loss_cfg.to_dict(),
                   "protocol_config": self.protocol.config(), "world_size": self.world_size,
                   "world": world.fingerprint() if world is not None else None,
                   "trainable_parameters": policy.num_parameters()[0]}
            if isinstance(run, Run):
                self.run = run
                self.run.write_config(cfg)
            elif run is not None and Path(run).exists() and (Path(run) / "config.json").exists():
                self.run = open_run(run)
            else:
                self.run = Run.create(run, kind="train", name=f"{config.preset}-{config.reward}", config=cfg)
            self.run.take_writer_lock()  # a second writer (two resumes of one run) is refused, naming the first
            self.run.mark_running()  # incomplete until train() has finished (a resumed run too)
            self.run.write_examples(train + self.eval_examples + self.val_examples)
        else:
            self.run = None
        from workbench.rl.rollout_sync import AdapterSync

        self.adapter_sync = AdapterSync(self.backend, policy, None if self.run is None else self.run.path / "rollout_adapters")
        """Hands the current adapter to an ``openai`` / ``vllm`` rollout backend before a rollout."""
        self.trackers = Trackers(config.report_to if self.rank == 0 else "none", self.run, say=self._say)
        """``config.report_to``'s experiment trackers (:mod:`workbench.rl.trackers`): a copy of every metrics row and
        each step's completions, opened at the first."""
        self.health = HealthMonitor(rules_for(config.health_rules), config.health_reference_steps)
        """The run's health signals against their references, every step (:mod:`workbench.rl.health`)."""
        self.stop_on = parse_stop_on(config.stop_on_alarm, self.health.rules)
        self.stopped: Alarm | None = None
        """The alarm ``stop_on_alarm`` named that ended the run early, if one did."""
        self.best: dict[str, Any] | None = None
        """``keep_best``'s state: the best validation round so far (``step``, ``metric``, ``value``) and the rounds
        since without a gain (``stale``); kept in each checkpoint."""

    def _dataset_tools(self, train: Sequence[Example]) -> Toolbox | Callable[[Example], Toolbox]:
        """A dataset file's tools: one toolbox over all the training questions' paragraphs (``pooled``), or a
        function giving each question a toolbox over its own (``per-question``; :meth:`roll_out` then rolls out each
        question's group on its own)."""
        from workbench.data.corpora import check_own_paragraphs, corpus_from_contexts
        from workbench.tools.toolbox import build_toolbox

        cfg = self.config

        def tools(passages: list[Any]) -> Toolbox:
            return build_toolbox(self.protocol, None, passages=passages, retriever=cfg.retriever,
                                 tokenizer=self.tokenizer, encoder=self._search_encoder())

        if cfg.corpus != "per-question":
            passages = corpus_from_contexts(list(train))
            if not passages:
                raise ValueError(f"TrainConfig.dataset {cfg.dataset!r}: its questions carry no paragraphs to search; "
                                 "pass a corpus file (--corpus FILE)")
            return tools(passages)
        check_own_paragraphs(train, cfg.dataset)
        kept: dict[str, Toolbox] = {}

        def per_question(example: Example) -> Toolbox:
            if example.id not in kept:
                kept[example.id] = tools(corpus_from_contexts([example], fill_supporting=False))
            return kept[example.id]

        per_question.per_question = True  # type: ignore[attr-defined]  # roll_out: one toolbox per question
        return per_question

    # ------------------------------------------------------------------ helpers
    def _say(self, msg: str) -> None:
        if self.rank == 0 and self.progress:
            print(msg, flush=True)

    def _warn(self, msg: str) -> None:
        """``warning: msg`` on stderr (rank 0), with or without progress output (``--no-progress`` hides ``_say``)."""
        if self.rank == 0:
            print(f"warning: {msg}", file=sys.stderr, flush=True)

    def step_seed(self, step: int, round_: int = 0) -> int:
        """The seed of step ``step``'s draw ``round_`` on this process: every random draw of a step comes from
        ``(seed, step, round, rank)``, so a resumed run draws what an uninterrupted one would."""
        return (self.config.seed * 1_000_003 + step * 1009 + round_ * 7919 + self.rank * 104_729) % (2**31 - 1)

    @property
    def feature_needs(self) -> FeatureNeeds:
        """What the feature step computes (:class:`~workbench.rewards.preset.FeatureNeeds`): the method's
        declaration if ``config.method`` is set, else the reward preset's (``parts.needs``)."""
        return self.parts.needs

    def _encoder_arg(self) -> Any:
        enc = self.config.encoder
        if enc == "none" or (enc == "auto" and not self.feature_needs.encoder):
            return False
        if self._encoder is None:
            from workbench.tools.dense import load_encoder

            self._encoder = load_encoder(None if enc in ("auto", "default") else enc,
                                         query_prefix=self.config.query_prefix, pooling=self.config.pooling)
        return self._encoder

    def _search_encoder(self) -> Any:
        """Dense search's query encoder (``config.encoder`` with its prefix and pooling); None for BM25."""
        c = self.config
        if c.retriever != "dense":
            return None
        from workbench.tools.dense import load_encoder

        return load_encoder(None if c.encoder in ("auto", "none", "default") else c.encoder,
                            query_prefix=c.query_prefix, pooling=c.pooling)

    def _evidence_arg(self) -> Any:
        if not self.feature_needs.evidence_model:
            return None
        if self._evidence is None:
            from workbench.rewards.evidence import as_evidence_scorer

            self._evidence = as_evidence_scorer(self.config.evidence_model, base_backend=self.backend)
        return self._evidence

    def _judges_arg(self) -> list[Any]:
        """``config.judges`` over ``config.judge_model`` (None: the policy's backend, as the evidence
        model's fallback). A method's declared judges are optional and not switched on here."""
        if self._judges is None:
            self._judges = []
            if self.config.judges:
                from workbench.rewards.judges import get_judge

                llm = self.backend
                if self.config.judge_model:
                    from workbench.rollout.backends import make_backend

                    llm = make_backend("hf", self.config.judge_model)
                self._judges = [get_judge(name, llm) for name in self.config.judges]
        return self._judges

    @property
    def current_rubric(self) -> Rubric:
        """The reward rubric with the config's parameters and weights, at the current stage (a staged reward)."""
        return self.parts.rubric(self.config, self.stage if self.staged else None)

    # ------------------------------------------------------------------ phases
    def sample_questions(self, n: int) -> list[Example]:
        """The next ``n`` training questions (this process's shard, curriculum order)."""
        return self.data.take(n)

    def roll_out(self, examples: Sequence[Example], seed: int, greedy: bool = False,
                 group_size: int | None = None) -> list[Trajectory]:
        """Groups of trajectories with the current adapter (KV cache dropped afterwards)."""
        cfg = self.config.rollout_config(seed, greedy=greedy, group_size=group_size)
        self.adapter_sync(self.opt_step)  # a serving backend gets the adapter of this optimizer step
        self.policy.model.eval()
        meta = {"method": self.protocol.name, "model": self.config.model}
        with torch.no_grad():
            if not getattr(self.toolbox, "per_question", False):
                trajs = rollout(list(examples), self.protocol, self.toolbox, self.backend, cfg, progress=self.progress,
                                meta=meta)
            else:  # each question its own tools: its group rolls out on its own (the engine shares one toolbox)
                trajs = [t for ex in examples for t in rollout([ex], self.protocol, self.toolbox(ex), self.backend, cfg,
                                                               progress=False, meta=meta)]
        self.backend.clear_cache()
        return trajs

    def featurize(self, trajs: Sequence[Trajectory], examples: Sequence[Example]) -> pd.DataFrame:
        """The features table (``workbench.rewards.features``) of ``trajs``."""
        from workbench.rewards.features import compute_features

        feats = compute_features(list(trajs), list(examples), evidence_model=self._evidence_arg(),
                                 judges=self._judges_arg(), encoder=self._encoder_arg())
        if self.config.judges:
            self.backend.clear_cache()  # judge prompts ran through the policy's backend
        return feats

    def score(self, features: pd.DataFrame) -> RewardTable:
        """The current rubric (with the current reward stage) on a features table."""
        return self.current_rubric(features)

    def advantages(self, rewards: np.ndarray, group_ids: Sequence[str],
                   lengths: Sequence[int] | None = None) -> np.ndarray:
        """``LossConfig.adv_norm`` advantages; NaN rewards are left out of the statistics and get 0.
        ``lengths``: policy tokens per trajectory (token-weighted batch statistics of ``reinforce_pp``)."""
        lc = self.loss_cfg
        return compute_advantages(torch.as_tensor(rewards), list(group_ids), lc.adv_norm, lc.adv_eps, lc.adv_std,
                                  lengths=lengths).numpy()

    def collect(self, step: int | None = None) -> StepBatch:
        """Sample questions, roll out, score, filter (dynamic sampling) and compute advantages."""
        import pandas as pd

        step = self.step + 1 if step is None else step
        cfg = self.config
        secs = {"rollout": 0.0, "reward": 0.0}
        t_collect = time.perf_counter()
        rounds: list[tuple[list[Trajectory], Any, Any]] = []

        def sample_round(needed: int):
            r = len(rounds)
            exs = self.sample_questions(needed)
            t0 = time.perf_counter()
            trajs = self.roll_out(exs, seed=self.step_seed(step, r))
            secs["rollout"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            feats = self.featurize(trajs, exs)
            table = self.score(feats)
            secs["reward"] += time.perf_counter() - t0
            rewards = table.total.astype(np.float64)  # NaN = a failed reward: left out of the group statistics
            gids = [f"r{r}:{t.group_id}" for t in trajs]
            rounds.append((trajs, feats, table))
            items = [(r, i) for i in range(len(trajs))]
            return rewards, gids, items

        lc = self.loss_cfg
        if lc.dynamic_filter:
            kept_items, stats = fill_batch(sample_round, cfg.questions_per_step, lc.filter_max_rounds,
                                           lc.filter_criterion, lc.filter_keep_singletons)
            mixed_share = stats.keep_rate
        else:
            rewards, gids, items = sample_round(cfg.questions_per_step)
            keep = keep_groups(torch.as_tensor(rewards), gids, lc.filter_criterion)
            n_groups = len(set(gids))
            mixed = len({g for g, k in zip(gids, keep.tolist()) if k})
            # no filter: every group trains (uniform groups get advantage 0)
            stats = FilterStats(target=n_groups, rounds=1, generated=n_groups, generated_trajectories=len(items),
                                kept=n_groups)
            kept_items = items
            mixed_share = mixed / max(1, n_groups)
        kept_set = set(kept_items)

        generated, frames, tables = [], [], []
        for r, (trajs, feats, table) in enumerate(rounds):
            generated += trajs
            f = feats.copy()
            f["step"], f["round"] = step, r
            f["reward"] = table.total
            for comp in table.components:
                f[f"reward_{comp}"] = table.values[comp]
            f["kept"] = [(r, i) in kept_set for i in range(len(trajs))]
            f["group_id"] = [f"r{r}:{g}" for g in f["group_id"]]
            frames.append(f)
            tables.append(table)
        features = pd.concat(frames, ignore_index=True)
        kept_mask = features["kept"].to_numpy(bool)
        batch_trajs = [t for t, k in zip(generated, kept_mask) if k]
        rewards = features["reward"].to_numpy(np.float64)
        n_failed = int(np.isnan(rewards).sum())
        self._check_failed(n_failed, len(generated), tables, step)
        adv = np.zeros(len(generated))
        if kept_mask.any():
            lengths = [t.n_policy_tokens for t, k in zip(generated, kept_mask) if k]
            adv[kept_mask] = self.advantages(rewards[kept_mask], features["group_id"][kept_mask].tolist(), lengths)
        features["advantage"] = adv
        for t, a, rw, k in zip(generated, adv, rewards, kept_mask):
            t.meta.update(step=step, reward=float(rw), advantage=float(a), kept=bool(k))
        secs["collect"] = time.perf_counter() - t_collect
        return StepBatch(batch_trajs, rewards[kept_mask], adv[kept_mask], generated, features,
                         tables[-1] if tables else None, stats, mixed_share, secs, n_failed)

    def _check_failed(self, n_failed: int, n: int, tables: Sequence[Any], step: int) -> None:
        """Stop when more than ``max_failed_share`` of the step's trajectories (all processes) failed."""
        n_failed_all, n_all = self._sum([n_failed, n])
        check_failed_share(int(n_failed_all), int(n_all), self.config.max_failed_share, tables, step,
                           hint=missing_encoder(self.config.encoder, self.feature_needs))

    # ------------------------------------------------------------------ distributed helpers
    def _sum(self, values: Sequence[float]) -> list[float]:
        return all_reduce_sum(values, self.world_size)

    def reduce_grads(self) -> None:
        """Sum the LoRA gradients over processes (each process's loss is already divided by the
        global token / sequence count, so the sum is the gradient of the whole batch)."""
        all_reduce_grads(list(self.policy.trainable_parameters()), self.world_size)

    # ------------------------------------------------------------------ update
    def build(self, sb: StepBatch) -> RLBatch:
        return build_batch(sb.trajectories, advantages=sb.advantages, rewards=sb.rewards, pad_id=self.pad_id)

    def update(self, batch: RLBatch, step: int | None = None) -> dict[str, float]:
        """Optimizer epochs over mini-batches, gradient accumulation over micro-batches
        (:func:`workbench.rl.update.run_update`: micro-batching, rollout mismatch, TIS, FLOPs)."""
        return run_update(self, batch, self.step + 1 if step is None else step)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Collect a batch, update the adapter, log; returns the metrics row."""
        self._phase("rollouts")
        sb = self.collect(self.step + 1)
        self._phase(f"update of {len(sb.trajectories)} trajectories")
        return self.apply(sb)

    def apply(self, sb: StepBatch) -> dict[str, Any]:
        """Update the adapter on a collected batch, advance the step, log; returns the metrics row."""
        step = self.step + 1
        t0 = time.perf_counter()
        # an empty batch still goes through update(): under data parallel every process joins its collectives
        batch_stats = self.update(self.build(sb) if sb.trajectories else empty_batch(), step)
        self.step = step
        row = self._step_row(sb, batch_stats, sb.seconds.get("collect", 0.0) + time.perf_counter() - t0)
        self._maybe_switch_stage(row)
        if self.rank == 0:
            self._write_step(sb, row)
        return row

    def _step_row(self, sb: StepBatch, st: dict[str, float], seconds: float) -> dict[str, Any]:
        row = step_row(sb, st, seconds, self.step, self.stage)
        if self.world_size > 1:
            keys = sorted(k for k, v in row.items() if isinstance(v, (int, float)) and k not in ("step", "stage"))
            vals = self._sum([float(row[k]) if row[k] == row[k] else 0.0 for k in keys])
            for k, v in zip(keys, vals):
                row[k] = v / self.world_size
        return row

    def _maybe_switch_stage(self, row: dict[str, Any]) -> None:
        cfg = self.config
        if self.stage != 1:
            return
        by_step = cfg.stage_switch_step is not None and self.step >= cfg.stage_switch_step
        by_search = cfg.stage_switch_searches is not None and row["searches_per_answer"] >= cfg.stage_switch_searches
        if by_step or by_search:
            self.stage = 2
            row["stage_switched"] = 1
            self._say(f"step {self.step}: reward stage 1 -> 2 ({'step' if by_step else 'searches per answer'} reached)")

    def _write_step(self, sb: StepBatch, row: dict[str, Any]) -> None:
        write_step(self.run, self.step, sb, row)
        self.trackers.log_step(row, sb.generated, sb.features, self.data.examples)
        self.check_health(row, sb)

    # ------------------------------------------------------------------ health
    def check_health(self, row: dict[str, Any], sb: StepBatch | None = None) -> list[Alarm]:
        """The step's health signals through the rules: its row appended to ``health.jsonl``, each alarm that fires
        one line on stderr (and in the trackers); an alarm ``stop_on_alarm`` names ends the run after this step."""
        signals = step_signals(row, sb.generated if sb else None, sb.features if sb else None)
        health, fired = self.health.observe(self.step, signals)
        self.run.append_line(HEALTH_FILE, health)
        for alarm in fired:
            self._alarm(alarm.line())
            self.trackers.log_row({f"alarm_{alarm.name}": 1.0}, self.step)
            if alarm.name in self.stop_on and self.stopped is None:
                self.stopped = alarm
        return fired

    def _alarm(self, line: str) -> None:
        from tqdm.auto import tqdm

        if self.rank == 0:
            tqdm.write(line, file=sys.stderr)

    def _stop_now(self) -> bool:
        """Whether an alarm ``stop_on_alarm`` names fired on rank 0 (every process stops at the same step)."""
        flag = 1.0 if self.stopped is not None else 0.0
        return (self._sum([flag])[0] if self.world_size > 1 else flag) > 0

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, limit: int | None = None, save: bool = True, examples: Sequence[Example] | None = None,
                 prefix: str = "eval") -> dict[str, float]:
        """Greedy rollouts on the held-out questions (or ``examples``, e.g. the validation set with ``prefix`` "val"):
        mean reward (current rubric), EM, cover-EM, F1, searches, answered, as ``<prefix>_*``.

        ``save``: write the trajectories to ``<prefix>/<step>.trajectories.parquet`` in the run."""
        exs = list(self.eval_examples if examples is None else examples)
        exs = exs[: limit] if limit else exs
        if not exs:
            return {}
        exs = exs[self.rank :: self.world_size]
        t0 = time.perf_counter()
        trajs = self.roll_out(exs, seed=self.step_seed(0, 1), greedy=True, group_size=1)
        feats = self.featurize(trajs, exs)
        table = self.score(feats)
        r = table.total.astype(np.float64)
        out = {f"{prefix}_reward_mean": nanmean(r), f"{prefix}_n": float(len(exs))}
        for col in ("em", "cem", "f1"):
            out[f"{prefix}_{col}"] = nanmean(feats[col].to_numpy(np.float64))
        out[f"{prefix}_searches"] = float(np.mean([t.n_searches for t in trajs])) if trajs else 0.0
        out[f"{prefix}_answered"] = float(np.mean([t.answer is not None for t in trajs])) if trajs else 0.0
        out[f"{prefix}_seconds"] = time.perf_counter() - t0
        if self.world_size > 1:
            keys = sorted(out)
            vals = self._sum([out[k] * (len(exs) if k != f"{prefix}_n" else 1) for k in keys])
            n = self._sum([len(exs)])[0]
            out = {k: (v if k == f"{prefix}_n" else v / max(1, n)) for k, v in zip(keys, vals)}
        if self.rank == 0 and save:
            d = self.run.path / prefix
            d.mkdir(exist_ok=True)
            save_trajectories(trajs, d / f"{self.step:06d}.trajectories.parquet")
        return out

    def log_eval(self) -> dict[str, float]:
        """:meth:`evaluate` and append the result to ``metrics.jsonl`` (row ``step`` = steps done)."""
        ev = self.evaluate()
        if ev and self.rank == 0:
            self.run.append_step_metrics({"step": self.step, **ev})
            self.trackers.log_row(ev, self.step)
            self._say(f"eval @ step {self.step}: reward {ev['eval_reward_mean']:.3f}, cover-EM {ev['eval_cem']:.3f}, "
                      f"F1 {ev['eval_f1']:.3f} on {int(ev['eval_n'])} held-out questions")
        return ev

    def log_validation(self) -> dict[str, float]:
        """:meth:`evaluate` on the validation questions (``val_*`` in ``metrics.jsonl``); with ``keep_best``, a round
        that beats the best so far saves this step's adapter as ``checkpoints/best``."""
        if not self.val_examples:
            return {}
        ev = self.evaluate(examples=self.val_examples, prefix="val")
        if not ev:
            return ev
        if self.rank == 0:
            self.run.append_step_metrics({"step": self.step, **ev})
            self.trackers.log_row(ev, self.step)
        metric = self.config.keep_best
        if metric is not None:
            key = "val_reward_mean" if metric == "reward" else f"val_{metric}"
            value = float(ev[key])
            best = self.best
            if best is None or value > best["value"]:
                self.best = {"step": self.step, "metric": metric, "value": value, "stale": 0,
                             "n": int(ev["val_n"]), "first": self.step}
                self.save_best()
                mark = f"best so far (was {best['value']:.3f} at step {best['step']})" if best else "the first"
            elif value == best["value"]:
                # a tie on a few questions is noise: the later adapter, which trained more, is kept; no gain, so it
                # still counts towards early_stop
                best.update(step=self.step, stale=best["stale"] + 1)
                self.save_best()
                mark = f"ties the best {value:.3f}: the later adapter is kept ({best['stale']} round(s) without a gain)"
            else:
                best["stale"] += 1
                mark = f"best stays {best['value']:.3f} at step {best['step']} ({best['stale']} round(s) without a gain)"
            self._say(f"validation @ step {self.step}: {metric} {value:.3f} on {int(ev['val_n'])} questions: {mark}")
        return ev

    def save_best(self) -> Path | None:
        """The current adapter as ``checkpoints/best`` (atomically), with ``selection.json``: the step, the metric,
        its value and the validation set's size."""
        if self.rank != 0 or self.best is None:
            return None
        import shutil

        from workbench.util.io import atomic_write_json

        final = self.run.path / "checkpoints" / "best"
        tmp = final.with_name("best.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        self.policy.save_adapter(tmp)
        atomic_write_json(tmp / SELECTION_FILE, {**selection_note(self.best), "val_questions": len(self.val_examples)})
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return final

    def begin(self) -> dict[str, float]:
        """Evaluate the untrained policy once (step 0: the held-out questions when ``eval_limit`` is set, the
        validation questions when ``val_questions`` is); a no-op afterwards, so a notebook can look at the step-0
        score before its first ``collect()``."""
        if self.step != 0 or getattr(self, "_began", False):
            return {}
        self._began = True
        ev = self.log_eval() if self.config.eval_limit else {}
        return {**ev, **self.log_validation()}

    # ------------------------------------------------------------------ the loop
    def train(self, steps: int | None = None, on_step: Callable[[dict[str, Any]], None] | None = None) -> Run | None:
        """Run until ``steps`` (default ``config.steps``) training steps are done; checkpoint and summarize. The run's
        writer lock is held throughout and released on every way out, a failed or interrupted step included, so the
        same process (a notebook after Ctrl-C) can resume the run; such a run's ``status.json`` says ``failed``, with
        the error and the step it stopped at.

        ``on_step(row)`` is called after each step's row (and any evaluation after it) is logged, and once more after
        the final evaluation: a live view redraws from the run's files there (notebook 04's curves)."""
        if self.rank == 0:
            self.run.take_writer_lock()  # a no-op when held since __init__; taken again by a second train() call
        try:
            return self._train(steps, on_step)
        except BaseException as e:
            if self.rank == 0:  # the views then say the run failed and why, not "killed" or "still running"
                try:
                    self.run.mark_failed(e, step=self.step)
                except OSError:  # a full disk: the error raised is the step's own, not the marker's
                    pass
            raise
        finally:
            self._bar, self._postfix = None, {}
            if self.rank == 0:
                self.run.release_writer_lock()

    def _phase(self, what: str) -> None:
        """Name the phase the step is in on the progress bar (a CPU update takes minutes: the bar says so)."""
        bar = getattr(self, "_bar", None)
        if bar is not None:
            done = ", ".join(f"{k}={v}" for k, v in getattr(self, "_postfix", {}).items())
            bar.set_postfix_str(f"{done}{', ' if done else ''}step {self.step + 1}: {what}", refresh=True)

    def _train(self, steps: int | None, on_step: Callable[[dict[str, Any]], None] | None = None) -> Run | None:
        from tqdm.auto import tqdm

        cfg = self.config
        total = cfg.steps if steps is None else steps
        self.begin()
        if lost := missing_encoder(cfg.encoder, self.feature_needs):
            self._warn(lost)
        # closed on the way out either way (a failed step leaves the bar marked failed, not running)
        validated = -1  # the step of the last validation round
        row: dict[str, Any] = {}
        with tqdm(total=total, initial=self.step, desc=self.progress_label(), disable=not self.progress) as bar:
            self._bar = bar if self.progress else None
            while self.step < total:
                row = self.train_step()
                bar.update(1)
                self._postfix = self.progress_postfix(row)
                bar.set_postfix(**self._postfix)
                if self._stop_now():
                    self._alarm(f"stopping at step {self.step}: alarm {self.stopped.name if self.stopped else '?'} "
                                "is in --stop-on-alarm")
                    break
                if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < total:
                    if cfg.eval_limit:
                        self.log_eval()
                    self.log_validation()
                    validated = self.step
                    if cfg.early_stop and self.best is not None and self.best["stale"] >= cfg.early_stop:
                        self._say(f"early stop at step {self.step}: {cfg.early_stop} validation round(s) without "
                                  f"a gain over step {self.best.get('first', self.best['step'])}")
                        break
                if cfg.save_every and self.step % cfg.save_every == 0 and self.step < total:
                    self.save_checkpoint()
                if on_step is not None:
                    on_step(row)
            self._bar = None
        if cfg.eval_limit:
            self.log_eval()
        if self.val_examples and validated != self.step:
            self.log_validation()
        if on_step is not None and row:
            on_step(row)
        self.save_checkpoint()
        if self.rank == 0:
            self.finalize()
            self.trackers.close()
            self.run.mark_complete(steps=self.step)  # last: the run is complete only now
        return self.run

    def progress_label(self) -> str:
        return f"train {self.config.preset}/{self.config.reward}"

    def progress_postfix(self, row: dict[str, Any]) -> dict[str, str]:
        """What the progress bar shows after a step."""
        return {"reward": f"{row['reward_mean']:.3f}", "kept": f"{row['kept_group_share']:.2f}",
                "s": f"{row['time_step_s']:.0f}"}

    def finalize(self) -> dict[str, Any]:
        """Join the per-step tables into ``trajectories.parquet`` / ``features.parquet``; write ``metrics.json``
        (with the alarms that fired, the alarm that stopped the run and the kept checkpoint, where any)."""
        summary = finalize_run(self.run, self.config, self.step)
        summary["alarms"] = [{"name": a.name, "step": a.step, "text": a.text} for a in self.health.alarms]
        if self.stopped is not None:
            summary["stopped_by_alarm"] = {"name": self.stopped.name, "step": self.stopped.step}
        if self.best is not None:
            summary["best"] = selection_note(self.best)
        self.run.write_metrics(summary)
        return summary

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_dir(self, step: int | None = None) -> Path:
        return checkpoint_dir(self.run.path, self.step if step is None else step)

    def save_checkpoint(self) -> Path | None:
        """Adapter (PEFT safetensors), optimizer, RNG states, data cursor and stage, atomically
        (:func:`workbench.rl.checkpoint.save_checkpoint`)."""
        return _save_checkpoint(self)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore from a checkpoint directory (safetensors + JSON; an old pickle file is refused)."""
        _load_checkpoint(self, path)
        if self.rank == 0:  # drop what a killed run logged after its checkpoint (the resumed run logs it again)
            truncate_logs(self.run, self.step)
            self._resume_health()

    def _resume_health(self) -> None:
        """The health monitor as it stood at the checkpoint: ``health.jsonl`` cut to the checkpoint's step, its
        signals read back in order (the references and alarms it had; nothing printed again)."""
        rows = [r for r in read_health(self.run.path) if r["step"] <= self.step]
        from workbench.util.io import atomic_write_text

        atomic_write_text(self.run.path / HEALTH_FILE, "".join(json.dumps(r) + "\n" for r in rows))
        for r in rows:
            self.health.observe(r["step"], r.get("signals") or {})

    @classmethod
    def resume(cls, run_dir: str | os.PathLike, resolve: Callable[[TrainConfig], RunParts], progress: bool = True,
               **overrides: Any) -> Trainer:
        """A trainer for an existing run, restored from its newest checkpoint (``steps`` may be raised)."""
        run = open_run(run_dir)
        run.take_writer_lock()  # refused at once if another process writes the run (taken for good in __init__)
        run.release_writer_lock()
        stored = {k: v for k, v in run.config.items() if k in {f.name for f in dataclasses.fields(cls.config_class)}}
        cfg = cls.config_class.from_dict({**stored, **overrides})
        trainer = cls(cfg, resolve(cfg), run=run.path, progress=progress)
        ck = latest_checkpoint(run.path)
        if ck is not None:
            trainer.load_checkpoint(ck)
            trainer._say(f"resumed {run.path} at step {trainer.step} from {ck.name}")
        else:
            trainer._say(f"{run.path} has no checkpoint yet: starting from step 0")
            if trainer.rank == 0:
                truncate_logs(run, 0)
        return trainer
