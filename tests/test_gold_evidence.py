"""Per-hop gold evidence: where a trajectory's searches returned each gold passage of its question
(``workbench.rewards.gold_evidence.gold_retrievals``), and the inspector's marks and summary drawn from it
(``widgets.trajectory.turns_html``).

The hand-built trajectory is on the real HotpotQA record ``dev_0`` (gold: "Albert Einstein", then "Ulm"): its search
at turn 0 returns no gold passage, the one at turn 2 returns "Albert Einstein" third, and the one at turn 4 returns it
again, first; "Ulm" is never returned (a passage "Ulm Minster" and a KG triple about Ulm are not it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from widgets.trajectory import turns_html
from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import ToolCall
from workbench.data.example import Example
from workbench.data.loaders import load_dataset
from workbench.rewards.features import compute_features
from workbench.rewards.gold_evidence import evidence_kind, gold_retrievals

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    hotpot = load_dataset(FIXTURES / "flashrag_suite" / "hotpotqa" / "dev.jsonl")
    musique = load_dataset(FIXTURES / "hf_musique_validation.parquet")[:1]
    bamboogle = load_dataset(FIXTURES / "flashrag_suite" / "bamboogle" / "test.jsonl")[:1]
    return [*hotpot, *musique, *bamboogle]


def _passage(title: str, pid: str = "") -> dict:
    return {"id": pid, "title": title, "text": f"{title} is a passage.", "score": 1.0}


def _search_turn(kind: str, *titles: str) -> Turn:
    call = ToolCall("search", {"query": "q"}, results=[_passage(t) for t in titles])
    return Turn(kind, "", [], tool_calls=[call])


def _hand_built(ex: Example) -> Trajectory:
    triple = {"head": "Ulm", "relation": "located in", "tail": "Germany"}
    turns = [
        _search_turn(POLICY, "Physics", "Ulm Minster"),
        Turn(OBSERVATION, "<information>...</information>", []),
        _search_turn(POLICY, "Physics", "Germany", "ALBERT einstein"),  # the title as another case writes it
        Turn(OBSERVATION, "<information>...</information>", []),
        Turn(POLICY, "", [], tool_calls=[ToolCall("search", {"query": "q"}, results=[_passage("Albert Einstein"),
                                                                                       triple])]),
        Turn(POLICY, "<answer> Germany </answer>", []),
    ]
    return Trajectory("t0", ex.id, ex.question, "search_r1", [], turns=turns, answer="Germany", finish_reason="answer")


# --------------------------------------------------------------------------- the matching


def test_each_gold_passage_first_retrieved_at_its_turn_and_rank(examples):
    ex = examples[0]
    assert ex.id == "dev_0" and ex.supporting_titles == ["Albert Einstein", "Ulm"]
    golds = gold_retrievals(_hand_built(ex), ex)
    assert [(g.hop, g.title, g.by, g.turn, g.rank) for g in golds] == [
        (1, "Albert Einstein", "title", 2, 3), (2, "Ulm", "title", None, None)]
    assert golds[0].found == ((2, 0, 3), (4, 0, 1))  # every place, first first
    assert not golds[1].retrieved and golds[1].found == ()
    assert evidence_kind(golds) == "some"


def test_the_question_without_supporting_facts_has_no_gold(examples):
    ex = examples[3]
    assert ex.dataset == "bamboogle" and not ex.supporting_titles
    assert gold_retrievals(_hand_built(ex), ex) == [] and evidence_kind([]) == "no-gold"


def test_by_id_where_every_passage_has_one_else_by_title():
    ex = Example("w", "Q?", ["x"], supporting_ids=["p7", "p8"], supporting_titles=["Harbour", "Mill"])
    call = ToolCall("search", {}, results=[_passage("Harbour", "p99"), _passage("Renamed", "p8")])
    traj = Trajectory("t", "w", "Q?", "search_r1", [], turns=[Turn(OBSERVATION, "", [], tool_calls=[call])])
    golds = gold_retrievals(traj, ex)
    # by id: the same title under another id is not the gold passage; the gold id under another title is
    assert [(g.hop, g.id, g.title, g.by, g.turn, g.rank) for g in golds] == [
        (1, "p7", "Harbour", "id", None, None), (2, "p8", "Mill", "id", 0, 2)]
    call.results.append({"title": "Mill", "text": ""})  # a passage without an id: the titles decide
    assert [(g.by, g.rank) for g in gold_retrievals(traj, ex)] == [("title", 1), ("title", 3)]
    with pytest.raises(ValueError, match="by="):
        gold_retrievals(traj, ex, by="embedding")


def test_recall_features_count_the_same_gold_passages(examples):
    """``recall_title`` / ``recall_id`` in features.parquet are the share of gold_retrievals retrieved."""
    trajs = [_hand_built(ex) for ex in examples]
    feats = compute_features(trajs, examples, encoder=False, cache=False)
    for t, ex, (_, row) in zip(trajs, examples, feats.iterrows()):
        golds = gold_retrievals(t, ex)
        assert row["n_gold_passages"] == len(golds)
        if golds:
            assert row["recall"] == sum(g.retrieved for g in golds) / len(golds)
    assert feats["recall"].tolist()[:3] == [0.5, 0.0, 0.5]  # dev_0: Einstein; dev_1: neither; MuSiQue: Einstein


# --------------------------------------------------------------------------- the inspector's transcript


def _passage_items(page: str) -> dict[str, str]:
    """Each retrieved passage's title -> what follows it up to the end of its list item, over every tool result."""
    items = re.findall(r"<li style='margin:2px 0'><b>(.*?)</b>(.*?)</li>", page, flags=re.DOTALL)
    out: dict[str, str] = {}
    for title, rest in items:
        out[title] = out.get(title, "") + rest
    return out


def test_the_transcript_marks_the_gold_passage_and_says_where_each_hop_was_found(examples):
    ex = examples[0]
    page = turns_html(_hand_built(ex), example=ex)
    items = _passage_items(page)
    assert set(items) == {"Physics", "Ulm Minster", "Germany", "ALBERT einstein", "Albert Einstein"}
    for title, rest in items.items():
        assert ("gold · hop 1" in rest) == (title.lower() == "albert einstein"), title
    assert page.count("class='wb-gold'") == 2 and "hop 2</b>" not in page
    evidence = re.search(r"<div class='wb-evidence'.*?</div>", page, flags=re.DOTALL).group(0)
    assert "1 of 2 gold passages retrieved" in evidence and "matched by title" in evidence
    assert re.search(r"hop 1 <span[^>]*>“Albert Einstein”</span>: <b[^>]*>retrieved at turn 2, rank 3</b>", evidence)
    assert re.search(r"hop 2 <span[^>]*>“Ulm”</span>: <b[^>]*>not retrieved</b>", evidence)
    # without the example, or for a question without gold passages: no marks, no evidence line
    for other in (None, examples[3]):
        assert "wb-gold" not in turns_html(_hand_built(ex), example=other)
        assert "wb-evidence" not in turns_html(_hand_built(ex), example=other)
