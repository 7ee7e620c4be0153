"""The sharded, memory-mapped BM25 index (``workbench/tools/bm25_sharded.py``) against bm25s itself: a corpus
built in shards with global statistics scores every document as one bm25s index over the whole corpus does."""

from __future__ import annotations

import json

import numpy as np
import pytest

bm25s = pytest.importorskip("bm25s")

from workbench.tools.bm25_sharded import ShardedBM25, ShardedBM25Builder, shard_postings  # noqa: E402


def zipf_docs(rng, n_docs, n_vocab, mean_len=30):
    lengths = rng.integers(mean_len // 2, 2 * mean_len, n_docs)
    ranks = rng.zipf(1.2, int(lengths.sum()) * 2)
    ranks = ranks[ranks <= n_vocab][: int(lengths.sum())] - 1
    assert len(ranks) == lengths.sum()
    return ranks.astype(np.int32), lengths


def build(tmp_path, docs, n_vocab, shard_sizes):
    """Shards of ``shard_sizes`` documents from the list of per-document id arrays ``docs``."""
    b = ShardedBM25Builder(tmp_path, n_vocab)
    i = 0
    for n in shard_sizes:
        part = docs[i : i + n]
        b.add_shard(np.concatenate(part) if part else np.zeros(0, np.int32), np.array([len(d) for d in part]))
        i += n
    assert i == len(docs)
    b.finish()
    return ShardedBM25.load(tmp_path)


def one_bm25s(docs, n_vocab):
    one = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    one.index(([list(map(int, d)) for d in docs], {i: i for i in range(n_vocab)}), show_progress=False)
    return one


def test_three_shards_score_as_one_bm25s_index(tmp_path):
    rng = np.random.default_rng(0)
    n_vocab = 5000
    flat, lengths = zipf_docs(rng, 6000, n_vocab)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    sharded = build(tmp_path, docs, n_vocab, [2000, 2000, 2000])
    one = one_bm25s(docs, n_vocab)
    assert sharded.n_docs == 6000 and [s["offset"] for s in sharded.meta["shards"]] == [0, 2000, 4000]
    queries = [rng.choice(docs[i], size=min(len(docs[i]), int(rng.integers(3, 9))), replace=False) for i in range(60)]
    for q in queries:
        want = one.get_scores_from_ids(list(map(int, q)))
        np.testing.assert_allclose(sharded.scores_ids(q), want, rtol=2e-6, atol=1e-6)
    queries += [np.concatenate([q, q[:2]]) for q in queries[:10]]  # repeated terms count twice, as in bm25s
    got_docs, got_scores = sharded.search_ids(queries, k=10)  # MaxScore (the shards carry each term's max weight)
    for q, d, s in zip(queries, got_docs, got_scores):
        d2, s2 = sharded._exhaustive(np.asarray(q, dtype=np.int64), 10)  # and the exhaustive path agrees
        np.testing.assert_allclose(s2, s, rtol=2e-6, atol=1e-6)
        want = one.get_scores_from_ids(list(map(int, q)))
        best = np.sort(want)[::-1][:10]
        np.testing.assert_allclose(s, best, rtol=2e-6, atol=1e-6)  # the exact top-10 scores
        np.testing.assert_allclose(want[d], s, rtol=2e-6, atol=1e-6)  # ... of the documents returned
        assert len(set(d.tolist())) == len(d) and (np.diff(s) <= 0).all()
    # per-shard statistics would differ: the IDF really is global
    local = one_bm25s(docs[:2000], n_vocab).get_scores_from_ids(list(map(int, queries[0])))
    assert not np.allclose(local, sharded.scores_ids(queries[0])[:2000], rtol=1e-3)


def test_sharded_text_index_returns_the_in_process_searchers_hits(tmp_path, world):
    """The world's passages through bm25s's own tokenizer, in 3 unequal shards: the same hits as ``BM25Search``."""
    from bm25s.tokenization import Tokenizer

    from workbench.tools.bm25 import BM25Search

    passages = list(world.passages)
    tok = Tokenizer(stopwords="en")
    ids = tok.tokenize([f"{p.title} {p.text}" for p in passages], update_vocab=True, return_as="ids",
                       show_progress=False)
    n_vocab = len(tok.get_vocab_dict())
    sharded = build(tmp_path, [np.asarray(d, dtype=np.int32) for d in ids], n_vocab, [100, 600, len(passages) - 700])
    searcher = BM25Search(passages)
    questions = [e.question for e in world.split("train")[:40]]
    q_ids = tok.tokenize(questions, update_vocab=False, return_as="ids", show_progress=False)
    docs, scores = sharded.search_ids(q_ids, k=5)
    for q, hits, d, s in zip(q_ids, searcher.search_batch(questions, k=5), docs, scores):
        np.testing.assert_allclose(s, [h.score for h in hits], rtol=2e-6)
        np.testing.assert_allclose(sharded.scores_ids(q)[d], s, rtol=2e-6)
        # the same documents, up to the order of equal scores (and which of those tied at the cut made it)
        above = s[-1] + 1e-5
        assert sorted(passages[i].id for i, x in zip(d, s) if x > above) == sorted(h.id for h in hits if h.score > above)


@pytest.mark.parametrize("k", [1, 3, 50])
def test_maxscore_prunes_and_stays_exact_over_many_shards(tmp_path, k):
    rng = np.random.default_rng(k)
    flat, lengths = zipf_docs(rng, 4000, 3000, mean_len=12)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    sharded = build(tmp_path, docs, 3000, [250] * 16)
    one = one_bm25s(docs, 3000)
    for i in range(40):
        q = rng.choice(docs[i], size=min(len(docs[i]), 6), replace=False)
        d, s = sharded.search_ids([q], k=k)
        want = one.get_scores_from_ids(list(map(int, q)))
        np.testing.assert_allclose(s[0], np.sort(want)[::-1][: len(s[0])], rtol=2e-6, atol=1e-6)
        assert len(s[0]) == min(k, int((want > 0).sum()))
        np.testing.assert_allclose(want[d[0]], s[0], rtol=2e-6, atol=1e-6)
    assert not sharded._scores.any()


def test_each_shard_is_a_bm25s_index_on_disk(tmp_path):
    rng = np.random.default_rng(1)
    flat, lengths = zipf_docs(rng, 500, 800)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    build(tmp_path, docs, 800, [500])
    loaded = bm25s.BM25.load(tmp_path / "shard_00000", mmap=True, load_vocab=True)
    assert isinstance(loaded.scores["data"], np.memmap) and loaded.scores["num_docs"] == 500
    q = list(map(int, docs[3][:4]))
    np.testing.assert_allclose(loaded.get_scores_from_ids(q), one_bm25s(docs, 800).get_scores_from_ids(q), rtol=2e-6)
    meta = json.loads((tmp_path / "sharded.json").read_text())
    assert meta["n_docs"] == 500 and abs(meta["avg_doc_len"] - lengths.mean()) < 1e-9
    assert not list(tmp_path.glob("shard_*/*.build.npy"))  # pass-1 files are gone


def test_postings_are_csc_with_term_frequencies():
    indptr, doc, tf = shard_postings(np.array([2, 0, 2, 1, 2]), np.array([3, 2]), n_vocab=4)
    assert indptr.tolist() == [0, 1, 2, 4, 4]  # term 0: doc 0; term 1: doc 1; term 2: docs 0 and 1; term 3: none
    assert doc.tolist() == [0, 1, 0, 1] and tf.tolist() == [1, 1, 2, 1]


def test_edge_cases_and_bad_input(tmp_path):
    with pytest.raises(ValueError, match="lengths sum to 3"):
        shard_postings(np.array([0, 1]), np.array([3]), n_vocab=2)
    with pytest.raises(ValueError, match=r"term ids must lie in \[0, 2\)"):
        shard_postings(np.array([0, 5]), np.array([2]), n_vocab=2)
    with pytest.raises(ValueError, match="no documents"):
        ShardedBM25Builder(tmp_path / "empty", 3).finish()
    with pytest.raises(FileNotFoundError, match="not a sharded BM25 index"):
        ShardedBM25.load(tmp_path / "nothing")
    idx = build(tmp_path / "small", [np.array([0, 1]), np.array([1, 2])], 3, [1, 1])
    docs, scores = idx.search_ids([[], [7], [0], [1, 1]], k=5)
    assert [len(d) for d in docs] == [0, 0, 1, 2]  # empty / unknown terms find nothing; k is an upper bound
    assert docs[2].tolist() == [0] and scores[3][0] > 0
    assert not idx._scores.any()  # the shared accumulator is reset after each query


# --------------------------------------------------------------------------- text index, served


def same_hits(got, want):
    """Equal scores in order; the same passages (all fields) up to the order of ties and which tie made the cut."""
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=2e-6)
    if not want:
        return
    above = want[-1].score + 1e-5
    key = lambda h: (h.id, h.title, h.text, h.source)  # noqa: E731
    assert sorted(key(h) for h in got if h.score > above) == sorted(key(h) for h in want if h.score > above)


@pytest.fixture(scope="module")
def text_index(tmp_path_factory, world):
    from workbench.tools.bm25_sharded import build_text_index

    path = tmp_path_factory.mktemp("text-index")
    meta = build_text_index(iter(world.passages), path, shard_size=300)  # 4 shards, the last one short
    assert [s["n_docs"] for s in meta["shards"]] == [300, 300, 300, 100]
    return path


def test_text_index_searches_as_bm25search(text_index, world):
    from workbench.tools.bm25 import BM25Search
    from workbench.tools.bm25_sharded import ShardedBM25Search

    sharded, one = ShardedBM25Search(text_index), BM25Search(list(world.passages))
    assert len(sharded) == len(one) == len(world.passages)
    assert sharded.passage(999) == world.passages[999]
    questions = [e.question for e in world.split("dev")[:30]] + ["zzqx unknownword", ""]
    for got, want in zip(sharded.search_batch(questions, k=5), one.search_batch(questions, k=5)):
        same_hits(got, want)


def test_serve_retrieval_serves_a_sharded_index(text_index, world):
    pytest.importorskip("fastapi")
    from workbench.integrations.retrieval_server import ServerThread, create_app, load_service
    from workbench.tools.bm25 import BM25Search
    from workbench.tools.remote import RemoteRetrieval, RemoteToolError

    service = load_service(str(text_index))  # a directory given as the corpus is served as it is
    assert service.retriever == "bm25-sharded" and service.n_passages == 1000 and service.kg is None
    questions = [e.question for e in world.split("train")[:10]]
    with ServerThread(create_app(service)) as s:
        client = RemoteRetrieval(s.url)
        for got, want in zip(client.search_batch(questions, 3), BM25Search(list(world.passages)).search_batch(questions, 3)):
            same_hits(got, want)
        with pytest.raises(RemoteToolError, match="HTTP 404"):
            client.kg(["x"])


def test_serve_retrieval_builds_the_index_dir_from_a_corpus_file(tmp_path, capsys):
    from workbench.apps.cli import main
    from workbench.integrations.retrieval_server import load_service

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "contents": f'"T{i}"\ntext number {i} about rivers'}) + "\n"
                              for i in range(50)))
    service = load_service(str(corpus), index_dir=str(tmp_path / "idx"), shard_size=20, limit=45)
    assert service.n_passages == 45 and service.search("T7 rivers", 1)[0].id == "d7"
    assert main(["serve-retrieval", "--index-dir", str(tmp_path / "idx"), "--retriever", "dense"]) == 2
    assert "--retriever dense cannot use it" in capsys.readouterr().err
    assert main(["serve-retrieval", "--corpus", str(tmp_path / "missing.jsonl"), "--index-dir", str(tmp_path / "i2")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
