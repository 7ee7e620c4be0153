"""Classic RAG baselines as protocols, so they run through the same engine and are scored alike.

- ``vanilla_rag``: one retrieval with the question (top-k 5), then one answer.
- ``iter_retgen``: Iter-RetGen (Shao et al. 2023): retrieve with the question, generate; then
  ``iterations - 1`` more times retrieve with question + last generation and generate again;
  the last generation is the answer (3 iterations by default).
- ``ircot``: IRCoT (Trivedi et al. 2023): retrieve with the question, then alternate one
  chain-of-thought sentence and a retrieval with that sentence, until a sentence says
  "So the answer is: ..." or the turn budget ends (bounded by ``max_turns``).

The retrievals the environment makes on its own are recorded as search actions on the
observation turns, so the retrieval count (RC) includes them. Observations are inline
(inside the assistant's message) and carry loss mask 0 like any observation.
"""

from __future__ import annotations

import re
from typing import Any

from workbench.protocols.base import (
    ANSWER,
    INVALID,
    SEARCH,
    Action,
    Observation,
    Protocol,
    count_close,
    count_open,
    failure_text,
    find_tags,
    free_text_answer,
    strip_tags,
)
from workbench.tools.base import Toolbox, render_passages

_RAG_SYSTEM = (
    "Answer the question using the retrieved documents. Give only the final answer inside <answer> and </answer>, "
    "without detailed illustrations. For example, <answer> Beijing </answer>."
)
# Tags in invalid-action messages are written as empty pairs (<answer></answer>): a policy that
# echoes the message must not produce an action.
INVALID_MESSAGE = "\nPlease give the final answer inside <answer></answer>.\n"
# Two demonstrations with different answers: with one ("Ira Velt") the 135M default model answered
# with it in 20 of 80 real questions. A second answer makes no single string the "usual" answer, and the
# comparison demonstration answers with one option only (cover-EM credits "X or Y"; see ``cem_strict``). The
# names are fictional and checked by ``demo_leak`` (an answer that contains one is flagged and counted).
_RAG_DEMOS = [
    {
        "question": "Who designed the tower that stands in Olsby?",
        "steps": [
            ("observation", "<documents>\nDoc 1(Title: Olsby) Olsby is a village. The Olsby Tower stands in its square.\n"
                            "Doc 2(Title: Olsby Tower) The Olsby Tower was designed by the architect Mira Kestrel."
                            "\n</documents>\n"),
            ("policy", "<answer> Mira Kestrel </answer>"),
        ],
    },
    {
        "question": "Which lake is larger, Lake Tarn or Lake Orrin?",
        "steps": [
            ("observation", "<documents>\nDoc 1(Title: Lake Tarn) Lake Tarn covers 12 square kilometres.\n"
                            "Doc 2(Title: Lake Orrin) Lake Orrin covers 40 square kilometres.\n</documents>\n"),
            ("policy", "<answer> Lake Orrin </answer>"),
        ],
    },
]


def _retrieve(protocol: Protocol, toolbox: Toolbox, query: str, env_initiated: bool = False) -> Observation:
    call = toolbox.call("search", query=query, k=protocol.top_k)
    body = render_passages(call.hits(), style="doc", max_chars_per_hit=protocol.max_chars_per_hit) if call.ok else failure_text(call)
    body = (body or "No results.")[: protocol.max_obs_chars]
    # a retrieval the environment makes on its own is recorded as a search action on the observation
    action = {"kind": SEARCH, "payload": query, "reason": ""} if env_initiated else None
    return Observation(f"<documents>\n{body}\n</documents>\n", [call], action=action)


def _answer_or_text(text: str) -> Action:
    """A box, an unclosed box's text, or the whole output; never an answer with a tag (``free_text_answer``)."""
    return free_text_answer(text)


class _RetrieveFirst(Protocol):
    """Shared by the pipeline baselines: inline observations, retrieval with the question first."""

    default_observation_mode = "inline"
    tags = ("documents", "answer")

    def __init__(self, top_k: int = 5, **kwargs: Any):
        kwargs["observation_mode"] = "inline"
        super().__init__(top_k=top_k, **kwargs)

    def system_prompt(self) -> str:
        return _RAG_SYSTEM

    def demonstrations(self) -> list[dict[str, Any]]:
        return list(_RAG_DEMOS)

    def initial_observation(self, example, toolbox) -> Observation:
        return _retrieve(self, toolbox, example.question, env_initiated=True)

    def act(self, action, toolbox, example) -> Observation:
        if action.kind != SEARCH:
            return self.invalid_observation(action)
        return _retrieve(self, toolbox, str(action.payload))

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE)

    def format_flags(self, traj) -> dict[str, Any]:
        flags = super().format_flags(traj)
        flags["answer_boxes"] = sum(len(find_tags(t.text, "answer")) for t in traj.policy_turns)
        flags["format_ok"] = bool(flags["format_ok"] and flags["answer_boxes"] >= 1)
        return flags


class VanillaRAG(_RetrieveFirst):
    """One retrieval (top-k 5), one answer."""

    name = "vanilla_rag"
    stop = ("</answer>",)

    def parse(self, text: str) -> Action:
        return _answer_or_text(text)


class IterRetGen(_RetrieveFirst):
    """Iter-RetGen: ``iterations`` rounds of retrieve-then-generate; the last generation answers."""

    name = "iter_retgen"
    stop = ("</answer>",)

    def __init__(self, iterations: int = 3, **kwargs: Any):
        super().__init__(**kwargs)
        if iterations < 1:
            raise ValueError(f"iter_retgen: iterations must be >= 1, got {iterations}")
        self.iterations = iterations

    def config(self) -> dict[str, Any]:
        return {**super().config(), "iterations": self.iterations}

    def parse(self, text: str) -> Action:
        return _answer_or_text(text)

    def parse_in_context(self, text: str, traj) -> Action:
        action = self.parse(text)
        done = len(traj.policy_turns)  # generations before this one
        if action.kind == ANSWER and done + 1 < self.iterations:
            # retrieve again with the question and the generation so far (Iter-RetGen's query)
            return Action(SEARCH, f"{traj.question} {action.payload}")
        return action


_ANSWER_IS = re.compile(r"answer is\s*:?\s*(.+)", re.IGNORECASE | re.DOTALL)


class IRCoT(_RetrieveFirst):
    """IRCoT: one reasoning sentence per turn, each used as the next retrieval query."""

    name = "ircot"
    stop = ("</answer>", ".", "\n")
    _SYSTEM = (
        "Answer the question by reasoning step by step using the retrieved documents. Write one sentence at a time. "
        "When you know the answer, write: So the answer is: <answer> ANSWER </answer>"
    )
    _DEMO = {  # fictional, like the RAG demonstrations (its answer is checked by ``demo_leak``)
        "question": "Who designed the tower that stands in Olsby?",
        "steps": [
            ("observation", "<documents>\nDoc 1(Title: Olsby) Olsby is a village. The Olsby Tower stands in its square.\n"
                            "</documents>\n"),
            ("policy", "The Olsby Tower stands in Olsby."),
            ("observation", "<documents>\nDoc 1(Title: Olsby Tower) The Olsby Tower was designed by the architect Mira "
                            "Kestrel.\n</documents>\n"),
            ("policy", "The Olsby Tower was designed by Mira Kestrel."),
            ("observation", "<documents>\nDoc 1(Title: Mira Kestrel) Mira Kestrel was an architect.\n</documents>\n"),
            ("policy", "So the answer is: <answer> Mira Kestrel </answer>"),
        ],
    }

    def __init__(self, top_k: int = 3, **kwargs: Any):
        super().__init__(top_k=top_k, **kwargs)

    def system_prompt(self) -> str:
        return self._SYSTEM

    def demonstrations(self) -> list[dict[str, Any]]:
        return [self._DEMO]

    def parse(self, text: str) -> Action:
        """A box (complete, unclosed or only closed: its text; ``free_text_answer``), or "answer is: X", is the
        answer; an empty box (also the echoed invalid-action message) is invalid; any other sentence is the
        next retrieval query."""
        if find_tags(text, "answer") or count_open(text, "answer") or count_close(text, "answer"):
            return free_text_answer(text)
        said = _ANSWER_IS.search(text)
        answer = strip_tags(said.group(1), "answer").strip(" .\n") if said else ""
        if answer:
            return Action(ANSWER, answer)
        sentence = strip_tags(text, "answer")  # a stray </answer> is no part of a query
        return Action(SEARCH, sentence) if sentence else Action(INVALID, reason="empty reasoning step")
