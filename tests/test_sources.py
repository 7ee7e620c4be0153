"""SourceRegistry: corpus-backed general/news/academic sources, aliases, user callables."""

from __future__ import annotations

import threading
import time

import pytest

from workbench.core.types import Hit, Passage
from workbench.tools.dag import run_plan
from workbench.tools.sources import SourceRegistry

PASSAGES = [
    Passage("w1", "Paris", "Paris is the capital and largest city of France."),
    Passage("w2", "Berlin", "Berlin is the capital of Germany."),
    Passage("n1", "Coke prices rise", "Metallurgical coke rose 11.1% in early October 2024.", source="news"),
    Passage("n2", "EU AI Act adopted", "The EU AI Act was finally adopted on 21 May 2024.", source="news"),
    Passage("a1", "Attention is all you need", "The transformer architecture relies on attention.", source="academic"),
    Passage("a2", "BM25 revisited", "Okapi BM25 remains a strong lexical retrieval baseline.", source="academic"),
]


@pytest.fixture(scope="module")
def corpus_registry() -> SourceRegistry:
    return SourceRegistry.from_passages(PASSAGES)


def test_from_passages_builds_three_sources_over_the_right_subsets(corpus_registry):
    reg = corpus_registry
    assert reg.names() == ["academic", "general", "news"]
    assert [h.id for h in reg.search("news", "coke price October", k=3)] == ["n1"]
    assert {h.source for h in reg.search("academic", "attention transformer retrieval BM25", k=5)} == {"academic"}
    # general covers every passage, wiki ones included; wiki passages are in no other source
    assert reg.search("general", "capital of Germany", k=1)[0].id == "w2"
    assert reg.search("general", "EU AI Act adopted", k=1)[0].id == "n2"
    assert all(h.source != "wiki" for s in ("news", "academic") for h in reg.search(s, "capital of France Germany", 5))


def test_searcher_factory_gets_each_subset():
    seen: dict[int, list[str]] = {}

    def factory(passages):
        ids = [p.id for p in passages]
        seen[len(seen)] = ids
        return lambda q, k: [Hit(ids[0], "t", q)]

    reg = SourceRegistry.from_passages(PASSAGES, searcher=factory, k_default=2)
    assert sorted(map(sorted, seen.values())) == [["a1", "a2"], ["a1", "a2", "n1", "n2", "w1", "w2"], ["n1", "n2"]]
    assert reg.search("academic", "q")[0].id == "a1"
    assert reg.k_default == 2


def test_missing_source_is_skipped_and_described():
    reg = SourceRegistry.from_passages([p for p in PASSAGES if p.source != "academic"])
    assert reg.names() == ["general", "news"]
    assert reg.resolve("Academic") is None
    text = reg.describe()
    assert "academic: not available (no passages with source 'academic')" in text
    assert "- news" in text and "- general (also: web, wiki" in text
    assert "not available (the corpus is empty)" in SourceRegistry.from_passages([]).describe()


@pytest.mark.parametrize(
    "written, canonical",
    [
        ("General", "general"),
        ("Web", "general"),
        ("WIKI", "general"),
        ("web search", "general"),
        ("General_Search", "general"),
        ("News", "news"),
        ("  news search tool ", "news"),
        ("GNews", "news"),
        ("Academic", "academic"),
        ("arXiv", "academic"),
        ("Scholar API", "academic"),
        ("Fax", None),
        ("", None),
        ("search", None),
    ],
)
def test_aliases_resolve(corpus_registry, written, canonical):
    assert corpus_registry.resolve(written) == canonical
    assert (written in corpus_registry) == (canonical is not None)


def test_user_callable_is_registered_and_used():
    calls = []

    def patents(query: str, k: int) -> list[Hit]:
        calls.append((query, k))
        return [Hit(f"p{i}", f"Patent {i}", f"about {query}", source="patents") for i in range(k)]

    reg = SourceRegistry(k_default=2)
    reg.register("Patents", patents, aliases=["USPTO", "patent office"], description="patent filings")
    assert reg.resolve("uspto") == reg.resolve("Patent Office Search") == "patents"
    assert [h.id for h in reg.search("USPTO", "solid-state battery")] == ["p0", "p1"]
    assert calls == [("solid-state battery", 2)]
    assert "- patents (also: uspto, patent office): patent filings" in reg.describe()
    plan, res = run_plan("A: solid-state battery (Patents)", reg, k=1)
    assert plan.valid and res["A"].hits[0].text == "about solid-state battery"
    assert calls[-1] == ("solid-state battery", 1)


def test_dict_results_become_hits_and_junk_is_a_type_error():
    reg = SourceRegistry()
    reg.register("dicts", lambda q, k: [{"id": "1", "title": "T", "text": q, "extra": 1}])
    reg.register("junk", lambda q, k: [42])
    assert reg.search("dicts", "x", 1) == [Hit("1", "T", "x")]
    with pytest.raises(TypeError, match="must return Hit"):
        reg.search("junk", "x", 1)


def test_register_conflicts_are_loud():
    reg = SourceRegistry()
    reg.register("news", lambda q, k: [], aliases=["gnews"])
    with pytest.raises(ValueError, match="replace=True"):
        reg.register("News", lambda q, k: [])
    with pytest.raises(ValueError, match="'gnews' already names source 'news'"):
        reg.register("other", lambda q, k: [], aliases=["GNews"])
    with pytest.raises(TypeError, match="callable"):
        reg.register("bad", "not a function")  # type: ignore[arg-type]
    reg.register("news", lambda q, k: [Hit("2", "t", q)], replace=True)
    assert reg.search("news", "x")[0].id == "2"
    assert reg.resolve("gnews") is None  # the old source's aliases went with it
    with pytest.raises(KeyError, match="available: news"):
        reg.search("fax", "x")


def test_raising_source_is_a_recorded_error_in_the_dag_executor():
    reg = SourceRegistry()

    def broken(query, k):
        raise ConnectionError("GNews quota exceeded")

    reg.register("news", broken)
    reg.register("general", lambda q, k: [Hit("g1", "General", q)])
    reg.register("junk", lambda q, k: ["not a hit"])
    plan, res = run_plan("A: coke price (News)\nB: coke price (General)\nC: x (Junk)\nA -> B", reg)
    assert plan.valid
    assert res["A"].error == "source 'news' raised ConnectionError: GNews quota exceeded"
    assert res["A"].hits == [] and not res["A"].ok
    assert res["B"].ok and res["B"].hits[0].id == "g1" and res["B"].parents == ["A"]
    assert "TypeError" in res["C"].error
    text = res.render()
    assert "Node A (news) search failed: source 'news' raised ConnectionError: GNews quota exceeded" in text
    assert "Node B (general) Search results:\nResult 1: Title: General Abstract: coke price" in text


def test_serialized_source_never_runs_two_calls_at_once():
    active, peak = [0], [0]
    lock = threading.Lock()

    def slow(query, k):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return [Hit(query, "t", query)]

    reg = SourceRegistry()
    reg.register("news", slow, serialize=True)
    plan, res = run_plan("\n".join(f"N{i}: q{i} (News)" for i in range(4)), reg, max_workers=4)
    assert res.levels == [["N0", "N1", "N2", "N3"]] and all(r.ok for r in res.records)
    assert peak[0] == 1
