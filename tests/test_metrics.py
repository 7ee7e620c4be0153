"""Answer metrics against hand-computed values."""

import math

import pytest

from workbench.rewards.metrics import (
    answer_metrics,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
    word_count,
)


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  A   cat, an apple;  the END. ", "cat apple end"),
        ("Theater", "theater"),  # 'the' only as a whole word
        ("an-other", "another"),  # ASCII punctuation dropped, not replaced by a space
        ("Café Müller", "café müller"),  # non-ASCII kept
        ("", ""),
        (None, ""),
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_max_over_aliases():
    assert exact_match("Republic of Ostrevia", ["Ostrevia", "the Republic of Ostrevia"]) == 1.0
    assert exact_match("Ostrevia republic", ["Ostrevia", "Republic of Ostrevia"]) == 0.0
    assert exact_match("anything", []) == 0.0
    assert exact_match(None, ["x"]) == 0.0


def test_cover_exact_match():
    assert cover_exact_match("He was born in Ulmbridge, Ostrevia.", ["ulmbridge"]) == 1.0
    assert cover_exact_match("Ulm", ["Ulmbridge"]) == 0.0
    # an empty normalized gold never matches
    assert cover_exact_match("anything", ["the", ""]) == 0.0
    # substring is over normalized strings: articles and punctuation removed first
    # character-level substring, as FlashRAG's sub_em: 'glass orchard' is inside 'its theglass orchard'
    assert cover_exact_match("it's THE-Glass orchard", ["The Glass Orchard"]) == 1.0
    assert cover_exact_match("glassorchard", ["The Glass Orchard"]) == 0.0
    assert cover_exact_match("it's the Glass Orchard!", ["The Glass Orchard"]) == 1.0


def test_f1_by_hand():
    # pred tokens: paris france (2); gold: paris (1); overlap 1 -> P=1/2 R=1 F1=2/3
    assert f1_score("Paris, France", ["Paris"]) == pytest.approx(2 / 3)
    # pred: new york city; gold: york city new jersey -> overlap 3 (new, york, city); P=1, R=3/4 -> 6/7
    assert f1_score("New York City", ["York City New Jersey"]) == pytest.approx(6 / 7)
    # repeated tokens count with multiplicity: pred x y y, gold y y y -> overlap 2, P=2/3, R=2/3
    assert f1_score("x y y", ["y y y"]) == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))
    assert f1_score("Paris", ["London", "paris"]) == 1.0  # max over aliases
    assert f1_score("", ["Paris"]) == 0.0
    assert f1_score(None, ["Paris"]) == 0.0


def test_f1_yes_no_rule():
    assert f1_score("yes", ["no"]) == 0.0
    assert f1_score("yes it is", ["yes"]) == 0.0  # normalized pred differs from the special gold
    assert f1_score("no", ["No."]) == 1.0
    assert f1_score("noanswer", ["something"]) == 0.0


def test_answer_metrics_and_word_count():
    m = answer_metrics("the Glass Orchard by Maren", ["Glass Orchard"])
    assert m == {"em": 0.0, "cem": 1.0, "f1": pytest.approx(2 * (2 / 4) * 1 / (2 / 4 + 1))}
    assert word_count("The quick, brown fox") == 3
    assert word_count("") == 0


@pytest.mark.parametrize("gold", ["A", "The", "an", "(A)."])
def test_no_answer_never_matches_a_gold_that_normalizes_to_empty(gold):
    # normalize_answer empties these golds; an unanswered trajectory used to score EM 1 against them
    assert normalize_answer(gold) == ""
    assert answer_metrics(None, [gold]) == {"em": 0.0, "cem": 0.0, "f1": 0.0}
    assert answer_metrics("", [gold]) == {"em": 0.0, "cem": 0.0, "f1": 0.0}
    assert answer_metrics("Paris", [gold]) == {"em": 0.0, "cem": 0.0, "f1": 0.0}


def test_golds_that_normalize_to_empty_compare_on_their_lowercased_stripped_form():
    assert answer_metrics("A", ["A"]) == {"em": 1.0, "cem": 1.0, "f1": 1.0}
    assert answer_metrics(" (a). ", ["A"]) == {"em": 1.0, "cem": 1.0, "f1": 1.0}
    assert answer_metrics("the", ["The"]) == {"em": 1.0, "cem": 1.0, "f1": 1.0}
    assert answer_metrics("B", ["A"]) == {"em": 0.0, "cem": 0.0, "f1": 0.0}
    # cover-EM is exact for them: the letter "a" is in nearly every answer
    m = answer_metrics("The answer is a cat", ["A"])
    assert m["em"] == 0.0 and m["cem"] == 0.0 and m["f1"] == pytest.approx(2 * (1 / 5) / (1 / 5 + 1))
    # another alias that normalizes normally is unaffected
    assert answer_metrics("Ostrevia", ["A", "Ostrevia"]) == {"em": 1.0, "cem": 1.0, "f1": 1.0}
    assert exact_match(None, ["anything"]) == cover_exact_match(None, ["x"]) == f1_score(None, ["x"]) == 0.0


def test_answer_metrics_without_gold_are_nan():
    m = answer_metrics("Paris", [])
    assert all(v != v for v in m.values()) and set(m) == {"em", "cem", "f1"}
    assert answer_metrics("Paris", None)["em"] != answer_metrics("Paris", None)["em"]
    assert exact_match("anything", []) == 0.0  # the single metrics stay 0 (nothing matched)


# --------------------------------------------------------------------------- options and leakage


@pytest.mark.parametrize("question, options", [
    ("Which film whose director is younger, Forbidden Ground or Free Guy?", ["Forbidden Ground", "Free Guy"]),
    ("Which film has the director born earlier, The Adventures Of Priscilla, Queen Of The Desert or Harvest: 3,000 "
     "Years?", ["The Adventures Of Priscilla, Queen Of The Desert", "Harvest: 3,000 Years"]),
    ("Which magazine was started first Arthur's Magazine or First for Women?", ["Arthur's Magazine", "First for Women"]),
    ("Did Alice Munro or Bob Dylan win first?", ["Alice Munro", "Bob Dylan"]),
    ("Are Local H and For Against both from the United States?", []),
    ("Who directed Free Guy?", []),
    ("Is it this or that?", []),  # no capitalized options
])
def test_comparison_options(question, options):
    from workbench.rewards.metrics import comparison_options

    assert comparison_options(question) == options


def test_multi_option_by_hand():
    from workbench.rewards.metrics import multi_option

    q = "Which film came out first, Forbidden Ground or Free Guy?"
    assert multi_option("Forbidden Ground or Free Guy", q, ["Free Guy"]) == 1.0
    assert multi_option("free guy, then forbidden ground", q, ["Free Guy"]) == 1.0  # normalized
    assert multi_option("Free Guy", q, ["Free Guy"]) == multi_option("Free Guys", q, ["Free Guy"]) == 0.0
    assert multi_option("Forbidden Ground or Free Guy", "Who directed Free Guy?", ["Shawn Levy"]) == 0.0
    assert multi_option("Forbidden Ground and Free Guy", q, ["Forbidden Ground and Free Guy"]) == 0.0  # gold names both


def test_in_context_answers_and_demo_leak_by_hand():
    from workbench.rewards.metrics import demo_leak, in_context_answers

    prompt = ("Put it inside <answer> and </answer>. For example, <answer> Beijing </answer>. <answer>...</answer> <answer> ANSWER </answer> "
              "<answer></answer> <answer> The final answer is \\boxed{answer} </answer> <answer> Ira Velt </answer>")
    assert in_context_answers(prompt) == ["Beijing", "Ira Velt"]
    demos = in_context_answers(prompt)
    assert demo_leak("Ira Velt", demos, ["Ada Quist"]) == 1.0
    assert demo_leak("Ira Velt & Sons", demos, ["Ada Quist"]) == 1.0
    assert demo_leak("Iravelt", demos, ["Ada Quist"]) == 0.0  # whole words only
    assert demo_leak("Beijing", demos, ["Beijing, China"]) == 0.0  # a gold contains it
    assert demo_leak(None, demos, ["x"]) == demo_leak("x", [], ["y"]) == 0.0


def test_choice_options_and_option_set_f1_by_hand():
    from workbench.rewards.metrics import choice_options, option_set_f1

    q = "Which of these are rivers?\nA. Danube\nB. Alps\nC. (the) Rhine\nD. Sahara\nE. Nile"
    assert list(choice_options(q)) == ["A", "B", "C", "D", "E"] and choice_options(q)["A"] == "Danube"
    gold = ["A, C, E"]
    assert option_set_f1("A, C, E", gold, q) == 1.0
    assert option_set_f1("(A) and (C)", gold, q) == pytest.approx(2 * 2 / 5)  # P={A,C}, G={A,C,E}
    assert option_set_f1("A, B", gold, q) == pytest.approx(2 * 1 / 5)
    assert option_set_f1("Danube, Rhine and Nile", gold, q) == 1.0  # option texts count when no label is written
    assert option_set_f1(None, gold, q) == 0.0
    assert option_set_f1("B", ["D", "B"], q) == 1.0  # best alias
    # not multiple choice: NaN (the judge or string metric applies instead)
    assert math.isnan(option_set_f1("Paris", ["Paris"], "What is the capital of France?"))
    assert math.isnan(option_set_f1("A", ["Zebra"], q))  # a gold naming no option
    assert choice_options("Who wrote it? I. e. nobody") == {} and choice_options("Pick A. one") == {}
