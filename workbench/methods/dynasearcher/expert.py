"""The expert's turns in DynaSearcher's grammar: a JSON search request naming the hop's entity and relation."""

from __future__ import annotations

import json

from workbench.protocols.base import Protocol
from workbench.rl.expert import ExpertPlan, ExpertWriter, conclusion, steps


def _turns(protocol: Protocol, plan: ExpertPlan) -> list[str]:
    """One JSON request per hop (the query, the hop's head entity and relation), the boxed answer last."""
    turns = []
    for why, h in zip(steps(plan), plan.hops):
        req = json.dumps({"query": h.query, "entity": [h.head], "relation": [h.relation]}, ensure_ascii=False)
        turns.append(f"<think> {why} </think>\n<search> {req} </search>")
    return turns + [f"<think> {conclusion(plan)} </think>\n<answer> The final answer is \\boxed{{{plan.answer}}} </answer>"]


#: the request must be strict JSON (the protocol's ``json_strict`` flag), not repaired
WRITER = ExpertWriter(_turns, required_flags=("json_strict",))
