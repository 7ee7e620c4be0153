"""TRL / verl exports: the same numbers as the Rubric on stored trajectories, from completion text alone."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from workbench.core.trajectory import POLICY
from workbench.core.types import Hit
from workbench.data.example import Example
from workbench.integrations.trl import to_trl
from workbench.integrations.verl.reward import to_verl
from workbench.methods import get_preset, get_protocol
from workbench.rewards.features import compute_features
from workbench.rewards.from_text import parse_passages, split_turns, trajectory_from_text
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox

EXAMPLES = [
    Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"], hops=1, supporting_titles=["Tarnholm Mills"]),
    Example("q2", "Where is Ulmbridge?", ["Ostrevia"], hops=1, supporting_titles=["Ulmbridge"]),
    Example("q3", "Which river flows through Ulmbridge?", ["Ulm River", "the Ulm"], hops=2,
            supporting_titles=["Ulmbridge", "Ulm (river)"]),
    Example("q4", "When did Ada Quist die?", ["1901"], hops=2, supporting_titles=["Ada Quist", "Tarnholm Mills"]),
    Example("q5", "What country is Ulmbridge in?", ["Ostrevia"], hops=1, supporting_titles=["Ulmbridge"]),
]

SCRIPTS = {
    "Tarnholm": ["<think>look it up</think>\n<search> Tarnholm Mills founder </search>", "<answer> Ada Quist </answer>"],
    "Where is": ["<search> </search>", "<search>Ulmbridge location</search>", "<answer> Ostrevia </answer>"],
    "river": ["<search>Ulmbridge river</search>", "<search>where is the Ulm river?</search>",
              "<answer> the Ulm, a river </answer>"],
    "die": ["<search>Ada Quist death</search>", "<search>Ada Quist 1901</search>", "<search>Quist obituary</search>",
            "<search>Tarnholm history</search>"],
    "country": ["<think>I know this.</think> <answer>Ostrevia</answer>"],
}


def script(prompt: str, turn: int) -> str:
    question = prompt.rsplit("Question:", 1)[-1].splitlines()[0]
    for key, turns in SCRIPTS.items():
        if key in question:
            return turns[turn] if turn < len(turns) else ""
    return ""


def search(query: str, k: int = 3):
    if "Ulm" in query:
        return [Hit("p3", "Ulmbridge", "Ulmbridge is a town in Ostrevia on the Ulm.", 1.0),
                Hit("p4", "Ulm (river)", "The Ulm (a river) flows through Ulmbridge.", 0.8)]
    return [Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0),
            Hit("p9", "Avatar (2009 film)", "A film (with parentheses).", 0.5)]


class HashEncoder:
    """Deterministic pseudo-embeddings (sha256 of the text): same text → same vector."""

    name = "hash-encoder"

    def encode(self, texts, **kw):
        return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:32], dtype=np.uint8).astype(np.float32) - 127
                         for t in texts])


@pytest.fixture(scope="module")
def stored(tokenizer):
    be = ScriptedBackend(tokenizer, script)
    trajs = rollout(EXAMPLES, get_protocol("search_r1"), Toolbox({"search": search}), be,
                    RolloutConfig(group_size=2, max_turns=4), progress=False)
    return trajs


def trl_columns(trajs):
    by_id = {e.id: e for e in EXAMPLES}
    exs = [by_id[t.example_id] for t in trajs]
    return {
        "answers": [e.answers for e in exs], "hops": [e.hops for e in exs],
        "supporting_titles": [e.supporting_titles for e in exs], "question": [e.question for e in exs],
    }


def as_list(values):
    return [None if math.isnan(v) else float(v) for v in values]


def test_the_rollouts_cover_the_cases(stored):
    by = {t.example_id: t for t in stored}
    assert by["q1"].answer == "Ada Quist" and by["q1"].n_searches == 1
    assert by["q2"].n_invalid == 1 and by["q2"].n_searches == 1  # an empty query, then a search
    assert by["q3"].n_searches == 2 and by["q4"].answer is None and by["q4"].finish_reason == "max_turns"
    assert by["q5"].n_searches == 0 and by["q5"].answer == "Ostrevia"


def test_trajectory_from_text_recovers_what_the_engine_recorded(stored):
    for t in stored:
        rebuilt = trajectory_from_text(t.response_text, get_protocol("search_r1"), id=t.id)
        assert [a["kind"] for a in rebuilt.actions] == [a["kind"] for a in t.actions], t.id
        assert rebuilt.queries == t.queries and rebuilt.answer == t.answer and rebuilt.n_invalid == t.n_invalid
        assert rebuilt.flags == t.flags
        titles = [h["title"] for c in rebuilt.tool_calls for h in c.results]
        assert titles == [h["title"] for c in t.tool_calls for h in c.results]
        assert [h["text"] for c in rebuilt.tool_calls for h in c.results] == [
            h["text"] for c in t.tool_calls for h in c.results]
        kinds = [k for k, _ in split_turns(t.response_text, get_protocol("search_r1"))]
        assert kinds == [turn.kind for turn in t.turns], t.id


@pytest.mark.parametrize("preset", ["dspo", "dynasearcher", "when_to_search"])
def test_trl_and_verl_match_the_rubric_on_stored_trajectories(stored, preset):
    enc = HashEncoder()
    features = compute_features(stored, EXAMPLES, encoder=enc, cache=False)
    table = get_preset(preset)(features)
    assert table.missing["total"] == 0
    prompts = [t.prompt_text for t in stored]
    completions = [t.response_text for t in stored]
    funcs, weights = to_trl(get_preset(preset), get_protocol("search_r1"), encoder=enc, cache=False)
    assert weights == list(table.weights.values())
    outs = [f(prompts=prompts, completions=completions, **trl_columns(stored)) for f in funcs]
    for f, out, name in zip(funcs, outs, table.weights):
        assert f.__name__ == f"{preset}_{name}"
        assert out == pytest.approx(as_list(table[name]), abs=1e-12), name
    total = [sum(w * v for w, v in zip(weights, vals) if w) for vals in zip(*outs)]
    assert total == pytest.approx(list(table.total), abs=1e-12)
    # one total function
    (only,), w1 = to_trl(get_preset(preset), get_protocol("search_r1"), split=False, encoder=enc, cache=False)
    assert w1 == [1.0] and only(prompts, completions, **trl_columns(stored)) == pytest.approx(list(table.total))
    # conversational completions: assistant messages are policy turns, the rest observations
    convo = [[{"role": "assistant" if turn.kind == POLICY else "user", "content": turn.text} for turn in t.turns]
             for t in stored]
    assert only(prompts, convo, **trl_columns(stored)) == pytest.approx(list(table.total))
    # verl
    compute_score = to_verl(get_preset(preset), get_protocol("search_r1"), encoder=enc, cache=False)
    cols = trl_columns(stored)
    for i, t in enumerate(stored):
        info = {"hops": cols["hops"][i], "supporting_titles": cols["supporting_titles"][i],
                "question": cols["question"][i]}
        got = compute_score("world", t.response_text, np.array(cols["answers"][i]), extra_info=info)
        assert got == pytest.approx(table.total[i], abs=1e-12), t.id
    detailed = to_verl(get_preset(preset), get_protocol("search_r1"), return_dict=True, encoder=enc, cache=False)(
        "world", stored[0].response_text, cols["answers"][0], {"hops": cols["hops"][0],
                                                                "supporting_titles": cols["supporting_titles"][0]})
    assert detailed["score"] == pytest.approx(table.total[0]) and set(table.weights) <= set(detailed)


def test_missing_components_raise_or_are_none(stored):
    prompts = [t.prompt_text for t in stored]
    completions = [t.response_text for t in stored]
    funcs, _ = to_trl(get_preset("rsearch_evidence"), get_protocol("search_r1"), encoder=False, cache=False)
    # search_r1 writes no evidence flags and no evidence model is configured
    with pytest.raises(ValueError, match=r"rsearch_evidence: component 'r_evid' is missing.*evidence_model"):
        funcs[1](prompts, completions, **trl_columns(stored))
    funcs, _ = to_trl(get_preset("rsearch_evidence"), get_protocol("search_r1"), on_missing="none", encoder=False, cache=False)
    assert funcs[1](prompts, completions, **trl_columns(stored)) == [None] * len(stored)
    assert funcs[0](prompts, completions, **trl_columns(stored))[0] == 1.0  # r_ans = F1 is there
    score = to_verl(get_preset("rsearch_dag"), get_protocol("search_r1"), encoder=False, cache=False)
    with pytest.raises(ValueError, match="F_dag"):
        score("world", completions[0], ["Ada Quist"])
    assert math.isnan(to_verl(get_preset("rsearch_dag"), get_protocol("search_r1"), on_missing="nan", encoder=False, cache=False)(
        "world", completions[0], ["Ada Quist"]))
    with pytest.raises(ValueError, match="no gold answers among the dataset columns"):
        to_trl(get_preset("dspo"), get_protocol("search_r1"), encoder=False, cache=False)[0][0](prompts, completions, solutions_typo=[1] * len(stored))


def test_export_errors_and_defaults():
    dspo, search_r1 = get_preset("dspo"), get_protocol("search_r1")
    with pytest.raises(TypeError, match="expected a Rubric, got str 'x'.*workbench.methods.get_preset"):
        to_trl("x", search_r1)
    with pytest.raises(TypeError, match="expected a Protocol instance, got str 'nope'.*workbench.methods.get_protocol"):
        to_verl(dspo, "nope")
    with pytest.raises(ValueError, match="unknown parameter"):
        to_trl(dspo, search_r1, gamma=0.9)
    with pytest.raises(ValueError, match="on_missing"):
        to_trl(dspo, search_r1, on_missing="zero")
    # ground truth in verl's {"target": [...]} form
    score = to_verl(dspo, search_r1, cache=False, encoder=False)
    assert score("nq", "<answer> It is Oslo </answer>", {"target": ["oslo"]}) == 1.0
    assert score("nq", "<answer> Bergen </answer>", "Oslo") == 0.0
    assert score("nq", "no tags at all", ["Oslo"]) == 0.0  # never answered: wrong


def test_parse_passages_styles():
    doc = "<information>Doc 1(Title: Avatar (2009 film)) A film (with parens).\nDoc 2(Title: Pandora) A moon.</information>"
    assert [(h["title"], h["text"]) for h in parse_passages(doc)] == [
        ("Avatar (2009 film)", "A film (with parens)."), ("Pandora", "A moon.")]
    title = "<observation>(Title: Oslo) Capital of Norway.\n(Title: Bergen) A city.</observation>"
    assert [h["title"] for h in parse_passages(title)] == ["Oslo", "Bergen"]
    abstract = "<result>Node A (news) Search results: Result 1: Title: EU AI Act Abstract: Adopted in 2024.</result>"
    assert [(h["title"], h["text"]) for h in parse_passages(abstract)] == [("EU AI Act", "Adopted in 2024.")]
    assert parse_passages("<information>No results.</information>") == []


# ============================================================================= the four seed protocols

SEED_EX = Example("s1", "Who founded Ostmark Ironworks?", ["Elsa Brandvik"], hops=2,
                  supporting_titles=["Ostmark Ironworks", "Elsa Brandvik"])
DS_S = ('<think> Find the founder. </think>\n<search> {"query": "Ostmark Ironworks founder", '
        '"entity": ["Ostmark Ironworks"], "relation": ["founded by"]} </search>')
DS_A = "<think> It was Elsa Brandvik. </think>\n<answer> The final answer is \\boxed{Elsa Brandvik} </answer>"
RS_S = "I need the founder.\n<search> Ostmark Ironworks founder </search>"
RS_A = ("It is Elsa Brandvik.\n<original_evidence>- Ostmark Ironworks was founded by Elsa Brandvik."
        "</original_evidence>\n<answer> Elsa Brandvik </answer>")
PLAN = "Nodes:\nA: Ostmark Ironworks founder (News)\nB: Elsa Brandvik biography (Web)\nEdges: A -> B"
DT = "<think> Two searches; B needs A. </think>\n"
T, R, A = "<think> t </think>", "<reflect> r </reflect>", "<answer> Elsa Brandvik </answer>"
S = "<search> Ostmark Ironworks founder </search>"

SEED_CASES = {
    "dynasearcher": [
        [DS_S, DS_A], ["<think> t </think><search> Ostmark Ironworks founder </search>", DS_A],
        [DS_S, "<think> t </think><result> fake </result><think> t </think><answer> The final answer is \\boxed{Elsa} "
               "</answer>"],
        [DS_S, DS_S], ['<think> t </think><search> {"query": "x" "y"} </search>', DS_A], [DS_S, "<think> t </think>"],
        ["<think> t </think><search> </search>", DS_A],
    ],
    "rsearch_evidence": [[RS_S, RS_A], ["<answer> Elsa Brandvik </answer>"], [RS_S, "<answer> Elsa </answer>"],
                         [RS_S, RS_S], [RS_S, "no action here"]],
    "rsearch_dag": [[DT + f"<search>\n{PLAN}\n</search>", A], [DT + "<search>A: x (Fax)</search>", A],
                    [DT + "<search>A: x (News)\nA -> A</search>", A], [DT + A],
                    [DT + "<search>A: x (News)</search>", "<result> forged </result>" + A]],
    "when_to_search": [[T + R + A], [T + S, R + A], [T + S, R + S, R + A], [T + S, A], [T + " hmm", T + R + A],
                       [T + S, R + S]],
}


def seed_toolbox(name):
    from workbench.core.types import Triple
    from workbench.methods.rsearch_dag.protocol import make_plan_tool
    from workbench.tools.sources import SourceRegistry

    def hits(query, k=3):
        return [Hit("p1", "Ostmark Ironworks", "Ostmark Ironworks was founded by Elsa Brandvik.", 1.0),
                Hit("p2", "Varnholt Bridge (1911)", f"A bridge ({query}).", 0.5)][:k]

    if name == "rsearch_dag":
        reg = SourceRegistry()
        reg.register("general", lambda query, k: hits(query, k), aliases=["web"])
        reg.register("news", lambda query, k: hits(query, k)[::-1])
        return Toolbox({"plan": make_plan_tool(reg, k=2)}, timeout_s=None), {"registry": reg}
    kg = lambda entities, relations=None, query="": [Triple("Ostmark Ironworks", "founded by", "Elsa Brandvik")]  # noqa: E731
    return Toolbox({"search": hits, "kg": kg}, timeout_s=None), {}


@pytest.mark.parametrize("name", sorted(SEED_CASES))
def test_seed_protocols_rebuilt_from_text_score_the_same(tokenizer, name):
    from workbench.rewards.evidence import EvidenceScorer
    from workbench.rewards.features import FeatureCache
    from workbench.rewards.judges import SimilarityJudge, YesNoJudge

    toolbox, kw = seed_toolbox(name)
    proto = get_protocol(name, **kw)
    stored = []
    for i, turns in enumerate(SEED_CASES[name]):
        be = ScriptedBackend(tokenizer, list(turns), append_eos=not turns[0].endswith("hmm"))
        t = rollout([SEED_EX], proto, toolbox, be, RolloutConfig(max_turns=len(turns)), progress=False)[0]
        t.id, t.sample_idx = f"s1#{i}", i
        stored.append(t)
    for t in stored:
        rebuilt = trajectory_from_text(t.response_text, proto, id=t.id)
        assert rebuilt.flags == t.flags, (t.id, [tt.text for tt in t.turns])
        assert rebuilt.answer == t.answer and rebuilt.queries == t.queries
    cache = FeatureCache(":memory:")
    extra = {
        "dynasearcher": {},
        "rsearch_evidence": {"evidence_model": EvidenceScorer(lambda p: "Elsa Brandvik" if "Elsa" in p else "?")},
        "rsearch_dag": {"judges": [SimilarityJudge(lambda p: "0.9" if "Elsa Brandvik" in p.split("Predicted")[1]
                                                   else "0.2")]},
        "when_to_search": {"judges": [YesNoJudge(lambda p: "YES" if "elsa brandvik" in p else "NO")]},
    }[name]
    enc = HashEncoder()
    features = compute_features(stored, [SEED_EX], encoder=enc, cache=cache, **extra)
    table = get_preset(name)(features)
    completions = [t.response_text for t in stored]
    cols = {"answers": [SEED_EX.answers] * len(stored), "hops": [2] * len(stored),
            "supporting_titles": [SEED_EX.supporting_titles] * len(stored), "question": [SEED_EX.question] * len(stored)}
    funcs, weights = to_trl(get_preset(name), proto, on_missing="none", encoder=enc, cache=cache, **extra)
    outs = [f([""] * len(stored), completions, **cols) for f in funcs]
    for out, comp in zip(outs, table.weights):
        assert out == pytest.approx(as_list(table[comp]), abs=1e-12, nan_ok=True), comp
    score = to_verl(get_preset(name), proto, on_missing="nan", encoder=enc, cache=cache, **extra)
    got = [score("seed", c, SEED_EX.answers, {"hops": 2, "supporting_titles": SEED_EX.supporting_titles,
                                              "question": SEED_EX.question}) for c in completions]
    np.testing.assert_allclose(got, table.total, atol=1e-12)
    assert np.isfinite(table.total).sum() >= 3  # most cases are fully scored


# ============================================================================= agreement with passage ids

from workbench.core.types import Passage  # noqa: E402

LONG = " It has a long history." * 40  # over render_passages' 600 characters: the rendered text is cut
CORPUS = [Passage("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist." + LONG),
          Passage("p3", "Ulmbridge", "Ulmbridge is a town in Ostrevia on the Ulm." + LONG),
          Passage("p4", "Ulm (river)", "The Ulm (a river) flows through Ulmbridge."),
          Passage("p5", "Ulm (river)", "A second page with the same title."),
          Passage("p9", "Avatar (2009 film)", "A film (with parentheses).")]
ID_EXAMPLES = [Example(e.id, e.question, e.answers, hops=e.hops, supporting_titles=e.supporting_titles,
                       supporting_ids=[p.id for p in CORPUS if p.title in e.supporting_titles][:len(e.supporting_titles)])
               for e in EXAMPLES]


def id_search(query, k=3):
    by = {p.id: p for p in CORPUS}
    ids = ["p3", "p4"] if "Ulm" in query else ["p1", "p9"]
    return [Hit(by[i].id, by[i].title, by[i].text, 1.0) for i in ids]


@pytest.fixture(scope="module")
def stored_ids(tokenizer):
    be = ScriptedBackend(tokenizer, script)
    return rollout(ID_EXAMPLES, get_protocol("search_r1"), Toolbox({"search": id_search}), be,
                   RolloutConfig(group_size=1, max_turns=4), progress=False)


@pytest.mark.parametrize("preset", ["dspo", "dynasearcher", "when_to_search"])
def test_text_rewards_equal_the_rubric_with_passage_ids(stored_ids, preset):
    from workbench.rewards.from_text import PassageIndex

    enc, index = HashEncoder(), PassageIndex(CORPUS)
    features = compute_features(stored_ids, ID_EXAMPLES, encoder=enc, cache=False, passages=index)
    table = get_preset(preset)(features)
    by_id = {e.id: e for e in ID_EXAMPLES}
    score = to_verl(get_preset(preset), get_protocol("search_r1"), on_missing="nan", encoder=enc, cache=False, passages=index)
    (total,), _ = to_trl(get_preset(preset), get_protocol("search_r1"), split=False, on_missing="none", encoder=enc, cache=False, passages=index)
    cols = {"answers": [by_id[t.example_id].answers for t in stored_ids],
            "hops": [by_id[t.example_id].hops for t in stored_ids],
            "supporting_titles": [by_id[t.example_id].supporting_titles for t in stored_ids],
            "supporting_ids": [by_id[t.example_id].supporting_ids for t in stored_ids],
            "question": [t.question for t in stored_ids]}
    want = [None if math.isnan(v) else v for v in table.total]
    # one flat string, and a conversation whose single assistant message holds the whole rollout
    assert total([""] * len(stored_ids), [t.response_text for t in stored_ids], **cols) == pytest.approx(want)
    single = [[{"role": "assistant", "content": t.response_text}] for t in stored_ids]
    assert total([""] * len(stored_ids), single, **cols) == pytest.approx(want)
    for i, t in enumerate(stored_ids):
        ex = by_id[t.example_id]
        info = {"hops": ex.hops, "supporting_titles": ex.supporting_titles, "supporting_ids": ex.supporting_ids,
                "question": ex.question}
        assert score("world", t.response_text, ex.answers, info) == pytest.approx(table.total[i], nan_ok=True), t.id
    rebuilt = trajectory_from_text(stored_ids[0].response_text, get_protocol("search_r1"), passages=index)
    assert [h["id"] for c in rebuilt.tool_calls for h in c.results] == [
        h["id"] for c in stored_ids[0].tool_calls for h in c.results]
