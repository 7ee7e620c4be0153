"""Search-R1's dense index: a faiss index file over a JSONL corpus, searched with the encoder's prefix and pooling.

Every index here is built in the test with faiss itself (flat, IVF, HNSW; inner product and L2) and its results are
compared with an exact numpy top-k over the same vectors; the encoder is the bundled all-MiniLM-L6-v2, and a
random-initialised BERT (a real architecture, named like an e5 model) checks the query prefix and the pooling
against transformers' own forward pass. Then the same index is served by ``serve-retrieval`` and searched from an
eval, an eval over the server, and a trainer's toolbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from workbench.core.types import Passage  # noqa: E402
from workbench.data.jsonl_corpus import JsonlCorpus, line_offsets, open_corpus  # noqa: E402
from workbench.data.world import load_world  # noqa: E402
from workbench.tools.dense import Encoder, load_encoder, passage_text  # noqa: E402
from workbench.tools.faiss_index import FaissSearch, read_index  # noqa: E402

N_PASSAGES = 48


def exact_top_k(emb: np.ndarray, queries: np.ndarray, k: int, metric: str = "ip") -> tuple[np.ndarray, np.ndarray]:
    """Rows and scores of the exact top-k (score: inner product, or minus the squared L2 distance), best first."""
    if metric == "ip":
        scores = queries @ emb.T
    else:
        scores = -((queries[:, None, :] - emb[None, :, :]) ** 2).sum(-1)
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return rows, np.take_along_axis(scores, rows, axis=1)


def write_corpus(path: Path, passages: list[Passage]) -> Path:
    """Search-R1's corpus layout: one FlashRAG record per line, contents = '"Title"\\ntext'."""
    lines = [json.dumps({"id": p.id, "contents": f'"{p.title}"\n{p.text}'}, ensure_ascii=False) for p in passages]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """World passages, their MiniLM embeddings, the corpus file and a flat inner-product index written by faiss."""
    root = tmp_path_factory.mktemp("faiss")
    passages = list(load_world().passages)[:N_PASSAGES]
    enc = load_encoder()
    emb = enc.encode([passage_text(p) for p in passages], kind="passage")
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    faiss.write_index(index, str(root / "flat.index"))
    return {"root": root, "passages": passages, "emb": emb, "encoder": enc,
            "corpus": write_corpus(root / "corpus.jsonl", passages), "index": root / "flat.index"}


# --------------------------------------------------------------------------- the corpus, row by row


def test_jsonl_corpus_reads_rows_on_demand(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes("\ufeff".encode() + b'{"id": "a", "contents": "\\"The \\"\\"Best\\"\\" Band\\"\\nA band."}\n\n'
                     b'  \r\n{"id": 7, "title": "T", "text": " plain "}\n{"contents": "No title line"}')
    c = JsonlCorpus(path)
    assert len(c) == 3 and len(line_offsets(path)) == 4  # blank and whitespace-only lines are not rows
    assert (c[0].id, c[0].title, c[0].text) == ("a", 'The "Best" Band', "A band.")
    assert (c[1].id, c[1].title, c[1].text) == ("7", "T", "plain")
    assert (c[-1].id, c[2].title, c[2].text) == ("2", "", "No title line")  # no id: the row number
    assert [p.id for p in c] == ["a", "7", "2"] and [p.id for p in c[1:]] == ["7", "2"]
    with pytest.raises(IndexError):
        c[3]
    assert open_corpus(path)[1] == c[1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "contents": "ok"}\n{"id": "y"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="passage 1 .* no 'contents' or 'text'"):
        JsonlCorpus(bad)[1]


# --------------------------------------------------------------------------- equal to an exact search


def test_flat_index_is_memory_mapped_and_equals_exact_search(built):
    search = FaissSearch(built["index"], JsonlCorpus(built["corpus"]), built["encoder"])
    info = search.info()
    assert search.mapped and info["mmap"] and info["type"] == "IndexFlatIP" and info["vectors"] == N_PASSAGES
    assert any(str(built["index"]) in line for line in Path("/proc/self/maps").read_text().splitlines())
    questions = [e.question for e in load_world().split("dev")[:12]] + ["", "  "]
    hits = search.search_batch(questions, k=5)
    assert hits[-2:] == [[], []]  # blank queries: no hits
    q = built["encoder"].encode(questions[:-2], kind="query")
    rows, scores = exact_top_k(built["emb"], q, 5)
    for got, r, s in zip(hits, rows, scores):
        assert [h.id for h in got] == [built["passages"][i].id for i in r]
        np.testing.assert_allclose([h.score for h in got], s, atol=1e-5)
        assert got[0].title == built["passages"][r[0]].title and got[0].text == built["passages"][r[0]].text


@pytest.mark.parametrize("kind", ["ivf", "hnsw", "flat_l2"])
def test_ivf_hnsw_and_l2_indexes_equal_exact_search(kind, tmp_path):
    rng = np.random.default_rng(0)
    n, d = 1500, 24
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    passages = [Passage(f"p{i}", f"t{i}", f"text {i}") for i in range(n)]
    if kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, 16, faiss.METRIC_INNER_PRODUCT)
        index.train(emb)
        index.nprobe = 16  # every list: exact (saved in the file)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, 16, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexFlatL2(d)
    index.add(emb)
    faiss.write_index(index, str(tmp_path / "x.index"))
    search = FaissSearch(tmp_path / "x.index", passages, Encoder(_FixedDim(d)),
                         ef_search=n if kind == "hnsw" else None)
    assert search.mapped
    queries = rng.standard_normal((20, d)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    hits = search.search_by_vector(queries, k=10)
    rows, scores = exact_top_k(emb, queries, 10, "l2" if kind == "flat_l2" else "ip")
    for got, r, s in zip(hits, rows, scores):
        assert [h.id for h in got] == [f"p{i}" for i in r]
        np.testing.assert_allclose([h.score for h in got], s, atol=1e-4)  # L2: minus the distance, higher is better


class _FixedDim:
    """An encoder object of a given dimension (the IVF/HNSW test searches by vector)."""

    def __init__(self, d: int):
        self.d = d

    def get_embedding_dimension(self) -> int:
        return self.d

    def encode(self, texts, **kw):
        return np.ones((len(texts), self.d), dtype=np.float32)


def test_mismatches_are_one_line_errors(built, tmp_path):
    with pytest.raises(ValueError, match=f"holds {N_PASSAGES} vectors but the corpus has 3 passages"):
        FaissSearch(built["index"], built["passages"][:3], built["encoder"])
    with pytest.raises(ValueError, match="384-dimensional vectors but the encoder .* gives 8: pass --encoder"):
        FaissSearch(built["index"], built["passages"], Encoder(_FixedDim(8)))
    with pytest.raises(ValueError, match="nprobe is for IVF indexes"):
        FaissSearch(built["index"], built["passages"], built["encoder"], nprobe=4)
    (tmp_path / "junk.index").write_bytes(b"not an index")
    with pytest.raises(ValueError, match="not a faiss index"):
        read_index(tmp_path / "junk.index")


# --------------------------------------------------------------------------- e5: the query prefix and the pooling


@pytest.fixture(scope="module")
def tiny_e5(tmp_path_factory):
    """A random-initialised BERT (e5-base-v2's architecture, tiny) with MiniLM's tokenizer, in a folder named like an
    e5 model and without sentence-transformers files (as a plain transformers checkpoint is)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from workbench.tools.dense import default_encoder_path

    folder = tmp_path_factory.mktemp("models") / "tiny-e5-bert"
    tok = AutoTokenizer.from_pretrained(default_encoder_path())
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=128))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model.eval(), tok


def _reference(model, tok, text: str, pooling: str) -> np.ndarray:
    """Search-R1's encoder: tokenize, forward, mean over the attention mask or the first token, unit length."""
    import torch

    with torch.no_grad():
        inputs = tok([text], return_tensors="pt", truncation=True)
        h = model(**inputs).last_hidden_state
        m = inputs["attention_mask"][..., None].float()
        v = (h * m).sum(1) / m.sum(1) if pooling == "mean" else h[:, 0]
        return torch.nn.functional.normalize(v, dim=-1).numpy()


@pytest.mark.parametrize("pooling", [None, "mean", "cls"])
def test_e5_query_prefix_and_pooling_match_transformers(tiny_e5, pooling):
    folder, model, tok = tiny_e5
    enc = Encoder(str(folder), pooling=pooling)
    assert (enc.query_prefix, enc.passage_prefix) == ("query: ", "passage: ")  # e5 in the name
    got = enc.encode(["who wrote hamlet"], kind="query")
    want = _reference(model, tok, "query: who wrote hamlet", pooling or "mean")  # a plain folder pools by mean
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(got, _reference(model, tok, "who wrote hamlet", pooling or "mean"), atol=1e-3)
    other = Encoder(str(folder), query_prefix="", pooling="cls" if pooling != "cls" else "mean")
    assert not np.allclose(other.encode(["who wrote hamlet"]), got, atol=1e-3)
    with pytest.raises(ValueError, match="unknown pooling 'pooler'"):
        Encoder(str(folder), pooling="pooler")


# --------------------------------------------------------------------------- served, and used by eval and train


def test_served_index_answers_like_the_in_process_search(built, tmp_path):
    import httpx

    from workbench.integrations.retrieval_server import create_app, load_service
    from workbench.tools.remote import RemoteRetrieval
    from workbench.util.http_stack import ServerThread

    service = load_service(str(built["corpus"]), "dense", index=str(built["index"]), encoder=built["encoder"])
    local = FaissSearch(built["index"], built["passages"], built["encoder"])
    questions = [e.question for e in load_world().split("dev")[:6]]
    with ServerThread(create_app(service)) as s:
        health = httpx.get(s.url + "/health").json()
        assert health["retriever"] == "dense-faiss" and health["passages"] == N_PASSAGES
        assert health["index"]["mmap"] is True and health["index"]["metric"] == "ip"
        client = RemoteRetrieval(s.url)
        remote = client.search_batch(questions, 3)
        client.close()
    for r, h in zip(remote, local.search_batch(questions, 3)):
        assert [(x.id, x.title, x.text) for x in r] == [(x.id, x.title, x.text) for x in h]
        np.testing.assert_allclose([x.score for x in r], [x.score for x in h], atol=1e-5)


def test_eval_searches_the_index_in_process_and_over_the_server(built, tokenizer, tmp_path):
    from workbench.eval.runner import run_eval
    from workbench.integrations.retrieval_server import create_app, load_service
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.util.http_stack import ServerThread

    q = "Who founded Treimveex Textiles?"
    want = FaissSearch(built["index"], built["passages"], built["encoder"]).search(q, 3)

    script = [f"<search> {q} </search>", "<answer> x </answer>"]
    kw = dict(limit=1, max_turns=2, protocol_kwargs={"top_k": 3}, log=None, progress=False)
    in_process = run_eval("search_r1", "world", ScriptedBackend(tokenizer, script), out=tmp_path, retriever="dense",
                          index=str(built["index"]), corpus=str(built["corpus"]), encoder=None, **kw)
    cfg = in_process.config
    assert cfg["eval"]["index"] == str(built["index"]) and cfg["n_passages"] == N_PASSAGES
    service = load_service(str(built["corpus"]), "dense", index=str(built["index"]), encoder=built["encoder"])
    with ServerThread(create_app(service)) as s:
        served = run_eval("search_r1", "world", ScriptedBackend(tokenizer, script), out=tmp_path,
                          retrieval_url=s.url, **kw)
    for run in (in_process, served):
        assert _hit_ids(run) == [h.id for h in want]


def _hit_ids(run) -> list[str]:
    (traj,) = run.trajectories()
    return [h.id for t in traj.turns for c in t.tool_calls for h in c.hits()]


def test_train_searches_the_index(built, tmp_path):
    from workbench import methods as wm
    from workbench.rl.train_config import TrainConfig

    cfg = TrainConfig(method="search_r1", steps=1, retriever="dense", index=str(built["index"]),
                      corpus=str(built["corpus"]), questions_per_step=1, group_size=2, max_turns=1, max_new_tokens=4,
                      encoder="none", save_every=0)
    tr = wm.trainer(cfg, run=tmp_path, progress=False)
    tool = tr.toolbox.tools["search"]
    assert isinstance(tool, FaissSearch) and tool.mapped and isinstance(tool.passages, JsonlCorpus)
    q = "Who founded Treimveex Textiles?"
    want = FaissSearch(built["index"], built["passages"], built["encoder"]).search(q, 3)
    assert [h.id for h in tr.toolbox.call("search", query=q, k=3).hits()] == [h.id for h in want]
    with pytest.raises(ValueError, match="retriever is 'bm25': add --retriever dense"):
        TrainConfig(index=str(built["index"]))


@pytest.mark.parametrize("argv, says", [
    (["serve-retrieval", "--index", "x.index"], "--index x.index is a dense (faiss) index: add --retriever dense"),
    (["eval", "--method", "search_r1", "--index", "x.index"], "--index is for dense search: add --retriever dense"),
    (["eval", "--method", "search_r1", "--retriever", "dense", "--pooling", "cls", "--retrieval-url",
      "http://127.0.0.1:9"], "--pooling and --retrieval-url"),
    (["eval", "--method", "search_r1", "--retriever", "dense", "--index", "x.index", "--dataset", "q.json",
      "--corpus", "pooled"], "holds the vectors of one corpus"),
    (["ask", "q", "--retriever", "dense", "--pooling", "pooler"], "unknown --pooling 'pooler'"),
])
def test_index_flags_are_checked_in_one_line(argv, says, capsys):
    from workbench.apps import cli

    assert cli.main(argv) == 2
    assert says in capsys.readouterr().err
