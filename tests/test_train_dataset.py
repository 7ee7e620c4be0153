"""RL on a benchmark file's questions (``workbench train --dataset FILE --corpus pooled|per-question``): the
questions come from the file, and search goes over all of its paragraphs or each question's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import methods as wm
from workbench.rl.train_config import TrainConfig
from workbench.rollout.backends.scripted import ScriptedBackend


def _record(qid: str, hop_titles: list[tuple[str, str]], answer: str) -> dict:
    paragraphs = [{"idx": i, "title": t, "paragraph_text": text, "is_supporting": True}
                  for i, (t, text) in enumerate(hop_titles)]
    return {"id": qid, "question": f"Question {qid}?", "answer": answer, "answer_aliases": [], "answerable": True,
            "paragraphs": paragraphs,
            "question_decomposition": [{"id": i + 1, "question": f"hop {i + 1}", "answer": answer,
                                        "paragraph_support_idx": i} for i in range(len(hop_titles))]}


RECORDS = [
    _record("2hop__a", [("Marlow Tins", "The Marlow Tins were founded by Edda Vry."),
                        ("Edda Vry", "Edda Vry was born in Quillby.")], "Quillby"),
    _record("2hop__b", [("Ostrel Bay", "Ostrel Bay lies on the Vand river."),
                        ("Vand", "The Vand flows into the Grey Sea.")], "Grey Sea"),
]
OWN = {r["id"]: {p["title"] for p in r["paragraphs"]} for r in RECORDS}


@pytest.fixture
def musique(tmp_path) -> Path:
    path = tmp_path / "musique_ans_train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def _trainer(tiny_model, musique, tmp_path, corpus):
    cfg = TrainConfig(method="search_r1", model=tiny_model, dataset=str(musique), corpus=corpus, steps=1,
                      questions_per_step=2, group_size=2, max_turns=2, max_new_tokens=24, encoder="none",
                      save_every=0, device="cpu")
    return wm.trainer(cfg, run=tmp_path / f"run-{corpus}", progress=False)


def _hits(trajs) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for t in trajs:
        out.setdefault(t.example_id, set()).update(h.title for turn in t.turns for c in turn.tool_calls
                                                   for h in c.hits())
    return out


@pytest.mark.parametrize("corpus", ["per-question", "pooled"])
def test_training_questions_search_their_own_or_all_paragraphs(tiny_model, musique, tmp_path, tokenizer, corpus):
    tr = _trainer(tiny_model, musique, tmp_path, corpus)
    assert sorted(e.id for e in tr.data.examples) == sorted(OWN) and tr.eval_examples == []
    # every rollout searches words of both questions' paragraphs, then answers
    query = "<search> who founded the Marlow Tins by the Vand river </search>"
    tr.backend = ScriptedBackend(tokenizer, [query, "<answer> x </answer>"])
    hits = _hits(tr.roll_out(tr.sample_questions(2), seed=0))
    assert sorted(hits) == sorted(OWN)
    if corpus == "per-question":  # each question finds only its own paragraphs, the other's never
        assert all(found and found <= OWN[qid] for qid, found in hits.items()), hits
    else:  # one corpus: each question's search finds paragraphs of both
        assert all(found & OWN["2hop__a"] and found & OWN["2hop__b"] for found in hits.values()), hits


def test_train_cli_runs_a_step_on_a_dataset_file(tiny_model, musique, tmp_path):
    from workbench.apps.cli import main
    from workbench.storage.runs import open_run

    out = tmp_path / "runs"
    assert main(["train", "--model", tiny_model, "--dataset", str(musique), "--corpus", "per-question", "--steps", "1",
                 "--questions-per-step", "2", "--group-size", "2", "--max-turns", "2", "--max-new-tokens", "8",
                 "--encoder", "none", "--save-every", "1", "--no-progress", "--out", str(out)]) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    run = open_run(run_dir)
    assert run.config["dataset"] == str(musique) and run.config["corpus"] == "per-question"
    assert [m["step"] for m in run.step_metrics()] == [1]


@pytest.mark.parametrize("kw, says", [
    ({"corpus": "per-question"}, "the world has one shared corpus: add --dataset FILE"),
    ({"corpus": "pooled"}, "the world has one shared corpus: add --dataset FILE"),
    ({"dataset": "q.jsonl", "eval_limit": 10}, "has no held-out questions: drop --eval-limit"),
    ({"dataset": "q.jsonl", "corpus": "per-question", "index": "x.index", "retriever": "dense"},
     "an index is of a corpus file"),
])
def test_dataset_settings_are_checked_in_one_line(kw, says):
    with pytest.raises(ValueError, match=says):
        TrainConfig(**kw)
