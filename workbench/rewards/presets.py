"""The five published reward designs as Rubrics over one features table.

Every preset is a function returning a :class:`~workbench.rewards.rubric.Rubric` with the
paper's defaults; ``get_preset(name, **params)`` looks one up in ``PRESETS``. Components
are plain vectorized functions of feature columns (see ``workbench.rewards.features`` for
the column contract); their docstrings name the paper and equation.

======================  =======================================================  =================
preset                  total                                                    paper
======================  =======================================================  =================
``dynasearcher``        r_acc + r_gain                                           000, Eqs. 1–6
``rsearch_evidence``    r_ans + r_evid + r_fmt                                   001, Eqs. 3–6
``dspo``                subEM                                                    002
``rsearch_dag``         0.25·F_fmt + 0.25·F_dag + 0.5·F_ans                      003, Eq. 3
``when_to_search``      r_a + r_s + r_f (stage 1: Eq. 10, stage 2: Eq. 11)       004, Eqs. 6–12
======================  =======================================================  =================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.rewards.needs import FeatureNeeds
from workbench.rewards.rubric import Columns, Rubric, Spec, in_range, is_true, nan_where, one_of, params

# ----------------------------------------------------------------------------- shared: metric choices

#: Column read for each answer-metric name a preset parameter may name.
METRIC_COLUMNS = {
    "em": "em",
    "cem": "cem",
    "sub_em": "cem",
    "f1": "f1",
    "judge": "judge_yesno",
    "judge_yesno": "judge_yesno",
    "judge_lasj": "judge_lasj",
    "judge_similarity": "judge_similarity",
}
_CORRECT_RE = re.compile(r"^\s*([a-z_0-9]+)\s*(?:>=\s*([0-9]*\.?[0-9]+))?\s*$")


def _check_correct_metric(value: Any) -> str | None:
    allowed = "'auto', 'judge', 'em', 'cem', 'sub_em', or '<metric>>=<threshold>' e.g. 'f1>=0.5', 'judge_lasj>=0.8'"
    if not isinstance(value, str):
        return f"expected a string: {allowed}"
    if value == "auto":
        return None
    m = _CORRECT_RE.match(value)
    if not m or m.group(1) not in METRIC_COLUMNS:
        return f"allowed: {allowed} (metrics: {', '.join(METRIC_COLUMNS)})"
    if m.group(2) is not None and not 0.0 <= float(m.group(2)) <= 1.0:
        return "thresholds must be in [0, 1]"
    return None


def correct(c: Columns, metric: str, auto_judge: str = "judge_yesno", auto_fallback: str = "cem") -> np.ndarray:
    """Correctness as 1/0/NaN from a metric name (``correct_metric`` of When-to-Search).

    ``"auto"``: the judge column ``auto_judge`` if the table has it, else ``auto_fallback``
    (a NaN judgment stays NaN: a failed judge call is never replaced by a string metric).
    ``"cem"``/``"em"``/``"judge"``: the 0/1 column; ``"f1>=0.5"``: thresholded.
    """
    if metric == "auto":
        metric = auto_judge if c.has(auto_judge) else auto_fallback
    m = _CORRECT_RE.match(metric)
    if not m or m.group(1) not in METRIC_COLUMNS:
        raise ValueError(f"unknown correctness metric {metric!r}")
    x = c[METRIC_COLUMNS[m.group(1)]]
    thr = 1.0 if m.group(2) is None else float(m.group(2))
    return nan_where(x >= thr, 1.0, 0.0, x)


def answer_score(c: Columns, source: str, judge: str = "judge_similarity", fallback: str = "f1") -> np.ndarray:
    """A [0, 1] answer score: ``"judge"``, a string metric, or ``"auto"`` (judge column if present, else ``fallback``)."""
    if source == "auto":
        return c[judge] if c.has(judge) else c[METRIC_COLUMNS[fallback]]
    if source == "judge":
        return c[judge]
    return c[METRIC_COLUMNS[source]]


# ============================================================================= DynaSearcher (000)

_dyna = dict(
    alpha=in_range(0, None, description="α: scale of the gain reward (Eq. 4)"),
    gamma=in_range(0, 1, low_open=True, description="γ: decay of the hop penalty (Eq. 5)"),
    beta=in_range(-1, 1, description="β: lower bound of the hop penalty (Eq. 5)"),
    n=in_range(0, None, low_open=True, description="n: length multiple switching F1/CEM (Eq. 2)"),
)


@params(n=_dyna["n"])
def r_ans(c: Columns, *, n: float = 3.0) -> np.ndarray:
    """DynaSearcher Eq. 2: ``F1(pred, gold)`` if ``L_pred ≥ n·L_gt`` else ``CEM(pred, gold)``. n = 3."""
    L_pred, L_gt = c["L_pred"], c["L_gt"]
    return nan_where(L_pred >= n * L_gt, c["f1"], c["cem"], L_pred, L_gt)


@params(n=_dyna["n"])
def r_acc(c: Columns, *, n: float = 3.0) -> np.ndarray:
    """DynaSearcher Eq. 1: ``max(0.1, r_ans)`` if the format is correct (``format_ok``) else 0."""
    fmt = c["format_ok"]
    return nan_where(is_true(fmt), np.maximum(0.1, r_ans(c, n=n)), 0.0, fmt)


def r_recall(c: Columns) -> np.ndarray:
    """DynaSearcher Eq. 3: ``TP / (TP + FN)`` over the gold supporting passages (``recall``: title or embedding match)."""
    return c["recall"]


@params(beta=_dyna["beta"], gamma=_dyna["gamma"])
def r_penalty(c: Columns, *, beta: float = -0.2, gamma: float = 0.9) -> np.ndarray:
    """DynaSearcher Eq. 5: ``max(β, 1 − γ^(t − i))``, t = searches made, i = gold hops. β = −0.2, γ = 0.9.

    With β < 0: a bonus (≥ β) when t < i, 0 when t = i, a growing penalty when t > i.
    """
    t, i = c["n_searches"], c["hops"]
    # γ^(t−i) as exp((t−i)·ln γ): same value (exactly 1 at t = i), several times faster than np.power
    return np.maximum(beta, 1.0 - np.exp((t - i) * np.log(gamma)))  # np.maximum propagates NaN


@params(alpha=_dyna["alpha"], beta=_dyna["beta"], gamma=_dyna["gamma"])
def r_gain(c: Columns, *, alpha: float = 0.5, beta: float = -0.2, gamma: float = 0.9) -> np.ndarray:
    """DynaSearcher Eq. 4: ``α · (r_recall − r_penalty)``. α = 0.5."""
    return alpha * (r_recall(c) - r_penalty(c, beta=beta, gamma=gamma))


def dynasearcher(**kw: Any) -> Rubric:
    """DynaSearcher (file 000): ``r_overall = r_acc + r_gain`` (Eq. 6).

    Defaults α = 0.5, γ = 0.9, β = −0.2, n = 3 (Sec. 3.2). ``r_ans``, ``r_recall`` and
    ``r_penalty`` are reported with weight 0. Needs ``format_ok``, ``f1``, ``cem``,
    ``L_pred``, ``L_gt``, ``recall``, ``n_searches``, ``hops``.
    """
    return Rubric([r_acc, r_gain, r_ans, r_recall, r_penalty], [1, 1, 0, 0, 0], kw, name="dynasearcher",
                  doc=dynasearcher.__doc__ or "")


# ============================================================================= R-Search, evidence (001)

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
    r_ans_f1 = _renamed(r_answer_f1, "r_ans")
    return Rubric([r_ans_f1, r_evid, r_fmt], [1, 1, 1], kw, name="rsearch_evidence", doc=rsearch_evidence.__doc__ or "")


# ============================================================================= DSPO (002)


def r_subem(c: Columns) -> np.ndarray:
    """DSPO: binary subEM, 1 if a normalized gold alias is a substring of the normalized answer (``cem``)."""
    return c["cem"]


def dspo(**kw: Any) -> Rubric:
    """DSPO (file 002): the reward is binary subEM of the final answer (no format term)."""
    return Rubric([r_subem], [1], kw, name="dspo", doc=dspo.__doc__ or "")


# ============================================================================= R-Search, NL-DAG (003)

_ANSWER_SOURCES = ("auto", "judge", "f1", "cem", "em")


def F_fmt(c: Columns) -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_fmt = 1`` iff think/search/result/answer appear exactly once, in order (``format_ok``)."""
    return c["format_ok"]


def F_dag(c: Columns) -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_dag = 1`` iff the NL-DAG passes every validation (``dag_valid``)."""
    return c["dag_valid"]


@params(
    answer_source=one_of(*_ANSWER_SOURCES, description="F_ans: judge similarity, a string metric, or auto"),
    fallback=one_of("f1", "cem", "em", description="string metric used by answer_source='auto' without a judge column"),
)
def F_ans(c: Columns, *, answer_source: str = "auto", fallback: str = "f1") -> np.ndarray:
    """Shi & Shen Eq. 3: ``F_ans`` = the judge's similarity in [0, 1] (``judge_similarity``).

    ``answer_source="auto"`` uses the judge column when the table has one, else
    ``fallback`` (F1 by default); a failed judgment (NaN) stays missing. On multiple-choice questions
    (lettered options) ``auto`` uses the F1 between option sets (``option_f1``), as the paper does.
    """
    score = answer_score(c, answer_source, "judge_similarity", fallback)
    if answer_source == "auto" and c.has("option_f1"):
        mc = c["option_f1"]
        score = np.where(np.isnan(mc), score, mc)
    return score


def rsearch_dag(**kw: Any) -> Rubric:
    """R-Search multi-source NL-DAG (file 003): ``R = 0.25·F_fmt + 0.25·F_dag + 0.5·F_ans`` (Eq. 3).

    The α_fmt : α_dag : α_ans = 0.25 : 0.25 : 0.5 coefficients are the rubric weights
    (``with_weights`` changes them). Needs ``format_ok``, ``dag_valid`` and
    ``judge_similarity`` (or the fallback string metric).
    """
    return Rubric([F_fmt, F_dag, F_ans], [0.25, 0.25, 0.5], kw, name="rsearch_dag", doc=rsearch_dag.__doc__ or "")


# ============================================================================= Learning When to Search (004)


def r_f(c: Columns) -> np.ndarray:
    """When-to-Search Eq. 6: ``r_f = +1`` if the output structure fully matches (``format_ok``), else ``−1``."""
    fmt = c["format_ok"]
    return nan_where(is_true(fmt), 1.0, -1.0, fmt)


@params(sim_divisor=one_of("paper", "pairs", description="avg_sim divisor: 'paper' N(N−1) (Eq. 8) or 'pairs' N(N−1)/2"))
def r_s(c: Columns, *, sim_divisor: str = "paper") -> np.ndarray:
    """When-to-Search Eq. 9: ``0`` if RC ≤ 1 and the query is concise; ``−1`` if RC ≤ 1 and not concise;
    ``−avg_sim`` if RC > 1.

    avg_sim (Eq. 8) divides the sum over pairs i<j by N(N−1) as printed (``sim_divisor="paper"``,
    column ``query_sim_paper``); ``"pairs"`` uses the true mean over N(N−1)/2 pairs
    (``query_sim_mean``).
    """
    rc, concise = c["n_searches"], c["query_concise"]
    sim = c["query_sim_paper"] if sim_divisor == "paper" else c["query_sim_mean"]
    few = nan_where(is_true(concise), 0.0, -1.0, concise)
    return nan_where(rc > 1, -sim, few, rc)


@params(
    stage=one_of(1, 2, description="training stage: 1 (Eq. 10) or 2 (Eq. 11)"),
    beta=in_range(0, None, description="β: retrieval-count coefficient (Eqs. 10–11)"),
    correct_metric=Spec("how correctness is decided", validator=_check_correct_metric),
)
def r_a(c: Columns, *, stage: int = 1, beta: float = 0.3, correct_metric: str = "auto") -> np.ndarray:
    """When-to-Search answer reward, β = 0.3, RC = ``n_searches``.

    Stage 1 (Eq. 10): ``1`` if correct else ``−1 + β·RC``.
    Stage 2 (Eq. 11): ``1 − β·RC`` if correct else ``−1``.
    Correctness: the YES/NO judge (``judge_yesno``) when the table has it, else cover-EM
    (``correct_metric="auto"``); or any ``correct_metric`` such as ``"em"`` or ``"f1>=0.5"``.
    """
    ok, rc = correct(c, correct_metric), c["n_searches"]
    if stage == 1:
        return nan_where(ok == 1.0, 1.0, -1.0 + beta * rc, ok, rc)
    return nan_where(ok == 1.0, 1.0 - beta * rc, -1.0, ok, rc)


def when_to_search(**kw: Any) -> Rubric:
    """Learning When to Search (file 004): ``r_sum = r_a + r_s + r_f`` (Eq. 12), β = 0.3, ``stage`` 1 or 2.

    Needs ``format_ok``, ``n_searches``, ``query_concise``, ``query_sim_paper`` /
    ``query_sim_mean`` (for RC > 1) and ``judge_yesno`` or a string metric.
    """
    return Rubric([r_a, r_s, r_f], [1, 1, 1], kw, name="when_to_search", doc=when_to_search.__doc__ or "")


# ============================================================================= registry


def _renamed(fn: Callable, name: str) -> Callable:
    """The same component under another name in the breakdown."""

    def wrapper(c: Columns) -> np.ndarray:
        return fn(c)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = fn.__doc__
    return wrapper


PRESETS: dict[str, Callable[..., Rubric]] = {}
"""Registered reward presets: name -> function returning the paper's Rubric (``register_preset``)."""
PRESET_NEEDS: dict[str, FeatureNeeds] = {}
"""What each preset needs computed beyond the cheap features (embeddings, evidence model, judges)."""


def register_preset(name: str, fn: Callable[..., Rubric], needs: FeatureNeeds = FeatureNeeds()) -> Callable[..., Rubric]:
    """Register a reward preset under ``name`` with the expensive features it reads; returns ``fn``.

    A method file registers its own preset this way (no list to edit); a second registration
    of a name must be the same function.
    """
    if name in PRESETS and PRESETS[name] is not fn:
        raise ValueError(f"reward preset {name!r} is already registered")
    PRESETS[name] = fn
    PRESET_NEEDS[name] = needs
    return fn


register_preset("dynasearcher", dynasearcher, FeatureNeeds(encoder=True))  # Eq. 3: title OR embedding match
register_preset("rsearch_evidence", rsearch_evidence, FeatureNeeds(evidence_model=True))  # Eq. 4
register_preset("dspo", dspo)
register_preset("rsearch_dag", rsearch_dag, FeatureNeeds(judges=("similarity",)))  # Eq. 3 F_ans (F1 fallback)
register_preset("when_to_search", when_to_search, FeatureNeeds(encoder=True, judges=("yesno",)))  # Eqs. 8, 10-11


def _known(name: str) -> bool:
    if name not in PRESETS:  # a method file may register it: import them all once
        from workbench.methods import discover

        discover()
    return name in PRESETS


def preset_names() -> list[str]:
    """Every registered reward preset (the method files' own included), sorted."""
    _known("")
    return sorted(PRESETS)


def preset_needs(name: str) -> FeatureNeeds:
    """The expensive features preset ``name`` reads (unknown name: a clear error)."""
    if not _known(name):
        raise ValueError(f"unknown reward preset {name!r}; valid names: {', '.join(sorted(PRESETS))}")
    return PRESET_NEEDS.get(name, FeatureNeeds())


def preset_protocol(name: str) -> str:
    """The protocol of the paper that defines preset ``name`` (for exports that parse completion text):
    the method of that name if there is one, else the first method whose reward it is."""
    from workbench.methods import discover

    methods = discover()
    if name in methods and methods[name].reward == name:
        return methods[name].protocol
    for m in sorted(methods.values(), key=lambda m: (m.baseline, m.name)):
        if m.reward == name:
            return m.protocol
    raise ValueError(f"no method declares reward preset {name!r}; pass protocol= explicitly")


def get_preset(name: str | Rubric, weights: dict[str, float] | None = None, **params: Any) -> Rubric:
    """A preset rubric by name, with parameters (validated) and optional weight overrides."""
    if isinstance(name, Rubric):
        rubric = name.with_params(**params) if params else name
    else:
        if not _known(name):
            raise ValueError(f"unknown reward preset {name!r}; valid names: {', '.join(sorted(PRESETS))}")
        rubric = PRESETS[name](**params)
    return rubric.with_weights(**weights) if weights else rubric
