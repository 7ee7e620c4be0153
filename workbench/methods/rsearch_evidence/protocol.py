"""R-Search, evidence variant (seed 001, Zhao et al.): ``<search>``, ``<observation>``, ``<original_evidence>``, ``<answer>``.

The agent reasons in free text (no ``<think>`` tag), searches with ``<search> query </search>``,
reads passages rendered ``(Title: t) text`` inside ``<observation>``, and before answering
copies the supporting facts into ``<original_evidence> ... </original_evidence>``, then ends
with ``<answer> ... </answer>`` (paper Table 1 / Appendix B.1).

The evidence is written by the policy, in the same turn as the answer, so its tokens are
policy tokens with loss mask 1 (paper §3: only observations are masked); the engine does
that without help from this module. The paper's defaults are left to the caller: at most
4 turns (``RolloutConfig(max_turns=MAX_TURNS)``), top-k 3 in training and 5 in evaluation
(``RSearchEvidence(top_k=TOP_K_EVAL)``).

R-Search-as-a-Tool (RSTool, and the evidence reward ``r_evid`` of Eq. 4): :func:`rstool_answer`
hands the evidence alone to another model with the paper's Table 5 template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.core.types import Hit
from workbench.protocols.base import INVALID, Action, last_block, policy_blocks
from workbench.protocols.tagged import PassageSearchProtocol
from workbench.rewards.evidence import EVIDENCE_TEMPLATE

if TYPE_CHECKING:
    from workbench.rollout.backends.base import Backend


MAX_TURNS = 4  # the paper prints no turn limit; four, as the other methods here
TOP_K_TRAIN = 3  # passages per search in training (paper §4.3, "following Search-R1")
TOP_K_EVAL = 5  # ... and in evaluation (paper §4.3)

# Paper Table 1 (system template), verbatim; the question follows as the user turn.
SYSTEM_PROMPT = (
    "You are a helpful assistant that can solve the given question step by step. For each step, start by "
    "explaining your thought process. If additional information is needed, provide a specific query enclosed in "
    "<search> and </search>. The system will return the top search results within <observation> and "
    "</observation>. You can perform multiple searches as needed. When you know the final answer, use "
    "<original_evidence> and </original_evidence> to provide all potentially relevant original information from "
    "the observations. Ensure the information is complete and preserves the original wording without "
    "modification. If no searches were conducted or observations were made, omit the evidence section. Finally, "
    "provide the final answer within <answer> and </answer> tags."
)

# The paper says invalid actions get a fixed message but does not print it; these words are ours,
# modelled on Search-R1's (which R-Search's rollout code builds on).
# Tags are written as empty pairs, so that a policy echoing the message writes no action.
INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query inside <search></search>. "
    "If I know the final answer, I should put the supporting evidence inside "
    "<original_evidence></original_evidence> and then the answer inside <answer></answer>. Let me try again.\n"
)

TAGS = ("search", "observation", "original_evidence", "answer")
#: Valid order: searches with their observations, then (only after a search) one evidence box, then the answer.
SHAPE = r"(search observation )+original_evidence answer|answer"

# A fictional demonstration (nothing in it exists); the observation is rendered by the protocol.
DEMO_QUESTION = "Which river flows through the birthplace of the painter Ilse Marrow?"
DEMO_STEPS: list[tuple[str, Any]] = [
    ("policy", "First I need the birthplace of Ilse Marrow.\n<search> Ilse Marrow painter birthplace </search>"),
    (
        "observation",
        [
            Hit("d1", "Ilse Marrow", "Ilse Marrow (1902-1977) was a painter born in Kettleby."),
            Hit("d2", "Kettleby", "Kettleby is a market town on the river Dunmere."),
        ],
    ),
    (
        "policy",
        "Ilse Marrow was born in Kettleby, which lies on the river Dunmere.\n<original_evidence>"
        "- Ilse Marrow (1902-1977) was a painter born in Kettleby.\n- Kettleby is a market town on the river Dunmere."
        "</original_evidence>\n<answer> Dunmere </answer>",
    ),
]


class RSearchEvidence(PassageSearchProtocol):
    """R-Search with factual evidence (Zhao et al.). ``top_k``: 3 in training, 5 in evaluation."""

    name = "rsearch_evidence"
    observation_tag = "observation"  # ``<observation>`` with ``(Title: t) text`` passages, one per line
    passage_style = "title"
    invalid_message = INVALID_MESSAGE
    stop = ("</search>", "</answer>")
    tags = TAGS
    shape = SHAPE

    def __init__(self, top_k: int = TOP_K_TRAIN, **kwargs: Any):
        super().__init__(top_k=top_k, **kwargs)

    system_text = SYSTEM_PROMPT
    demo_question = DEMO_QUESTION
    demo_steps = DEMO_STEPS

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        action = super().parse(text)
        if (
            action.kind == INVALID
            and action.reason.startswith("no <search>")
            and last_block(text, ("original_evidence",))
        ):
            action.reason = "evidence given but no <answer> after it"
        return action

    # ------------------------------------------------------------------ format
    def extra_checks(self, traj, blocks, flags, errors) -> dict[str, Any]:
        """R-Search's indicators (Eq. 5): ``answer_boxes`` (I_A: exactly one), ``evidence_boxes``
        (I_E: exactly one after a search), ``evidence`` (the last box's text, for ``r_evid``)."""
        answers = [b for b in self.blocks_of(traj, "answer") if b.well_formed]
        evidence = [b for b in self.blocks_of(traj, "original_evidence") if b.well_formed]
        if len(answers) != 1:
            errors.append(f"{len(answers)} well-formed answer boxes (need exactly 1)")
        need = 1 if traj.n_searches else 0
        if len(evidence) != need:
            errors.append(f"{len(evidence)} well-formed evidence boxes (need {need} after {traj.n_searches} searches)")
        return {"evidence_boxes": len(evidence), "evidence": evidence[-1].content.strip() if evidence else ""}


def evidence_of(traj) -> str:
    """The text of the last well-formed ``<original_evidence>`` box of a trajectory ("" if none)."""
    boxes = [b for b in policy_blocks(traj, "original_evidence", TAGS) if b.well_formed]
    return boxes[-1].content.strip() if boxes else ""


def rstool_answer(
    traj_or_evidence: Any,
    question: str,
    backend: Backend,
    template: str = EVIDENCE_TEMPLATE,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
) -> dict[str, Any]:
    """R-Search-as-a-Tool: another model answers ``question`` from the evidence alone (Table 5 template).

    Args:
        traj_or_evidence: a ``Trajectory`` (its ``evidence`` flag, or its last evidence box) or the evidence text.
        question: the question (``{query}`` in the template).
        backend: a ``Backend`` (one chat completion) or any ``str -> str`` callable (an API client).
        template: with ``{evidence}`` and ``{query}`` placeholders.

    Returns ``{"answer", "raw", "prompt", "evidence", "error"}``: ``answer`` is the ``<answer>``
    content when the model wrote one, else its whole (stripped) text. Without evidence the model is
    not asked (``answer=""``, ``error="no evidence"``): with no evidence there is nothing to reward.
    A failed call is recorded with ``answer=None`` and the ``error``, never raised.
    """
    from workbench.core.trajectory import Trajectory

    if isinstance(traj_or_evidence, Trajectory):
        evidence = traj_or_evidence.flags.get("evidence")
        evidence = evidence_of(traj_or_evidence) if evidence is None else evidence
    else:
        evidence = "" if traj_or_evidence is None else str(traj_or_evidence)
    evidence = evidence.strip()
    prompt = template.replace("{evidence}", evidence).replace("{query}", str(question))
    out: dict[str, Any] = {"answer": "", "raw": "", "prompt": prompt, "evidence": evidence, "error": None}
    if not evidence:
        out["error"] = "no evidence"
        return out
    try:
        raw = _complete(backend, prompt, max_new_tokens, temperature)
    except Exception as e:  # recorded as failed, not scored as an empty answer
        out.update(answer=None, error=f"{type(e).__name__}: {e}")
        return out
    box = last_block(raw, ("answer",))
    answer = box.content if box is not None else raw
    answer = answer.strip()
    if answer.lower().startswith("answer:"):
        answer = answer[len("answer:") :].strip()
    out.update(answer=answer, raw=raw)
    return out


def _complete(backend: Backend, prompt: str, max_new_tokens: int, temperature: float) -> str:
    if hasattr(backend, "chat"):
        from workbench.rollout.backends.base import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, stop=("</answer>",))
        return str(backend.chat(prompt, params))
    if callable(backend):
        return str(backend(prompt))
    raise TypeError(f"rstool_answer: backend must be a Backend or a str -> str callable, got {type(backend).__name__}")
