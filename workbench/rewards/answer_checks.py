"""Answer checks beside the answer metrics: answers that game cover-EM or copy the prompt, and option sets.

``multi_option`` (an answer naming several options of a choice question), ``option_f1`` (option-set F1
of a multiple-choice question) and ``demo_leak`` (an answer shown in the prompt, copied). Columns are
registered in :mod:`workbench.rewards.columns`; :mod:`workbench.rewards.features` calls :func:`answer_checks`.
"""

from __future__ import annotations

from workbench.core.trajectory import Trajectory
from workbench.rewards.metrics import demo_leak, in_context_answers, multi_option, option_set_f1


def answer_checks(t: Trajectory, golds: list[str]) -> dict[str, float]:
    """The three answer-check columns of one trajectory."""
    return {"multi_option": multi_option(t.answer, t.question, golds),
            "option_f1": option_set_f1(t.answer, golds, t.question),
            "demo_leak": demo_leak(t.answer, prompt_answers(t), golds)}


def prompt_answers(t: Trajectory) -> list[str]:
    """The answers shown in the trajectory's prompt (its demonstrations', the instruction's example); a trajectory
    rebuilt from text carries the prompt its protocol builds (``trajectory_from_text``)."""
    return in_context_answers(t.prompt_text) if t.prompt_text else []
