"""The expert's turns in When-to-Search's grammar: ``<think>`` once, ``<reflect>`` after each observation."""

from __future__ import annotations

from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, need


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """A ``<think>`` and a search first, a ``<reflect>`` after each observation, the answer last."""
    h0 = plan.hops[0]
    turns = [f"<think> I do not know this from memory. {need(h0)} </think>\n<search> {h0.query} </search>"]
    for prev, h in zip(plan.hops, plan.hops[1:]):
        turns.append(f"<reflect> {prev.fact} {need(h, False)} </reflect>\n<search> {h.query} </search>")
    return turns + [f"<reflect> {conclusion(plan)} </reflect>\n<answer> {plan.answer} </answer>"]


WRITER = ExpertWriter(_turns)
