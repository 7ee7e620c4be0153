"""Per-hop gold evidence: where a trajectory's searches returned each gold passage of its question
(``workbench.rewards.gold_evidence.gold_retrievals``), the inspector's marks and summary drawn from it
(``widgets.trajectory.turns_html``), and the dashboard drill-down's gold-evidence filter.

The hand-built trajectory is on the real HotpotQA record ``dev_0`` (gold: "Albert Einstein", then "Ulm"): its search
at turn 0 returns no gold passage, the one at turn 2 returns "Albert Einstein" third, and the one at turn 4 returns it
again, first; "Ulm" is never returned (a passage "Ulm Minster" and a KG triple about Ulm are not it).

The run for the views: four real records (two HotpotQA, one MuSiQue: gold passages; one Bamboogle: none), ``direct``
(answers "Germany" without searching: rows 0-3) and ``search_r1`` (rows 4-7, each answer right), whose search returns
both of ``dev_0``'s gold passages, one of ``dev_1``'s and none of the MuSiQue question's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_dashboard import _eval_run
from widgets.trajectory import turns_html
from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import Hit, ToolCall
from workbench.dashboard import app as dash
from workbench.dashboard import queries as q
from workbench.data.example import Example
from workbench.data.loaders import load_dataset
from workbench.rewards.features import compute_features
from workbench.rewards.gold_evidence import evidence_kind, gold_retrievals

FIXTURES = Path(__file__).parent / "fixtures"
RUN = "20261125-100000-eval-evidence"
F = q.TrajectoryFilter


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


# --------------------------------------------------------------------------- a run: the inspector and the dashboard


def _search(query: str, k: int = 3):
    pages = {"einstein birthplace": ["Physics", "Albert Einstein", "Ulm"], "verne": ["Jules Verne", "Nantes"]}
    return [Hit(f"h{i}", t, f"{t} is a passage.", 1.0) for i, t in enumerate(pages.get(query, ["Physics"]))]


@pytest.fixture(scope="module")
def evidence_root(tmp_path_factory, tokenizer, examples) -> Path:
    queries = {"dev_0": "einstein birthplace", "dev_1": "verne"}

    def agent(prompt: str, turn: int) -> str:
        ex = next(e for e in examples if e.question in prompt)
        return f"<search> {queries.get(ex.id, 'zurich doctorate')} </search>" if turn == 0 else \
            f"<answer> {ex.answers[0]} </answer>"

    root = tmp_path_factory.mktemp("evidence-runs")
    _eval_run(root, RUN, tokenizer, examples, {"direct": ["<answer> Germany </answer>"], "search_r1": agent},
              "hotpotqa", search=_search)
    return root


def _kinds(root: Path) -> list[str]:
    """Each row's evidence kind from gold_retrievals over the stored trajectory and its example."""
    exs = q.run_examples(root, RUN)
    trajs = [q.load_trajectory(root, RUN, r) for r in q.run_trajectories(root, RUN)["row"]]
    return [evidence_kind(gold_retrievals(t, exs[t.example_id])) for t in trajs]


def test_the_run_is_as_the_module_says(evidence_root):
    df = q.run_trajectories(evidence_root, RUN)
    assert df["method"].tolist() == ["direct"] * 4 + ["search_r1"] * 4
    assert _kinds(evidence_root) == ["none", "none", "none", "no-gold", "all", "some", "none", "no-gold"]


@pytest.mark.parametrize("filters,rows", [
    (F(evidence="all"), [4]),
    (F(evidence="some"), [5]),
    (F(evidence="none"), [0, 1, 2, 6]),
    (F(evidence="no-gold"), [3, 7]),
    (F(evidence="none", methods=("search_r1",)), [6]),  # with the other filters: all must pass
    (F(evidence="none", correct=False), [1, 2]),  # direct answers "Germany" everywhere: right on dev_0 only
    (F(evidence="some", text="verne"), [5]),
])
def test_the_evidence_filter_keeps_the_rows_gold_retrievals_says(evidence_root, filters, rows):
    assert q.run_trajectories(evidence_root, RUN, filters=filters)["row"].tolist() == rows
    assert q.count_trajectories(evidence_root, RUN, filters) == len(rows)
    kinds = _kinds(evidence_root)
    if filters == F(evidence=filters.evidence):
        assert rows == [i for i, k in enumerate(kinds) if k == filters.evidence]


def test_the_evidence_filter_names_itself_and_needs_the_features_table(evidence_root, tmp_path):
    import shutil

    assert F(evidence="some", hops=(2,)).describe() == ["hops 2", "some gold retrieved"]
    with pytest.raises(ValueError, match="evidence"):
        F(evidence="most")
    root = tmp_path / "runs"
    shutil.copytree(evidence_root, root)
    assert q.run_evidence(root, RUN) == root / RUN / "features.parquet"
    (root / RUN / "features.parquet").unlink()  # unknown evidence: no row passes, none is guessed
    assert q.run_evidence(root, RUN) is None and q.count_trajectories(root, RUN, F(evidence="none")) == 0


def test_the_drilldown_filters_by_evidence_and_its_transcript_marks_the_hop(evidence_root):
    import panel as pn

    _, section = dash._drilldown_section(evidence_root, [RUN])
    body = section[2][0]
    (count,) = [p for p in body.select(pn.pane.HTML) if "wb-drill-count" in p.object]
    table = body.select(pn.widgets.Tabulator)[0]
    evidence = next(w for w in body.select(pn.widgets.Select) if w.label == "gold evidence")
    assert not evidence.disabled and list(evidence.options) == [
        "any", "all gold retrieved", "some gold retrieved", "no gold retrieved", "no gold facts"]
    evidence.value = "all"
    assert table.value["row"].tolist() == [4]
    assert "<b>1</b> of 8 trajectories · all gold retrieved</div>" in count.object
    transcript = section[1].object  # the first match opens
    t = q.load_trajectory(evidence_root, RUN, 4)
    turn = next(i for i, x in enumerate(t.turns) if x.tool_calls)
    assert "row 4" in transcript and transcript.count("class='wb-gold'") == 2
    assert f"hop 1 <span style='color:#555'>“Albert Einstein”</span>: <b style='color:#1b7f3b'>retrieved at turn " \
           f"{turn}, rank 2</b>" in transcript
    assert f"retrieved at turn {turn}, rank 3" in transcript  # hop 2, "Ulm"
    evidence.value = "some"
    assert table.value["row"].tolist() == [5] and section[1].object.count("class='wb-gold'") == 1


def test_the_notebook_inspector_marks_the_same_passages(evidence_root):
    from widgets.inspector import trajectory_inspector

    ins = trajectory_inspector(evidence_root / RUN).inspector
    for row, n_marks in ((4, 2), (5, 1), (6, 0), (7, 0)):
        ins.open_row(row)
        assert ins.transcript.value.count("class='wb-gold'") == n_marks
    assert "hop 2 <span style='color:#555'>“Mark Twain”</span>: <b style='color:#b00020'>not retrieved</b>" in \
        (ins.open_row(5), ins.transcript.value)[1]
