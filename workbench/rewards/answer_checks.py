"""Answer checks beside the answer metrics: answers that game cover-EM or copy the prompt, and option sets.

``multi_option`` (an answer naming several options of a choice question), ``option_f1`` (option-set F1
of a multiple-choice question) and ``demo_leak`` (an answer shown in the prompt, copied). Columns are
registered in :mod:`workbench.rewards.columns`; :mod:`workbench.rewards.features` calls :func:`answer_checks`.
"""

from __future__ import annotations

import functools

from workbench.rewards.metrics import demo_leak, in_context_answers, multi_option, option_set_f1
from workbench.trajectory import Trajectory


def answer_checks(t: Trajectory, golds: list[str]) -> dict[str, float]:
    """The three answer-check columns of one trajectory."""
    return {"multi_option": multi_option(t.answer, t.question, golds),
            "option_f1": option_set_f1(t.answer, golds, t.question),
            "demo_leak": demo_leak(t.answer, prompt_answers(t), golds)}


def prompt_answers(t: Trajectory) -> list[str]:
    """The answers shown in the trajectory's prompt; from the protocol's own prompt when the prompt text
    was not kept (trajectories rebuilt from text)."""
    if t.prompt_text:
        return in_context_answers(t.prompt_text)
    return list(_protocol_answers(t.protocol))


@functools.lru_cache(maxsize=64)
def _protocol_answers(name: str) -> tuple[str, ...]:
    from workbench.data.example import Example
    from workbench.protocols.base import get_protocol

    try:
        proto = get_protocol(name)
    except ValueError:  # a protocol this process does not know: nothing to compare with
        return ()
    msgs = proto.messages(Example(id="probe", question="", answers=[]))
    return tuple(in_context_answers("\n".join(m["content"] for m in msgs)))
