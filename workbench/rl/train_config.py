"""``TrainConfig``: everything a training run needs, saved as the run's ``config.json``.

A run is assembled from parts that mix freely: a protocol, a reward preset, an optimizer preset
(:mod:`workbench.rl.config`) and the training sizes. The config holds their names (what ``config.json``
records); :class:`RunParts` holds the objects they stand for, resolved once by the application
(``workbench.methods.run_parts``). ``Method.train_config`` starts from a published method's declaration and puts
the user's overrides on top, so ``--method dynasearcher --preset dspo`` is DynaSearcher with the DSPO optimizer.

    >>> TrainConfig(steps=3).loss_config().name
    'grpo'
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.core.choices import (
    AMP_MODES,
    MICRO_BATCHING,
    ROLLOUT_BACKENDS,
    ROLLOUT_ENGINES,
    Amp,
    MicroBatching,
    RolloutBackend,
    RolloutEngine,
)
from workbench.rl.trackers import tracker_names
from workbench.util.io import loads_yaml
from workbench.util.kinds import kinds_error
from workbench.util.ranges import range_error

if TYPE_CHECKING:  # the command line reads this module for its flags: nothing here imports torch or pandas
    from workbench.protocols.base import Protocol
    from workbench.rewards.preset import FeatureNeeds, RewardPreset
    from workbench.rewards.rubric import Rubric
    from workbench.rl.config import LossConfig
    from workbench.rollout.engine import RolloutConfig

DEFAULT_PROTOCOL_KWARGS: dict[str, Any] = {"observation_mode": "chat"}
#: ``TrainConfig.keep_best``'s metrics: the validation round's greedy cover-EM, F1, EM or mean reward.
KEEP_BEST = ("cem", "f1", "em", "reward")


@dataclass
class TrainConfig:
    """Everything a training run needs; saved as the run's ``config.json``.

    Defaults are tiny CPU settings for the default model; pass real sizes on a GPU.
    """

    #: Fields this config keeps its own default for when a method's declaration fills the others.
    KEEPS_OWN: ClassVar[tuple[str, ...]] = ()
    #: The fields by named section, in the order ``workbench train --help`` lists them; every field is in one. The
    #: fields stay attributes of the config (``config.lr``; ``config.json`` is flat), and a config file may group its
    #: keys by section (``rollout: {max_turns: 4}``) or not.
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "agent": ("method", "model", "protocol", "protocol_kwargs", "device"),
        "data": ("dataset", "split", "question_types", "curriculum", "hop_repeats", "retriever", "corpus", "index",
                 "query_prefix", "pooling"),
        "evaluation": ("eval_split", "eval_limit", "eval_every", "val_questions", "keep_best", "early_stop"),
        "rollout": ("questions_per_step", "group_size", "max_turns", "max_new_tokens", "max_total_tokens",
                    "temperature", "top_p", "rollout_backend", "rollout_engine", "server", "rollout_kwargs"),
        "rewards": ("reward", "reward_params", "reward_weights", "stage_switch_step", "stage_switch_searches",
                    "encoder", "evidence_model", "judges", "judge_model", "max_failed_share"),
        "optimization": ("preset", "loss_overrides", "steps", "lr", "weight_decay", "grad_clip", "micro_batch_size",
                         "micro_batching", "gradient_checkpointing", "amp", "tis_cap", "seed"),
        "lora": ("lora_r", "lora_alpha", "lora_dropout", "target_modules", "init_adapter", "init_adapter_merge"),
        "health": ("stop_on_alarm", "health_rules", "health_reference_steps"),
        "output": ("save_every", "keep_checkpoints", "report_to"),
    }

    #: The range each numeric field must lie in (:mod:`workbench.util.ranges`): checked here and by the command line's
    #: flag types, so a value out of range is refused before a run starts, from a flag or from a file.
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("steps", "questions_per_step", "group_size", "max_turns", "max_new_tokens",
                         "max_total_tokens", "micro_batch_size", "lora_r", "lora_alpha"), ">= 1"),
        **dict.fromkeys(("eval_limit", "eval_every", "save_every", "keep_checkpoints", "grad_clip", "weight_decay",
                         "temperature", "val_questions", "early_stop"), ">= 0"),
        "health_reference_steps": ">= 1",
        "group_size": ">= 2", "lr": "> 0", "top_p": "(0, 1]", "lora_dropout": "[0, 1)", "max_failed_share": "[0, 1]",
    }

    method: str | None = None
    """The published method this run follows (``workbench methods`` lists them), recorded in
    ``config.json``. The fields it declares are filled in by ``Method.train_config`` (``--method``),
    other flags on top; the trainer reads its feature declaration (encoder, evidence model)."""
    model: str = "smollm2-135m"
    """Policy base model: the ``smollm2-135m`` alias, a local path or a cached HF id."""
    protocol: str = "search_r1"
    """Agent protocol (``workbench.methods.protocol_names()``)."""
    protocol_kwargs: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_PROTOCOL_KWARGS))
    """Keyword arguments of the protocol (e.g. ``{"observation_mode": "chat", "top_k": 3}``)."""
    reward: str = "dynasearcher"
    """Reward preset (``workbench.methods.preset_names()``)."""
    reward_params: dict[str, Any] = field(default_factory=dict)
    """Preset parameter overrides (e.g. ``{"alpha": 0.5}``)."""
    reward_weights: dict[str, float] = field(default_factory=dict)
    """Component weight overrides."""
    preset: str = "grpo"
    """Optimizer preset: grpo, dapo, gspo, dspo, dr_grpo, reinforce_pp... (``workbench.rl.config.PRESETS``)."""
    loss_overrides: dict[str, Any] = field(default_factory=dict)
    """LossConfig field overrides (e.g. ``{"kl_coef": 0.0, "num_mini_batches": 2}``,
    ``{"surrogate": "dual_clip"}``, ``{"adv_norm": "rloo"}``)."""

    dataset: str = "world"
    """``world`` (the synthetic world), or a benchmark file or name ``load_dataset`` reads (HotpotQA, 2Wiki, MuSiQue,
    IRCoT, FlashRAG layouts: e.g. a MuSiQue train file), whose questions search their own paragraphs as ``corpus``
    says; it has no held-out questions (``eval_limit`` 0: judge the adapter with ``workbench eval``). Other data
    through the Python API: ``Trainer(examples=..., toolbox=...)``."""
    split: str = "train"
    eval_split: str = "dev"
    eval_limit: int = 0
    """Held-out questions evaluated greedily at step 0, every ``eval_every`` steps and at the end (0 = none)."""
    eval_every: int = 0
    """Evaluate every this many steps (0 = only before and after training): the held-out questions (``eval_limit``)
    and the validation questions (``val_questions``)."""
    val_questions: int = 0
    """Training questions set aside as a validation set (drawn by ``seed``, not trained on): evaluated greedily at
    step 0, every ``eval_every`` steps and at the end; ``keep_best`` chooses the adapter by it (0 = none; 24 when
    ``keep_best`` is set and this is not)."""
    keep_best: str | None = None
    """Keep the checkpoint with the best validation score as the run's adapter (``checkpoints/best``, which
    ``--adapter RUN`` and ``--init-adapter RUN`` then load; the last step's stays beside it): cem, f1, em or reward."""
    early_stop: int = 0
    """With ``keep_best``: stop after this many validation rounds in a row without a gain (0 = never)."""
    question_types: list[str] | None = None
    """Only questions of these types (world: 1hop, compositional, comparison, inference, chain), train and held-out."""
    retriever: str = "bm25"
    """Passage search: bm25, or dense (chromadb; or the faiss ``index``), encoding queries with ``encoder``."""
    corpus: str | None = None
    """A corpus file (FlashRAG JSONL, or any layout ``load_corpus`` reads) the search tool searches instead of the
    world's passages (the questions stay the world's or the dataset's); with a ``dataset`` file also ``pooled`` (the
    default there: one corpus from all its questions' paragraphs) or ``per-question`` (each question searches only
    its own paragraphs, as ``workbench eval --corpus per-question`` judges it)."""
    index: str | None = None
    """A faiss index of ``corpus`` (row i = passage i; or of the world's passages) that dense search uses, built with
    ``encoder``; memory-mapped where its type allows, a JSONL corpus read on demand."""
    query_prefix: str | None = None
    """Text put before each dense query (None: ``query: `` for an e5 encoder, else none)."""
    pooling: str | None = None
    """How the encoder pools token vectors instead of its folder's own: mean (Search-R1's for e5), cls, max, lasttoken."""
    curriculum: str = "none"
    """Question order: ``none`` (shuffled per epoch), ``hops`` (fewer hops first) or ``sources`` (fewer sources first)."""
    hop_repeats: dict[str, int] = field(default_factory=dict)
    """Times a training question (SFT: an expert trace) of so many hops comes up per epoch, e.g. ``{"3": 3, "4": 3}``
    to oversample the deep questions; levels not named come up once."""

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
    micro_batching: MicroBatching = "bucket"
    """How rows form micro-batches (none changes the gradient): ``sequential`` (batch order), ``bucket`` (sorted
    by length: less padding), ``shared_prefix`` (one group's rows together, their shared prompt run once with
    gradient: ``workbench.rl.shared_prefix``)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (less memory for long
    sequences, about one more forward of the body per update; ``workbench.rl.memory`` measures it). Not with
    ``micro_batching="shared_prefix"`` (checkpointed layers drop the shared prompt's key/value cache)."""
    amp: Amp = "auto"
    """Mixed precision of the training forward: ``auto`` (bf16 autocast on CUDA, fp32 on CPU), ``bf16`` (autocast
    on any device) or ``off``. LoRA weights and their optimizer state stay fp32; the logprobs' log-softmax is
    fp32 (``workbench.rl.policy``)."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: list[str] | None = None
    device: str = "auto"
    init_adapter: str | None = None
    """Start from this LoRA adapter instead of a fresh one (SFT -> RL): an adapter directory
    (``adapter_model.safetensors`` + ``adapter_config.json``) or a run directory (its newest
    checkpoint). Its rank, alpha and target modules must equal ``lora_r``, ``lora_alpha``,
    ``target_modules``."""
    init_adapter_merge: bool = False
    """Merge ``init_adapter`` into the base weights and train a fresh adapter on top, so the KL
    reference (the adapter disabled) is the initial policy rather than the base model. The saved
    adapter is then relative to the merged model: keep ``init_adapter`` with it."""

    stage_switch_step: int | None = None
    """Multi-stage rewards (When-to-Search): switch the preset's ``stage`` 1 → 2 at this step."""
    stage_switch_searches: float | None = None
    """...or as soon as a step's mean searches per answer reaches this value."""
    encoder: str = "auto"
    """Sentence encoder for embedding features: ``auto`` (only when the method's or reward preset's
    declared needs include embeddings: query similarity, recall by embedding), ``none``, ``default``
    (all-MiniLM-L6-v2) or a path. With ``retriever="dense"`` the search encodes its queries with it too
    (``auto``, ``none``, ``default``: all-MiniLM-L6-v2)."""
    evidence_model: str | None = None
    """Cross-family model for evidence rewards, used when the declared needs include an evidence
    model (None: the policy's base model answers, with a warning)."""
    judges: list[str] = field(default_factory=list)
    """LLM judges computed as features (``lasj``, ``yesno``, ``similarity``): ``judge_<name>`` columns
    the reward reads. A method's declared judges are optional and not switched on by ``--method``
    (presets fall back to a string metric); name them here to use them."""
    judge_model: str | None = None
    """Model of the judges: a local path or cached HF id (None: the policy's base model, adapter disabled)."""
    max_failed_share: float = 0.5
    """Stop with an error when more than this share of a step's trajectories have a failed (NaN)
    reward (a judge, tool or backend that failed); failed ones get advantage 0 until then."""

    rollout_backend: RolloutBackend = "hf"
    """What generates the rollouts (``workbench.rl.rollout_sync``): ``hf`` (the trained model in this process),
    ``openai`` (an OpenAI-compatible server at ``server`` that loads LoRA adapters at run time: vLLM with
    --enable-lora, or ``python -m workbench.rollout.server --enable-lora``; the adapter is saved and loaded there
    whenever it changed), ``vllm`` (a colocated vllm.LLM with enable_lora, a new LoRARequest per adapter; needs
    CUDA; not yet run on hardware)."""
    rollout_engine: RolloutEngine = "auto"
    """How the ``hf`` rollout backend runs the policy (``workbench.rollout.backends.quant``): ``fp32`` (the trained
    model itself, exact), ``int4`` (a copy with int4 weights for decode steps and bf16 for prefill, the live LoRA
    unmerged; the update's logprobs stay fp32, ``rollout_logprob_diff`` logs the gap and ``tis_cap`` corrects it),
    ``graph`` (the trained model with its LoRA merged for each rollout call and the decode step replayed as a CUDA
    graph; ``workbench.rollout.backends.graph``), ``auto`` (``graph`` on CUDA, ``int4`` on a CPU with native bf16 or
    the C decode step's vector kernels, else ``fp32``)."""
    server: str | None = None
    """Base URL of the rollout server for ``rollout_backend="openai"``, e.g. ``http://127.0.0.1:8000/v1``; the
    adapter directories it is asked to load must be readable there."""
    rollout_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra arguments of the rollout backend: ``HFBackend`` (batch_size...), ``OpenAIBackend`` (api_key,
    timeout_s, concurrency, model...) or ``VLLMBackend`` (gpu_memory_utilization, max_model_len...)."""
    tis_cap: float | None = None
    """Truncated importance sampling (Yao et al. 2025; verl's ``tis_imp_ratio_cap``): each policy token's
    surrogate is weighted by min(π_trainer / π_rollout, tis_cap), correcting for the rollout engine's numerics
    (None = off; 2.0 is verl's example value)."""

    seed: int = 0
    save_every: int = 10
    """Checkpoint every this many steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept (older ones are deleted)."""
    stop_on_alarm: str = ""
    """End the run at the step where one of these health alarms fires (comma-separated, or ``all``; the alarms are
    ``workbench.rl.health.RULES``); every alarm is printed and written to ``health.jsonl`` either way."""
    health_rules: list[dict[str, Any]] = field(default_factory=list)
    """Health rules added to ``workbench.rl.health.RULES``, or replacing one of the same name, as dicts of a rule's
    fields, e.g. ``[{"name": "search_drop", "signal": "searches", "when": "drop", "amount": 0.25}]``."""
    health_reference_steps: int = 1
    """Steps at the start whose mean is each health signal's reference (the starting policy)."""
    report_to: str = "none"
    """Experiment trackers that get a copy of the run's logs, comma-separated: tensorboard, wandb, mlflow, trackio
    (or none). Each writes offline into the run directory (``<run>/tensorboard``, ``wandb``, ``mlflow``, ``trackio``)
    through its own library, an extra: ``pip install -e '.[tensorboard]'`` ... (``workbench.rl.trackers``): every
    number of each metrics.jsonl row, the config, and a completions table per step."""

    def __post_init__(self) -> None:
        def bad(f: str, msg: str) -> ValueError:
            return ValueError(f"{type(self).__name__}.{f}: {msg}")

        if isinstance(self.report_to, (list, tuple)):  # a list from Python or a YAML file
            self.report_to = ",".join(map(str, self.report_to))
        error = kinds_error(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if error:  # a value of another kind from a file or a JSON flag (steps: [1, 2]), before anything compares it
            raise ValueError(f"{type(self).__name__}.{error}")
        if self.group_size < 2:
            raise bad("group_size", f"GRPO-family advantages compare rollouts of one question; use >= 2, got {self.group_size}")
        for f, rule in self.RANGES.items():
            error = range_error(getattr(self, f), rule)
            if error:
                raise bad(f, error)
        if self.init_adapter_merge and not self.init_adapter:
            raise bad("init_adapter_merge", "needs init_adapter (the adapter to merge into the base weights)")
        from workbench.rl.data_stream import CURRICULA

        if self.curriculum not in CURRICULA:
            raise bad("curriculum", f"{self.curriculum!r} is not one of {CURRICULA}")
        if self.keep_best is not None:
            if self.keep_best not in KEEP_BEST:
                raise bad("keep_best", f"{self.keep_best!r} is not one of {', '.join(KEEP_BEST)}")
            if not self.eval_every:
                raise bad("keep_best", "chooses among the checkpoints of validation rounds: add --eval-every K")
            self.val_questions = self.val_questions or 24
        elif self.early_stop:
            raise bad("early_stop", "counts rounds without a gain of the keep_best metric: add --keep-best METRIC")
        from workbench.rl.health import parse_stop_on, rules_for

        parse_stop_on(self.stop_on_alarm, rules_for(self.health_rules))  # unknown names and bad rules, said now
        self.hop_repeats = {str(h): t for h, t in dict(self.hop_repeats or {}).items()}  # JSON keys are strings
        for hops, times in self.hop_repeats.items():
            if not str(hops).isdigit() or isinstance(times, bool) or not isinstance(times, int) or times < 1:
                raise bad("hop_repeats", f"{{{hops!r}: {times!r}}}: give hop counts and whole numbers >= 1, "
                                         'e.g. {"3": 3, "4": 3}')
        if self.corpus in ("pooled", "per-question"):
            if self.dataset == "world":
                raise bad("corpus", f"{self.corpus!r} builds the corpus from a dataset file's own paragraphs; the world "
                                    "has one shared corpus: add --dataset FILE, or drop --corpus")
            if self.index is not None:
                raise bad("index", f"an index is of a corpus file, not of --corpus {self.corpus}: drop --index")
        if self.dataset != "world" and self.eval_limit:
            raise bad("eval_limit", f"--dataset {self.dataset} has no held-out questions: drop --eval-limit and judge "
                                    "the adapter with `workbench eval --dataset DEV_FILE --corpus per-question`")
        if self.index is not None and self.retriever != "dense":
            raise bad("index", f"a faiss index is for dense search; retriever is {self.retriever!r}: add --retriever dense")
        from workbench.tools.dense import POOLING

        if self.pooling is not None and self.pooling not in POOLING:
            raise bad("pooling", f"{self.pooling!r} is not one of {POOLING}")
        from workbench.rewards.judges import JUDGES

        unknown = [j for j in self.judges if j not in JUDGES]
        if unknown:
            raise bad("judges", f"unknown judge(s) {unknown}; valid: {', '.join(sorted(JUDGES))}")
        if self.stage_switch_step is not None and self.stage_switch_step < 1:
            raise bad("stage_switch_step", f"must be >= 1, got {self.stage_switch_step}")
        self.report_to = ",".join(tracker_names(self.report_to)) or "none"  # a library not installed: named here
        self.loss_config()  # validates the optimizer mix with LossConfig's own messages
        self._check_engines(bad)

    def _check_engines(self, bad: Any) -> None:
        if self.rollout_backend not in ROLLOUT_BACKENDS:
            raise bad("rollout_backend", f"{self.rollout_backend!r} is not one of {ROLLOUT_BACKENDS}")
        if self.rollout_backend == "openai" and not self.server:
            raise bad("server", "rollout_backend='openai' needs the server's URL (--server http://127.0.0.1:8000/v1; "
                      "start one with `python -m workbench.rollout.server --enable-lora`)")
        if self.server and self.rollout_backend != "openai":
            raise bad("server", f"a server URL is only used with rollout_backend='openai' (got {self.rollout_backend!r}); "
                      "add --rollout-backend openai or drop --server")
        if self.rollout_engine not in ROLLOUT_ENGINES:
            raise bad("rollout_engine", f"{self.rollout_engine!r} is not one of {ROLLOUT_ENGINES}")
        if self.rollout_engine in ("int4", "graph") and self.rollout_backend != "hf":
            raise bad("rollout_engine", f"{self.rollout_engine!r} runs the in-process hf backend, not {self.rollout_backend!r}; "
                      "drop --rollout-engine or use --rollout-backend hf")
        if self.micro_batching not in MICRO_BATCHING:
            raise bad("micro_batching", f"{self.micro_batching!r} is not one of {MICRO_BATCHING}")
        if self.gradient_checkpointing and self.micro_batching == "shared_prefix":
            raise bad("gradient_checkpointing", "cannot be combined with micro_batching='shared_prefix' (checkpointed "
                      "layers drop the shared prompt's key/value cache); use --micro-batching bucket or drop it")
        if self.amp not in AMP_MODES:
            raise bad("amp", f"{self.amp!r} is not one of {AMP_MODES}")
        if self.tis_cap is not None and not self.tis_cap >= 1.0:
            raise bad("tis_cap", f"must be >= 1 (weights are capped at it; None = off), got {self.tis_cap}")

    # ------------------------------------------------------------------ derived
    def loss_config(self) -> LossConfig:
        from workbench.rl.config import get_loss_config

        over = dict(self.loss_overrides)
        over.setdefault("group_size", self.group_size)
        if over.get("agg", get_loss_config(self.preset).agg) == "seq-mean-token-sum-norm":
            over.setdefault("max_len", self.max_total_tokens)
        over.setdefault("kl_anneal_steps", None)
        if over.get("kl_coef_end") is not None and over["kl_anneal_steps"] is None:
            over["kl_anneal_steps"] = self.steps
        if over["kl_anneal_steps"] is None:
            over.pop("kl_anneal_steps")
        return get_loss_config(self.preset, **over)

    def rollout_config(self, seed: int, greedy: bool = False, group_size: int | None = None) -> RolloutConfig:
        from workbench.rollout.engine import RolloutConfig

        return RolloutConfig(
            group_size=group_size or self.group_size, max_turns=self.max_turns, max_new_tokens=self.max_new_tokens,
            max_total_tokens=self.max_total_tokens, temperature=0.0 if greedy else self.temperature,
            top_p=self.top_p, seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sections(self) -> dict[str, dict[str, Any]]:
        """The config's values by section (``SECTIONS``): ``{"rollout": {"max_turns": 3, ...}, ...}``."""
        values = self.to_dict()
        return {name: {f: values[f] for f in fields} for name, fields in self.SECTIONS.items()}

    @classmethod
    def flatten(cls, data: dict[str, Any], where: str = "") -> dict[str, Any]:
        """Field -> value of a mapping that may group its keys by section (``{"rollout": {"max_turns": 4}}``); a key
        in the wrong section or given twice is a one-line error naming it (``where``: the file, for the message)."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in cls.SECTIONS and not isinstance(value, dict):
                raise ValueError(f"{where}section {key!r} must be a mapping of its fields ({', '.join(cls.SECTIONS[key])}), "
                                 f"got {json.dumps(value, default=str)[:60]}")
            if key in cls.SECTIONS:
                for k, v in value.items():
                    home = next((s for s, fs in cls.SECTIONS.items() if k in fs), None)
                    if home != key:
                        raise ValueError(f"{where}section {key!r} has no field {k!r}"
                                         + (f" (it is in {home!r})" if home else "")
                                         + f"; its fields: {', '.join(cls.SECTIONS[key])}")
                    if k in out:
                        raise ValueError(f"{where}{k!r} is given twice (at the top and in section {key!r})")
                    out[k] = v
            else:
                if key in out:
                    raise ValueError(f"{where}{key!r} is given twice (at the top and in its section)")
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; valid fields: {', '.join(sorted(names))}")
        return cls(**d)



#: The most a TrainConfig file may hold (one is a few KB).
CONFIG_FILE_BYTES = 16 << 20


def read_config_file(path: str | os.PathLike, config_class: type[TrainConfig] | None = None) -> dict[str, Any]:
    """The fields a JSON or YAML TrainConfig file sets (keys = field names of ``config_class``, default TrainConfig,
    checked; ``method:`` allowed; at the top or grouped by ``SECTIONS``), with one-line errors naming the file and
    the fix."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"train config file not found: {p}")
    if not p.is_file():
        raise ValueError(f"--config {p} is a directory, not a file: pass a TrainConfig JSON or YAML file "
                         "(e.g. my_run.yaml with `steps: 20`)")
    if p.stat().st_size > CONFIG_FILE_BYTES:
        raise ValueError(f"--config {p}: {p.stat().st_size >> 20} MiB, more than a TrainConfig file holds "
                         f"({CONFIG_FILE_BYTES >> 20} MiB): pass a TrainConfig JSON or YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--config {p} is not UTF-8 text (byte {e.start}): pass a TrainConfig JSON or YAML file") from None
    if p.suffix in (".yaml", ".yml"):
        data = loads_yaml(text, p, "fix the file (keys are TrainConfig field names, e.g. `steps: 20`)")
        data = {} if data is None else data
    else:
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError(f"{p}: JSON nested too deep to read; a TrainConfig file is a mapping of fields") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}: JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a mapping of TrainConfig fields, got {type(data).__name__}")
    data = (config_class or TrainConfig).flatten(data, where=f"{p}: ")
    names = {f.name for f in dataclasses.fields(config_class or TrainConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{p}: unknown TrainConfig field(s) {unknown}; valid fields: {', '.join(sorted(names))}")
    error = kinds_error(config_class or TrainConfig, {k: v for k, v in data.items() if k != "report_to"})  # a list
    if error:  # ... of trackers is a report_to too (joined by __post_init__)
        raise ValueError(f"{p}: {error}; fix the file")
    return data


@dataclass(frozen=True)
class RunParts:
    """The objects a TrainConfig's names stand for, resolved once by the application
    (``workbench.methods.run_parts``): the protocol built with its arguments, the reward preset, and what the
    feature step computes for it."""

    protocol: Protocol
    reward: RewardPreset
    needs: FeatureNeeds

    def rubric(self, config: TrainConfig, stage: int | None = None) -> Rubric:
        """The reward rubric with ``config``'s parameters and weights (and ``stage`` for a staged reward)."""
        params = dict(config.reward_params)
        if stage is not None:
            params["stage"] = stage
        return self.reward(weights=config.reward_weights or None, **params)


def check_parts(config: TrainConfig, parts: RunParts) -> bool:
    """Validate ``config``'s reward parameters, weights and stage switching against ``parts`` (named errors);
    returns whether the reward is staged (has a ``stage`` parameter)."""
    try:
        rubric = parts.rubric(config)
    except ValueError as e:
        raise ValueError(f"TrainConfig.reward_params / reward_weights: {e}") from None
    staged = "stage" in rubric.param_names
    if not staged and (config.stage_switch_step is not None or config.stage_switch_searches is not None):
        raise ValueError(f"TrainConfig.stage_switch_step: reward preset {parts.reward.name!r} has no stage parameter; "
                         "stage switching applies to staged rewards such as when_to_search (drop stage_switch_step / "
                         "stage_switch_searches)")
    return staged


@dataclass
class SFTConfig(TrainConfig):
    """A :class:`TrainConfig` (model, protocol, LoRA, evaluation, checkpoints) plus the SFT data.

    ``steps`` are optimizer steps of ``batch_size`` trajectories; ``group_size`` and
    ``temperature`` are those of rejection sampling.
    """

    traces: list[str] = field(default_factory=list)
    """Trajectories to imitate: run directories (``workbench expert`` / ``eval`` runs) or Parquet files."""
    rejection_questions: int = 0
    """Training questions the initial policy rolls out for rejection sampling (0 = none)."""
    trace_hops: list[int] | None = None
    """Only trajectories of questions with these hop counts (None = all)."""
    max_traces: int = 0
    """At most this many trajectories from ``traces`` (the first ones; 0 = all)."""
    batch_size: int = 8
    """Trajectories per optimizer step."""
    lr: float = 1e-4  # LoRA SFT; the RL default (2e-5) moves a cold start too slowly on CPU budgets

    #: A method's RL learning rate is not SFT's: SFT keeps its own ``lr``.
    KEEPS_OWN: ClassVar[tuple[str, ...]] = ("lr",)
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        **TrainConfig.SECTIONS, "sft": ("traces", "rejection_questions", "trace_hops", "max_traces", "batch_size")}

    RANGES: ClassVar[dict[str, str]] = {**TrainConfig.RANGES, "rejection_questions": ">= 0", "max_traces": ">= 0",
                                         "batch_size": ">= 1"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.keep_best is not None or self.val_questions:
            raise ValueError("SFTConfig.keep_best / val_questions: a validation set is carved from RL's training "
                             "questions; SFT's held-out evaluation is eval_limit (drop --keep-best / --val-questions)")
        if not self.traces and not self.rejection_questions:
            raise ValueError("SFTConfig: no data; give traces (e.g. a `workbench expert` run directory) "
                             "and/or rejection_questions > 0")
