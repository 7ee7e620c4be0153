"""Evaluation: roll out a method on examples, score the answers, summarize, write a run.

``evaluate`` is what ``workbench eval`` and ``workbench demo`` call, and what a notebook
calls; it returns the trajectories, one metric row per trajectory, and a summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.data.example import Example
from workbench.protocols.base import Protocol, get_protocol
from workbench.rewards.metrics import answer_metrics
from workbench.rollout.backends.base import Backend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.runs import Run
from workbench.tools.base import Toolbox
from workbench.trajectory import Trajectory

#: Columns of the summary table, in display order, with their labels.
SUMMARY_COLUMNS = {
    "n": "n",
    "em": "EM",
    "cem": "cover-EM",
    "f1": "F1",
    "searches": "searches",
    "tokens": "tokens/answer",
    "seconds": "s/answer",
    "valid_actions": "valid actions",
    "answered": "answered",
}


def score(trajs: list[Trajectory], examples: list[Example]) -> list[dict[str, Any]]:
    """One row per trajectory: answer metrics against the example's gold answers, plus counts."""
    by_id = {e.id: e for e in examples}
    rows = []
    for t in trajs:
        ex = by_id.get(t.example_id)
        golds = ex.answers if ex else []
        n_actions = len(t.actions)
        rows.append(
            {
                "id": t.id,
                "example_id": t.example_id,
                "protocol": t.protocol,
                "hops": ex.hops if ex else None,
                "qtype": ex.qtype if ex else None,
                **answer_metrics(t.answer, golds),
                "searches": t.n_searches,
                "tokens": t.n_policy_tokens,
                "seconds": t.latency_s,
                "tool_seconds": t.tool_latency_s,
                "valid_actions": (n_actions - t.n_invalid) / n_actions if n_actions else 0.0,
                "answered": float(t.answer is not None),
                "format_ok": float(bool(t.flags.get("format_ok"))),
                "finish_reason": t.finish_reason,
            }
        )
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means of the metric columns, overall and per hop count."""
    def means(rs: list[dict[str, Any]]) -> dict[str, float]:
        out: dict[str, float] = {"n": len(rs)}
        for k in ("em", "cem", "f1", "searches", "tokens", "seconds", "tool_seconds", "valid_actions", "answered", "format_ok"):
            out[k] = float(np.mean([r[k] for r in rs])) if rs else float("nan")
        return out

    summary = means(rows)
    hops = sorted({r["hops"] for r in rows if r.get("hops") is not None})
    summary["by_hops"] = {str(h): means([r for r in rows if r.get("hops") == h]) for h in hops}
    return summary


@dataclass
class EvalResult:
    method: str
    trajectories: list[Trajectory]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)


def evaluate(
    method: str | Protocol,
    examples: list[Example],
    backend: Backend,
    toolbox: Toolbox | None = None,
    config: RolloutConfig | None = None,
    progress: bool = True,
    meta: dict[str, Any] | None = None,
) -> EvalResult:
    """Roll out ``method`` (a protocol name or instance) on ``examples`` and score it."""
    protocol = get_protocol(method)
    toolbox = toolbox or Toolbox()
    missing = [t for t in protocol.required_tools if t not in toolbox]
    if missing:
        raise ValueError(
            f"method {protocol.name!r} needs tools {missing} but the toolbox has {toolbox.names()}; "
            "register them with Toolbox.register(name, fn)"
        )
    cfg = config or RolloutConfig()
    t0 = time.perf_counter()
    trajs = rollout(examples, protocol, toolbox, backend, cfg, progress=progress, meta={"method": protocol.name, **(meta or {})})
    secs = time.perf_counter() - t0
    rows = score(trajs, examples)
    summary = summarize(rows)
    summary["wall_seconds"] = secs
    return EvalResult(protocol.name, trajs, rows, summary, secs, {"protocol": protocol.config(), "rollout": cfg.to_dict()})


def write_eval_run(run: Run, results: list[EvalResult], examples: list[Example]) -> Run:
    """Write trajectories (all methods in one table, with their metric columns), examples and metrics."""
    trajs = [t for r in results for t in r.trajectories]
    rows = [row for r in results for row in r.rows]
    extra = {k: [row[k] for row in rows] for k in ("em", "cem", "f1", "format_ok")}
    extra["method"] = [t.meta.get("method", t.protocol) for t in trajs]
    run.write_trajectories(trajs, extra_columns=extra)
    run.write_examples(examples)
    run.write_metrics({"methods": {r.method: r.summary for r in results}})
    run.update_config(methods={r.method: r.config for r in results})
    return run


def format_table(results: list[EvalResult]) -> str:
    """A plain-text metrics table, one row per method."""
    head = ["method"] + list(SUMMARY_COLUMNS.values())
    body = []
    for r in results:
        s = r.summary
        body.append(
            [r.method, str(s["n"])]
            + [f"{s[k]:.3f}" for k in ("em", "cem", "f1")]
            + [f"{s['searches']:.2f}", f"{s['tokens']:.1f}", f"{s['seconds']:.2f}", f"{s['valid_actions']:.2f}", f"{s['answered']:.2f}"]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])
