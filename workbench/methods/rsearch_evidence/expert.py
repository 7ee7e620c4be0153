"""The expert's turns in R-Search's evidence grammar: the ``<original_evidence>`` quotes each hop's supporting sentence."""

from __future__ import annotations

from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, evidence_sentence, steps


def _evidence(plan: ExpertPlan) -> str:
    """Each hop's evidence sentence (from its supporting passage), once, as a bullet list."""
    lines: list[str] = []
    for h in plan.hops:
        s = evidence_sentence(h)
        if s not in lines:
            lines.append(s)
    return "\n".join(f"- {s}" for s in lines)


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """Plain reasoning and a search per hop; the conclusion, the evidence box and the answer last."""
    turns = [f"{why}\n<search> {h.query} </search>" for why, h in zip(steps(plan), plan.hops)]
    return turns + [f"{conclusion(plan)}\n<original_evidence>\n{_evidence(plan)}\n</original_evidence>\n"
                    f"<answer> {plan.answer} </answer>"]


WRITER = ExpertWriter(_turns)
