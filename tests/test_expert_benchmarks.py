"""Expert traces of questions in published layouts (``workbench expert --dataset FILE``): MuSiQue's decomposition
and 2Wiki's evidences become one search per hop over the question's own paragraphs, checked like the world's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workbench.apps.cli import main
from workbench.data.corpora import corpus_from_contexts
from workbench.data.loaders import load_musique
from workbench.rl.expert import Dropped, benchmark_hops

_MUSIQUE = {
    "id": "3hop1__1_2_3", "question": "Where was the founder of the band that recorded Zorp born?", "answer": "Quillby",
    "answer_aliases": [], "answerable": True,
    "paragraphs": [  # idx differs from the position: the hop's paragraph is found by idx
        {"idx": 7, "title": "Zorp", "paragraph_text": "Zorp is a song recorded by the Marlow Tins.", "is_supporting": True},
        {"idx": 3, "title": "Filler", "paragraph_text": "Nothing to see here about any band.", "is_supporting": False},
        {"idx": 5, "title": "Marlow Tins", "paragraph_text": "The Marlow Tins were founded by Edda Vry.",
         "is_supporting": True},
        {"idx": 9, "title": "Edda Vry", "paragraph_text": "Edda Vry was born in Quillby.", "is_supporting": True},
    ],
    "question_decomposition": [
        {"id": 1, "question": "Zorp >> performer", "answer": "Marlow Tins", "paragraph_support_idx": 7},
        {"id": 2, "question": "Who founded #1?", "answer": "Edda Vry", "paragraph_support_idx": 5},
        {"id": 3, "question": "#2 >> place of birth", "answer": "Quillby", "paragraph_support_idx": 9},
    ],
}


def _musique(tmp_path: Path, rec: dict) -> Path:
    path = tmp_path / "musique_ans_dev.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_musique_hops_resolve_placeholders_and_find_each_paragraph(tmp_path):
    ex = load_musique(_musique(tmp_path, _MUSIQUE))[0]
    hops = benchmark_hops(ex, corpus_from_contexts([ex], fill_supporting=False))
    assert [h.support_title for h in hops] == ["Zorp", "Marlow Tins", "Edda Vry"]
    assert (hops[0].head, hops[0].relation, hops[0].tail) == ("Zorp", "performer", "Marlow Tins")
    assert hops[1].subquestion == "Who founded Marlow Tins?" and hops[1].fact == \
        'The answer to "Who founded Marlow Tins?" is Edda Vry.'
    assert hops[2].head == "Edda Vry" and hops[2].fact == "Edda Vry was born in Quillby."


@pytest.mark.parametrize("change, reason", [
    (lambda r: r["question_decomposition"][1].update(paragraph_support_idx=42), "its paragraph_support_idx names none of the question's 4 paragraphs"),
    (lambda r: r.update(paragraphs=[]), "no paragraphs of its own"),
])
def test_a_question_without_usable_annotations_is_dropped_with_the_reason(tmp_path, change, reason):
    rec = json.loads(json.dumps(_MUSIQUE))
    change(rec)
    ex = load_musique(_musique(tmp_path, rec))[0]
    with pytest.raises(Dropped, match=reason):
        benchmark_hops(ex, corpus_from_contexts([ex], fill_supporting=False))


def test_expert_command_on_a_musique_file_writes_checked_traces(tmp_path, capsys):
    rc = main(["expert", "--method", "search_r1", "--dataset", str(_musique(tmp_path, _MUSIQUE)), "--no-progress",
               "--out", str(tmp_path / "runs")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "1 of 1 questions have a valid trace" in out and "3-hop" in out
    (run,) = (tmp_path / "runs").iterdir()
    traj = pd.read_parquet(run / "trajectories.parquet").iloc[0]
    assert traj.n_searches == 3 and traj.cem == 1.0 and traj.answer == "Quillby"
    assert "<search> Zorp performer </search>" in traj.response_text
    assert json.loads((run / "config.json").read_text())["dataset"].endswith("musique_ans_dev.jsonl")


def test_the_benchmark_samples_give_a_trace_per_annotated_question(samples, tmp_path, capsys):
    fx = samples
    for name, want in (("musique_ans_dev.sample.jsonl", "20 of 20"), ("2wikimultihopqa_dev.sample.jsonl", "20 of 20"),
                       ("hotpotqa_dev_distractor.sample.json", "0 of 20")):  # HotpotQA has no per-hop annotation
        assert main(["expert", "--method", "search_r1", "--dataset", str(fx / name), "--no-progress", "--out",
                     str(tmp_path / name)]) == 0
        out = capsys.readouterr().out
        assert f"{want} questions have a valid trace" in out, out
    assert "no per-hop annotation" in out


def test_sft_trains_on_benchmark_traces_beside_the_world(tmp_path, capsys, one_thread):
    assert main(["expert", "--method", "search_r1", "--dataset", str(_musique(tmp_path, _MUSIQUE)), "--no-progress",
                 "--out", str(tmp_path / "expert")]) == 0
    (traces,) = (tmp_path / "expert").iterdir()
    sft = ["sft", "--method", "search_r1", "--traces", json.dumps([str(traces)]), "--steps", "1", "--batch-size", "1",
           "--micro-batch-size", "1", "--eval-limit", "0", "--max-turns", "4", "--max-new-tokens", "64",
           "--save-every", "1", "--no-progress", "--out", str(tmp_path / "sft")]
    assert main([*sft, "--rejection-questions", "4"]) == 2  # rejection samples are the world's: refused in one line
    assert "traces of musique questions are given too" in capsys.readouterr().err
    assert main(sft) == 0
    (run,) = (tmp_path / "sft").iterdir()
    pool = json.loads((run / "config.json").read_text())["sft_pool"]
    assert pool["n"] == 1 and pool["by_source"] == {"expert": 1} and pool["by_hops"] == {"3": 1}
