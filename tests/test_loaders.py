"""Loaders for real benchmark files: the samples in data/samples, crafted files in both HotpotQA layouts, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench.core.types import Triple
from workbench.data.example import Example
from workbench.data.loaders import (
    DATASETS,
    context_passage_id,
    corpus_from_contexts,
    dedup_answers,
    detect_layout,
    load_2wiki,
    load_2wiki_kg,
    load_bamboogle,
    load_dataset,
    load_flashrag_corpus,
    load_flashrag_dataset,
    load_hotpotqa,
    load_musique,
    parse_flashrag_contents,
)
from workbench.util.paths import samples_dir


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- benchmark samples


def test_hotpotqa_sample():
    exs = load_hotpotqa(samples_dir() / "hotpotqa_dev_distractor.sample.json")
    raw = json.loads((samples_dir() / "hotpotqa_dev_distractor.sample.json").read_text())
    assert len(exs) == len(raw) == 20
    assert [e.id for e in exs] == [r["_id"] for r in raw]  # file order
    first = exs[0]
    assert (first.dataset, first.split, first.hops, first.qtype) == ("hotpotqa", "dev", 2, "comparison")
    assert first.answers == ["yes"]
    assert first.supporting_titles == ["Scott Derrickson", "Ed Wood"]
    assert {e.qtype for e in exs} == {"bridge", "comparison"}
    for e, r in zip(exs, raw):
        assert e.supporting_titles == list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
        ctx = e.meta["contexts"]
        assert [c["title"] for c in ctx] == [t for t, _ in r["context"]]
        assert {c["title"] for c in ctx if c["supporting"]} == set(e.supporting_titles)
    # HotpotQA sentences carry their own leading space: joined without doubling it
    derrickson = next(c for c in first.meta["contexts"] if c["title"] == "Scott Derrickson")
    assert derrickson["text"].startswith(
        "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer. He lives"
    )


def test_2wiki_sample_hops_kg_path_and_kg():
    path = samples_dir() / "2wikimultihopqa_dev.sample.jsonl"
    exs = load_2wiki(path)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(exs) == 20
    for e, r in zip(exs, raw):
        assert e.dataset == "2wiki" and e.qtype == r["type"]
        assert e.hops == max(2, len(r["evidences"]))
        assert [(s["head"], s["relation"], s["tail"]) for s in e.kg_path] == [tuple(t) for t in r["evidences"]]
        assert e.supporting_titles == list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
    assert exs[0].hops == 4 and exs[0].qtype == "bridge_comparison"
    assert exs[4].hops == 2 and exs[4].kg_path[1] == {
        "head": "Denys Desjardins",
        "relation": "place of birth",
        "tail": "Montreal, Quebec",
    }

    kg = load_2wiki_kg(path)
    unique = list(dict.fromkeys(tuple(t) for r in raw for t in r["evidences"]))
    assert all(isinstance(t, Triple) for t in kg)
    assert [(t.head, t.relation, t.tail) for t in kg] == unique
    assert len(load_2wiki_kg(path, limit=1)) == 4


def test_musique_sample_hops_decomposition_aliases():
    path = samples_dir() / "musique_ans_dev.sample.jsonl"
    exs = load_musique(path)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(exs) == 20
    for e, r in zip(exs, raw):
        assert e.hops == len(r["question_decomposition"]) == int(re.match(r"(\d)hop", r["id"]).group(1))
        assert e.meta["id_hops"] == e.hops
        assert e.decomposition == [d["question"] for d in r["question_decomposition"]]
        by_idx = {p["idx"]: p for p in r["paragraphs"]}
        hop_titles = [by_idx[d["paragraph_support_idx"]]["title"] for d in r["question_decomposition"]]
        assert e.supporting_titles == list(dict.fromkeys(hop_titles))  # in hop order
        assert sum(c["supporting"] for c in e.meta["contexts"]) == sum(p["is_supporting"] for p in r["paragraphs"])
    pirates = next(e for e in exs if e.id == "2hop__335418_279684")
    assert pirates.answers[0] == "Pittsburgh Pirates" and "Baltimore Orioles" in pirates.answers
    assert pirates.decomposition == ["Anna Benson >> spouse", "#1 >> member of sports team"]
    assert pirates.meta["decomposition_answers"] == ["Kris Benson", "Pittsburgh Pirates"]
    assert pirates.qtype == "2hop" and pirates.meta["answerable"] is True


def test_bamboogle_sample():
    exs = load_bamboogle(samples_dir() / "bamboogle_test.flashrag.sample.jsonl")
    assert len(exs) == 20
    assert exs[0].answers == ["james madison"]
    assert {(e.dataset, e.split, e.hops) for e in exs} == {("bamboogle", "test", 2)}


def test_flashrag_corpus_sample():
    passages = load_flashrag_corpus(samples_dir() / "wiki18_corpus.flashrag.sample.jsonl")
    assert len(passages) == 200
    assert (passages[0].id, passages[0].title) == ("0", "Evan Morris")
    assert passages[0].text.startswith("Evan Morris Evan L. Morris (January 26, 1977")
    assert not any(p.title.startswith('"') or p.title.endswith('"') for p in passages)
    assert "Absalon" in {p.title for p in passages}  # an unquoted title line
    assert len(load_flashrag_corpus(samples_dir() / "wiki18_corpus.flashrag.sample.jsonl", limit=7)) == 7


@pytest.mark.parametrize(
    "fname, dataset, hops",
    [
        ("hotpotqa_dev_distractor.sample.json", "hotpotqa", 2),
        ("2wikimultihopqa_dev.sample.jsonl", "2wiki", 4),
        ("musique_ans_dev.sample.jsonl", "musique", 2),
        ("bamboogle_test.flashrag.sample.jsonl", "bamboogle", 2),
    ],
)
def test_load_dataset_sniffs_the_layout(fname, dataset, hops):
    exs = load_dataset(samples_dir() / fname, limit=3)
    assert len(exs) == 3
    assert exs[0].dataset == dataset and exs[0].hops == hops
    assert exs[0].meta["source_file"].endswith(fname)


@pytest.mark.parametrize("name", ["hotpotqa", "2wiki", "musique", "bamboogle"])
def test_load_dataset_by_name_falls_back_to_the_sample_with_a_warning(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    with pytest.warns(UserWarning, match="small sample"):
        exs = load_dataset(name, limit=2)
    assert len(exs) == 2 and exs[0].dataset == name


def test_corpus_from_contexts_on_samples():
    fx = samples_dir()
    exs = load_hotpotqa(fx / "hotpotqa_dev_distractor.sample.json") + load_2wiki(
        fx / "2wikimultihopqa_dev.sample.jsonl"
    )
    exs += load_musique(fx / "musique_ans_dev.sample.jsonl") + load_bamboogle(
        fx / "bamboogle_test.flashrag.sample.jsonl"
    )
    corpus = corpus_from_contexts(exs)
    by_id = {p.id: p for p in corpus}
    assert len(by_id) == len(corpus)
    assert len({(p.title, p.text) for p in corpus}) == len(corpus)  # deduplicated
    n_ctx = sum(len(e.meta.get("contexts", [])) for e in exs)
    assert 0 < len(corpus) < n_ctx  # 2Wiki repeats a paragraph inside one example
    for e in exs:
        if e.dataset == "bamboogle":
            assert e.supporting_ids == []
            continue
        assert e.supporting_ids, e.id
        assert all(i in by_id for i in e.supporting_ids)
        assert {by_id[i].title for i in e.supporting_ids} == set(e.supporting_titles)
    # ids are content-derived: another order gives the same ids
    again = corpus_from_contexts(list(reversed(load_hotpotqa(fx / "hotpotqa_dev_distractor.sample.json"))))
    assert {p.id for p in again} <= set(by_id)


# ----------------------------------------------------------------------------- crafted files


_HOTPOT_ORIGINAL = [
    {
        "_id": "h1",
        "question": "Which band formed first, Alpha or Beta?",
        "answer": "Alpha",
        "supporting_facts": [["Alpha (band)", 0], ["Beta", 1], ["Alpha (band)", 1]],
        "context": [
            ["Alpha (band)", ["Alpha is a band.", " It formed in 1970."]],
            ["Gamma", ["Gamma is a distractor."]],
            ["Beta", ["Beta is a band.", " It formed in 1980."]],
        ],
        "type": "comparison",
        "level": "easy",
    },
    {
        "_id": "h2",
        "question": "Empty answer kept?",
        "answer": "",
        "supporting_facts": [],
        "context": [],
        "type": "bridge",
        "level": "hard",
    },
]


def _hf(rec: dict) -> dict:
    """The Hugging Face ``hotpot_qa`` layout of an original record."""
    return {
        "id": rec["_id"],
        "question": rec["question"],
        "answer": rec["answer"],
        "type": rec["type"],
        "level": rec["level"],
        "supporting_facts": {
            "title": [t for t, _ in rec["supporting_facts"]],
            "sent_id": [i for _, i in rec["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]},
    }


def _strip_source(exs: list[Example]) -> list[dict]:
    out = []
    for e in exs:
        d = e.to_dict()
        d["meta"].pop("source_file")
        out.append(d)
    return out


def test_hotpotqa_both_layouts_json_and_jsonl_agree(tmp_path):
    orig = tmp_path / "hotpot_dev.json"
    orig.write_text(json.dumps(_HOTPOT_ORIGINAL))
    hf_jsonl = _jsonl(tmp_path / "hotpot_hf_dev.jsonl", [_hf(r) for r in _HOTPOT_ORIGINAL])
    hf_list = tmp_path / "hotpot_hf_list_dev.json"
    hf_list.write_text(json.dumps([_hf(r) for r in _HOTPOT_ORIGINAL]))

    a = load_hotpotqa(orig)
    assert _strip_source(a) == _strip_source(load_hotpotqa(hf_jsonl)) == _strip_source(load_hotpotqa(hf_list))
    h1, h2 = a
    assert h1.supporting_titles == ["Alpha (band)", "Beta"]
    assert h1.meta["supporting_facts"] == [["Alpha (band)", 0], ["Beta", 1], ["Alpha (band)", 1]]
    assert h1.meta["contexts"][0] == {
        "title": "Alpha (band)",
        "text": "Alpha is a band. It formed in 1970.",
        "supporting": True,
    }
    assert h1.meta["contexts"][1]["supporting"] is False
    assert (h1.hops, h1.qtype, h1.meta["level"], h1.split) == (2, "comparison", "easy", "dev")
    assert h2.answers == []  # kept, with no gold answer
    assert load_dataset(hf_jsonl)[0].dataset == "hotpotqa"  # sniffed
    assert [e.id for e in load_hotpotqa(orig, limit=1)] == ["h1"]
    assert load_hotpotqa(orig, split="train")[0].split == "train"


def test_flashrag_packaging_of_hotpotqa_uses_metadata(tmp_path):
    rec = _hf(_HOTPOT_ORIGINAL[0])
    packed = {
        "id": rec["id"],
        "question": rec["question"],
        "golden_answers": ["Alpha", "alpha", "Alpha band"],
        "metadata": {k: rec[k] for k in ("type", "level", "supporting_facts", "context")},
    }
    path = _jsonl(tmp_path / "dev.jsonl", [packed])
    for ex in (load_hotpotqa(path)[0], load_flashrag_dataset(path)[0]):
        assert ex.dataset == "hotpotqa"
        assert ex.answers == ["Alpha", "Alpha band"]  # deduplicated, case-insensitively
        assert ex.supporting_titles == ["Alpha (band)", "Beta"]
    plain = _jsonl(
        tmp_path / "nq_test.jsonl", [{"id": "q", "question": "Q?", "golden_answers": [], "metadata": {"x": 1}}]
    )
    ex = load_flashrag_dataset(plain)[0]
    assert (ex.dataset, ex.split, ex.answers, ex.meta["metadata"]) == ("flashrag", "test", [], {"x": 1})


def test_2wiki_aliases_and_evidence_ids(tmp_path):
    rec = {
        "_id": "w1",
        "type": "inference",
        "question": "Who is the maternal grandfather of X?",
        "answer": "Henry I",
        "answer_aliases": ["Henry the First", "henry i"],
        "supporting_facts": [["X", 0], ["Y", 0]],
        "context": [["X", ["X's mother is Y."]], ["Y", ["Y's father is Henry I."]]],
        "evidences": [["X", "mother", "Y"]],
        "evidences_id": [["Q1", "P25", "Q2"]],
    }
    rec2 = {**rec, "_id": "w2", "evidences": [["X", "mother", "Y"], ["Y", "father", "Henry I"]], "evidences_id": []}
    path = _jsonl(tmp_path / "2wiki_dev.jsonl", [rec, rec2])
    ex = load_2wiki(path)[0]
    kg = load_2wiki_kg(path)  # the shared triple appears once, with the ids of its first occurrence
    assert [(t.head, t.relation, t.tail, t.head_id) for t in kg] == [
        ("X", "mother", "Y", "Q1"),
        ("Y", "father", "Henry I", ""),
    ]
    assert ex.answers == ["Henry I", "Henry the First"]
    assert ex.hops == 2  # one evidence, but at least 2
    assert ex.kg_path == [
        {"head": "X", "relation": "mother", "tail": "Y", "head_id": "Q1", "relation_id": "P25", "tail_id": "Q2"}
    ]
    assert ex.meta["contexts"][0]["text"] == "X's mother is Y."


def test_musique_id_prefix_cross_check_warns(tmp_path):
    rec = {
        "id": "3hop1__1_2_3",
        "question": "Q?",
        "answer": "A",
        "answer_aliases": ["A"],
        "answerable": True,
        "paragraphs": [
            {"idx": 0, "title": "T0", "paragraph_text": "p0", "is_supporting": True},
            {"idx": 1, "title": "T1", "paragraph_text": "p1", "is_supporting": True},
        ],
        "question_decomposition": [
            {"id": 1, "question": "q1", "answer": "a1", "paragraph_support_idx": 1},
            {"id": 2, "question": "#1 >> r", "answer": "A", "paragraph_support_idx": 0},
        ],
    }
    with pytest.warns(UserWarning, match="id prefix disagrees"):
        ex = load_musique(_jsonl(tmp_path / "musique_dev.jsonl", [rec]))[0]
    assert (ex.hops, ex.meta["id_hops"], ex.answers) == (2, 3, ["A"])
    assert ex.supporting_titles == ["T1", "T0"]  # hop order, not paragraph order
    corpus_from_contexts([ex])
    assert ex.supporting_ids == [context_passage_id("T1", "p1"), context_passage_id("T0", "p0")]


def test_corpus_from_raw_records_and_examples_agree(tmp_path):
    path = tmp_path / "hotpot_dev.json"
    path.write_text(json.dumps(_HOTPOT_ORIGINAL))
    from_raw = corpus_from_contexts(_HOTPOT_ORIGINAL)
    exs = load_hotpotqa(path)
    from_ex = corpus_from_contexts(exs)
    assert from_raw == from_ex and len(from_ex) == 3
    assert exs[0].supporting_ids == [
        context_passage_id("Alpha (band)", "Alpha is a band. It formed in 1970."),
        context_passage_id("Beta", "Beta is a band. It formed in 1980."),
    ]
    assert exs[1].supporting_ids == []
    with pytest.raises(TypeError, match="not an Example"):
        corpus_from_contexts(["nope"])


def test_dedup_answers_and_contents_parsing():
    assert dedup_answers(None, [], "") == []
    assert dedup_answers("A  b", ["a b", "c"]) == ["A  b", "c"]
    assert parse_flashrag_contents("no newline here") == ("", "no newline here")
    assert parse_flashrag_contents('"Quoted"\n  text  ') == ("Quoted", "text")
    assert detect_layout({"id": "0", "contents": "x"}) == "corpus"


# ----------------------------------------------------------------------------- bad input


def test_corpus_line_without_contents(tmp_path):
    path = _jsonl(
        tmp_path / "corpus.jsonl",
        [{"id": "0", "contents": '"A"\na'}, {"id": "1", "text": "b"}, {"id": "2", "contents": "C\nc"}],
    )
    with pytest.raises(ValueError, match=re.escape(f"{path}:2") + ".*contents"):
        load_flashrag_corpus(path)
    with pytest.warns(UserWarning, match=r"skipped 1 bad corpus line"):
        passages = load_flashrag_corpus(path, skip_bad=True)
    assert [(p.id, p.title, p.text) for p in passages] == [("0", "A", "a"), ("2", "C", "c")]


LOADERS = [
    load_hotpotqa,
    load_2wiki,
    load_musique,
    load_bamboogle,
    load_flashrag_dataset,
    load_flashrag_corpus,
    load_2wiki_kg,
    load_dataset,
]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda f: f.__name__)
def test_missing_file_is_named(loader, tmp_path):
    missing = tmp_path / "nowhere" / "dev.jsonl"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        loader(missing)


@pytest.mark.parametrize("loader", [load_hotpotqa, load_musique, load_dataset], ids=lambda f: f.__name__)
def test_broken_json_is_named(loader, tmp_path):
    jsonl = tmp_path / "broken_dev.jsonl"
    jsonl.write_text('{"id": "a", "question": "q", "golden_answers": []}\n{"id": "b", "question": \n')
    with pytest.raises(ValueError, match=re.escape(f"{jsonl}:2") + ".*not valid JSON"):
        loader(jsonl)
    array = tmp_path / "broken_dev.json"
    array.write_text('[{"_id": "a", "question": "q"}, {"_id": ')
    with pytest.raises(ValueError, match=re.escape(str(array)) + ".*not valid JSON"):
        loader(array)


def test_record_without_question_is_named(tmp_path):
    path = _jsonl(tmp_path / "musique_dev.jsonl", [{"id": "2hop__1", "paragraphs": []}])
    with pytest.raises(ValueError, match=re.escape(f"{path}:1") + ".*question"):
        load_musique(path)


def test_unknown_dataset_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown dataset 'hotpot-qa-xl'") as err:
        load_dataset("hotpot-qa-xl")
    assert all(name in str(err.value) for name in DATASETS)
    with pytest.raises(ValueError, match="valid names"):
        load_dataset("nope", path="x.jsonl")
    with pytest.raises(ValueError, match="format"):
        load_dataset("flashrag")


def test_load_dataset_finds_flashrag_folder_layout(tmp_path):
    (tmp_path / "musique").mkdir()
    rec = {
        "id": "2hop__9_9",
        "question": "Q?",
        "golden_answers": ["A"],
        "metadata": {"question_decomposition": [{"question": "a", "answer": "b", "paragraph_support_idx": None}] * 2},
    }
    _jsonl(tmp_path / "musique" / "dev.jsonl", [rec])
    _jsonl(tmp_path / "musique" / "train.jsonl", [{**rec, "id": "2hop__8_8"}])
    exs = load_dataset("musique", split="dev", data_dir=tmp_path)
    assert [(e.id, e.split, e.hops, e.answers) for e in exs] == [("2hop__9_9", "dev", 2, ["A"])]
    assert load_dataset("musique", split="train", data_dir=tmp_path)[0].id == "2hop__8_8"


def test_corpus_file_given_as_dataset(tmp_path):
    path = _jsonl(tmp_path / "wiki.jsonl", [{"id": "0", "contents": "T\nx"}])
    with pytest.raises(ValueError, match="passage corpus.*--corpus FILE") as err:
        load_dataset(path)
    assert "load_flashrag_corpus" not in str(err.value)  # the CLI flag, not a Python function


def test_questions_that_share_an_id_are_refused_before_any_work(tmp_path):
    """Three records sharing ``"id": "q1"`` crashed an eval after all its rollouts (a TypeError in the outcome
    table) and wrote no run: the loader names the id and the file instead."""
    import json

    from workbench.apps.cli import main
    from workbench.data.loaders import load_dataset

    p = tmp_path / "dup.jsonl"
    p.write_text("".join(json.dumps({"id": i, "question": f"Who wrote play {k}?", "golden_answers": ["x"]}) + "\n"
                         for k, i in enumerate(["q1", "q1", "q2", "q1", "q2"])))
    with pytest.raises(ValueError, match=r"dup.jsonl: 3 questions share the id 'q1' \(and 1 other shared ids\); give"):
        load_dataset(p)
    assert main(["eval", "--method", "direct", "--dataset", str(p), "--out", str(tmp_path / "runs")]) == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
