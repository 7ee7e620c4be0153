"""Supervised fine-tuning on trajectories: the cold start before RL (``workbench sft``).

The loss is the mean negative log-likelihood of the policy tokens of a batch of trajectories,
``-Σ_t m_t log π(x_t | x_<t) / Σ_t m_t`` with ``m`` the same loss mask as RL (prompt and
observation tokens 0; policy tokens, R-Search's evidence included, 1), summed over micro-batches
with the batch's global token count (:mod:`workbench.rl.batch`), so micro-batching does not change
the gradient.

The trajectories come from two sources, as the cold starts of R1-Searcher and ReSearch do:

- **expert traces** (:mod:`workbench.rl.expert`, ``workbench expert``): run directories or Parquet
  files of trajectories, ``SFTConfig.traces``;
- **rejection sampling**: the initial policy rolls out ``rejection_questions`` training questions
  (``group_size`` samples each, ``temperature``); the trajectories with cover-EM 1 and ``format_ok``
  are kept.

Both are filtered the same way (correct and well-formed, the hop counts and question types asked
for, no held-out question, at most ``max_total_tokens``), and every trace must carry exactly the
prompt this run's protocol builds, so SFT teaches the token layout RL and evaluation roll out.
The pool is written to ``sft/pool.trajectories.parquet`` (the inspector reads it) and read back on
resume.

:class:`SFTTrainer` is a :class:`~workbench.rl.trainer.Trainer` whose step is an SFT step: the run
directory, checkpoints and exact resume (:mod:`workbench.rl.checkpoint`: the data cursor is the
position in the pool), the held-out greedy evaluation before and after (``Trainer.evaluate``) and
``--init-adapter`` are the RL trainer's. ``metrics.jsonl`` gets one row per step (``loss``,
``tokens``: policy tokens, ``tokens_per_s``: tokens through the model per second, ``grad_norm``).

    workbench expert --method search_r1 --split train --out runs/
    workbench sft --method search_r1 --traces runs/<expert run> --steps 30 --eval-limit 36
    workbench train --method search_r1 --init-adapter runs/<sft run>
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.core.trajectory import POLICY, Trajectory, load_trajectories, save_trajectories
from workbench.data.example import Example
from workbench.rewards.metrics import cover_exact_match
from workbench.rl.batch import RLBatch, build_batch
from workbench.rl.data_stream import DataStream, repeat_by_hops
from workbench.rl.train_config import RunParts, SFTConfig, TrainConfig  # noqa: F401 (SFTConfig re-exported)
from workbench.rl.trainer import Trainer
from workbench.storage.runs import Run, open_run

POOL_FILE = "sft/pool.trajectories.parquet"


# =============================================================================== data


def read_traces(source: str | os.PathLike) -> tuple[list[Trajectory], list[Example]]:
    """The trajectories of a run directory (with its examples) or of a Parquet file (no examples)."""
    p = Path(source)
    if p.is_file():
        return load_trajectories(p), []
    run = open_run(p)
    return run.trajectories(), (run.examples() if run.exists("examples.jsonl") else [])


def check_traces(traces: Sequence[str | os.PathLike]) -> None:
    """Each of ``traces`` is a run directory or a Parquet file, or a ``ValueError`` naming it: said before an SFT run's
    folder is made, as a training run's inputs are checked before its folder is."""
    for src in traces:
        p = Path(src)
        if not (p / "config.json").is_file() and not (p.is_file() and p.suffix == ".parquet"):
            raise ValueError(f"SFTConfig.traces: {src} is neither a run directory (it has no config.json) nor a "
                             "trajectories .parquet file; give a `workbench expert` (or eval) run")


def benchmark_examples(traces: Sequence[str | os.PathLike]) -> list[Example]:
    """The questions of ``traces`` that are not the world's (``workbench expert --dataset FILE`` runs), in order:
    SFT takes them as training questions beside the world's split."""
    out: dict[str, Example] = {}
    for src in traces:
        p = Path(src)
        if not (p / "examples.jsonl").is_file():
            continue  # a Parquet file, or a bad path read_traces names later
        for e in open_run(p).examples():
            if e.dataset != "world":
                out.setdefault(e.id, e)
    return list(out.values())


def is_correct(traj: Trajectory, golds: Sequence[str]) -> bool:
    """What SFT imitates: a well-formed trajectory whose answer covers a gold answer."""
    return bool(traj.flags.get("format_ok")) and cover_exact_match(traj.answer, list(golds)) == 1.0


@dataclass
class PoolStats:
    """What went into the pool and what was left out, per reason."""

    n: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    by_hops: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    rejection: dict[str, float] = field(default_factory=dict)
    long_turns: int = 0
    """Kept trajectories with a policy turn longer than ``max_new_tokens``: rollouts cut such a turn short."""
    longest_turn: int = 0

    def skip(self, why: str) -> None:
        self.left_out[why] = self.left_out.get(why, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "by_source": self.by_source, "by_hops": self.by_hops, "left_out": self.left_out,
                "rejection": self.rejection, "long_turns": self.long_turns, "longest_turn": self.longest_turn}


# =============================================================================== trainer


class SFTTrainer(Trainer):
    """SFT with the RL trainer's run directory, checkpoints, resume and held-out evaluation.

    Args:
        config: an :class:`SFTConfig`.
        run: a Run, a run directory to continue, a runs root, or None (``runs/``).
        **kwargs: see :class:`~workbench.rl.trainer.Trainer` (``policy``, ``examples``, ``eval_examples``,
            ``toolbox``, ``progress``).
    """

    config_class = SFTConfig

    def __init__(self, config: SFTConfig, parts: RunParts, run: Run | str | os.PathLike | None = None, **kwargs: Any):
        if not isinstance(config, SFTConfig):
            raise TypeError(f"SFTTrainer needs an SFTConfig, got {type(config).__name__}")
        check_traces(config.traces)
        self._made: Run | None = None
        """The run folder this trainer made, until its first step starts (:meth:`_drop_unstarted`)."""
        if not isinstance(run, Run) and not (run is not None and (Path(run) / "config.json").exists()):
            run = self._made = Run.create(run, kind="sft", name=f"sft-{config.protocol}")
        try:
            super().__init__(config, parts, run, **kwargs)
            if self.world_size > 1:
                raise NotImplementedError("SFTTrainer runs in one process")
            self.run.update_config(kind="sft")
        except BaseException:
            self._drop_unstarted()
            raise
        self.questions = self.data
        """The training questions (rejection sampling draws from them); ``data`` becomes the pool."""
        self.pool: list[Trajectory] | None = None
        self.pool_stats = PoolStats()

    # ------------------------------------------------------------------ the pool
    def prepare(self) -> list[Trajectory]:
        """Build the pool (or read it back from the run), and stream it: ``self.data``."""
        if self.pool is not None:
            return self.pool
        path = self.run.path / POOL_FILE
        if path.exists():
            self.pool = load_trajectories(path)
            self.pool_stats = PoolStats(**self.run.config.get("sft_pool", {}))
        else:
            self.pool = self.collect_pool()
            path.parent.mkdir(exist_ok=True)
            save_trajectories(self.pool, path, extra_columns={"source": [t.meta.get("source", "") for t in self.pool]})
            self.run.update_config(sft_pool=self.pool_stats.to_dict())
        if not self.pool:
            raise ValueError(f"SFT: no trajectory left to train on ({self.pool_stats.left_out}); check traces, "
                             "trace_hops, question_types and max_total_tokens")
        hops = {e.id: e.hops for e in self.questions.examples}
        self.data = DataStream(repeat_by_hops(self.pool, lambda t: hops.get(t.example_id), self.config.hop_repeats),
                               seed=self.config.seed)
        repeated = f" (each of {self.config.hop_repeats} hops that many times an epoch)" if self.config.hop_repeats else ""
        self._say(f"SFT pool: {self.pool_stats.n} trajectories {self.pool_stats.by_source}, hops "
                  f"{self.pool_stats.by_hops}{repeated}; left out {self.pool_stats.left_out}")
        if self.pool_stats.long_turns:
            self._warn(f"{self.pool_stats.long_turns} of the {self.pool_stats.n} trajectories have a turn longer "
                       f"than --max-new-tokens {self.config.max_new_tokens} (the longest: {self.pool_stats.longest_turn} "
                       "tokens): the policy learns turns that its rollouts (RL, eval) cut short, before the closing tag; "
                       f"give this stage and the later ones --max-new-tokens {self.pool_stats.longest_turn} or more")
        return self.pool

    def collect_pool(self) -> list[Trajectory]:
        """Expert traces (``config.traces``) and rejection samples, filtered."""
        cfg = self.config
        pool: list[Trajectory] = []
        for src in cfg.traces:
            trajs, _ = read_traces(src)
            pool += self._filter(trajs[: cfg.max_traces or None], "expert")
        if cfg.rejection_questions:
            pool += self.rejection_sample(cfg.rejection_questions)
        return pool

    def rejection_sample(self, n: int) -> list[Trajectory]:
        """Roll the current policy out on the next ``n`` training questions (``group_size`` each) and
        keep the correct, well-formed trajectories."""
        t0 = time.perf_counter()
        exs = self.questions.take(n)
        trajs = self.roll_out(exs, seed=self.step_seed(0, 2))
        for t in trajs:
            t.meta["source"] = "rejection"
        kept = self._filter(trajs, "rejection")
        self.pool_stats.rejection = {"questions": n, "samples": len(trajs), "kept": len(kept),
                                     "questions_kept": len({t.example_id for t in kept}),
                                     "seconds": time.perf_counter() - t0}
        return kept

    def _filter(self, trajs: Sequence[Trajectory], source: str) -> list[Trajectory]:
        """The trajectories SFT may imitate: of this run's training questions (a held-out one is an
        error), with this run's prompt, of the hop counts asked for, correct, not too long."""
        from workbench.rollout.engine import build_prompt_ids

        cfg, st = self.config, self.pool_stats
        train = {e.id: e for e in self.questions.examples}  # the split, filtered by question_types
        held = {e.id for e in self.eval_examples}
        prompts: dict[str, list[int]] = {}
        out = []
        for t in trajs:
            if t.example_id in held:
                raise ValueError(f"SFT trace {t.id!r} is of held-out question {t.example_id!r}; make the traces "
                                 f"from the training split (workbench expert --split {cfg.split})")
            ex = train.get(t.example_id)
            if ex is None:
                st.skip("not a training question")
                continue
            if t.protocol != self.protocol.name:
                raise ValueError(f"SFT trace {t.id!r} is of protocol {t.protocol!r}, this run trains {self.protocol.name!r}")
            if ex.id not in prompts:
                prompts[ex.id] = build_prompt_ids(self.protocol, self.tokenizer, ex)
            if list(t.prompt_ids) != prompts[ex.id]:
                raise ValueError(
                    f"SFT trace {t.id!r} was made with another prompt than this run's protocol builds "
                    f"({self.protocol.config()}): regenerate the traces with the same protocol arguments "
                    "(workbench expert uses the method's training protocol; --protocol-kwargs changes it)")
            if cfg.trace_hops and ex.hops not in cfg.trace_hops:
                st.skip("hops")
                continue
            if not is_correct(t, ex.answers):
                st.skip("not correct or not format_ok")
                continue
            if len(t.token_ids) > cfg.max_total_tokens:
                st.skip("longer than max_total_tokens")
                continue
            longest = max((len(turn.token_ids) for turn in t.turns if turn.kind == POLICY), default=0)
            st.longest_turn = max(st.longest_turn, longest)
            st.long_turns += longest > cfg.max_new_tokens
            t.meta.setdefault("source", source)
            out.append(t)
            st.n += 1
            st.by_source[source] = st.by_source.get(source, 0) + 1
            st.by_hops[str(ex.hops)] = st.by_hops.get(str(ex.hops), 0) + 1
        return out

    # ------------------------------------------------------------------ the SFT step
    def nll(self, batch: RLBatch) -> tuple[torch.Tensor, int]:
        """``(loss, tokens)``: the batch's mean NLL over policy tokens (``loss_mask``), accumulated over
        micro-batches (backward is called on each, when grad is enabled)."""
        total, tokens = 0.0, max(1, batch.global_tokens)
        for micro in batch.micro_batches(self.config.micro_batch_size):
            micro = micro.to(self.policy.device)
            logp = self.policy.logprobs(micro.input_ids, micro.attention_mask, target_mask=micro.loss_mask > 0)
            loss = -(logp * micro.loss_mask).sum() / tokens
            if loss.requires_grad:
                loss.backward()
            total += float(loss.detach())
        return torch.tensor(total), batch.global_tokens

    @torch.no_grad()
    def eval_loss(self, trajs: Sequence[Trajectory]) -> float:
        """Mean NLL per policy token of ``trajs`` under the current adapter (no update)."""
        return float(self.nll(build_batch(list(trajs), pad_id=self.pad_id))[0])

    def sft_update(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """One optimizer step on ``trajs``; returns ``loss``, ``tokens``, ``tokens_per_s``, ``grad_norm``."""
        cfg = self.config
        t0 = time.perf_counter()
        batch = build_batch(list(trajs), pad_id=self.pad_id, max_tokens=cfg.max_total_tokens)
        self.policy.model.train(cfg.lora_dropout > 0)
        self.optimizer.zero_grad(set_to_none=True)
        loss, tokens = self.nll(batch)
        from workbench.rl.update import clip_grad_norm

        gnorm = clip_grad_norm(self.policy.trainable_parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.model.eval()
        self.opt_step += 1
        secs = time.perf_counter() - t0
        seq_tokens = int(batch.attention_mask.sum())
        return {"loss": float(loss), "tokens": float(tokens), "seq_tokens": float(seq_tokens),
                "tokens_per_s": seq_tokens / max(1e-9, secs), "grad_norm": gnorm, "n_seqs": float(len(batch)),
                "time_step_s": secs}

    def train_step(self) -> dict[str, Any]:
        """Take the next ``batch_size`` pool trajectories, update, log; returns the metrics row."""
        self.prepare()
        trajs = self.data.take(self.config.batch_size)
        row = {"step": self.step + 1, **self.sft_update(trajs), "epoch": self.data.epoch,
               "lr": self.optimizer.param_groups[0]["lr"]}
        self.step += 1
        self.run.append_step_metrics(row)
        self.trackers.log_row(row)
        return row

    def train(self, steps: int | None = None, on_step: Callable[[dict[str, Any]], None] | None = None) -> Run:
        """Evaluate (step 0), run SFT steps until ``steps`` (default ``config.steps``), evaluate, checkpoint:
        the RL trainer's loop over this class's ``train_step`` (``on_step`` as there). A run whose pool cannot be made
        leaves no folder behind, as a training run whose inputs fail leaves none."""
        try:
            self.prepare()
        except BaseException:
            self._drop_unstarted()
            raise
        self._made = None  # from here on the folder is a run: a failure leaves it incomplete, as a training run's
        return super().train(steps, on_step)

    def _drop_unstarted(self) -> None:
        """Remove the run folder this trainer made, when no step has started in it (it holds its config, its examples
        and at most an empty pool): a failed start is an error line, not a folder that reads as a run."""
        made, self._made = self._made, None
        if made is None:
            return
        import shutil

        made.release_writer_lock()
        shutil.rmtree(made.path, ignore_errors=True)

    def progress_label(self) -> str:
        return f"sft {self.config.protocol}"

    def progress_postfix(self, row: dict[str, Any]) -> dict[str, str]:
        return {"loss": f"{row['loss']:.3f}", "s": f"{row['time_step_s']:.0f}"}

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        self.prepare()  # the checkpoint's data cursor is a position in the pool
        super().load_checkpoint(path)

    def finalize(self) -> dict[str, Any]:
        """``metrics.json``: the RL trainer's summary (held-out before/after), the first/last-quarter
        loss, the pool, and held-out cover-EM per hop count before and after."""
        summary = super().finalize()
        rows = [r for r in self.run.step_metrics() if "loss" in r]
        if rows:
            k = max(1, len(rows) // 4)
            summary["loss_first"] = float(np.mean([r["loss"] for r in rows[:k]]))
            summary["loss_last"] = float(np.mean([r["loss"] for r in rows[-k:]]))
            summary["seconds_per_step"] = float(np.mean([r["time_step_s"] for r in rows]))
        summary["kind"] = "sft"
        summary["pool"] = self.pool_stats.to_dict()
        evals = sorted((self.run.path / "eval").glob("*.trajectories.parquet")) if (self.run.path / "eval").exists() else []
        if evals:
            summary["eval_by_hops"] = {"before": eval_by_hops(evals[0], self.eval_examples),
                                       "after": eval_by_hops(evals[-1], self.eval_examples)}
        self.run.write_metrics(summary)
        return summary


def eval_by_hops(path: str | os.PathLike, examples: Sequence[Example]) -> dict[str, dict[str, float]]:
    """Held-out metrics per hop count (``{hops: {n, em, cem, f1, ...}}`` and ``all``) of an
    ``eval/<step>.trajectories.parquet`` written by ``Trainer.evaluate``."""
    from workbench.rewards.outcomes import score, summarize

    s = summarize(score(load_trajectories(path), list(examples)))
    by = {h: {k: v for k, v in m.items() if k in ("n", "em", "cem", "f1", "format_ok", "answered", "n_searches")}
          for h, m in s.pop("by_hops").items()}
    by["all"] = {k: v for k, v in s.items() if k in ("n", "em", "cem", "f1", "format_ok", "answered", "n_searches")}
    return by
