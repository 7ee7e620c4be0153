r"""ReSearch's grammar (Chen et al., 2025, Sec. 2.1–2.2, Table 1): ``<think>``, ``<search>``, ``<result>``, ``<answer>``.

The model thinks in ``<think> ... </think>``, searches with ``<search> query </search>`` (generation
stops at ``</search>``; the query is the text between the last ``<search>`` and that ``</search>``),
reads the top-5 passages the environment appends as `` <result>\n...\n</result>`` (masked from the
loss, Sec. 2.1 "Retrieval Result Masking") and ends with ``<answer> ... \boxed{a} ... </answer>``.

The answer is the content of the last ``\boxed{}`` in the answer (Eq. 2: ``a_pred is the final
answer in \boxed{}``); an answer without a balanced ``\boxed{}`` is the empty string, as in the
authors' evaluation pipeline (``ReSearchPipeline``: ``pred = ""``). So EM / F1 / cover-EM of a
run score what the paper scores.

``format_ok`` is the authors' ``validate_format`` (``verl/utils/reward_score/re_search.py``) over
the response (the policy turns and the ``<result>`` blocks of the searches they asked for):
``<think>`` and ``</think>`` paired and present; exactly one ``<answer>`` and one ``</answer>``, in
that order; every ``<search>`` followed by ``</search>``, ``<result>``, ``</result>`` in that order;
a ``\boxed{}`` that closes inside the answer — plus the workbench's own conditions for every
protocol: the episode ended with an answer and no action was invalid. Tags are literal
(case-sensitive), as the authors' stop string and checks are; every scan is linear.
"""

from __future__ import annotations

from typing import Any

from workbench.core.trajectory import POLICY
from workbench.core.types import Hit
from workbench.protocols.base import (
    ANSWER,
    INVALID,
    SEARCH,
    Action,
    Observation,
    Protocol,
    extract_boxed,
    format_errors,
    strip_tags,
)
from workbench.tools.base import Toolbox, clean_text

THINK, END_THINK = "<think>", "</think>"
SEARCH_TAG, END_SEARCH = "<search>", "</search>"
RESULT, END_RESULT = "<result>", "</result>"
ANSWER_TAG, END_ANSWER = "<answer>", "</answer>"

# Table 1, "System Prompt Template For Instruction-Tuned Model", verbatim.
SYSTEM_PROMPT = (
    "You are a helpful assistant that can solve the given question step by step with the help of the wikipedia "
    "search tool. Given a question, you need to first think about the reasoning process in the mind and then "
    "provide the answer. During thinking, you can invoke the wikipedia search tool to search for fact information "
    "about specific topics if needed. The reasoning process and answer are enclosed within <think> </think> and "
    "<answer> </answer> tags respectively, and the search query and result are enclosed within <search> </search> "
    "and <result> </result> tags respectively. For example, <think> This is the reasoning process. </think> "
    "<search> search query here </search> <result> search result here </result> <think> This is the reasoning "
    "process. </think> <answer> The final answer is \\boxed{answer here} </answer>. In the last part of the answer, "
    "the final exact answer is enclosed within \\boxed{} with latex format."
)

# The paper has no invalid action (generation runs to EOS); these words are ours. Tags are written as empty pairs,
# so a policy that echoes the message writes no action.
INVALID_MESSAGE = (
    "\nMy previous output had no complete search and no final answer. To search I write the query inside "
    "<search></search>; to answer I write inside <answer></answer>: The final answer is \\boxed{answer}.\n"
)

# A fictional demonstration (nothing in it exists); the result block is rendered by the protocol.
DEMO_QUESTION = "Where was the glassmaker Ilka Marsden born?"
DEMO_STEPS: list[tuple[str, Any]] = [
    ("policy", "<think> I do not know where Ilka Marsden was born, so I search for it. </think> "
               "<search> Ilka Marsden glassmaker birthplace </search>"),
    ("observation", [Hit("d1", "Ilka Marsden", "Ilka Marsden (1851-1920) was a glassmaker. She was born in Tessaly, "
                                               "a river town in Estovia.")]),
    ("policy", "<think> The result says Ilka Marsden was born in Tessaly. </think> "
               "<answer> The final answer is \\boxed{Tessaly} </answer>"),
]


def literal_blocks(text: str, open_tag: str, close_tag: str) -> list[str]:
    """The contents of the successive ``open_tag ... close_tag`` pairs of ``text`` (literal, non-overlapping; an
    opening tag without a close after it ends the scan). Linear: each ``find`` starts where the last one ended.

    >>> literal_blocks("<a>1</a> <a>2 <a>3</a> <a>", "<a>", "</a>")
    ['1', '2 <a>3']
    """
    out, pos = [], 0
    while (start := text.find(open_tag, pos)) >= 0:
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            break
        out.append(text[start + len(open_tag) : end])
        pos = end + len(close_tag)
    return out


def format_problems(response: str) -> list[str]:
    r"""What the authors' ``validate_format`` finds wrong with ``response`` (empty: the format is right).

    >>> format_problems("<think> t </think> <search> q </search> <result> r </result> "
    ...                 "<think> u </think> <answer> The final answer is \\boxed{a} </answer>")
    []
    >>> format_problems("<think> t <search> q </search> <answer> \\boxed{a} </answer>")
    ['<think> </think> not paired', 'search/result tags are incomplete']
    """
    problems = []
    n_think = response.count(THINK)
    if n_think != response.count(END_THINK):
        problems.append("<think> </think> not paired")
    elif n_think == 0:
        problems.append("<think> or </think> not found")
    if response.count(ANSWER_TAG) != 1 or response.count(END_ANSWER) != 1:
        problems.append("not exactly one <answer> and one </answer>")
    pos = 0
    while (s := response.find(SEARCH_TAG, pos)) >= 0:  # each search: </search>, then <result>, then </result>
        s_end = response.find(END_SEARCH, s)
        r = response.find(RESULT, s)
        r_end = response.find(END_RESULT, r) if r >= 0 else -1
        if -1 in (s_end, r, r_end):
            problems.append("search/result tags are incomplete")
            break
        if not s < s_end < r < r_end:
            problems.append("search/result tags are nested in the wrong order")
            break
        pos = r_end
    a, a_end = response.find(ANSWER_TAG), response.find(END_ANSWER)
    if a >= 0 and a_end >= 0:
        if a > a_end:
            problems.append("</answer> before <answer>")
        elif extract_boxed(response[a + len(ANSWER_TAG) : a_end]) is None:
            problems.append("no \\boxed{} closed inside the answer")
    return problems


class ReSearch(Protocol):
    """ReSearch's grammar: ``<think>`` / ``<search>`` / ``<result>`` / ``<answer>`` with ``\\boxed{}``, literal tags."""

    name = "re_search"
    stop = (END_SEARCH, END_ANSWER)
    tags = ("think", "search", "result", "answer")
    required_tools = ("search",)

    def __init__(self, top_k: int = 5, **kwargs: Any):  # Sec. 3.1: top-5 results per query, training and evaluation
        super().__init__(top_k=top_k, **kwargs)

    system_text = SYSTEM_PROMPT
    demo_question = DEMO_QUESTION
    demo_steps = DEMO_STEPS

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        """The complete ``<search>`` or ``<answer>`` block that ends last (its nearest opening tag before the close);
        never raises, linear (``rfind`` only)."""
        s_end = text.rfind(END_SEARCH)
        s = text.rfind(SEARCH_TAG, 0, s_end) if s_end >= 0 else -1
        a_end = text.rfind(END_ANSWER)
        a = text.rfind(ANSWER_TAG, 0, a_end) if a_end >= 0 else -1
        if a >= 0 and (s < 0 or a_end > s_end):
            content = text[a + len(ANSWER_TAG) : a_end].strip()
            return Action(ANSWER, content) if content else Action(INVALID, reason="empty <answer>")
        if s >= 0:
            query = " ".join(text[s + len(SEARCH_TAG) : s_end].split())
            return Action(SEARCH, query) if query else Action(INVALID, reason="empty <search> query")
        if SEARCH_TAG in text:
            return Action(INVALID, reason="unclosed <search> tag")
        if ANSWER_TAG in text:
            return Action(INVALID, reason="unclosed <answer> tag")
        return Action(INVALID, reason="no <search> or <answer> action in the turn")

    def answer_text(self, action: Action) -> str:
        """Eq. 2's ``a_pred``: the content of the answer's last balanced ``\\boxed{}``, "" without one."""
        boxed = extract_boxed(str(action.payload or ""))
        return "" if boxed is None else strip_tags(boxed, "answer")

    def act(self, action: Action, toolbox: Toolbox, example: Any) -> Observation:
        return self.search_observation(action, toolbox)

    def render(self, hits: list[Hit] | str) -> str:
        """`` <result>\\n"Title"\\ntext\\n\\n"Title"\\ntext\\n</result>``: the authors' layout (FlashRAG passages are
        ``"Title"\\ntext``, joined by blank lines), every text through ``clean_text``, capped at ``max_obs_chars``."""
        if isinstance(hits, str):
            body = clean_text(hits, 500)
        else:
            body = "\n\n".join(f'"{clean_text(h.title, 200)}"\n{clean_text(h.text, self.max_chars_per_hit)}'
                               for h in hits) or "No results."
        if len(body) > self.max_obs_chars:
            body = body[: max(0, self.max_obs_chars - 1)].rstrip() + "…"
        return f" {RESULT}\n{body}\n{END_RESULT}"

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE)

    # ------------------------------------------------------------------ format
    def response_text(self, traj: Any) -> str:
        """What the authors' checks read: the policy turns and the observations of the searches they asked for (an
        invalid-action message is the workbench's, not part of the paper's response)."""
        parts, last = [], None
        for turn in traj.turns:
            if turn.kind == POLICY:
                parts.append(turn.text)
                last = (turn.action or {}).get("kind")
            elif last == SEARCH:
                parts.append(turn.text)
        return "".join(parts)

    def format_flags(self, traj: Any) -> dict[str, Any]:
        """``format_ok`` (the authors' ``validate_format``, an answer, no invalid action), ``answer_boxes`` (answer
        blocks of the policy turns holding a balanced ``\\boxed{}``) and ``format_errors`` in words."""
        flags = super().format_flags(traj)
        errors = format_errors(flags, format_problems(self.response_text(traj)), True, [])
        policy = "".join(t.text for t in traj.turns if t.kind == POLICY)
        boxes = sum(extract_boxed(b) is not None for b in literal_blocks(policy, ANSWER_TAG, END_ANSWER))
        flags.update(format_ok=not errors, answer_boxes=boxes, format_errors=errors)
        return flags
