"""R-Search's reward with evidence (Zhao et al., 2025, Eqs. 3–6): ``r = r_ans + r_evid + r_fmt``."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.components import renamed
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Columns, Rubric, in_range, nan_where, params

_gamma_fmt = in_range(0, None, description="format reward value (Eq. 5)")


def r_answer_f1(c: Columns) -> np.ndarray:
    """R-Search Eq. 3: ``r_ans = F1(answer, gold)``."""
    return c["f1"]


def r_evid(c: Columns) -> np.ndarray:
    """R-Search Eq. 4: ``r_evid = F1(α_cf, gold)``, α_cf the cross-family model's answer from the evidence alone."""
    return c["evidence_f1"]


@params(gamma_e=_gamma_fmt, gamma_a=_gamma_fmt)
def r_fmt(c: Columns, *, gamma_e: float = 0.2, gamma_a: float = 0.2) -> np.ndarray:
    """R-Search Eq. 5: ``(1 − I_S)(γ_e + γ_a·I_A) + I_S(γ_e·I_E + γ_a·I_A)``; γ_e = γ_a = 0.2.

    I_S: a search happened (``n_searches > 0``); I_A: exactly one well-formed answer box
    (``answer_boxes == 1``); I_E: exactly one evidence box (``evidence_boxes == 1``; only
    needed when I_S = 1).
    """
    t, na, ne = c["n_searches"], c["answer_boxes"], c["evidence_boxes"]
    I_S = (t > 0).astype(np.float64)
    I_A = (na == 1).astype(np.float64)
    I_E = (ne == 1).astype(np.float64)
    no_search = gamma_e + gamma_a * I_A
    searched = gamma_e * I_E + gamma_a * I_A
    out = nan_where(I_S == 1, searched, no_search, t, na)
    return np.where((I_S == 1) & np.isnan(ne), np.nan, out)


def rsearch_evidence(**kw: Any) -> Rubric:
    """R-Search with evidence (file 001): ``r = r_ans + r_evid + r_fmt`` (Eq. 6), γ_e = γ_a = 0.2.

    Needs ``f1``, ``evidence_f1`` (see ``workbench.rewards.evidence``), ``n_searches``,
    ``answer_boxes``, ``evidence_boxes``.
    """
    r_ans_f1 = renamed(r_answer_f1, "r_ans")
    return Rubric([r_ans_f1, r_evid, r_fmt], [1, 1, 1], kw, name="rsearch_evidence", doc=rsearch_evidence.__doc__ or "")


#: Eq. 4: a frozen cross-family model answers from the policy's evidence alone.
PRESET = RewardPreset("rsearch_evidence", rsearch_evidence, FeatureNeeds(evidence_model=True))
