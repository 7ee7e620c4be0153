"""Search-R1 / DSPO protocol: ``<search>``, ``<information>``, ``<answer>``.

DSPO (file 002) trains a Search-R1-style agent with a BM25 retriever. The agent reasons in
free text (optionally inside ``<think>``), searches with ``<search> query </search>``, reads
results in ``<information> ... </information>`` and ends with ``<answer> ... </answer>``.
The ``tool_call`` variant ends search turns with ``</tool_call>`` instead (DSPO Sec. 3):
``<tool_call> query </tool_call>``; a Qwen-style JSON payload
``{"name": "search", "arguments": {"query": ...}}`` is accepted too.
"""

from __future__ import annotations

from typing import Any

from workbench.protocols.base import (
    ANSWER,
    INVALID,
    SEARCH,
    Action,
    Observation,
    Protocol,
    count_open,
    failure_text,
    find_tags,
    last_action,
)
from workbench.tools.base import render_passages
from workbench.util.textsafe import over_limit, parse_json

# Search-R1's instruction (Jin et al. 2025), used by DSPO; adapted to be a system prompt.
SYSTEM_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<{s}> query </{s}> and it will return the top searched results between <information> and </information>. "
    "You can search as many times as your want. If you find no further external knowledge needed, you can "
    "directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>."
)

# Search-R1's message, with its tags written as empty pairs ("between <search> and </search>" parsed as a
# search for "and" when a policy echoed it).
INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query inside <{s}></{s}>. "
    "If I want to give the final answer, I should put the answer inside <answer></answer>. Let me try again.\n"
)

# A fictional two-hop demonstration (nothing in it exists), so the small model sees the grammar once.
DEMO = {
    "question": "In which country was the author of the novel The Glass Orchard born?",
    "steps": [
        ("policy", "<think> I need the author of The Glass Orchard first. </think>\n<{s}> The Glass Orchard novel author </{s}>"),
        (
            "observation",
            "\n\n<information>Doc 1(Title: The Glass Orchard) The Glass Orchard is a 1931 novel written by Maren Ostvik."
            "</information>\n\n",
        ),
        ("policy", "<think> The author is Maren Ostvik. Now I need her birthplace. </think>\n<{s}> Maren Ostvik place of birth </{s}>"),
        (
            "observation",
            "\n\n<information>Doc 1(Title: Maren Ostvik) Maren Ostvik was born in Hallervik, a town in Norway."
            "</information>\n\n",
        ),
        ("policy", "<think> Hallervik is in Norway. </think>\n<answer> Norway </answer>"),
    ],
}

# A one-hop demonstration without <think>: what the 135M default model imitates best (it copies
# the answer from the observation far more often than after the two-hop demo; see bench/RESULTS.md).
DEMO_ONE_HOP = {
    "question": "Where was the painter Ilse Marrow born?",
    "steps": [
        ("policy", "<{s}> Ilse Marrow birthplace </{s}>"),
        (
            "observation",
            "\n\n<information>Doc 1(Title: Ilse Marrow) Ilse Marrow is a painter. She was born in Hallervik."
            "</information>\n\n",
        ),
        ("policy", "<answer> Hallervik </answer>"),
    ],
}

DEMOS = {"two_hop": DEMO, "one_hop": DEMO_ONE_HOP}


class SearchR1(Protocol):
    """Search-R1 grammar (DSPO's agent). ``variant="tool_call"`` uses ``<tool_call>`` for searches;
    ``demo`` picks the few-shot demonstration: ``two_hop`` (with ``<think>``) or ``one_hop``."""

    name = "search_r1"
    tags = ("think", "search", "information", "answer", "tool_call")

    def __init__(self, variant: str = "search", demo: str = "two_hop", **kwargs: Any):
        super().__init__(**kwargs)
        if variant not in ("search", "tool_call"):
            raise ValueError(f"search_r1: variant must be 'search' or 'tool_call', got {variant!r}")
        if demo not in DEMOS:
            raise ValueError(f"search_r1: demo must be one of {sorted(DEMOS)}, got {demo!r}")
        self.variant = variant
        self.demo = demo
        self.search_tag = variant

    @property
    def stop(self) -> tuple[str, ...]:  # type: ignore[override]
        return (f"</{self.search_tag}>", "</answer>")

    def config(self) -> dict[str, Any]:
        return {**super().config(), "variant": self.variant, "demo": self.demo}

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(s=self.search_tag)

    def demonstrations(self) -> list[dict[str, Any]]:
        demo = DEMOS[self.demo]
        steps = [(k, t.format(s=self.search_tag)) for k, t in demo["steps"]]
        return [{"question": demo["question"], "steps": steps}]

    def parse(self, text: str) -> Action:
        found = last_action(text, (self.search_tag, "answer"))
        if found is None:
            for tag in (self.search_tag, "answer"):
                if count_open(text, tag):
                    return Action(INVALID, reason=f"unclosed <{tag}> tag")
            return Action(INVALID, reason=f"no <{self.search_tag}> or <answer> action in the turn")
        tag, content = found
        if tag == "answer":
            if not content.strip():
                return Action(INVALID, reason="empty <answer>")
            return Action(ANSWER, content.strip())
        query, excess = self._query(content)
        if excess:
            return Action(INVALID, reason=f"<{tag}> JSON {excess}")
        if not query:
            return Action(INVALID, reason=f"empty <{tag}> query")
        return Action(SEARCH, query)

    def _query(self, content: str) -> tuple[str, str]:
        """``(query, "")``; ``("", why)`` when a JSON payload is too long or nested too deeply."""
        content = content.strip()
        if self.variant == "tool_call" and content.startswith("{"):
            obj, err = parse_json(content)
            if err is not None:
                return ("", err) if over_limit(err) else (content, "")
            if isinstance(obj, dict):
                args = obj.get("arguments", obj)
                if isinstance(args, str):  # arguments as a JSON string
                    inner, err = parse_json(args)
                    if err is not None:
                        return ("", err) if over_limit(err) else (args.strip(), "")
                    args = inner
                q = args.get("query") if isinstance(args, dict) else None
                if isinstance(q, list):
                    q = " ".join(map(str, q))
                return (str(q).strip() if q else ""), ""
        return content, ""

    def act(self, action, toolbox, example) -> Observation:
        if action.kind != SEARCH:
            return self.invalid_observation(action)
        call = toolbox.call("search", query=str(action.payload), k=self.top_k)
        if call.ok:
            body = render_passages(call.hits(), style="doc", max_chars_per_hit=self.max_chars_per_hit) or "No results."
        else:
            body = failure_text(call)
        body = body[: self.max_obs_chars]
        return Observation(f"\n\n<information>{body}</information>\n\n", [call])

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE.format(s=self.search_tag))

    def format_flags(self, traj) -> dict[str, Any]:
        flags = super().format_flags(traj)
        text = "".join(t.text for t in traj.policy_turns)
        flags["answer_boxes"] = len(find_tags(text, "answer"))
        return flags
