"""Dense search: real-encoder retrieval, index reuse / rebuild, interrupted builds, e5 prefixes, bad queries."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from workbench.core.types import Passage
from workbench.tools.dense import DenseSearch, Encoder, ExactDenseSearch, chroma_client, clean_query, is_e5

CORPUS = [
    Passage("p-paris", "Paris", "Paris is the capital and most populous city of France, on the Seine."),
    Passage(
        "p-everest", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."
    ),
    Passage(
        "p-photo", "Photosynthesis", "Plants use sunlight, water and carbon dioxide to produce glucose and oxygen."
    ),
    Passage("p-shakes", "William Shakespeare", "Shakespeare was an English playwright who wrote Hamlet and Macbeth."),
    Passage(
        "p-python",
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum.",
    ),
    Passage("p-insulin", "Insulin", "Insulin is a hormone made by the pancreas that regulates blood sugar levels."),
    Passage(
        "p-titanic", "RMS Titanic", "The Titanic was a British ocean liner that sank in 1912 after striking an iceberg."
    ),
    Passage(
        "p-bach",
        "Johann Sebastian Bach",
        "Bach was a German composer of the Baroque period, known for the Brandenburg Concertos.",
        source="news",
    ),
]


class BagOfWords:
    """A tiny deterministic encoder: hashed word counts. Records every text it is asked to encode."""

    def __init__(self, name: str = "fake-bow", dim: int = 64, fail_on_call: int | None = None):
        self.name, self.dim, self.fail_on_call = name, dim, fail_on_call
        self.seen: list[str] = []
        self.calls = 0

    def encode(self, texts, **kwargs):
        self.calls += 1
        if self.fail_on_call is not None and self.calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated interrupt mid-build")
        self.seen.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(".", " ").replace(",", " ").split():
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
        return out

    def get_embedding_dimension(self):
        return self.dim


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))


def _fake(**kw) -> Encoder:
    return Encoder(BagOfWords(**kw), query_prefix="Q| ", passage_prefix="P| ")


def _passage_texts(enc: Encoder) -> list[str]:
    return [t for t in enc.model.seen if t.startswith("P| ")]


@pytest.mark.slow
def test_real_encoder_finds_paraphrases_top1():
    queries = {
        "Which city is the French capital?": "p-paris",
        "tallest peak on the planet": "p-everest",
        "how do green plants turn light into sugar": "p-photo",
        "who is the author of the play about the Danish prince": "p-shakes",
        "which coding language did van Rossum design": "p-python",
        "what substance controls glucose in the blood": "p-insulin",
        "ship that went down after hitting ice": "p-titanic",
    }
    dense = DenseSearch(CORPUS, progress=False)
    exact = ExactDenseSearch(CORPUS, encoder=dense.encoder, progress=False)
    # batched: on a busy 2-core CPU every separate encode call costs up to ~0.5 s
    got, ref = dense.search_batch(list(queries), k=3), exact.search_batch(list(queries), k=3)
    for (q, want), hits, ex in zip(queries.items(), got, ref):
        assert hits[0].id == want, (q, [h.id for h in hits])
        assert [h.id for h in ex] == [h.id for h in hits]
        assert hits[0].score == pytest.approx(ex[0].score, abs=1e-4)
        assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0
    bach = dense("Baroque composer of the Brandenburg Concertos", k=1)[0]
    assert (bach.id, bach.title, bach.source) == ("p-bach", "Johann Sebastian Bach", "news")  # from the passages map
    bad = ["", "   ", "x" * 10_000, "a\x00b\x07c\x1b[31m", "lone \ud800 surrogate", None]
    results = dense.search_batch(bad, k=2)  # never raises
    assert [len(r) for r in results] == [0, 0, 2, 2, 2, 0]


def test_index_is_reused_without_re_encoding(tmp_path):
    enc = _fake()
    first = DenseSearch(CORPUS, encoder=enc, progress=False, batch_size=3)
    assert first.built and len(_passage_texts(enc)) == len(CORPUS)
    enc2 = _fake()  # same identity, fresh counter
    second = DenseSearch(CORPUS, encoder=enc2, progress=False, batch_size=3)
    assert not second.built
    assert _passage_texts(enc2) == []
    assert second.collection_name == first.collection_name
    assert [h.id for h in second.search("capital of France", 3)] == [h.id for h in first.search("capital of France", 3)]
    assert second.search("capital of France", 1)[0].id == "p-paris"
    assert (tmp_path / "chroma").is_dir()  # default location: cache_dir()/"chroma"


def test_changed_corpus_or_encoder_gets_a_new_collection():
    base = DenseSearch(CORPUS, encoder=_fake(), progress=False)
    changed = CORPUS[:-1] + [Passage("p-bach", "Johann Sebastian Bach", "Bach wrote the Goldberg Variations.")]
    other = DenseSearch(changed, encoder=_fake(), progress=False)
    assert other.built and other.collection_name != base.collection_name
    assert other.search("Goldberg Variations", 1)[0].text == "Bach wrote the Goldberg Variations."
    renamed = DenseSearch([Passage("x" + p.id, p.title, p.text) for p in CORPUS], encoder=_fake(), progress=False)
    assert renamed.collection_name not in (base.collection_name, other.collection_name)
    other_encoder = DenseSearch(CORPUS, encoder=Encoder(BagOfWords(name="fake-bow-2")), progress=False)
    assert other_encoder.collection_name != base.collection_name
    tuned = DenseSearch(CORPUS, encoder=_fake(), progress=False, hnsw={"ef_search": 50})
    assert tuned.collection_name != base.collection_name
    assert tuned._collection.configuration_json["hnsw"]["ef_search"] == 50
    # the old index is still there and still reused
    assert not DenseSearch(CORPUS, encoder=_fake(), progress=False).built


def test_interrupted_build_is_not_reused_and_rebuilds_completely(tmp_path):
    broken = _fake(fail_on_call=3)  # batches of 3: the third batch never arrives
    with pytest.raises(KeyboardInterrupt):
        DenseSearch(CORPUS, encoder=broken, progress=False, batch_size=3)
    assert len(_passage_texts(broken)) == 6
    client = chroma_client(str((tmp_path / "chroma").resolve()))
    partial = client.list_collections()
    assert len(partial) == 1 and partial[0].metadata["complete"] is False and partial[0].count() == 6

    enc = _fake()

    rebuilt = DenseSearch(CORPUS, encoder=enc, progress=False, batch_size=3)
    assert rebuilt.built
    assert sorted(_passage_texts(enc)) == sorted(
        "P| " + p.title + "\n" + p.text for p in CORPUS
    )  # everything re-encoded
    col = client.get_collection(rebuilt.collection_name)
    assert col.metadata["complete"] is True and col.count() == len(CORPUS)
    assert rebuilt.search("ocean liner iceberg", 1)[0].id == "p-titanic"
    assert not DenseSearch(CORPUS, encoder=_fake(), progress=False, batch_size=3).built


def test_named_collection_with_other_content_is_rebuilt(tmp_path):
    a = DenseSearch(CORPUS[:4], encoder=_fake(), collection="my-index", persist_dir=tmp_path / "db", progress=False)
    b = DenseSearch(CORPUS[4:], encoder=_fake(), collection="my-index", persist_dir=tmp_path / "db", progress=False)
    assert a.built and b.built and b.collection_name == "my-index"
    assert {h.id for h in b.search("Python language", 8)} == {p.id for p in CORPUS[4:]}
    with pytest.raises(ValueError, match="invalid chroma collection name"):
        DenseSearch(CORPUS, encoder=_fake(), collection="x", progress=False)


@pytest.mark.parametrize("cls", [DenseSearch, ExactDenseSearch])
def test_e5_prefixes_reach_the_model(cls):
    model = BagOfWords(name="intfloat/e5-small-v2")
    search = cls(CORPUS, encoder=model, progress=False)
    passages = list(model.seen)
    assert len(passages) == len(CORPUS) and all(t.startswith("passage: ") for t in passages)
    search.search("capital of France", 1)
    assert model.seen[len(passages) :] == ["query: capital of France"]

    plain = BagOfWords(name="all-MiniLM-L6-v2")
    cls(CORPUS[:2], encoder=plain, progress=False).search("q", 1)
    assert plain.seen == ["Paris\n" + CORPUS[0].text, "Mount Everest\n" + CORPUS[1].text, "q"]


def test_e5_rule_from_names_without_loading():
    assert is_e5("intfloat/multilingual-e5-large") and is_e5("/models/e5_base") and not is_e5("bge5-small")
    enc = Encoder("intfloat/e5-base-v2")  # lazy: nothing is loaded here
    assert enc.prefixed(["a"], "query") == ["query: a"] and enc.prefixed(["a"], "passage") == ["passage: a"]
    assert Encoder("intfloat/e5-base-v2", query_prefix="").prefixed(["a"]) == ["a"]
    with pytest.raises(ValueError, match="kind"):
        enc.prefixed(["a"], "document")


@pytest.mark.parametrize("cls", [DenseSearch, ExactDenseSearch])
def test_bad_queries_never_raise(cls):
    enc = _fake()
    search = cls(CORPUS, encoder=enc, progress=False)
    assert search.search("", 5) == [] and search.search("  \n\t ", 5) == [] and search.search(None, 5) == []
    assert search.search("capital of France", 0) == []
    assert len(search.search("capital of France", 100)) == len(CORPUS)
    long_hits = search.search("capital of France " * 600, 3)  # ~10k characters
    assert long_hits[0].id == "p-paris"
    assert search.search("\x00capital\x01 of\x7f France\x1b", 1)[0].id == "p-paris"
    assert isinstance(search.search("surrogate \ud800 here", 2), list)
    batch = search.search_batch(["", "Hamlet playwright", None, "ocean liner iceberg"], k=1)
    assert [[h.id for h in hits] for hits in batch] == [[], ["p-shakes"], [], ["p-titanic"]]
    assert clean_query("a\x00b") == "a b"


def test_exact_and_chroma_agree_on_scores():
    enc = _fake()
    dense, exact = (
        DenseSearch(CORPUS, encoder=enc, progress=False),
        ExactDenseSearch(CORPUS, encoder=enc, progress=False),
    )
    for q in ["Hamlet Macbeth playwright", "blood sugar hormone", "German composer"]:
        d, e = dense.search(q, 4), exact.search(q, 4)
        assert [h.id for h in d][:1] == [h.id for h in e][:1]
        assert [h.score for h in d] == pytest.approx([h.score for h in e], abs=1e-4)
        assert e[0].score == pytest.approx(
            float(exact.embeddings[[p.id for p in CORPUS].index(e[0].id)] @ enc.encode([q])[0]), abs=1e-5
        )


def test_precomputed_embeddings_and_search_by_vector():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(len(CORPUS), 16)).astype(np.float32)
    exact = ExactDenseSearch(CORPUS, encoder=_fake(), embeddings=vecs, progress=False)
    dense = DenseSearch(CORPUS, encoder=_fake(), embeddings=vecs, progress=False)
    q = vecs[3:4] * 2.0  # unnormalized on purpose
    assert exact.search_by_vector(q, 1)[0][0].id == CORPUS[3].id
    assert dense.search_by_vector(q, 1)[0][0].id == CORPUS[3].id
    assert dense.search_by_vector(q, 1)[0][0].score == pytest.approx(1.0, abs=1e-5)
    other = DenseSearch(CORPUS, encoder=_fake(), embeddings=vecs[::-1].copy(), progress=False)
    assert other.collection_name != dense.collection_name  # the vectors are part of the key
    with pytest.raises(ValueError, match="rows"):
        ExactDenseSearch(CORPUS, encoder=_fake(), embeddings=vecs[:3])


def test_corpus_validation():
    with pytest.raises(ValueError, match="empty"):
        DenseSearch([], encoder=_fake())
    with pytest.raises(ValueError, match="duplicate passage id 'p-paris'"):
        ExactDenseSearch(CORPUS + [CORPUS[0]], encoder=_fake())
    with pytest.raises(TypeError, match="encode"):
        Encoder(42)
