"""The expert's turns in R1-Searcher's grammar: queries between the markers inside one ``<think>``."""

from __future__ import annotations

from workbench.methods.r1_searcher.protocol import BEGIN_QUERY, END_QUERY
from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, steps


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """Queries between the markers inside one ``<think>``, closed before the answer."""
    turns = []
    for i, (why, h) in enumerate(zip(steps(plan), plan.hops)):
        turns.append(f"{'<think> ' if i == 0 else ''}{why} {BEGIN_QUERY} {h.query} {END_QUERY}")
    return turns + [f"{conclusion(plan)} </think>\n\n<answer> {plan.answer} </answer>"]


WRITER = ExpertWriter(_turns)
