"""R1-Searcher's grammar (Song et al., 2025, Sec. 3.1; the authors' code, ``OpenRLHF-RAG``): queries between
``<|begin_of_query|>`` and ``<|end_of_query|>`` inside ``<think>``, the top-3 documents appended between the document
markers (masked from the loss), the answer in ``<answer>``."""

from __future__ import annotations

import re
from typing import Any

from workbench.core.types import Hit
from workbench.protocols.base import ANSWER, INVALID, SEARCH, Action, Observation, Protocol
from workbench.tools.base import Toolbox, clean_text

BEGIN_QUERY, END_QUERY = "<|begin_of_query|>", "<|end_of_query|>"
BEGIN_DOCS, END_DOCS = "<|begin_of_documents|>", "<|end_of_documents|>"

SYSTEM_PROMPT = (
    "You are a helpful assistant. Given a question, you should answer it by first thinking about the reasoning "
    "process in the mind and then providing the final answer. The output format of reasoning process and final "
    "answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "\"<think> reasoning process here </think>\n\n<answer> final answer here </answer>\". During the thinking "
    f"process, you can perform searching for uncertain knowledge if necessary with the format of \"{BEGIN_QUERY} "
    f"search query (only list keywords, such as \"keyword_1 keyword_2 ...\"){END_QUERY}\". A query must involve only "
    f"a single triple. Then, the search system will provide you with the retrieval information with the format of "
    f"\"{BEGIN_DOCS} ...search results... {END_DOCS}\"."
)

# The paper prints no invalid-action message; these words are ours.
INVALID_MESSAGE = (
    "\nMy previous output had no complete search query and no final answer. To search I write keywords between "
    "the query markers; to answer I close my thinking and write the answer inside <answer></answer>.\n"
)

# A fictional demonstration (nothing in it exists); the documents are rendered by the protocol.
DEMO_QUESTION = "In what year was the founder of the Harrowmere Chess Club born?"
DEMO_STEPS: list[tuple[str, Any]] = [
    ("policy", f"<think> I need the founder of the Harrowmere Chess Club first. {BEGIN_QUERY} Harrowmere Chess Club "
               f"founder {END_QUERY}"),
    ("observation", [Hit("d1", "Harrowmere Chess Club", "The club was founded in 1921 by Oda Fennick (born 1894).")]),
    ("policy", "The founder Oda Fennick was born in 1894. </think>\n\n<answer> 1894 </answer>"),
]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class R1Searcher(Protocol):
    """R1-Searcher's grammar: queries inside ``<think>``, documents appended, ``<answer>`` last."""

    name = "r1_searcher"
    stop = (END_QUERY, "</answer>")
    tags = ("think", "answer")
    required_tools = ("search",)

    def __init__(self, top_k: int = 3, **kwargs: Any):  # top-3 documents in training (top-5 in their evaluation)
        super().__init__(top_k=top_k, **kwargs)

    system_text = SYSTEM_PROMPT
    demo_question = DEMO_QUESTION
    demo_steps = DEMO_STEPS

    def parse(self, text: str) -> Action:
        """The last complete answer box, else the last complete query; never raises (linear scans only)."""
        end = text.rfind("</answer>")
        start = text.rfind("<answer>", 0, end) if end >= 0 else -1
        if start >= 0:
            content = text[start + len("<answer>"):end].strip()
            return Action(ANSWER, content) if content else Action(INVALID, reason="empty <answer>")
        q_end = text.rfind(END_QUERY)
        q_start = text.rfind(BEGIN_QUERY, 0, q_end) if q_end >= 0 else -1
        if q_start >= 0:
            query = " ".join(text[q_start + len(BEGIN_QUERY):q_end].replace('"', " ").split())
            return Action(SEARCH, query) if query else Action(INVALID, reason="empty query")
        if BEGIN_QUERY in text:
            return Action(INVALID, reason="unclosed query marker")
        if "<answer>" in text:
            return Action(INVALID, reason="unclosed <answer> tag")
        return Action(INVALID, reason="no query and no <answer> in the turn")

    def act(self, action: Action, toolbox: Toolbox, example: Any) -> Observation:
        return self.search_observation(action, toolbox)

    def render(self, hits: list[Hit] | str) -> str:
        """``(1)Title: t Text: x`` lines in the document block ("None" when nothing came back)."""
        if isinstance(hits, str):
            body = clean_text(hits, 500)
        else:
            body = "\n".join(f"({i}){clean_text(h.title, 200)} {clean_text(h.text, self.max_chars_per_hit)}"
                             for i, h in enumerate(hits, 1)) or "None"
        return f"\n\n{BEGIN_DOCS}\n{body[: self.max_obs_chars]}\n{END_DOCS}\n\n"

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE)

    def format_flags(self, traj: Any) -> dict[str, Any]:
        flags = super().format_flags(traj)
        policy = "".join(t.text for t in traj.turns if t.kind == "policy")
        full = "".join(t.text for t in traj.turns)
        answers = _ANSWER_RE.findall(policy)
        errors = []
        if policy.count("</think>") != 1 or policy.count("<think>") > 1:
            errors.append("think")
        if len(answers) != 1 or policy.count("<answer>") != 1 or policy.count("</answer>") != 1:
            errors.append("answer_boxes")
        n_q = policy.count(BEGIN_QUERY)
        if not (n_q == policy.count(END_QUERY) == full.count(BEGIN_DOCS) == full.count(END_DOCS)):
            errors.append("queries")
        if answers and any(m in answers[0] for m in (BEGIN_QUERY, END_QUERY, BEGIN_DOCS, END_DOCS)):
            errors.append("marker_in_answer")
        flags.update(format_ok=not errors and flags["format_ok"], answer_boxes=len(answers), format_errors=errors)
        return flags
