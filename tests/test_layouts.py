"""Benchmark files as researchers have them load without conversion: one fixture per public
layout in ``tests/fixtures/`` (written from each layout's documentation), loaded through
``workbench eval``; corpora in every layout; the corpus settings (pooled / per-question / file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.apps.cli import main
from workbench.data.loaders import load_corpus, load_dataset
from workbench.eval.config import EvalConfig
from workbench.eval.runner import load_eval_data, run_eval
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.storage.runs import list_runs

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared

# file, dataset, ids, answers of the first two, supporting titles of the first, contexts of the first
LAYOUTS = {
    "r1_searcher": ("r1searcher_hotpotqa_eval.jsonl", "qa", ["0", "1"], [["yes"], ["Chief of Protocol"]], [], 0),
    "search_o1_no_id": (
        "searcho1_bamboogle.json",
        "qa",
        ["1", "2"],
        [["james madison"], ["Titan IIIE", "Titan 3E"]],
        [],
        0,
    ),
    "other_id_names": ("other_ids_test.jsonl", "qa", ["t-17", "q-4"], [["Jules Verne"], ["Ulm"]], [], 0),
    "hf_hotpotqa_no_id": (
        "hf_hotpot_qa_validation.jsonl",
        "hotpotqa",
        ["1", "2"],
        [["yes"], ["Chief of Protocol"]],
        ["Scott Derrickson", "Ed Wood"],
        3,
    ),
    "hf_2wiki_parquet": (
        "hf_2wikimultihopqa_validation.parquet",
        "2wiki",
        ["8813f87c0bdd11eba7f7acde48001122", "a5c4ef3c0bdd11eba7f7acde48001122"],
        [["Jules Verne"], ["American"]],
        ["Arthur Conan Doyle", "Jules Verne"],
        3,
    ),
    "hf_musique_parquet": (
        "hf_musique_validation.parquet",
        "musique",
        ["2hop__3307_8988", "2hop__51_77"],
        [["1833", "in 1833"], ["Richard Wallace"]],
        ["Albert Einstein", "University of Zurich"],
        3,
    ),
    "ircot_processed": (
        "ircot/2wikimultihopqa/dev_subsampled.jsonl",
        "2wiki",
        ["028eaef60bdb11eba7f7acde48001122", "4f3c29a20bdb11eba7f7acde48001122"],
        [["8 February 1828"], ["50", "more than 50"]],
        ["Twenty Thousand Leagues Under the Seas", "Jules Verne"],
        3,
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_loads_through_the_eval_cli(layout, tmp_path, capsys):
    fname, dataset, ids, answers, sup, n_ctx = LAYOUTS[layout]
    path = FIXTURES / fname
    data = load_eval_data(EvalConfig(methods="direct", dataset=str(path), limit=2))
    assert [e.id for e in data.examples] == ids
    assert [e.answers for e in data.examples] == answers
    assert data.dataset == dataset
    first = data.examples[0]
    assert first.supporting_titles == sup
    assert len(first.meta.get("contexts", [])) == n_ctx
    if n_ctx:  # the pooled corpus holds the paragraphs, and the gold ids point into it
        assert data.setting == "pooled" and len(first.supporting_ids) == len(sup)
        assert set(first.supporting_ids) <= {p.id for p in data.passages}

    rc = main(
        [
            "eval",
            "--dataset",
            str(path),
            "--method",
            "direct",
            "--limit",
            "2",
            "--max-new-tokens",
            "2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    (run,) = list_runs(tmp_path)
    assert run.config["dataset"] == dataset and run.config["corpus_setting"] == "pooled"
    written = [json.loads(line) for line in (run.path / "examples.jsonl").read_text().splitlines()]
    assert [w["id"] for w in written] == ids and [w["answers"] for w in written] == answers


def test_format_forces_a_layout_and_errors_list_the_layouts_tried(tmp_path, capsys):
    odd = tmp_path / "odd_dev.jsonl"
    odd.write_text(json.dumps({"uid": 3, "query": "who?", "label": "x"}) + "\n")
    err = _err(capsys, ["eval", "--method", "direct", "--dataset", str(odd)])
    for name in ("ircot", "musique", "2wiki", "hotpotqa", "flashrag", "qa"):
        assert f"{name} lacks" in err
    assert "--format" in err and "load_" not in err
    # a MuSiQue-shaped record read as plain QA: no paragraphs kept
    exs = load_dataset(FIXTURES / "hf_musique_validation.parquet", format="qa")
    assert exs[0].answers == ["1833", "in 1833"] and "contexts" not in exs[0].meta
    with pytest.raises(ValueError, match="unknown --format 'csv'"):
        EvalConfig(methods="direct", format="csv")


@pytest.mark.parametrize(
    "fname", ["hipporag_musique_corpus.json", "title_sentences_corpus.json", "flashrag_corpus.jsonl"]
)
def test_a_corpus_given_as_dataset_says_use_corpus(fname, capsys):
    err = _err(capsys, ["eval", "--method", "direct", "--dataset", str(FIXTURES / fname)])
    assert "--corpus" in err and "load_flashrag_corpus" not in err and "skip_bad" not in err


def test_corpus_layouts():
    flash = load_corpus(FIXTURES / "flashrag_corpus.jsonl")
    assert [(p.id, p.title) for p in flash] == [("101", "Jules Verne"), ("102", "Ulm")]
    hippo = load_corpus(FIXTURES / "hipporag_musique_corpus.json")
    assert len(hippo) == 6 and hippo[1].title == "Albert Einstein" and hippo[1].text.startswith("In 1905")
    sents = load_corpus(FIXTURES / "title_sentences_corpus.json")
    assert [p.title for p in sents] == ["Jules Verne", "H. G. Wells", "Ulm"]
    assert (
        sents[0].text == "Jules Gabriel Verne was a French novelist. He wrote Twenty Thousand Leagues Under the Seas."
    )
    with pytest.raises(ValueError, match="--dataset"):
        load_corpus(FIXTURES / "other_ids_test.jsonl")


def test_hipporag_corpus_ids_match_the_questions_gold_paragraphs():
    """The HippoRAG corpus holds the same paragraphs as the MuSiQue contexts: the gold ids are found in it."""
    data = load_eval_data(
        EvalConfig(
            methods="search_r1",
            dataset=str(FIXTURES / "hf_musique_validation.parquet"),
            corpus=str(FIXTURES / "hipporag_musique_corpus.json"),
        )
    )
    assert data.setting == "file" and len(data.passages) == 6
    ids = {p.id for p in data.passages}
    from workbench.data.loaders import corpus_from_contexts

    corpus_from_contexts(data.examples)
    assert all(set(e.supporting_ids) <= ids for e in data.examples)


def _observations(run, example_id: str) -> str:
    import pandas as pd

    df = pd.read_parquet(run.path / "trajectories.parquet")
    return json.dumps(df[df["example_id"] == example_id].iloc[0].to_dict(), default=str)


def test_per_question_and_pooled_corpus_settings(tmp_path, tokenizer):
    path = FIXTURES / "hf_musique_validation.parquet"
    # every question searches "Corliss Archer", then answers
    backend = ScriptedBackend(tokenizer, ["<search> Corliss Archer sitcom </search>", "<answer> 1833 </answer>"])
    run = run_eval("search_r1", path, backend, out=tmp_path / "runs", corpus="per-question", progress=False, log=None)
    assert run.config["corpus_setting"] == "per-question" and run.config["passages_per_question"] == 3.0
    assert run.config["eval"]["corpus"] == "per-question"
    # the Einstein question sees only its own three paragraphs, never the sitcom one...
    assert "television sitcom" not in _observations(run, "2hop__3307_8988")
    assert "television sitcom" in _observations(run, "2hop__51_77")  # ...which the second question has
    assert run.metrics()["methods"]["search_r1"]["n"] == 2

    pooled = run_eval("search_r1", path, backend, out=tmp_path / "runs", corpus="pooled", progress=False, log=None)
    assert pooled.config["corpus_setting"] == "pooled" and pooled.config["n_passages"] == 6
    assert "television sitcom" in _observations(pooled, "2hop__3307_8988")  # one index over all paragraphs

    with pytest.raises(ValueError, match="per-question needs a benchmark file"):
        run_eval("search_r1", "world", backend, out=tmp_path / "runs", corpus="per-question", log=None)
    with pytest.raises(ValueError, match="no paragraphs of their own"):
        run_eval(
            "search_r1",
            FIXTURES / "other_ids_test.jsonl",
            backend,
            out=tmp_path / "runs",
            corpus="per-question",
            log=None,
        )


def test_dashboard_runs_table_shows_the_corpus_setting(tmp_path, tokenizer):
    from workbench.dashboard.queries import runs_table

    backend = ScriptedBackend(tokenizer, ["<answer> yes </answer>"])
    run_eval(
        "direct",
        FIXTURES / "hf_hotpot_qa_validation.jsonl",
        backend,
        out=tmp_path,
        corpus="per-question",
        progress=False,
        log=None,
    )
    assert runs_table(tmp_path)["corpus_setting"].tolist() == ["per-question"]


def _err(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err
