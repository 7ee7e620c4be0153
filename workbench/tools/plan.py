"""The NL-DAG ``"plan"`` tool: validate a plan against a source registry, execute it, return per-node records.

:func:`make_plan_tool` returns a :class:`PlanTool`, a ``Toolbox`` tool ``tool(plan: str) -> list[dict]``
with one record per node (``node``, ``tool``, ``query``, ``hits``, ``error``, ``skipped``, ``level``,
``parents``, ``latency_s``). It carries its ``registry``, ``k`` and ``max_nodes``. The R-Search NL-DAG
protocol (``workbench.methods.rsearch_dag.protocol``) renders the records; this module knows no protocol.
"""

from __future__ import annotations

from typing import Any

from workbench.tools.dag import DEFAULT_MAX_NODES, Plan, parse_plan, run_plan, validate
from workbench.tools.sources import SourceRegistry


class PlanTool:
    """The ``"plan"`` tool: ``tool(plan) -> list[dict]``, one record per node (see the module docstring)."""

    def __init__(
        self,
        registry: SourceRegistry,
        k: int = 3,
        max_nodes: int = DEFAULT_MAX_NODES,
        max_workers: int = 4,
        timeout_s: float = 30.0,
    ):
        if not isinstance(registry, SourceRegistry):
            raise TypeError(f"make_plan_tool: registry must be a SourceRegistry, got {type(registry).__name__}")
        if k < 1 or max_nodes < 1:
            raise ValueError(f"make_plan_tool: need k >= 1 and max_nodes >= 1, got k={k}, max_nodes={max_nodes}")
        self.registry, self.k, self.max_nodes = registry, k, max_nodes
        self.max_workers, self.timeout_s = max_workers, timeout_s

    def validate(self, text: str) -> Plan:
        return validate(parse_plan(text), self.registry, max_nodes=self.max_nodes)

    def __call__(self, plan: str) -> list[dict[str, Any]]:
        _, res = run_plan(plan, self.registry, self.k, self.max_nodes, self.max_workers, self.timeout_s)
        return [
            {
                "node": r.node_id,
                "tool": r.tool,
                "query": r.query,
                "hits": [h.to_dict() for h in r.hits],
                "error": r.error,
                "skipped": r.skipped_reason,
                "level": r.level,
                "parents": list(r.parents),
                "latency_s": r.latency_s,
            }  # fmt: skip
            for r in res.records
        ]


def make_plan_tool(registry: SourceRegistry, k: int = 3, max_nodes: int = DEFAULT_MAX_NODES, **kwargs: Any) -> PlanTool:
    """A ``"plan"`` tool over ``registry``: ``k`` hits per node, at most ``max_nodes`` nodes executed.

    ``kwargs``: ``max_workers`` (parallel nodes of a level), ``timeout_s`` (per node).
    """
    return PlanTool(registry, k=k, max_nodes=max_nodes, **kwargs)
