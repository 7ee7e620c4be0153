"""Rubric mechanics, the five presets against hand-computed values (every branch), counterfactuals."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from workbench.methods import PRESETS, get_preset
from workbench.rewards.counterfactual import counterfactual, group_stats, rescore
from workbench.rewards.features import save_features
from workbench.rewards.rubric import Columns, Rubric, in_range, params

NAN = float("nan")


def frame(**cols):
    n = len(next(iter(cols.values())))
    return pd.DataFrame({"id": [f"t{i}" for i in range(n)], **cols})


def approx(values, expected):
    np.testing.assert_allclose(np.asarray(values, dtype=float), np.asarray(expected, dtype=float), rtol=0, atol=1e-9)


# ============================================================================= Rubric mechanics


def correct(c):
    return c["cem"]


@params(k=in_range(0, None, low_open=True, description="scale"))
def scaled(c, *, k=2.0):
    return k * c["f1"]


def length_penalty(c, *, cap=10.0):
    return -np.minimum(c["L_pred"], cap) / cap


def test_total_is_weighted_sum_and_weight_zero_is_reported_only():
    df = frame(cem=[1.0, 0.0], f1=[0.5, 0.25], L_pred=[5.0, 20.0])
    t = Rubric([correct, scaled, length_penalty], weights=[1.0, 0.5, 0.0])(df)
    # row 0: 1 + 0.5·(2·0.5) = 1.5 ; row 1: 0 + 0.5·(2·0.25) = 0.25 ; length_penalty logged only
    approx(t.total, [1.5, 0.25])
    approx(t["length_penalty"], [-0.5, -1.0])
    assert list(t.frame.columns) == ["id", "total", "correct", "scaled", "length_penalty"]
    assert t.breakdown.loc["length_penalty", "weight"] == 0.0
    assert t.breakdown.loc["scaled", "mean"] == pytest.approx(0.75)


def test_missing_column_gives_nan_and_a_missing_count_never_zero():
    df = frame(cem=[1.0, 0.0, 1.0], f1=[0.5, NAN, 1.0])  # no L_pred column at all
    t = Rubric([correct, scaled, length_penalty], weights=[1, 1, 0])(df)
    assert math.isnan(t["scaled"][1]) and math.isnan(t.total[1])
    assert t.missing == {"total": 1, "correct": 0, "scaled": 1, "length_penalty": 3}
    assert t.breakdown.loc["length_penalty", "missing"] == 3
    assert t.absent_columns == ("L_pred",)
    # a weight-0 component that is all NaN does not poison the total
    approx(t.total[[0, 2]], [2.0, 3.0])


def test_with_params_validates_and_returns_a_new_rubric():
    r = Rubric([correct, scaled, length_penalty])
    assert r.params == {"k": 2.0, "cap": 10.0}
    r2 = r.with_params(k=3.0)
    assert r.params["k"] == 2.0 and r2.params["k"] == 3.0
    with pytest.raises(ValueError, match=r"unknown parameter.*'kk'.*valid names: cap, k"):
        r.with_params(kk=1)
    with pytest.raises(ValueError, match=r"k=0.*scale.*\(0, inf\)"):
        r.with_params(k=0)
    with pytest.raises(ValueError, match="expected a number"):
        r.with_params(k="big")
    with pytest.raises(ValueError, match="unknown component"):
        r.with_weights(nope=1.0)
    assert r.with_weights(length_penalty=0.0).weights["length_penalty"] == 0.0


def test_rubric_construction_errors():
    def other(c, *, cap=5.0):
        return c["f1"]

    with pytest.raises(ValueError, match="share parameters by name"):
        Rubric([length_penalty, other])
    with pytest.raises(ValueError, match="2 weights for 1 components"):
        Rubric([correct], weights=[1, 2])
    with pytest.raises(ValueError, match="duplicate component"):
        Rubric([correct, correct])

    def no_default(c, *, k):
        return c["f1"]

    with pytest.raises(TypeError, match="needs a default"):
        Rubric([no_default])


def test_a_crashing_or_misshaped_component_raises():
    def boom(c):
        raise RuntimeError("bad feature")

    def wrong_shape(c):
        return np.zeros(3)

    df = frame(cem=[1.0, 0.0])
    with pytest.raises(RuntimeError, match="bad feature"):
        Rubric([boom])(df)
    with pytest.raises(ValueError, match="shape"):
        Rubric([wrong_shape])(df)


def test_columns_convert_bools_and_none():
    c = Columns(pd.DataFrame({"a": [True, False], "b": [None, 1.0]}))
    approx(c["a"], [1, 0])
    assert math.isnan(c["b"][0]) and c.has("b") and not c.has("z")
    assert np.isnan(c["z"]).all() and c.absent == {"z"}
    c2 = Columns({"a": np.array([1.0, 2.0])})
    approx(c2["a"], [1, 2])


def test_get_preset_errors_list_valid_names():
    with pytest.raises(ValueError, match=r"unknown reward preset 'dyna'.*dspo, dynasearcher, .*rsearch_dag"):
        get_preset("dyna")
    with pytest.raises(ValueError, match=r"gamma=0.*\(0, 1\]"):
        get_preset("dynasearcher", gamma=0.0)
    with pytest.raises(ValueError, match=r"gamma=-0.5"):
        get_preset("dynasearcher", gamma=-0.5)
    with pytest.raises(ValueError, match=r"n=0.*\(0, inf\)"):
        get_preset("dynasearcher", n=0)
    with pytest.raises(ValueError, match=r"valid names: alpha, beta, gamma, n"):
        get_preset("dynasearcher", lambda_=1)
    with pytest.raises(ValueError, match=r"stage=3.*one of 1, 2"):
        get_preset("when_to_search", stage=3)
    with pytest.raises(ValueError, match="correct_metric"):
        get_preset("when_to_search", correct_metric="bleu")
    with pytest.raises(ValueError, match="thresholds must be in"):
        get_preset("when_to_search", correct_metric="f1>=1.5")
    with pytest.raises(ValueError, match="gamma_e"):
        get_preset("rsearch_evidence", gamma_e=-0.1)
    with pytest.raises(ValueError, match="answer_source"):
        get_preset("rsearch_dag", answer_source="bleu")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_documents_its_equations_and_scores_a_full_row(name):
    rubric = get_preset(name)
    assert re.search(r"\bEqs?\.|\bSec\.", rubric.doc or "") or name == "dspo", "name the paper's equation or section"
    for fn in rubric.components:
        assert fn.__doc__, f"{name}.{fn.__name__} has no docstring"
    row = frame(
        em=[1.0], cem=[1.0], f1=[1.0], L_pred=[1.0], L_gt=[1.0], format_ok=[1.0], recall=[1.0], n_searches=[2.0],
        hops=[2.0], answered=[1.0], answer_boxes=[1.0], evidence_boxes=[1.0], evidence_f1=[1.0], dag_valid=[1.0],
        judge_similarity=[1.0], judge_yesno=[1.0], query_concise=[1.0], query_sim_mean=[0.5], query_sim_paper=[0.25],
    )
    t = rubric(row)
    assert np.isfinite(t.total).all() and t.breakdown["missing"].sum() == 0
    assert rubric.with_params(**rubric.params).params == rubric.params


# ============================================================================= DynaSearcher (Eqs. 1-6)


def test_dynasearcher_every_branch():
    df = frame(
        format_ok=[1, 1, 1, 0, NAN, 1, 1],
        L_pred=[2, 6, 0, 1, 1, 1, 3], L_gt=[1, 2, 1, 1, 1, 1, 1],
        f1=[0.667, 0.4, 0.0, 1.0, 1.0, 1.0, 0.5], cem=[1, 1, 0, 1, 1, 1, 0],
        recall=[0.5, 1.0, 0.0, 0.5, 0.5, 0.5, 0.0],
        n_searches=[2, 1, 4, 3, 2, 2, 1], hops=[2, 3, 2, 2, 2, NAN, 2],
    )
    t = get_preset("dynasearcher")(df)  # α=0.5, γ=0.9, β=−0.2, n=3
    # r_ans (Eq. 2): 2<3·1 → CEM=1 | 6≥3·2 → F1=0.4 | 0<3 → CEM=0 | 1<3 → CEM=1 | CEM=1 | CEM=1 | 3≥3·1 → F1=0.5
    approx(t["r_ans"], [1, 0.4, 0, 1, 1, 1, 0.5])
    # r_acc (Eq. 1): max(0.1, r_ans) if format ok: 1, 0.4, 0.1 (floor), format wrong → 0, format NaN → NaN, 1, 0.5
    approx(t["r_acc"][[0, 1, 2, 3, 5, 6]], [1, 0.4, 0.1, 0, 1, 0.5])
    assert math.isnan(t["r_acc"][4])
    # r_penalty (Eq. 5) = max(−0.2, 1 − 0.9^(t−i)):
    #   t=i → 0 | t−i=−2: 1 − 1/0.81 = −0.2346 → β = −0.2 | t−i=2: 1 − 0.81 = 0.19 | t−i=1: 0.1
    #   hops NaN → NaN | t−i=−1: 1 − 1/0.9 = −0.1111 (between β and 0)
    approx(t["r_penalty"][[0, 1, 2, 3, 4, 6]], [0, -0.2, 0.19, 0.1, 0, 1 - 1 / 0.9])
    assert math.isnan(t["r_penalty"][5])
    # r_gain (Eq. 4) = 0.5·(recall − penalty): 0.25 | 0.5·1.2 = 0.6 | 0.5·(−0.19) = −0.095 | 0.5·0.4 = 0.2 | 0.25 | NaN
    #   | 0.5·(0 + 0.1111) = 0.05556
    approx(t["r_gain"][[0, 1, 2, 3, 4, 6]], [0.25, 0.6, -0.095, 0.2, 0.25, 0.5 * (1 / 0.9 - 1)])
    # total (Eq. 6) = r_acc + r_gain
    approx(t.total[[0, 1, 2, 3, 6]], [1.25, 1.0, 0.005, 0.2, 0.5 + 0.5 * (1 / 0.9 - 1)])
    assert math.isnan(t.total[4]) and math.isnan(t.total[5])
    assert t.missing["total"] == 2 and t.missing["r_acc"] == 1 and t.missing["r_gain"] == 1


def test_r_short_charges_the_hops_left_unsearched_when_answering():
    """Not the paper's term: −max(0, i − t)/i for an answer, 0 without one; weight 0 unless the user gives one."""
    df = frame(format_ok=[1] * 6, L_pred=[1] * 6, L_gt=[1] * 6, f1=[1.0] * 6, cem=[1] * 6, recall=[0.5] * 6,
               n_searches=[1, 2, 0, 1, 3, 1], hops=[2, 2, 1, 3, 2, NAN], answered=[1, 1, 1, 0, 1, 1])
    t = get_preset("dynasearcher")(df)
    # 2-hop after 1 search: half its hops left | all searched | 1-hop, none: all | no answer: 0 | past the hops: 0
    approx(t["r_short"][:5], [-0.5, 0.0, -1.0, 0.0, 0.0])
    assert math.isnan(t["r_short"][5]) and t.weights["r_short"] == 0
    charged = get_preset("dynasearcher", weights={"r_short": 0.5})(df)
    approx(charged.total[:5] - t.total[:5], [-0.25, 0.0, -0.5, 0.0, 0.0])  # the paper's total, then the charge


def test_dynasearcher_parameters_move_the_right_terms():
    df = frame(format_ok=[1.0], L_pred=[1.0], L_gt=[1.0], f1=[1.0], cem=[1.0], recall=[0.5], n_searches=[4.0], hops=[2.0])
    # γ=0.5: penalty = 1 − 0.25 = 0.75; α=1: gain = 0.5 − 0.75 = −0.25; total = 1 − 0.25
    approx(get_preset("dynasearcher", gamma=0.5, alpha=1.0)(df).total, [0.75])
    # β=0.3 > 1 − 0.9² = 0.19: penalty = 0.3, gain = 0.5·(0.5 − 0.3) = 0.1
    approx(get_preset("dynasearcher", beta=0.3)(df)["r_gain"], [0.1])
    # n=0.5: L_pred=1 ≥ 0.5 → F1 branch (same value here, F1 = 1)
    approx(get_preset("dynasearcher", n=0.5)(df)["r_ans"], [1.0])


# ============================================================================= R-Search evidence (Eqs. 3-6)


def test_rsearch_evidence_format_reward_every_branch():
    df = frame(
        n_searches=[0, 0, 2, 1, 1, 1, 0],
        answer_boxes=[1, 2, 1, 1, 0, 1, 1],
        evidence_boxes=[NAN, 0, 1, 0, 2, NAN, 1],
        f1=[1.0, 0.5, 0.5, 0.0, 0.2, 1.0, 1.0],
        evidence_f1=[0.5, 0.0, 1.0, 0.0, 0.0, 1.0, NAN],
    )
    t = get_preset("rsearch_evidence")(df)  # γ_e = γ_a = 0.2
    # r_fmt (Eq. 5):
    #   no search, one answer box: γ_e + γ_a = 0.4 (evidence not needed: NaN is fine)
    #   no search, two answer boxes (I_A = 0): γ_e = 0.2
    #   search, one evidence box, one answer box: 0.2 + 0.2 = 0.4
    #   search, no evidence box, answer box: γ_a = 0.2
    #   search, two evidence boxes, no answer box: 0
    #   search, evidence flag missing: NaN
    #   no search, one answer box: 0.4
    approx(t["r_fmt"][[0, 1, 2, 3, 4, 6]], [0.4, 0.2, 0.4, 0.2, 0.0, 0.4])
    assert math.isnan(t["r_fmt"][5])
    assert set(np.round(t["r_fmt"].dropna(), 9)) <= {0.0, 0.2, 0.4}  # Eq. 8: {0, γ_e, γ_a, γ_e + γ_a}
    # total (Eq. 6) = F1 + evidence F1 + r_fmt
    approx(t.total[:5], [1.9, 0.7, 1.9, 0.2, 0.2])
    assert math.isnan(t.total[5]) and math.isnan(t.total[6])  # missing flag; missing evidence answer
    t2 = get_preset("rsearch_evidence", gamma_e=0.1, gamma_a=0.3)(df)
    # row 3: search, I_E = 0, I_A = 1 → γ_a = 0.3 ; row 1: no search, I_A = 0 → γ_e = 0.1
    approx(t2["r_fmt"][[1, 3]], [0.1, 0.3])


# ============================================================================= DSPO


def test_dspo_is_binary_subem():
    t = get_preset("dspo")(frame(cem=[1.0, 0.0, NAN]))
    approx(t.total[:2], [1, 0])
    assert math.isnan(t.total[2]) and t.missing["total"] == 1


# ============================================================================= Shi & Shen (Eq. 3)


def test_rsearch_dag_judge_fallback_and_missing():
    judged = frame(format_ok=[1, 0, 1], dag_valid=[1, 1, 0], f1=[0.2, 0.5, 1.0], judge_similarity=[0.8, NAN, 0.0])
    t = get_preset("rsearch_dag")(judged)
    # 0.25·1 + 0.25·1 + 0.5·0.8 = 0.9 | judge failed → NaN (not replaced by F1) | 0.25 + 0 + 0 = 0.25
    approx(t.total[[0, 2]], [0.9, 0.25])
    assert math.isnan(t.total[1]) and t.missing["F_ans"] == 1
    # the string metric on request, even with a judge column: 0.25 + 0.25 + 0.5·0.2 = 0.6 | 0 + 0.25 + 0.25 = 0.5
    approx(get_preset("rsearch_dag", answer_source="f1")(judged).total, [0.6, 0.5, 0.75])
    # no judge column at all: auto falls back to F1 (default) or to CEM
    plain = frame(format_ok=[1, 1], dag_valid=[0, 1], f1=[0.5, 0.0], cem=[1, 0])
    approx(get_preset("rsearch_dag")(plain).total, [0.25 + 0.25, 0.5])
    approx(get_preset("rsearch_dag", fallback="cem")(plain).total, [0.25 + 0.5, 0.5])
    t_judge = get_preset("rsearch_dag", answer_source="judge")(plain)
    assert np.isnan(t_judge.total).all() and "judge_similarity" in t_judge.absent_columns
    approx(get_preset("rsearch_dag", weights={"F_ans": 1.0})(plain).total, [0.25 + 0.5, 0.5])


# ============================================================================= When to Search (Eqs. 6-12)


def wts_rows():
    return frame(
        format_ok=[1, 0, 1, 1, NAN],
        n_searches=[0, 2, 1, 3, 0],
        query_concise=[1, 0, 0, 1, 1],
        query_sim_paper=[NAN, 0.3, NAN, 0.2, NAN],
        query_sim_mean=[NAN, 0.6, NAN, 0.4, NAN],
        judge_yesno=[1, 0, 1, 1, 0],
        cem=[0, 1, 1, 0, 0],
        f1=[0.5, 0.49, 1.0, 0.0, 0.0],
    )


def test_when_to_search_components_every_branch():
    df = wts_rows()
    t1 = get_preset("when_to_search")(df)  # stage 1, β = 0.3, correctness from the judge column (auto)
    # r_f (Eq. 6): +1 | −1 | +1 | +1 | NaN
    approx(t1["r_f"][:4], [1, -1, 1, 1])
    # r_s (Eq. 9): RC=0 concise → 0 | RC=2 → −avg_sim (paper N(N−1)) = −0.3 | RC=1 not concise → −1 | RC=3 → −0.2 | 0
    approx(t1["r_s"], [0, -0.3, -1, -0.2, 0])
    # r_a stage 1 (Eq. 10): correct → 1 | wrong, RC=2 → −1 + 0.6 = −0.4 | 1 | 1 | wrong, RC=0 → −1
    approx(t1["r_a"], [1, -0.4, 1, 1, -1])
    # r_sum (Eq. 12): 2 | −1.7 | 1 | 1.8 | NaN (format flag missing)
    approx(t1.total[:4], [2, -1.7, 1, 1.8])
    assert math.isnan(t1.total[4])
    t2 = get_preset("when_to_search", stage=2)(df)
    # r_a stage 2 (Eq. 11): correct RC=0 → 1 | wrong → −1 | correct RC=1 → 0.7 | correct RC=3 → 1 − 0.9 = 0.1 | −1
    approx(t2["r_a"], [1, -1, 0.7, 0.1, -1])
    approx(t2.total[:4], [2, -2.3, 0.7, 0.9])
    # the true pair mean instead of the paper's divisor: −0.6 and −0.4
    approx(get_preset("when_to_search", sim_divisor="pairs")(df)["r_s"][[1, 3]], [-0.6, -0.4])


def test_when_to_search_correctness_metrics():
    df = wts_rows()
    # string metrics instead of the judge (stage 1, wrong → −1 + 0.3·RC)
    approx(get_preset("when_to_search", correct_metric="cem")(df)["r_a"], [-1, 1, 1, -1 + 0.9, -1])
    approx(get_preset("when_to_search", correct_metric="f1>=0.5")(df)["r_a"], [1, -1 + 0.6, 1, -1 + 0.9, -1])
    # auto without a judge column → cover-EM
    approx(get_preset("when_to_search")(df.drop(columns="judge_yesno"))["r_a"], [-1, 1, 1, -1 + 0.9, -1])
    # a failed judgment is missing, never "wrong"
    df.loc[2, "judge_yesno"] = NAN
    t = get_preset("when_to_search")(df)
    assert math.isnan(t["r_a"][2]) and t.missing["r_a"] == 1
    approx(get_preset("when_to_search", beta=0.5)(wts_rows())["r_a"][1], -1 + 0.5 * 2)


# ============================================================================= counterfactual


def wts_groups():
    # group g1 (stage 1 → stage 2): x1 correct RC=0: 2 → 2 | x2 correct RC=2: 2 → 1.4 | x3 wrong RC=2: 0.6 → 0
    # group g2: two wrong answers without search: 0 and 0 under both stages (std 0, filtered)
    # group g3: z1 correct RC=1: 2 → 1.7 | z2 wrong RC=1: 0.3 → 0
    return pd.DataFrame({
        "id": ["x1", "x2", "x3", "y1", "y2", "z1", "z2"],
        "group_id": ["g1", "g1", "g1", "g2", "g2", "g3", "g3"],
        "sample_idx": [0, 1, 2, 0, 1, 0, 1],
        "format_ok": [1.0] * 7,
        "n_searches": [0, 2, 2, 0, 0, 1, 1],
        "query_concise": [1.0] * 7,
        "query_sim_paper": [NAN, 0.0, 0.0, NAN, NAN, NAN, NAN],
        "cem": [1, 1, 0, 0, 0, 1, 0],
    })


def test_counterfactual_rewards_advantages_filter_and_ranks(tmp_path):
    df = wts_groups()
    cf = counterfactual(df, get_preset("when_to_search"), {"stage": 2})
    rows = cf.rows.set_index("id")
    approx(rows["reward_old"], [2, 2, 0.6, 0, 0, 2, 0.3])
    approx(rows["reward_new"], [2, 1.4, 0, 0, 0, 1.7, 0])
    # mean-only advantage, new rewards: g1 mean 3.4/3 → 2 − 1.1333, 1.4 − 1.1333, −1.1333 ; g3 mean 0.85 → ±0.85
    approx(rows["adv_mean_new"], [2 - 3.4 / 3, 1.4 - 3.4 / 3, -3.4 / 3, 0, 0, 0.85, -0.85])
    # std-normalized (population std as the trainer, ε=1e-6): g3 std = sqrt((0.85² + 0.85²)/2) = 0.85
    approx(rows.loc[["z1", "z2"], "adv_std_new"], [0.85 / (0.85 + 1e-6), -0.85 / (0.85 + 1e-6)])
    # ranks: old g1 has a tie at 2 (both rank 1), new g1 is strictly ordered
    approx(rows["rank_old"], [1, 1, 3, 1, 1, 1, 2])
    approx(rows["rank_new"], [1, 2, 3, 1, 1, 1, 2])
    assert rows["rank_changed"].tolist() == [False, True, False, False, False, False, False]
    groups = cf.groups.set_index("group_id")
    assert groups["keep_old"].tolist() == [True, False, True] and groups["keep_new"].tolist() == [True, False, True]
    assert groups["rank_changed"].tolist() == [True, False, False]
    assert cf.summary["kept_new"] == 2 and cf.summary["rows_rank_changed"] == 1 and cf.summary["groups"] == 3
    # unbiased std (TRL / verl) and ε = 0: g3 std = sqrt((0.85² + 0.85²)/1) = 0.85·√2
    cf1 = counterfactual(df, get_preset("when_to_search"), {"stage": 2}, ddof=1, eps=0.0)
    approx(cf1.rows.set_index("id").loc[["z1", "z2"], "adv_std_new"], [1 / math.sqrt(2), -1 / math.sqrt(2)])
    # from a run directory with a stored features table
    save_features(tmp_path, df)
    assert counterfactual(tmp_path, get_preset("when_to_search"), {"stage": 2}).summary == cf.summary
    approx(rescore(tmp_path, get_preset("when_to_search"), stage=2).total, rows["reward_new"])


def test_counterfactual_filter_changes_and_missing_rewards():
    def reward(c, *, k=1.0):
        return k * c["cem"]

    df = pd.DataFrame({"id": list("abcd"), "group_id": ["g", "g", "h", "h"], "cem": [1.0, 0.0, 1.0, NAN]})
    cf = counterfactual(df, Rubric([reward]), {"k": 0.0})
    g = cf.groups.set_index("group_id")
    # k = 0 makes every reward 0: group g no longer passes the filter; group h has a NaN reward → never kept
    assert g.loc["g", "keep_old"] and not g.loc["g", "keep_new"] and g.loc["g", "keep_changed"]
    assert not g.loc["h", "keep_old"] and math.isnan(g.loc["h", "std_old"])
    r = cf.rows.set_index("id")
    assert math.isnan(r.loc["c", "adv_std_old"]) and math.isnan(r.loc["d", "rank_old"])
    assert cf.summary["missing_old"] == 1 and cf.summary["groups_keep_changed"] == 1
    with pytest.raises(ValueError, match="group_id"):
        counterfactual(df.drop(columns="group_id"), Rubric([reward]))
    with pytest.raises(ValueError, match="unknown parameter"):
        counterfactual(df, Rubric([reward]), {"kk": 1})


def test_group_stats_single_member_and_float_residue():
    s = group_stats(np.array([0.1, 0.1, 0.1, 5.0]), ["a", "a", "a", "b"])
    # all-equal group: std exactly 0 (no float residue from the mean), advantage 0, filtered out
    assert s.std[0] == 0.0 and (s.adv_std[:3] == 0).all() and not s.keep.any()
    assert s.std[3] == 0.0 and s.rank.tolist() == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="ddof"):
        group_stats(np.zeros(2), ["a", "a"], ddof=2)
    with pytest.raises(ValueError, match="missing"):
        group_stats(np.zeros(2), ["a", None])


def test_group_stats_matches_pandas_on_random_groups():
    rng = np.random.default_rng(0)
    r = np.round(rng.random(2000) * 4) / 4  # many ties
    r[rng.random(2000) < 0.02] = NAN
    g = rng.integers(0, 300, 2000).astype(str)
    s = group_stats(r, g, eps=0.0, ddof=1)  # pandas' std is the unbiased one
    ser = pd.Series(r)
    ranks = ser.groupby(g).rank(ascending=False, method="min").to_numpy()
    np.testing.assert_array_equal(s.rank, ranks)
    ok = ~pd.Series(np.isnan(r)).groupby(g).transform("any").to_numpy()
    mean = ser.groupby(g).transform("mean").to_numpy()
    std = ser.groupby(g).transform("std").fillna(0.0).to_numpy()
    np.testing.assert_allclose(s.adv_mean[ok], (r - mean)[ok], atol=1e-12)
    np.testing.assert_allclose(s.std[ok], std[ok], atol=1e-12)


def test_group_stats_agree_with_the_trainer_advantages():
    torch = pytest.importorskip("torch")
    from workbench.rl import advantages as A

    rng = np.random.default_rng(1)
    r = np.round(rng.random(500) * 3) / 3
    g = [f"g{i}" for i in rng.integers(0, 60, 500)]
    s = group_stats(r, g, eps=1e-6)
    np.testing.assert_allclose(s.adv_std, A.group_std_advantages(torch.tensor(r), g, eps=1e-6).numpy(), atol=1e-5)
    np.testing.assert_allclose(s.adv_mean, A.mean_only_advantages(torch.tensor(r), g).numpy(), atol=1e-5)
    np.testing.assert_array_equal(s.keep, A.keep_groups(torch.tensor(r), g).numpy().astype(bool))


def test_rsearch_dag_multiple_choice_uses_option_set_f1():
    """Paper 003: "for multiple choice questions, F1 scores are calculated between the predicted and correct
    option sets"; other rows keep the judge (or its fallback)."""
    df = frame(format_ok=[1, 1], dag_valid=[1, 1], f1=[0.0, 0.5], judge_similarity=[0.1, 0.9], option_f1=[2 / 3, NAN])
    # row 0 is multiple choice: 0.5 + 0.5·(2/3); row 1 is not: 0.5 + 0.5·0.9
    approx(get_preset("rsearch_dag")(df).total, [0.5 + 1 / 3, 0.95])
    approx(get_preset("rsearch_dag", answer_source="judge")(df).total, [0.55, 0.95])  # explicit source: as asked
