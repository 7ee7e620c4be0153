"""The expert's turns in the NL-DAG grammar: one plan whose nodes are the hops, each probed on its source."""

from __future__ import annotations

from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, Hop
from workbench.tools.base import Toolbox


def plan_probe(protocol: Protocol, toolbox: Toolbox, hop: Hop, query: str) -> str | None:
    """NL-DAG: the plan tool's sources (``general``, then the passage's own source) with the tool's k."""
    tool = toolbox.tools.get("plan")
    registry = getattr(tool, "registry", None)
    if registry is None:
        return None
    k = getattr(tool, "k", protocol.top_k)
    for source in dict.fromkeys(["general", hop.support_source]):
        if source and source in registry:
            try:
                hits = registry.search(source, query, k)
            except Exception:  # a failing source is simply not the one
                continue
            if any(h.id == hop.support_id for h in hits):
                return registry.resolve(source)
    return None


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """One NL-DAG plan with a node per hop (chained unless the question compares), then the facts and the answer."""
    labels = [chr(ord("A") + i) for i in range(len(plan.hops))]
    nodes = "\n".join(f"{a}: {h.query} ({h.tool.title()})" for a, h in zip(labels, plan.hops))
    chained = plan.example.qtype != "comparison"
    edges = " -> ".join(labels) if chained and len(labels) > 1 else "none"
    order = ("each search depends on the one before" if chained and len(labels) > 1
             else "the searches are independent")
    subqs = " ".join(h.subquestion for h in plan.hops)
    think = f"<think> Sub-questions: {subqs} One search per sub-question; {order}. </think>"
    facts = " ".join(h.fact for h in plan.hops)
    return [f"{think}\n<search>\nNodes:\n{nodes}\nEdges: {edges}\n</search>",
            f"{facts} So the answer is {plan.answer}.\n<answer> {plan.answer} </answer>"]


WRITER = ExpertWriter(_turns, probe=plan_probe, required_flags=("dag_valid",))
