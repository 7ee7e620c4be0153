"""The expert traces of ``workbench expert`` as an eval-style run the inspector and the dashboard open."""

from __future__ import annotations

from typing import Any

from workbench.eval.runner import EvalResult, score, summarize, write_eval_run
from workbench.protocols.base import Protocol
from workbench.rewards.features import compute_features
from workbench.rl.expert import ExpertResult
from workbench.storage.runs import Run


def write_expert_run(result: ExpertResult, method: str, protocol: Protocol, out: Any = None, split: str = "train",
                     name: str | None = None, config: dict[str, Any] | None = None) -> Any:
    """An eval-style run of the expert trajectories (inspector and dashboard read it like any run):
    ``trajectories.parquet``, ``examples.jsonl``, ``metrics.json`` (with ``expert``: the yield per hop
    count and the dropped questions' reasons), ``features.parquet``, ``config.json`` (``kind: expert``)."""
    feats = compute_features(result.trajectories, result.examples, encoder=False, cache=False)
    rows = score(result.trajectories, result.examples, feats)
    summary = summarize(rows)
    summary["wall_seconds"] = result.seconds
    er = EvalResult(method, result.trajectories, rows, summary, result.seconds, {"protocol": protocol.config()},
                    features=feats)
    run = Run.create(out, kind="expert", name=name or f"expert-{method}-{split}",
                     config={"method": method, "split": split, "model": "expert", "source": "expert",
                             "protocol_config": protocol.config(), **(config or {})})
    expert = {"yield": result.yield_by_hops(), "n_valid": len(result.trajectories),
              "n_dropped": len(result.dropped), "dropped": result.dropped}
    return write_eval_run(run, [er], result.examples, features=True, extra_metrics={"expert": expert})
