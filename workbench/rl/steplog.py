"""What one training step leaves in the run: the collected batch, its metrics row, its tables.

:class:`StepBatch` is what ``Trainer.collect`` gathered; :func:`step_row` turns it into the
``metrics.jsonl`` row; :func:`write_step` writes ``steps/<n>.trajectories.parquet`` /
``steps/<n>.features.parquet``; :func:`finalize_run` joins them and writes ``metrics.json``.
Every file goes through the atomic writer (:mod:`workbench.util.io`), so a killed run never leaves a
truncated table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from workbench.core.trajectory import Trajectory, save_trajectories
from workbench.rewards.features import save_features
from workbench.rewards.preset import FeatureNeeds
from workbench.rl.advantages import FilterStats
from workbench.storage.runs import Run

if TYPE_CHECKING:
    from workbench.rewards.rubric import RewardTable


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
    n_failed: int = 0
    """Generated trajectories whose reward failed (NaN): left out of group statistics, advantage 0."""


def step_row(sb: StepBatch, st: dict[str, float], seconds: float, step: int, stage: int) -> dict[str, Any]:
    """The ``metrics.jsonl`` row of training step ``step`` (this process's numbers): reward mean/std
    (and per component), ``n_failed_rewards``, EM/cover-EM/F1, searches, response length, filter
    counts, the update's ``st`` and seconds per phase."""
    f = sb.features
    r = f["reward"].to_numpy(np.float64)
    row: dict[str, Any] = {"step": step, "stage": stage, "reward_mean": nanmean(r),
                           "reward_std": nanstd(r), "reward_missing": int(np.isnan(r).sum()),
                           "n_failed_rewards": sb.n_failed}
    if sb.reward_table is not None:
        for comp in sb.reward_table.components:
            v = f[f"reward_{comp}"].to_numpy(np.float64)
            row[f"reward_{comp}_mean"], row[f"reward_{comp}_std"] = nanmean(v), nanstd(v)
    for col, name in (("cem", "cem"), ("f1", "f1"), ("em", "em")):
        if col in f:
            row[name] = nanmean(f[col].to_numpy(np.float64))
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
    return row


def write_step(run: Run, step: int, sb: StepBatch, row: dict[str, Any]) -> None:
    """``steps/<step>.trajectories.parquet`` + ``.features.parquet`` (atomic) and the metrics row."""
    d = run.path / "steps"
    d.mkdir(exist_ok=True)
    f = sb.features
    extra = {"step": [step] * len(sb.generated), "method": [t.protocol for t in sb.generated]}
    for col in ("em", "cem", "f1", "reward", "advantage", "kept"):
        extra[col] = f[col].tolist()  # Python scalars
    extra["format_ok"] = [bool(t.flags.get("format_ok")) for t in sb.generated]
    save_trajectories(sb.generated, d / f"{step:06d}.trajectories.parquet", extra_columns=extra)
    save_features(d, f, f"{step:06d}.features.parquet")
    run.append_step_metrics(row)


class RunNames(Protocol):
    """The names :func:`finalize_run` records: a :class:`~workbench.rl.train_config.TrainConfig`'s, or those read
    back from the config of another trainer's run (``workbench.integrations.trl``)."""

    @property
    def preset(self) -> str | None: ...

    @property
    def reward(self) -> str | None: ...

    @property
    def protocol(self) -> str | None: ...


def finalize_run(run: Run, config: RunNames, steps: int) -> dict[str, Any]:
    """Join the per-step tables into ``trajectories.parquet`` / ``features.parquet`` (atomically);
    write ``metrics.json`` (first/last-quarter reward, held-out before/after)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workbench.util.io import atomic_path

    d = run.path / "steps"
    tparts = sorted(d.glob("*.trajectories.parquet"))
    fparts = sorted(d.glob("*.features.parquet"))
    if tparts:
        tables = [pq.read_table(p) for p in tparts]
        with atomic_path(run.path / "trajectories.parquet") as tmp:  # a kill never leaves a truncated table
            pq.write_table(pa.concat_tables(tables, promote_options="default"), tmp)
    if fparts:
        save_features(run, pd.concat([pd.read_parquet(p) for p in fparts], ignore_index=True))
    rows = run.step_metrics()
    train_rows = [r for r in rows if "reward_mean" in r]
    eval_rows = [r for r in rows if "eval_reward_mean" in r]
    summary: dict[str, Any] = {"kind": "train", "steps": steps, "preset": config.preset,
                               "reward": config.reward, "protocol": config.protocol}
    if train_rows:
        k = max(1, len(train_rows) // 4)
        summary["reward_first"] = float(np.mean([r["reward_mean"] for r in train_rows[:k]]))
        summary["reward_last"] = float(np.mean([r["reward_mean"] for r in train_rows[-k:]]))
        summary["reward_mean"] = train_rows[-1]["reward_mean"]
        summary["seconds_per_step"] = float(np.mean([r["time_step_s"] for r in train_rows]))
    if eval_rows:
        summary["eval_before"] = {k: v for k, v in eval_rows[0].items() if k.startswith("eval_")}
        summary["eval_after"] = {k: v for k, v in eval_rows[-1].items() if k.startswith("eval_")}
    run.write_metrics(summary)
    return summary



def merge_micro_stats(sums: dict[str, float], st: dict[str, float]) -> None:
    """Add one micro-batch's ``policy_loss`` stats into ``sums`` (ratio extremes by min/max, β as is)."""
    for k, v in st.items():
        if k == "ratio_min":
            sums[k] = min(sums.get(k, math.inf), v)
        elif k == "ratio_max":
            sums[k] = max(sums.get(k, -math.inf), v)
        elif k == "kl_coef":
            sums[k] = v
        else:
            sums[k] = sums.get(k, 0.0) + v


def summarize_updates(acc: dict[str, list[float]]) -> dict[str, float]:
    """The step's update stats from per-optimizer-step values: means, ratio extremes, step count."""
    out = {k: float(np.mean(v)) for k, v in acc.items() if k not in ("ratio_min", "ratio_max", "n_tokens")}
    out["ratio_min"] = float(min(acc.get("ratio_min", [1.0])))
    out["ratio_max"] = float(max(acc.get("ratio_max", [1.0])))
    out["optimizer_steps"] = float(len(acc.get("loss", [])))
    return out


class FailedRewardsError(ValueError):
    """Too many trajectories of a step have a failed (NaN) reward to train on."""


def missing_encoder(encoder: str, needs: FeatureNeeds) -> str:
    """What is lost when ``encoder`` is ``"none"`` but the reward declares embedding features (``needs.encoder``):
    a sentence naming the fix, or ``""``.

    >>> from workbench.rewards.preset import FeatureNeeds
    >>> missing_encoder("none", FeatureNeeds(encoder=True))[:36]
    'TrainConfig.encoder is "none", but t'
    >>> missing_encoder("auto", FeatureNeeds(encoder=True)), missing_encoder("none", FeatureNeeds())
    ('', '')
    """
    if encoder != "none" or not needs.encoder:
        return ""
    return ('TrainConfig.encoder is "none", but the reward reads embedding features (query similarity, recall by '
            "embedding), which stay NaN without an encoder: pass --encoder auto (or a path)")


def check_failed_share(n_failed: int, n: int, max_share: float, tables: Sequence[RewardTable], step: int,
                       hint: str = "") -> None:
    """Raise :class:`FailedRewardsError` when ``n_failed / n > max_share``, naming the reward
    components (of the rubric ``tables``) that were NaN and how often, and ``hint`` (a likely cause) first."""
    if n == 0 or n_failed / n <= max_share:
        return
    comps: dict[str, int] = {}
    for table in tables:
        for comp in table.components:
            k = int(np.isnan(np.asarray(table.values[comp], dtype=np.float64)).sum())
            if k:
                comps[comp] = comps.get(comp, 0) + k
    named = ", ".join(f"{c} ({k} NaN)" for c, k in sorted(comps.items(), key=lambda x: -x[1])) or "the total"
    raise FailedRewardsError(
        f"step {step}: {n_failed} of {n} trajectories have a failed (NaN) reward, more than "
        f"max_failed_share={max_share}; failing reward components: {named}. {hint + '. ' if hint else ''}"
        "Check the judge / evidence model / "
        "tools those components read (the flags in features.parquet say which failed), or raise "
        "TrainConfig.max_failed_share")


def truncate_logs(run: Run, step: int) -> None:
    """Drop what a killed run logged after step ``step`` (metrics rows, step tables) so a resumed run logs it again."""
    from workbench.util.io import atomic_write_text

    rows = [r for r in run.step_metrics() if int(r.get("step", 0)) <= step]
    atomic_write_text(run.path / "metrics.jsonl",
                      "".join(json.dumps(r, ensure_ascii=False, default=float) + "\n" for r in rows))
    for p in (run.path / "steps").glob("*.parquet") if (run.path / "steps").exists() else []:
        if int(p.name.split(".")[0]) > step:
            p.unlink()


def nanmean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def nanstd(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.std()) if x.size else float("nan")
