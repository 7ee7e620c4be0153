"""Feature extraction: values by hand, conciseness rules, query similarity, recall, caching, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import Hit, ToolCall
from workbench.data.example import Example
from workbench.methods import get_preset
from workbench.rewards import features as F
from workbench.rewards.cache import cache_key
from workbench.rewards.features import (
    FEATURE_COLUMNS,
    FeatureCache,
    check_concise,
    compute_features,
    featurize_run,
    load_features,
    pairwise_similarity,
    queries_concise,
    save_features,
)
from workbench.storage.runs import Run

EX = Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist", "A. Quist"], hops=2,
             supporting_ids=["p1", "p2"], supporting_titles=["Tarnholm Mills", "Ada Quist"])


def make_traj(answer, searches=(), flags=None, id="q1#0", example_id="q1", group="q1", idx=0):
    """A trajectory built by hand: ``searches`` is a list of (query, [Hit, ...])."""
    turns = []
    for q, hits in searches:
        turns.append(Turn(POLICY, f"<search>{q}</search>", [], action={"kind": "search", "payload": q, "reason": ""}))
        turns.append(Turn(OBSERVATION, "<information>...</information>", [],
                          tool_calls=[ToolCall("search", {"query": q}, results=[h.to_dict() for h in hits])]))
    if answer is not None:
        turns.append(Turn(POLICY, f"<answer>{answer}</answer>", [], action={"kind": "answer", "payload": answer, "reason": ""}))
    return Trajectory(id, example_id, "Who founded Tarnholm Mills?", "search_r1", [], turns=turns, answer=answer,
                      group_id=group, sample_idx=idx, flags=dict(flags or {}))


H1 = Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)
H9 = Hit("p9", "Avatar (2009 film)", "A film.", 0.5)


class FakeEncoder:
    """Deterministic embeddings from a lookup (unknown texts get a hashed direction); counts encoded texts."""

    name = "fake-encoder"

    def __init__(self, table=None):
        self.table = table or {}
        self.encoded: list[str] = []

    def encode(self, texts, **kw):
        self.encoded += list(texts)
        out = []
        for t in texts:
            if t in self.table:
                out.append(np.asarray(self.table[t], dtype=np.float32))
            else:
                v = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=3).astype(np.float32)
                out.append(v)
        return np.stack(out)


# ============================================================================= conciseness rules


@pytest.mark.parametrize(
    "query, rule, detail",
    [
        ("", "empty", ""),
        ("   ", "empty", ""),
        ("Ada Quist birthplace?", "question_mark", "?"),
        ("who founded Tarnholm Mills", "question_word", "who"),
        ("Tarnholm Mills founded when", "question_word", "when"),
        ("is Ulmbridge in Ostrevia", "question_form", "is"),
        ("please Tarnholm Mills founder", "filler_phrase", "please"),
        ("tell me Tarnholm Mills founder", "filler_phrase", "tell me"),
        ("information about Ada Quist", "filler_phrase", "information about"),
        ("of Ada Quist birthplace", "redundant_preposition", "of"),
        ("Ada Quist born in", "redundant_preposition", "in"),
        ("Ada Quist born in at Ulmbridge", "redundant_preposition", "in at"),
        ("very famous Ada Quist birthplace", "redundant_modifier", "very"),
        ("Ada Quist exact birth date", "redundant_modifier", "exact"),
        ("a b c d e f g h i j k l m", "too_long", "13 words > 12"),
    ],
)
def test_each_conciseness_rule_fires(query, rule, detail):
    chk = check_concise(query)
    assert (chk.concise, chk.rule, chk.detail) == (False, rule, detail)
    assert rule in F.CONCISE_RULES


@pytest.mark.parametrize("query", ["Ada Quist birthplace", "Tarnholm Mills founder", "Maren Ostvik place of birth",
                                   "Avatar 2009 film director", "population of Ulmbridge 1990"])
def test_keyword_queries_are_concise(query):
    assert check_concise(query) == (True, None, "")


def test_rule_word_lists_are_explicit_module_constants():
    for words in (F.QUESTION_WORDS, F.QUESTION_OPENERS, F.FILLER_PHRASES, F.PREPOSITIONS, F.REDUNDANT_MODIFIERS):
        assert isinstance(words, tuple) and words and all(w == w.lower() for w in words)
    assert "who" in F.QUESTION_WORDS and "of" in F.PREPOSITIONS and "very" in F.REDUNDANT_MODIFIERS
    # the first rule in CONCISE_RULES order wins: a question mark beats the question word
    assert check_concise("who is Ada Quist?").rule == "question_mark"
    assert queries_concise([]) == (True, "")
    assert queries_concise(["Ada Quist birthplace", "where was she born"]) == (False, "question_word")
    assert check_concise("word " * 10_000).rule == "too_long"


# ============================================================================= query similarity


def test_pairwise_similarity_both_divisors():
    e = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # rows normalized inside
    c = 1 / math.sqrt(2)
    # pairs: (0,1) = 0, (0,2) = c, (1,2) = c → sum 2c; mean over 3 pairs; Eq. 8 divides by N(N−1) = 6
    mean, paper = pairwise_similarity(e)
    assert mean == pytest.approx(2 * c / 3) and paper == pytest.approx(2 * c / 6)
    assert all(math.isnan(x) for x in pairwise_similarity(e[:1]))


# ============================================================================= table values


def test_features_by_hand():
    t0 = make_traj("It was Ada Quist, a miller", [("Tarnholm Mills founder", [H1, H9]), ("who was Ada Quist", [H1])],
                   flags={"answered": True, "n_invalid": 0, "format_ok": True, "answer_boxes": 1,
                          "dag_valid": False, "dag_problems": ["cycle", "unknown tool"], "reflect_count": 2})
    t1 = make_traj(None, [], flags={"format_ok": False}, id="q1#1", idx=1)
    df = compute_features([t0, t1], [EX], encoder=False, cache=False)
    assert list(df.columns) == list(FEATURE_COLUMNS)
    r0, r1 = df.iloc[0], df.iloc[1]
    assert (r0["id"], r0["group_id"], r0["sample_idx"], r0["protocol"]) == ("q1#0", "q1", 0, "search_r1")
    # "It was Ada Quist, a miller" vs "Ada Quist": EM 0, cover-EM 1, F1 = 2·(2/5·1)/(2/5+1) = 0.5714 (5 words after "a" drops)
    assert (r0["em"], r0["cem"]) == (0.0, 1.0)  # DSPO's subEM is cem (one column per quantity)
    assert r0["f1"] == pytest.approx(2 * 0.4 / 1.4)
    assert (r0["L_pred"], r0["L_gt"]) == (5.0, 2.0)  # L_gt: the first alias "Ada Quist"
    assert (r0["n_searches"], r0["hops"], r0["n_queries"]) == (2.0, 2.0, 2.0)
    # gold titles {Tarnholm Mills, Ada Quist}; retrieved titles {Tarnholm Mills, Avatar (2009 film)} → 1/2
    assert (r0["n_gold_passages"], r0["n_retrieved"], r0["recall_title"], r0["recall_id"], r0["recall"]) == (
        2.0, 3.0, 0.5, 0.5, 0.5)
    assert math.isnan(r0["recall_embed"]) and math.isnan(r0["query_sim_mean"])
    assert (r0["format_ok"], r0["answer_boxes"], r0["dag_valid"], r0["n_dag_problems"], r0["reflect_count"]) == (
        1.0, 1.0, 0.0, 2.0, 2.0)
    assert math.isnan(r0["evidence_boxes"]) and math.isnan(r0["order_ok"]) and r0["evidence"] is None
    assert (r0["query_concise"], r0["concise_rule"]) == (0.0, "question_word")
    # never answered: wrong, not missing
    assert (r1["answered"], r1["em"], r1["cem"], r1["f1"], r1["L_pred"], r1["n_searches"]) == (0, 0, 0, 0, 0, 0)
    assert r1["answer"] is None and r1["recall"] == 0.0 and r1["query_concise"] == 1.0
    assert math.isnan(r1["answer_boxes"])  # the protocol did not write it
    assert df["em"].dtype == np.float64 and df["format_ok"].dtype == np.float64


def test_eq2_length_comes_from_the_best_matching_alias_not_the_alias_order():
    """DynaSearcher Eq. 2 (F1 if L_pred ≥ n·L_gt else CEM) must not change when the aliases are reordered."""
    long_first = Example("q1", EX.question, ["Ada Quist of Tarnholm Mills", "Ada Quist"], hops=1)
    short_first = Example("q1", EX.question, ["Ada Quist", "Ada Quist of Tarnholm Mills"], hops=1)
    # 7 words; it covers "Ada Quist" (cover-EM 1) but not the long alias: "Ada Quist" (2 words) is the match,
    # so L_pred ≥ 3·L_gt and Eq. 2 takes F1 (0.5, best over aliases) in both orders. With L_gt from the
    # first alias, the long-first order took CEM (1.0) instead.
    t = make_traj("It was Ada Quist who founded the mills", [("Tarnholm Mills founder", [H1])], flags={"format_ok": True})
    rows = [compute_features([t], [ex], encoder=False, cache=False) for ex in (long_first, short_first)]
    assert [r.iloc[0]["L_gt"] for r in rows] == [2.0, 2.0]
    r_ans = [float(get_preset("dynasearcher")(r)["r_ans"][0]) for r in rows]
    assert r_ans == [pytest.approx(0.5), pytest.approx(0.5)]
    # No answer: the canonical (first) alias.
    none = compute_features([make_traj(None)], [long_first], encoder=False, cache=False).iloc[0]
    assert none["L_gt"] == 5.0


def test_bad_inputs_give_nan_not_zero():
    no_gold = Example("q2", "?", [])
    no_hops = Example("q3", "?", ["x"])
    trajs = [make_traj("Ada Quist", id="a", example_id="q2"), make_traj("", id="b", example_id="q3"),
             make_traj(" ".join(["word"] * 10_000) + " x", id="c", example_id="q3")]
    df = compute_features(trajs, [no_gold, no_hops], encoder=False, cache=False).set_index("id")
    for col in ("em", "cem", "f1", "L_gt", "recall"):
        assert math.isnan(df.loc["a", col]), col
    assert df.loc["a", "has_gold"] == 0.0 and math.isnan(df.loc["b", "hops"])
    assert (df.loc["b", "em"], df.loc["b", "L_pred"]) == (0.0, 0.0)  # empty answer: wrong
    assert df.loc["c", "L_pred"] == 10_001.0 and df.loc["c", "cem"] == 1.0
    assert df.loc["c", "f1"] == pytest.approx(2 * (1 / 10_001) / (1 / 10_001 + 1))
    t = get_preset("dynasearcher")(df)
    # no gold answer → r_ans NaN; no hops → r_penalty NaN; every total is missing, and counted
    assert np.isnan(t.total).all() and t.missing["total"] == 3 and t.missing["r_penalty"] == 3
    # the 10k-word answer takes the F1 branch of Eq. 2 (10001 ≥ 3·1)
    assert t["r_ans"]["c"] == pytest.approx(df.loc["c", "f1"])
    with pytest.raises(KeyError, match="no example with id 'nope'"):
        compute_features([make_traj("x", example_id="nope")], [EX], encoder=False, cache=False)
    with pytest.raises(ValueError, match="recall_threshold"):
        compute_features([], [EX], recall_threshold=0.0)


def test_examples_as_dicts_and_mappings():
    t = make_traj("Ada Quist")
    a = compute_features([t], {"q1": {"golden_answers": ["ada quist"], "hops": 2.0, "question": "?"}}, encoder=False,
                         cache=False)
    assert (a["em"][0], a["hops"][0], a["L_gt"][0]) == (1.0, 2.0, 2.0)
    assert math.isnan(a["recall"][0])  # no supporting passages annotated


# ============================================================================= embeddings and caching


def test_embedding_features_with_fake_encoder_and_cache():
    table = {
        "Tarnholm Mills founder": [1, 0, 0], "Ada Quist birthplace": [0.6, 0.8, 0], "Ulmbridge": [0, 0, 1],
        # recall by embedding: gold title "Ada Quist" vs retrieved title "Ada M. Quist" (cosine 0.9 ≥ 0.8)
        "Ada Quist": [1, 0, 0], "Ada M. Quist": [0.9, math.sqrt(1 - 0.81), 0], "Tarnholm Mills": [0, 1, 0],
        "Avatar (2009 film)": [0, 0, 1],
    }
    enc = FakeEncoder(table)
    hit = Hit("p2", "Ada M. Quist", "Ada M. Quist was born in Ulmbridge.", 1.0)
    t = make_traj("Ada Quist", [("Tarnholm Mills founder", [H9]), ("Ada Quist birthplace", [hit]), ("Ulmbridge", [])])
    cache = FeatureCache(":memory:")
    df = compute_features([t], [EX], encoder=enc, cache=cache)
    r = df.iloc[0]
    # cosines: (q1,q2) = 0.6, (q1,q3) = 0, (q2,q3) = 0 → sum 0.6; mean over 3 pairs = 0.2; Eq. 8 → 0.6/6 = 0.1
    assert r["query_sim_mean"] == pytest.approx(0.2) and r["query_sim_paper"] == pytest.approx(0.1)
    # titles: no exact match; embeddings: "Ada Quist" ~ "Ada M. Quist" (0.9), "Tarnholm Mills" matches nothing → 1/2
    assert (r["recall_title"], r["recall_embed"], r["recall"]) == (0.0, 0.5, 0.5)
    n_first = len(enc.encoded)
    assert n_first == len(set(enc.encoded))  # each text once
    compute_features([t], [EX], encoder=enc, cache=cache)
    assert len(enc.encoded) == n_first  # everything came from the cache
    t2 = make_traj("Ada Quist", [("Tarnholm Mills founder", [H9]), ("Ada Quist birth year", [hit])])
    compute_features([t2], [EX], encoder=enc, cache=cache)
    assert enc.encoded[n_first:] == ["Ada Quist birth year"]  # only the changed input is recomputed
    # stricter threshold: 0.9 < 0.95 → no embedding match
    assert compute_features([t], [EX], encoder=enc, cache=cache, recall_threshold=0.95)["recall_embed"][0] == 0.0


def test_gold_passage_texts_for_embedding_recall():
    enc = FakeEncoder({"Tarnholm Mills\nTarnholm Mills was founded by Ada Quist.": [1, 0, 0],
                       "Ada Quist\nAda Quist was a miller.": [0, 1, 0],
                       "Avatar (2009 film)\nA film.": [0, 0.1, 1]})
    passages = {"p1": H1, "p2": {"title": "Ada Quist", "text": "Ada Quist was a miller."}}
    t = make_traj("x", [("q", [H1, H9])])
    r = compute_features([t], [EX], encoder=enc, cache=False, passages=passages).iloc[0]
    # gold texts vs hit texts: p1 identical (cos 1), p2 vs Avatar ≈ 0.1 → 1/2
    assert r["recall_embed"] == 0.5 and r["recall"] == 0.5


def test_feature_cache_on_disk(tmp_path):
    c = FeatureCache(tmp_path / "f.sqlite")
    c.put_many({"a": b"1", "b": b"2"})
    assert FeatureCache(tmp_path / "f.sqlite").get_many(["a", "b", "z"]) == {"a": b"1", "b": b"2"}
    assert len(c) == 2 and c.get_text("a") == "1"
    assert cache_key("embedding", "m", "x") != cache_key("embedding", "m2", "x")


@pytest.mark.slow
def test_real_default_encoder_query_similarity():
    t = make_traj("Ada Quist", [("Ada Quist birthplace", []), ("Ada Quist place of birth", []),
                                ("Tarnholm Mills founder", [])])
    r = compute_features([t], [EX], cache=False).iloc[0]  # encoder=None: all-MiniLM-L6-v2, offline
    assert 0.0 < r["query_sim_mean"] < 1.0
    assert r["query_sim_paper"] == pytest.approx(r["query_sim_mean"] / 2)
    assert r["recall"] == 0.0  # nothing retrieved


# ============================================================================= storage


def test_save_load_and_featurize_run(tmp_path):
    run = Run.create(tmp_path, name="feat")
    trajs = [make_traj("Ada Quist", [("Tarnholm Mills founder", [H1])], flags={"format_ok": True}),
             make_traj(None, id="q1#1", idx=1)]
    run.write_trajectories(trajs)
    run.write_examples([EX])
    df = featurize_run(run, encoder=False, cache=False)
    back = load_features(run)
    assert (run.path / "features.parquet").exists() and list(back.columns) == list(df.columns)
    np.testing.assert_allclose(back["f1"].to_numpy(), df["f1"].to_numpy())
    assert back["answer"].tolist()[1] is None or (isinstance(back["answer"][1], float) and math.isnan(back["answer"][1]))
    assert back["id"].tolist() == ["q1#0", "q1#1"]
    np.testing.assert_allclose(get_preset("dspo")(back).total, [1.0, 0.0])
    save_features(run, df.iloc[:1])
    assert len(load_features(run.path)) == 1
    with pytest.raises(FileNotFoundError, match="featurize_run"):
        load_features(tmp_path)
