"""ReSearch's rule-based reward (Chen et al., 2025, Sec. 2.3, Eq. 2): the answer's F1, else 0.1 for a right format.

Eq. 2::

    r = f1(a_pred, a_gt)   if the F1 score is not 0
        0.1                if the F1 score is 0 and the format is correct
        0                  if the F1 score is 0 and the format is incorrect

``a_pred`` is the final answer in ``\\boxed{}`` (the protocol's answer: "" without a box, so its F1 is 0) and
``f1`` the SQuAD token F1 with the yes/no rule, the maximum over gold aliases (the ``f1`` column; the authors'
``get_f1_score`` is the same). The total is ``r_answer + r_format``: exactly one of the two is non-zero.

The authors' code (``compute_score`` in ``verl/utils/reward_score/re_search.py``) checks the format first and
returns 0 for a wrong format even when the F1 is not 0; ``variant="code"`` scores that way, the default
``"paper"`` follows Eq. 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.preset import RewardPreset
from workbench.rewards.rubric import Columns, Rubric, in_range, is_true, nan_where, one_of, params

_variant = one_of("paper", "code", description="paper: Eq. 2 (F1 counts whatever the format); code: the authors' "
                                               "compute_score (0 whenever the format is wrong)")


@params(variant=_variant)
def r_answer(c: Columns, *, variant: str = "paper") -> np.ndarray:
    """ReSearch Eq. 2, answer reward: ``F1(a_pred, a_gt)`` when it is not 0 (``variant="code"``: and the format is
    right), else 0."""
    f1, fmt = c["f1"], c["format_ok"]
    if variant == "code":
        return nan_where(is_true(fmt), f1, 0.0, f1, fmt)
    return f1  # F1 = 0 contributes 0 here; the format term decides the reward


@params(format_credit=in_range(0, None, description="reward of a right format with F1 = 0 (Eq. 2: 0.1)"))
def r_format(c: Columns, *, format_credit: float = 0.1) -> np.ndarray:
    """ReSearch Eq. 2, format reward: ``0.1`` when the F1 is 0 and the format is right (``format_ok``), else 0."""
    f1, fmt = c["f1"], c["format_ok"]
    return nan_where((f1 == 0) & is_true(fmt), format_credit, 0.0, f1, fmt)


def re_search(**kw: Any) -> Rubric:
    """ReSearch (Chen et al., 2025), Sec. 2.3 Eq. 2: ``r = F1`` if it is not 0, else 0.1 for a right format, else 0.

    ``r_answer + r_format``; ``variant="code"`` gives 0 to a wrong format whatever the F1 (the authors' code);
    ``format_credit`` is Eq. 2's 0.1. Needs ``f1`` (of the ``\\boxed{}`` answer) and ``format_ok``.
    """
    return Rubric([r_answer, r_format], [1, 1], kw, name="re_search", doc=re_search.__doc__ or "")


PRESET = RewardPreset("re_search", re_search)
