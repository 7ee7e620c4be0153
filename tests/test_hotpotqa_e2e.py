"""The search agent end to end on real HotpotQA questions (the sample in data/samples), with the real default
model and a BM25 corpus built from the questions' own context paragraphs."""

from __future__ import annotations

import pytest

from workbench.data.loaders import corpus_from_contexts, load_hotpotqa
from workbench.eval.runner import run_eval
from workbench.rewards.metrics import normalize_answer
from workbench.tools.bm25 import BM25Search

SAMPLE = "hotpotqa_dev_distractor.sample.json"


pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared


@pytest.fixture(scope="module")
def hotpot(samples):
    path = samples / SAMPLE
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return path


def _norm(titles) -> set[str]:
    return {normalize_answer(t) for t in titles}


def test_bm25_over_the_contexts_finds_supporting_paragraphs(hotpot):
    """Retrieval alone (no model): the question as the query finds a supporting paragraph in the top 5."""
    examples = load_hotpotqa(hotpot)
    corpus = corpus_from_contexts(examples)
    search = BM25Search(corpus)
    found = sum(bool(_norm(h.title for h in search(e.question, 5)) & _norm(e.supporting_titles)) for e in examples)
    assert len(examples) == 20 and found >= 15


def test_search_agent_end_to_end_on_hotpotqa(hotpot, hf_backend, tmp_path):
    run = run_eval("search_r1,vanilla_rag", hotpot, hf_backend, limit=3, max_new_tokens=64, max_turns=2,
                   out=tmp_path, progress=False, log=None)
    all_examples = load_hotpotqa(hotpot)
    corpus = corpus_from_contexts(all_examples)
    corpus_titles = {p.title for p in corpus}
    corpus_ids = {p.id for p in corpus}

    cfg, m = run.config, run.metrics()
    assert cfg["dataset"] == "hotpotqa" and cfg["corpus"] == "contexts" and cfg["n_passages"] == len(corpus)
    examples = {e.id: e for e in run.examples()}
    assert len(examples) == 3
    for e in examples.values():  # supporting ids point into the corpus that was searched
        assert len(e.supporting_ids) == 2 and set(e.supporting_ids) <= corpus_ids
    for s in m["methods"].values():
        assert s["n"] == 3 and list(s["by_hops"]) == ["2"]

    overlap: dict[str, int] = {"search_r1": 0, "vanilla_rag": 0}
    agent_searches = 0
    for t in run.trajectories():
        calls = [c for c in t.tool_calls if c.name == "search"]
        for c in calls:
            assert c.ok, c.error
            assert {h.title for h in c.hits()} <= corpus_titles  # hits are passages of the corpus
        retrieved = _norm(h.title for c in calls for h in c.hits())
        overlap[t.meta["method"]] += bool(retrieved & _norm(examples[t.example_id].supporting_titles))
        if t.meta["method"] == "search_r1":
            agent_searches += t.n_searches
        else:  # vanilla RAG retrieves once, top 5, with the question
            assert len(calls) == 1 and len(calls[0].hits()) == 5
    assert agent_searches >= 1, "the agent never searched"
    assert overlap["vanilla_rag"] >= 2 and overlap["search_r1"] + overlap["vanilla_rag"] >= 3, overlap

    # the features table (what the reward playground reads) agrees with the trajectories
    import pandas as pd

    feats = pd.read_parquet(run.path / "features.parquet")
    got = feats.groupby("protocol")["recall_title"].apply(lambda r: int((r > 0).sum())).to_dict()
    assert got == overlap
    assert m["methods"]["search_r1"]["n_searches"] == agent_searches / 3
