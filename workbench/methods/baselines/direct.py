"""Direct answer without retrieval: the no-search baseline (one turn, ``<answer>`` optional)."""

from __future__ import annotations

from typing import Any

from workbench.protocols.base import Action, Observation, Protocol, find_tags, free_text_answer

SYSTEM_PROMPT = (
    "Answer the given question directly from your own knowledge, without searching. "
    "Give only the final answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>."
)

# Tags in invalid-action messages are written as empty pairs (<answer></answer>): a policy that
# echoes the message must not produce an action.
INVALID_MESSAGE = "\nPlease give the final answer inside <answer></answer>.\n"

DEMO = {
    "question": "What is the capital of the country where the Loire river flows?",
    "steps": [("policy", "<answer> Paris </answer>")],
}


class Direct(Protocol):
    """The direct-generation baseline. A turn without ``<answer>`` tags counts as the answer itself
    (so a model that ignores the format is still scored), flagged ``format_ok=False``."""

    name = "direct"
    stop = ("</answer>",)
    tags = ("answer",)
    required_tools = ()

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def demonstrations(self) -> list[dict[str, Any]]:
        return [DEMO]

    def parse(self, text: str) -> Action:
        """See ``free_text_answer``: a box, an unclosed box's text, or the whole output; never a tag."""
        return free_text_answer(text)

    def act(self, action, toolbox, example) -> Observation:
        return self.invalid_observation(action)

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE)

    def format_flags(self, traj) -> dict[str, Any]:
        flags = super().format_flags(traj)
        tagged = any(find_tags(t.text, "answer") for t in traj.policy_turns)
        flags["format_ok"] = bool(flags["format_ok"] and tagged)
        return flags
