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
  vLLM), ``trainer_state.pt`` (optimizer, RNG states, data cursor, reward stage).

``Trainer.resume(run_dir)`` continues a killed run from its newest checkpoint; the next step
is the one an uninterrupted run would have taken (every random draw of a step is seeded by
the step number, and the optimizer and data cursor are restored).

Data parallel: under ``accelerate launch --num_processes N`` (gloo on CPU, NCCL on GPUs) each
process rolls out its own shard of the questions; token counts are summed across processes
before the loss is normalized and gradients are summed, so N processes compute the gradient of
the whole batch (:meth:`Trainer._all_reduce_grads`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.data.example import Example
from workbench.rewards.features import save_features
from workbench.rl.advantages import FilterStats, compute_advantages, fill_batch, keep_groups
from workbench.rl.batch import RLBatch, build_batch
from workbench.rl.config import LossConfig, get_loss_config
from workbench.rl.losses import policy_loss
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.runs import Run, open_run
from workbench.trajectory import Trajectory, save_trajectories

log = logging.getLogger(__name__)

CURRICULA = ("none", "hops", "sources")
STATE_FILE = "trainer_state.pt"
LATEST = "latest"


# ============================================================================= config


@dataclass
class TrainConfig:
    """Everything a training run needs; saved as the run's ``config.json``.

    Defaults are tiny CPU settings for the default model; pass real sizes on a GPU.
    """

    model: str = "smollm2-135m"
    """Policy base model: the ``smollm2-135m`` alias, a local path or a cached HF id."""
    protocol: str = "search_r1"
    """Agent protocol (``workbench.protocols.PROTOCOLS``)."""
    protocol_kwargs: dict[str, Any] = field(default_factory=lambda: {"observation_mode": "chat"})
    """Keyword arguments of the protocol (e.g. ``{"observation_mode": "chat", "top_k": 3}``)."""
    reward: str = "dynasearcher"
    """Reward preset (``workbench.rewards.presets.PRESETS``)."""
    reward_params: dict[str, Any] = field(default_factory=dict)
    """Preset parameter overrides (e.g. ``{"alpha": 0.5}``)."""
    reward_weights: dict[str, float] = field(default_factory=dict)
    """Component weight overrides."""
    preset: str = "grpo"
    """Optimizer preset: grpo, dapo, gspo, dspo, dr_grpo (``workbench.rl.config.PRESETS``)."""
    loss_overrides: dict[str, Any] = field(default_factory=dict)
    """LossConfig field overrides (e.g. ``{"kl_coef": 0.0, "num_mini_batches": 2}``)."""

    dataset: str = "world"
    """``world`` (the synthetic world; others through the Python API: ``Trainer(examples=..., toolbox=...)``)."""
    split: str = "train"
    eval_split: str = "dev"
    eval_limit: int = 0
    """Held-out questions evaluated greedily at step 0, every ``eval_every`` steps and at the end (0 = none)."""
    eval_every: int = 0
    """Evaluate every this many steps (0 = only before and after training)."""
    question_types: list[str] | None = None
    """Only questions of these types (world: 1hop, compositional, comparison, inference, chain), train and held-out."""
    retriever: str = "bm25"
    curriculum: str = "none"
    """Question order: ``none`` (shuffled per epoch), ``hops`` (fewer hops first) or ``sources`` (fewer sources first)."""

    steps: int = 20
    questions_per_step: int = 4
    """Groups per step (per process under data parallel)."""
    group_size: int = 4
    max_turns: int = 3
    max_new_tokens: int = 64
    max_total_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0

    lr: float = 2e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    """Max global gradient norm (0 = no clipping)."""
    micro_batch_size: int = 4
    """Sequences per forward/backward (gradient accumulation; does not change the gradient)."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: list[str] | None = None
    device: str = "auto"

    stage_switch_step: int | None = None
    """Multi-stage rewards (When-to-Search): switch the preset's ``stage`` 1 → 2 at this step."""
    stage_switch_searches: float | None = None
    """...or as soon as a step's mean searches per answer reaches this value."""
    encoder: str = "auto"
    """Sentence encoder for embedding features: ``auto`` (only when the preset reads query
    similarity), ``none``, ``default`` (all-MiniLM-L6-v2) or a path."""
    evidence_model: str | None = None
    """Cross-family model for ``rsearch_evidence`` (None: the base model answers, with a warning)."""

    seed: int = 0
    save_every: int = 10
    """Checkpoint every this many steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept (older ones are deleted)."""

    def __post_init__(self) -> None:
        def bad(f: str, msg: str) -> ValueError:
            return ValueError(f"TrainConfig.{f}: {msg}")

        for f in ("steps", "questions_per_step", "group_size", "max_turns", "max_new_tokens", "max_total_tokens",
                  "micro_batch_size", "lora_r", "lora_alpha"):
            if getattr(self, f) < 1:
                raise bad(f, f"must be >= 1, got {getattr(self, f)}")
        for f in ("eval_limit", "eval_every", "save_every", "keep_checkpoints"):
            if getattr(self, f) < 0:
                raise bad(f, f"must be >= 0, got {getattr(self, f)}")
        if self.lr <= 0:
            raise bad("lr", f"must be > 0, got {self.lr}")
        if self.grad_clip < 0:
            raise bad("grad_clip", f"must be >= 0 (0 = no clipping), got {self.grad_clip}")
        if self.curriculum not in CURRICULA:
            raise bad("curriculum", f"{self.curriculum!r} is not one of {CURRICULA}")
        if self.group_size < 2:
            raise bad("group_size", f"GRPO-family advantages compare rollouts of one question; use >= 2, got {self.group_size}")
        from workbench.protocols import PROTOCOLS
        from workbench.rewards.presets import PRESETS as REWARDS

        if self.protocol not in PROTOCOLS:
            raise bad("protocol", f"unknown protocol {self.protocol!r}; valid: {', '.join(sorted(PROTOCOLS))}")
        if self.reward not in REWARDS:
            raise bad("reward", f"unknown reward preset {self.reward!r}; valid: {', '.join(sorted(REWARDS))}")
        rubric = self.rubric(stage=None)  # validates reward_params / reward_weights with named errors
        staged = self.stage_switch_step is not None or self.stage_switch_searches is not None
        if staged and "stage" not in rubric.param_names:
            raise bad("stage_switch_step", f"reward preset {self.reward!r} has no stage parameter; stage switching "
                      "applies to when_to_search (drop stage_switch_step / stage_switch_searches)")
        if self.stage_switch_step is not None and self.stage_switch_step < 1:
            raise bad("stage_switch_step", f"must be >= 1, got {self.stage_switch_step}")
        self.loss_config()  # validates the optimizer mix with LossConfig's own messages

    # ------------------------------------------------------------------ derived
    def loss_config(self) -> LossConfig:
        over = dict(self.loss_overrides)
        over.setdefault("group_size", self.group_size)
        if get_loss_config(self.preset).agg == "seq-mean-token-sum-norm":
            over.setdefault("max_len", self.max_total_tokens)
        over.setdefault("kl_anneal_steps", None)
        if over.get("kl_coef_end") is not None and over["kl_anneal_steps"] is None:
            over["kl_anneal_steps"] = self.steps
        if over["kl_anneal_steps"] is None:
            over.pop("kl_anneal_steps")
        return get_loss_config(self.preset, **over)

    def rubric(self, stage: int | None = None) -> Any:
        from workbench.rewards.presets import get_preset

        params = dict(self.reward_params)
        if stage is not None:
            params["stage"] = stage
        return get_preset(self.reward, weights=self.reward_weights or None, **params)

    def rollout_config(self, seed: int, greedy: bool = False, group_size: int | None = None) -> RolloutConfig:
        return RolloutConfig(
            group_size=group_size or self.group_size, max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
            max_total_tokens=self.max_total_tokens, temperature=0.0 if greedy else self.temperature,
            top_p=self.top_p, seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; valid fields: {', '.join(sorted(names))}")
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> TrainConfig:
        """From a JSON or YAML file (keys = field names), with overrides on top."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"train config file not found: {p}")
        text = p.read_text(encoding="utf-8")
        if p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a mapping of TrainConfig fields, got {type(data).__name__}")
        return cls.from_dict({**data, **overrides})


# ============================================================================= data


class DataStream:
    """An endless, resumable stream of examples: epoch by epoch, in curriculum or shuffled order.

    The order of epoch e depends only on ``(seed, e)``, so ``state_dict()`` = ``(epoch, pos)``
    is all a resume needs.
    """

    def __init__(self, examples: Sequence[Example], seed: int = 0, curriculum: str = "none"):
        if not examples:
            raise ValueError("DataStream: no training examples (check the dataset and split)")
        if curriculum not in CURRICULA:
            raise ValueError(f"curriculum {curriculum!r} is not one of {CURRICULA}")
        self.examples = list(examples)
        self.seed = seed
        self.curriculum = curriculum
        self.epoch = 0
        self.pos = 0
        self._order = self.order(0)

    def order(self, epoch: int) -> list[int]:
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.examples)).tolist()
        if self.curriculum == "none":
            return perm
        rank = {i: r for r, i in enumerate(perm)}  # ties keep the epoch's shuffle

        def key(i: int) -> tuple:
            ex = self.examples[i]
            hops = ex.hops if ex.hops is not None else 99
            if self.curriculum == "hops":
                return (hops, rank[i])
            return (len(set(ex.sources)) or 99, hops, rank[i])

        return sorted(range(len(self.examples)), key=key)

    def take(self, n: int) -> list[Example]:
        out = []
        for _ in range(n):
            if self.pos >= len(self._order):
                self.epoch += 1
                self.pos = 0
                self._order = self.order(self.epoch)
            out.append(self.examples[self._order[self.pos]])
            self.pos += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self.order(self.epoch)


# ============================================================================= batches


@dataclass
class StepBatch:
    """What :meth:`Trainer.collect` gathered for one step."""

    trajectories: list[Trajectory]
    """Kept trajectories (the training batch), groups together."""
    rewards: np.ndarray
    advantages: np.ndarray
    generated: list[Trajectory]
    """Every trajectory generated this step (kept or not)."""
    features: Any
    """Features of ``generated`` with ``step``, ``round``, ``reward``, ``advantage``, ``kept`` columns."""
    reward_table: Any
    filter: FilterStats
    mixed_group_share: float
    """Share of generated groups whose rewards differ (the ones that carry a learning signal)."""
    seconds: dict[str, float] = field(default_factory=dict)


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def maybe_init_distributed() -> tuple[int, int]:
    """Join the process group when launched by ``accelerate launch`` / ``torchrun`` (WORLD_SIZE > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not (torch.distributed.is_available()
                                                           and torch.distributed.is_initialized()):
        from accelerate import PartialState

        PartialState()  # initializes torch.distributed (gloo on CPU, NCCL on CUDA)
    return _dist()


# ============================================================================= trainer


class Trainer:
    """One training run. See the module docstring for the loop and the run directory.

    Args:
        config: a :class:`TrainConfig`.
        run: where to write (a Run, a directory or None = a new ``runs/train-...``).
        policy: a ready :class:`~workbench.rl.policy.LoRAPolicy` (default: built from ``config``).
        examples / eval_examples / toolbox: train on your own data instead of the world.
        progress: show progress bars.
    """

    def __init__(self, config: TrainConfig, run: Run | str | os.PathLike | None = None, *, policy: Any = None,
                 examples: Sequence[Example] | None = None, eval_examples: Sequence[Example] | None = None,
                 toolbox: Any = None, progress: bool = True):
        from workbench.protocols import get_protocol
        from workbench.rollout.backends.hf import HFBackend

        self.config = config
        self.loss_cfg = config.loss_config()
        self.rank, self.world_size = maybe_init_distributed()
        self.progress = progress and self.rank == 0
        _seed_everything(config.seed)  # the same LoRA init on every process (also broadcast below)
        self.protocol = get_protocol(config.protocol, **config.protocol_kwargs)

        world = None
        if examples is None or (toolbox is None and config.dataset == "world"):
            if config.dataset != "world":
                raise ValueError(f"TrainConfig.dataset {config.dataset!r}: only 'world' is built in; pass examples= "
                                 "and toolbox= to Trainer for other data")
            from workbench.data.world import load_world

            world = load_world()
        self.world = world
        train = list(examples) if examples is not None else world.split(config.split)
        if eval_examples is not None:
            held = list(eval_examples)
        elif world is not None:
            held = world.split(config.eval_split)
        else:
            held = []
        if config.question_types:
            types = set(config.question_types)
            train = [e for e in train if e.qtype in types]
            held = [e for e in held if e.qtype in types]
            if not train:
                raise ValueError(f"TrainConfig.question_types {sorted(types)}: no training question has these types")
        self.eval_examples = held[: config.eval_limit]
        seen = {e.id for e in train}
        leaked = [e.id for e in self.eval_examples if e.id in seen]
        if leaked:
            raise ValueError(f"{len(leaked)} held-out questions are also training questions (e.g. {leaked[0]!r}); "
                             "use a different eval_split")
        shard = train[self.rank :: self.world_size]
        self.data = DataStream(shard, seed=config.seed, curriculum=config.curriculum)

        if policy is None:
            from workbench.rl.policy import LoRAPolicy

            policy = LoRAPolicy(config.model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                                target_modules=config.target_modules, device=config.device)
        self.policy = policy
        if self.world_size > 1:  # start in step: every process takes rank 0's adapter
            for p in policy.trainable_parameters():
                torch.distributed.broadcast(p.data, src=0)
        self.tokenizer = policy.tokenizer
        self.backend = HFBackend(policy.model, policy.tokenizer)
        if toolbox is None:
            from workbench.tools.toolbox import build_toolbox

            toolbox = build_toolbox(self.protocol, world, retriever=config.retriever, tokenizer=self.tokenizer)
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
        self.pad_id = self.backend.pad_id

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
            self.run.write_examples(train + self.eval_examples)
        else:
            self.run = None

    # ------------------------------------------------------------------ helpers
    def _say(self, msg: str) -> None:
        if self.rank == 0 and self.progress:
            print(msg, flush=True)

    def _step_seed(self, step: int, round_: int = 0) -> int:
        return (self.config.seed * 1_000_003 + step * 1009 + round_ * 7919 + self.rank * 104_729) % (2**31 - 1)

    def _encoder_arg(self) -> Any:
        enc = self.config.encoder
        if enc == "none":
            return False
        if enc == "auto":  # only When-to-Search's search reward reads embeddings (query similarity)
            if self.config.reward != "when_to_search":
                return False
            enc = "default"
        if self._encoder is None:
            from workbench.tools.dense import load_encoder

            self._encoder = load_encoder() if enc == "default" else load_encoder(enc)
        return self._encoder

    def _evidence_arg(self) -> Any:
        if self.config.reward != "rsearch_evidence":
            return None
        if self._evidence is None:
            from workbench.rewards.evidence import as_evidence_scorer

            self._evidence = as_evidence_scorer(self.config.evidence_model, base_backend=self.backend)
        return self._evidence

    @property
    def current_rubric(self) -> Any:
        staged = "stage" in self.config.rubric(None).param_names
        return self.config.rubric(self.stage if staged else None)

    # ------------------------------------------------------------------ phases
    def sample_questions(self, n: int) -> list[Example]:
        """The next ``n`` training questions (this process's shard, curriculum order)."""
        return self.data.take(n)

    def roll_out(self, examples: Sequence[Example], seed: int, greedy: bool = False,
                 group_size: int | None = None) -> list[Trajectory]:
        """Groups of trajectories with the current adapter (KV cache dropped afterwards)."""
        cfg = self.config.rollout_config(seed, greedy=greedy, group_size=group_size)
        self.policy.model.eval()
        with torch.no_grad():
            trajs = rollout(list(examples), self.protocol, self.toolbox, self.backend, cfg, progress=self.progress,
                            meta={"method": self.protocol.name, "model": self.config.model})
        self.backend.clear_cache()
        return trajs

    def featurize(self, trajs: Sequence[Trajectory], examples: Sequence[Example]) -> Any:
        """The features table (``workbench.rewards.features``) of ``trajs``."""
        from workbench.rewards.features import compute_features

        return compute_features(list(trajs), list(examples), evidence_model=self._evidence_arg(),
                                encoder=self._encoder_arg())

    def score(self, features: Any) -> Any:
        """The current rubric (with the current reward stage) on a features table."""
        return self.current_rubric(features)

    def advantages(self, rewards: np.ndarray, group_ids: Sequence[str]) -> np.ndarray:
        return compute_advantages(torch.as_tensor(rewards), list(group_ids), self.loss_cfg.adv_norm,
                                  self.loss_cfg.adv_eps).numpy()

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
            trajs = self.roll_out(exs, seed=self._step_seed(step, r))
            secs["rollout"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            feats = self.featurize(trajs, exs)
            table = self.score(feats)
            secs["reward"] += time.perf_counter() - t0
            rewards = np.nan_to_num(table.total.astype(np.float64), nan=0.0)
            gids = [f"r{r}:{t.group_id}" for t in trajs]
            rounds.append((trajs, feats, table))
            items = [(r, i) for i in range(len(trajs))]
            return rewards, gids, items

        if self.loss_cfg.dynamic_filter:
            kept_items, stats = fill_batch(sample_round, cfg.questions_per_step, self.loss_cfg.filter_max_rounds)
            mixed_share = stats.keep_rate
        else:
            rewards, gids, items = sample_round(cfg.questions_per_step)
            keep = keep_groups(torch.as_tensor(rewards), gids)
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
        rewards = np.nan_to_num(features["reward"].to_numpy(np.float64), nan=0.0)
        adv = np.zeros(len(generated))
        if kept_mask.any():
            adv[kept_mask] = self.advantages(rewards[kept_mask], features["group_id"][kept_mask].tolist())
        features["advantage"] = adv
        for t, a, rw, k in zip(generated, adv, rewards, kept_mask):
            t.meta.update(step=step, reward=float(rw), advantage=float(a), kept=bool(k))
        secs["collect"] = time.perf_counter() - t_collect
        return StepBatch(batch_trajs, rewards[kept_mask], adv[kept_mask], generated, features,
                         tables[-1] if tables else None, stats, mixed_share, secs)

    # ------------------------------------------------------------------ distributed helpers
    def _sum(self, values: Sequence[float]) -> list[float]:
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def _all_reduce_grads(self) -> None:
        """Sum the LoRA gradients over processes (each process's loss is already divided by the
        global token / sequence count, so the sum is the gradient of the whole batch)."""
        if self.world_size == 1:
            return
        params = [p for p in self.policy.trainable_parameters()]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        i = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[i : i + n].view_as(p))
            i += n

    # ------------------------------------------------------------------ update
    def build(self, sb: StepBatch) -> RLBatch:
        return build_batch(sb.trajectories, advantages=sb.advantages, rewards=sb.rewards, pad_id=self.pad_id)

    @torch.no_grad()
    def _forward_no_grad(self, batch: RLBatch, ref: bool) -> torch.Tensor:
        out = torch.zeros_like(batch.old_logprobs)
        fn = self.policy.ref_logprobs if ref else self.policy.logprobs
        for start in range(0, len(batch), self.config.micro_batch_size):
            sl = slice(start, start + self.config.micro_batch_size)
            T = int(batch.attention_mask[sl].sum(-1).max())
            lp = fn(batch.input_ids[sl, :T], batch.attention_mask[sl, :T], target_mask=batch.loss_mask[sl, :T] > 0)
            out[sl, :T] = lp.float().cpu()
        return out

    def update(self, batch: RLBatch, step: int | None = None) -> dict[str, float]:
        """Optimizer epochs over mini-batches, gradient accumulation over micro-batches."""
        step = self.step + 1 if step is None else step
        cfg, lc = self.config, self.loss_cfg
        secs = {"reference": 0.0, "old_logprobs": 0.0, "update": 0.0}
        min_rows = len(batch)
        if self.world_size > 1:  # every process must take the same number of optimizer steps
            t = torch.tensor([len(batch)])
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
            min_rows = int(t)
        if min_rows == 0:
            return {"skipped_update": 1.0, **{f"time_{k}_s": v for k, v in secs.items()}}
        if lc.needs_ref:
            t0 = time.perf_counter()
            batch.ref_logprobs = self._forward_no_grad(batch, ref=True)
            secs["reference"] = time.perf_counter() - t0
        on_policy = lc.on_policy
        if not on_policy:
            t0 = time.perf_counter()
            recomputed = self._forward_no_grad(batch, ref=False)
            m = batch.loss_mask > 0
            diff = (recomputed - batch.old_logprobs)[m].abs()
            sampler_gap = float(diff.mean()) if diff.numel() else 0.0
            batch.old_logprobs = recomputed  # the policy's own logprobs (temperature-free) at sampling time
            secs["old_logprobs"] = time.perf_counter() - t0
        n_mini = min(lc.num_mini_batches, min_rows)
        gen = torch.Generator().manual_seed(self._step_seed(step, 99))
        acc: dict[str, list[float]] = {}
        t0 = time.perf_counter()
        self.policy.model.train(cfg.lora_dropout > 0)  # dropout only when there is some
        for _epoch in range(lc.ppo_epochs):
            minis = batch.mini_batches(n_mini, generator=gen if n_mini > 1 else None)
            for mb in minis:
                gt, gs = self._sum([mb.global_tokens, mb.global_seqs])
                mb.global_tokens, mb.global_seqs = int(gt), int(gs)
                self.optimizer.zero_grad(set_to_none=True)
                sums: dict[str, float] = {}
                ent_sum = 0.0
                for micro in mb.micro_batches(cfg.micro_batch_size):
                    micro = micro.to(self.policy.device)
                    logp, ent = self.policy.logprobs(micro.input_ids, micro.attention_mask,
                                                     target_mask=micro.loss_mask > 0, with_entropy=True)
                    loss, st = policy_loss(logp, None if on_policy else micro.old_logprobs, micro.ref_logprobs,
                                           micro.advantages, micro.loss_mask, lc, mb.global_tokens,
                                           mb.global_seqs, step=self.opt_step)
                    loss.backward()
                    for k, v in st.items():
                        if k in ("ratio_min",):
                            sums[k] = min(sums.get(k, math.inf), v)
                        elif k in ("ratio_max",):
                            sums[k] = max(sums.get(k, -math.inf), v)
                        elif k == "kl_coef":
                            sums[k] = v
                        else:
                            sums[k] = sums.get(k, 0.0) + v
                    ent_sum += float((ent.detach() * micro.loss_mask).sum())
                self._all_reduce_grads()
                params = self.policy.trainable_parameters()
                if cfg.grad_clip > 0:
                    gnorm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
                else:
                    gnorm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
                self.optimizer.step()
                self.opt_step += 1
                sums["entropy"] = self._sum([ent_sum])[0] / max(1, mb.global_tokens)
                sums["grad_norm"] = gnorm
                for k, v in sums.items():
                    acc.setdefault(k, []).append(v)
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.model.eval()
        secs["update"] = time.perf_counter() - t0
        out = {k: float(np.mean(v)) for k, v in acc.items() if k not in ("ratio_min", "ratio_max", "n_tokens")}
        out["ratio_min"] = float(min(acc.get("ratio_min", [1.0])))
        out["ratio_max"] = float(max(acc.get("ratio_max", [1.0])))
        out["optimizer_steps"] = float(len(acc.get("loss", [])))
        if not on_policy:
            out["sampler_logprob_gap"] = sampler_gap
        out.update({f"time_{k}_s": v for k, v in secs.items()})
        return out

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Collect a batch, update the adapter, log; returns the metrics row."""
        return self.apply(self.collect(self.step + 1))

    def apply(self, sb: StepBatch) -> dict[str, Any]:
        """Update the adapter on a collected batch, advance the step, log; returns the metrics row."""
        step = self.step + 1
        t0 = time.perf_counter()
        # an empty batch still goes through update(): under data parallel every process joins its collectives
        batch_stats = self.update(self.build(sb) if sb.trajectories else _empty_batch(), step)
        self.step = step
        row = self._step_row(sb, batch_stats, sb.seconds.get("collect", 0.0) + time.perf_counter() - t0)
        self._maybe_switch_stage(row)
        if self.rank == 0:
            self._write_step(sb, row)
        return row

    def _step_row(self, sb: StepBatch, st: dict[str, float], seconds: float) -> dict[str, Any]:
        f = sb.features
        r = f["reward"].to_numpy(np.float64)
        row: dict[str, Any] = {"step": self.step, "stage": self.stage, "reward_mean": _nanmean(r),
                               "reward_std": _nanstd(r), "reward_missing": int(np.isnan(r).sum())}
        if sb.reward_table is not None:
            for comp in sb.reward_table.components:
                v = f[f"reward_{comp}"].to_numpy(np.float64)
                row[f"reward_{comp}_mean"], row[f"reward_{comp}_std"] = _nanmean(v), _nanstd(v)
        for col, name in (("cem", "cem"), ("f1", "f1"), ("em", "em")):
            if col in f:
                row[name] = _nanmean(f[col].to_numpy(np.float64))
        trajs = sb.generated
        answered = [t for t in trajs if t.answer is not None]
        row["answered"] = len(answered) / max(1, len(trajs))
        row["searches_per_answer"] = (sum(t.n_searches for t in answered) / len(answered)) if answered else 0.0
        row["searches_mean"] = sum(t.n_searches for t in trajs) / max(1, len(trajs))
        row["format_ok"] = sum(bool(t.flags.get("format_ok")) for t in trajs) / max(1, len(trajs))
        row["response_len"] = sum(t.n_policy_tokens for t in trajs) / max(1, len(trajs))
        gen_tokens = sum(t.n_policy_tokens for t in trajs)
        row["tokens_per_s"] = gen_tokens / max(1e-9, sb.seconds.get("rollout", 0.0))
        fs = sb.filter
        row["kept_group_share"] = (fs.kept / fs.generated) if fs.generated else 0.0
        row["mixed_group_share"] = sb.mixed_group_share
        row["filter_rounds"] = fs.rounds
        row["batch_trajectories"] = len(sb.trajectories)
        row["generated_trajectories"] = len(trajs)
        row.update(st)
        row["time_rollout_s"] = sb.seconds.get("rollout", 0.0)
        row["time_reward_s"] = sb.seconds.get("reward", 0.0)
        row["time_step_s"] = seconds
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
        d = self.run.path / "steps"
        d.mkdir(exist_ok=True)
        f = sb.features
        extra = {"step": [self.step] * len(sb.generated), "method": [t.protocol for t in sb.generated]}
        for col in ("em", "cem", "f1", "reward", "advantage", "kept"):
            extra[col] = f[col].tolist()  # Python scalars
        extra["format_ok"] = [bool(t.flags.get("format_ok")) for t in sb.generated]
        save_trajectories(sb.generated, d / f"{self.step:06d}.trajectories.parquet", extra_columns=extra)
        save_features(d, f, f"{self.step:06d}.features.parquet")
        self.run.append_step_metrics(row)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, limit: int | None = None, save: bool = True) -> dict[str, float]:
        """Greedy rollouts on the held-out questions: mean reward (current rubric), EM, cover-EM, F1.

        ``save``: write the trajectories to ``eval/<step>.trajectories.parquet`` in the run."""
        exs = self.eval_examples[: limit] if limit else self.eval_examples
        if not exs:
            return {}
        exs = exs[self.rank :: self.world_size]
        t0 = time.perf_counter()
        trajs = self.roll_out(exs, seed=self._step_seed(0, 1), greedy=True, group_size=1)
        feats = self.featurize(trajs, exs)
        table = self.score(feats)
        r = table.total.astype(np.float64)
        out = {"eval_reward_mean": _nanmean(r), "eval_n": float(len(exs))}
        for col in ("em", "cem", "f1"):
            out[f"eval_{col}"] = _nanmean(feats[col].to_numpy(np.float64))
        out["eval_searches"] = float(np.mean([t.n_searches for t in trajs])) if trajs else 0.0
        out["eval_answered"] = float(np.mean([t.answer is not None for t in trajs])) if trajs else 0.0
        out["eval_seconds"] = time.perf_counter() - t0
        if self.world_size > 1:
            keys = sorted(out)
            vals = self._sum([out[k] * (len(exs) if k != "eval_n" else 1) for k in keys])
            n = self._sum([len(exs)])[0]
            out = {k: (v if k == "eval_n" else v / max(1, n)) for k, v in zip(keys, vals)}
        if self.rank == 0 and save:
            d = self.run.path / "eval"
            d.mkdir(exist_ok=True)
            save_trajectories(trajs, d / f"{self.step:06d}.trajectories.parquet")
        return out

    def log_eval(self) -> dict[str, float]:
        """:meth:`evaluate` and append the result to ``metrics.jsonl`` (row ``step`` = steps done)."""
        ev = self.evaluate()
        if ev and self.rank == 0:
            self.run.append_step_metrics({"step": self.step, **ev})
            self._say(f"eval @ step {self.step}: reward {ev['eval_reward_mean']:.3f}, cover-EM {ev['eval_cem']:.3f}, "
                      f"F1 {ev['eval_f1']:.3f} on {int(ev['eval_n'])} held-out questions")
        return ev

    # ------------------------------------------------------------------ the loop
    def train(self, steps: int | None = None) -> Run | None:
        """Run until ``steps`` (default ``config.steps``) training steps are done; checkpoint and summarize."""
        from tqdm.auto import tqdm

        cfg = self.config
        total = cfg.steps if steps is None else steps
        if self.step == 0 and cfg.eval_limit:
            self.log_eval()
        bar = tqdm(total=total, initial=self.step, desc=f"train {cfg.preset}/{cfg.reward}", disable=not self.progress)
        while self.step < total:
            row = self.train_step()
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", kept=f"{row['kept_group_share']:.2f}",
                            s=f"{row['time_step_s']:.0f}")
            if cfg.eval_limit and cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < total:
                self.log_eval()
            if cfg.save_every and self.step % cfg.save_every == 0 and self.step < total:
                self.save_checkpoint()
        bar.close()
        if cfg.eval_limit:
            self.log_eval()
        self.save_checkpoint()
        if self.rank == 0:
            self.finalize()
        return self.run

    def finalize(self) -> dict[str, Any]:
        """Join the per-step tables into ``trajectories.parquet`` / ``features.parquet``; write ``metrics.json``."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = self.run.path / "steps"
        tparts = sorted(d.glob("*.trajectories.parquet"))
        fparts = sorted(d.glob("*.features.parquet"))
        if tparts:
            tables = [pq.read_table(p) for p in tparts]
            pq.write_table(pa.concat_tables(tables, promote_options="default"), self.run.path / "trajectories.parquet")
        if fparts:
            save_features(self.run, pd.concat([pd.read_parquet(p) for p in fparts], ignore_index=True))
        rows = self.run.step_metrics()
        train_rows = [r for r in rows if "reward_mean" in r]
        eval_rows = [r for r in rows if "eval_reward_mean" in r]
        summary: dict[str, Any] = {"kind": "train", "steps": self.step, "preset": self.config.preset,
                                   "reward": self.config.reward, "protocol": self.config.protocol}
        if train_rows:
            k = max(1, len(train_rows) // 4)
            summary["reward_first"] = float(np.mean([r["reward_mean"] for r in train_rows[:k]]))
            summary["reward_last"] = float(np.mean([r["reward_mean"] for r in train_rows[-k:]]))
            summary["reward_mean"] = train_rows[-1]["reward_mean"]
            summary["seconds_per_step"] = float(np.mean([r["time_step_s"] for r in train_rows]))
        if eval_rows:
            summary["eval_before"] = {k: v for k, v in eval_rows[0].items() if k.startswith("eval_")}
            summary["eval_after"] = {k: v for k, v in eval_rows[-1].items() if k.startswith("eval_")}
        self.run.write_metrics(summary)
        return summary

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_dir(self, step: int | None = None) -> Path:
        return self.run.path / "checkpoints" / f"step_{self.step if step is None else step:06d}"

    def save_checkpoint(self) -> Path | None:
        """Adapter (PEFT safetensors), optimizer, RNG states, data cursor and stage, atomically."""
        cursors = [self.data.state_dict()]
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            torch.distributed.all_gather_object(gathered, self.data.state_dict())
            cursors = gathered
        if self.rank != 0:
            return None
        import shutil

        final = self.checkpoint_dir()
        tmp = final.with_name(final.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        self.policy.save_adapter(tmp)
        torch.save({"step": self.step, "opt_step": self.opt_step, "stage": self.stage,
                    "optimizer": self.optimizer.state_dict(), "rng": _rng_state(), "data": cursors,
                    "world_size": self.world_size, "config": self.config.to_dict()}, tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        (final.parent / LATEST).write_text(final.name + "\n")
        olds = sorted(p for p in final.parent.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
        for p in olds[: max(0, len(olds) - self.config.keep_checkpoints)]:
            shutil.rmtree(p, ignore_errors=True)
        return final

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        p = Path(path)
        state_file = p / STATE_FILE
        if not state_file.exists():
            raise FileNotFoundError(f"{state_file} is missing: not a checkpoint written by Trainer.save_checkpoint")
        state = torch.load(state_file, map_location="cpu", weights_only=False)
        if state.get("world_size", 1) != self.world_size:
            raise ValueError(f"checkpoint {p} was written by {state.get('world_size')} processes; resume it with "
                             f"the same number (this run has {self.world_size})")
        self.policy.load_adapter(p)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.opt_step, self.stage = int(state["step"]), int(state["opt_step"]), int(state["stage"])
        self.data.load_state_dict(state["data"][self.rank])
        _set_rng_state(state["rng"])
        if self.rank == 0:
            self._truncate_logs()

    def _truncate_logs(self) -> None:
        """Drop what a killed run logged after its checkpoint (the resumed run logs it again)."""
        rows = [r for r in self.run.step_metrics() if int(r.get("step", 0)) <= self.step]
        from workbench.io import atomic_write_text

        atomic_write_text(self.run.path / "metrics.jsonl",
                          "".join(json.dumps(r, ensure_ascii=False, default=float) + "\n" for r in rows))
        for p in (self.run.path / "steps").glob("*.parquet") if (self.run.path / "steps").exists() else []:
            if int(p.name.split(".")[0]) > self.step:
                p.unlink()

    @classmethod
    def resume(cls, run_dir: str | os.PathLike, progress: bool = True, **overrides: Any) -> Trainer:
        """A trainer for an existing run, restored from its newest checkpoint (``steps`` may be raised)."""
        run = open_run(run_dir)
        stored = {k: v for k, v in run.config.items() if k in {f.name for f in dataclasses.fields(TrainConfig)}}
        cfg = TrainConfig.from_dict({**stored, **overrides})
        trainer = cls(cfg, run=run.path, progress=progress)
        ck = latest_checkpoint(run.path)
        if ck is not None:
            trainer.load_checkpoint(ck)
            trainer._say(f"resumed {run.path} at step {trainer.step} from {ck.name}")
        else:
            trainer._say(f"{run.path} has no checkpoint yet: starting from step 0")
            if trainer.rank == 0:
                trainer._truncate_logs()
        return trainer


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run (``None`` if there is none)."""
    d = Path(run_dir) / "checkpoints"
    pointer = d / LATEST
    if pointer.exists():
        p = d / pointer.read_text().strip()
        if (p / STATE_FILE).exists():
            return p
    done = sorted(p for p in d.glob("step_*") if (p / STATE_FILE).exists() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def train(config: TrainConfig, run: Any = None, progress: bool = True) -> Run | None:
    """Build a :class:`Trainer` and run it (``workbench train``)."""
    return Trainer(config, run=run, progress=progress).train()


# ============================================================================= small helpers


def _empty_batch() -> RLBatch:
    z = torch.zeros((0, 1))
    return RLBatch(z.long(), z.long(), z, z)


def _nanmean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def _nanstd(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.std()) if x.size else float("nan")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])
