"""Learning When to Search (seed 004): ``<think>``, ``<search>``, ``<information>``, ``<reflect>``, ``<answer>``.

The agent thinks first, from its own knowledge. If that is enough it reflects and answers
(``think, reflect, answer``); otherwise it searches, reads ``<information>``, reflects, and
may search again before answering (``think, (search, information, reflect)+, answer``) —
paper §3.2 and appendix B.4. The format reward ``r_f`` (Eq. 6) is +1 only when the whole
response (policy turns and observations, in order) has one of these two shapes:
``format_ok`` here. ``reflect_count`` counts the well-formed ``<reflect>`` boxes.
"""

from __future__ import annotations

from typing import Any

from workbench.core.types import Hit
from workbench.protocols.tagged import PassageSearchProtocol

MAX_TURNS = 5  # paper appendix B, hyper-parameter table: max_turns 5

# Appendix B.4, "Instruction for Trained RLM", verbatim (its list layout kept as lines).
SYSTEM_PROMPT = (
    "Please answer the given question by following the structured reasoning protocol below:\n"
    "1. Always begin with <think>...</think> to provide a brief internal reasoning sketch. - This reasoning must "
    "primarily rely on your internal knowledge and reasoning abilities. - If your internal knowledge is sufficient "
    "to answer the question, do not assume the need for external tools.\n"
    "2. If your internal knowledge is sufficient to answer the question: - Provide a concise summary of your "
    "reasoning inside <reflect>...</reflect>. - Then give the final answer inside <answer>...</answer>. - Under no "
    "circumstances should you generate a <search> block if your internal knowledge is adequate.\n"
    "3. Only if your internal knowledge is genuinely insufficient to answer the question: - Generate a brief "
    "keyword-based search query inside <search>...</search>. The query should be as concise as possible but must "
    "include sufficient factual clues, such as names, dates, locations, key concepts, etc. - The query should be a "
    "brief description with multiple keywords instead of a natural language question.\n"
    "4. When the system returns information inside <information>...</information>: - If the information is "
    "reliable and sufficient, integrate it with your reasoning inside <reflect>...</reflect>. - Then provide the "
    "final concise answer inside <answer>...</answer>.\n"
    "5. If the retrieved information is insufficient or contradicts your internal knowledge: - Explain the issue "
    "within <reflect>...</reflect>. - If necessary, generate a revised <search> query.\n"
    "6. Final rule: - The final answer must be concise and clear, placed inside <answer></answer>. - Internal "
    "reasoning (in <think>) must always be the primary method; tool usage should be a last resort, not the default."
)

# The paper prints no invalid-action message; these words are ours.
# Tags are written as empty pairs, so that a policy echoing the message writes no action.
INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I need to search, I should put a brief keyword query inside "
    "<search></search>. If I can answer, I should reflect inside <reflect></reflect> and then put the answer "
    "inside <answer></answer>. Let me try again.\n"
)

TAGS = ("think", "search", "information", "reflect", "answer")
#: The two valid shapes (paper §3.3, format reward).
SHAPE = r"think reflect answer|think (search information reflect )+answer"

# A fictional demonstration (nothing in it exists); the observation is rendered by the protocol.
DEMO_QUESTION = "In what year was the founder of the Harrowmere Chess Club born?"
DEMO_STEPS: list[tuple[str, Any]] = [
    (
        "policy",
        "<think> I do not know who founded the Harrowmere Chess Club, so I need to search. </think>\n"
        "<search> Harrowmere Chess Club founder born </search>",
    ),
    ("observation", [Hit("d1", "Harrowmere Chess Club", "The club was founded in 1921 by Oda Fennick (born 1894).")]),
    (
        "policy",
        "<reflect> The club's founder Oda Fennick was born in 1894. </reflect>\n<answer> 1894 </answer>",
    ),
]


class WhenToSearch(PassageSearchProtocol):
    """The When-to-Search grammar: search only when internal knowledge is not enough."""

    name = "when_to_search"
    observation_tag = "information"  # ``<information>`` with ``Doc i(Title: t) text`` passages (the paper's examples)
    passage_style = "doc"
    invalid_message = INVALID_MESSAGE
    stop = ("</search>", "</answer>")
    tags = TAGS
    shape = SHAPE

    system_text = SYSTEM_PROMPT
    demo_question = DEMO_QUESTION
    demo_steps = DEMO_STEPS

    def extra_checks(self, traj, blocks, flags, errors) -> dict[str, Any]:
        return {"reflect_count": sum(b.well_formed for b in self.blocks_of(traj, "reflect"))}
