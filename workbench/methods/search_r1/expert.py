"""The expert's turns in Search-R1's grammar (``workbench expert --method search_r1``)."""

from __future__ import annotations

from typing import Any

from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, steps


def _turns(protocol: Any, plan: ExpertPlan) -> list[str]:
    """One ``<think>`` + ``<search>`` turn per hop, then ``<think>`` + ``<answer>``."""
    s = protocol.search_tag
    turns = [f"<think> {why} </think>\n<{s}> {h.query} </{s}>" for why, h in zip(steps(plan), plan.hops)]
    return turns + [f"<think> {conclusion(plan)} </think>\n<answer> {plan.answer} </answer>"]


WRITER = ExpertWriter(_turns)
