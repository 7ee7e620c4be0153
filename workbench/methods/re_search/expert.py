"""The expert's turns in ReSearch's grammar: ``<think>`` then ``<search>`` per hop, the boxed answer last."""

from __future__ import annotations

from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, steps


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """One ``<think>`` + ``<search>`` turn per hop, then ``<think>`` + ``<answer>`` with ``\\boxed{}`` (Table 1)."""
    turns = [f"<think> {why} </think> <search> {h.query} </search>" for why, h in zip(steps(plan), plan.hops)]
    return turns + [f"<think> {conclusion(plan)} </think> <answer> The final answer is \\boxed{{{plan.answer}}} </answer>"]


WRITER = ExpertWriter(_turns)
