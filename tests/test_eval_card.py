"""The eval card (``card.json`` beside every eval run) and ``workbench compare``, which refuses two runs whose cards
differ in a setting that changes a score. The runs: the world's dev questions answered by a scripted policy through
``run_eval`` itself, so the card is the one ``workbench eval`` writes."""

from __future__ import annotations

import hashlib
import json

import pytest

from workbench.apps import cli
from workbench.eval import card as cards
from workbench.eval.runner import run_eval
from workbench.rollout.backends.scripted import ScriptedBackend


def _run(root, tokenizer, **options):
    script = lambda text, turn: "<search> Tarnholm </search>" if turn == 0 else "<answer> Ada Quist </answer>"  # noqa: E731
    return run_eval("direct,search_r1", "world", ScriptedBackend(tokenizer, script), out=root, split="dev", limit=3,
                    progress=False, log=None, **options).path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("card-runs")
    return {"a": _run(root, tokenizer), "b": _run(root, tokenizer),
            "other": _run(root, tokenizer, max_turns=2, protocol_kwargs={"top_k": 5})}


def test_every_eval_run_carries_its_card(runs):
    card = json.loads((runs["a"] / cards.CARD_FILE).read_text())
    assert card["data"]["dataset"] == "world" and card["data"]["n_questions"] == 3 and card["data"]["split"] == "dev"
    assert card["data"]["sha256"]  # the world's id
    assert card["retrieval"]["retriever"] == "bm25" and card["retrieval"]["n_passages"] > 0
    assert card["budgets"]["max_turns"] == 4 and card["sampling"]["temperature"] == 0.0
    assert card["scoring"]["normalisation"].startswith("SQuAD")
    assert set(card["methods"]) == {"direct", "search_r1"}
    assert len(card["methods"]["search_r1"]["prompt_sha256"]) == 64
    assert card["methods"]["search_r1"]["prompt_sha256"] != card["methods"]["direct"]["prompt_sha256"]
    assert "commit" in card["code"]


def test_the_prompt_hash_moves_with_the_prompt():
    from workbench.methods import get_protocol

    a = cards.prompt_sha256(get_protocol("search_r1"))
    assert a == cards.prompt_sha256(get_protocol("search_r1"))
    assert a != cards.prompt_sha256(get_protocol("search_r1", few_shot=False))


def test_runs_measured_alike_compare_and_unlike_ones_are_refused_by_name(runs, capsys):
    assert cards.differences(cards.read_card(runs["a"]), cards.read_card(runs["b"]), [("search_r1", "search_r1")]) == []
    assert cli.main(["compare", str(runs["a"]), str(runs["b"]), "--method", "search_r1"]) == 0
    out = capsys.readouterr().out
    assert "| all | 3 |" in out and "+0.000" in out and "WARNING" not in out
    assert cli.main(["compare", str(runs["a"]), str(runs["other"]), "--method", "search_r1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "were not measured alike" in err and "--allow-different" in err
    assert "budgets.max_turns 4 vs 2" in err and "methods.search_r1.protocol.top_k 3 vs 5" in err
    assert cli.main(["compare", str(runs["a"]), str(runs["other"]), "--method", "search_r1", "--allow-different"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WARNING: the runs were not measured alike") and "| all | 3 |" in out


def test_two_methods_of_one_run_compare_on_their_own_protocols(runs, capsys):
    """direct and search_r1 share the run's settings; their prompts differ by design, and so do their arguments:
    only what both protocols take is held against each other."""
    a = cards.read_card(runs["a"])
    diffs = cards.differences(a, a, [("direct", "search_r1")])
    assert [k for k, _, _ in diffs] == ["methods.direct|search_r1.protocol.demo", "methods.direct|search_r1.protocol.variant",
                                        "methods.direct|search_r1.prompt_sha256"]
    assert cli.main(["compare", str(runs["a"]), str(runs["a"]), "--a", "direct", "--b", "search_r1",
                     "--allow-different"]) == 0
    assert "B (search_r1)" in capsys.readouterr().out


def test_a_run_from_before_cards_gets_one_from_its_config(runs, tmp_path):
    import shutil

    old = tmp_path / runs["b"].name
    shutil.copytree(runs["b"], old)
    (old / cards.CARD_FILE).unlink()
    card = cards.read_card(old)
    assert card["hashed"] is False and card["model"]["sha256"] is None
    assert cards.differences(cards.read_card(runs["a"]), card, [("search_r1", "search_r1")]) == []  # no hash: no claim


def test_file_hashes_are_the_bytes_hash_and_follow_a_change(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"id": "0", "contents": "a"}\n')
    assert cards.file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    assert cards.file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()  # from the memo
    f.write_text('{"id": "0", "contents": "b"}\n')
    assert cards.file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest()
    assert cards.file_sha256(tmp_path / "missing") is None and cards.file_sha256(tmp_path) is None


def test_the_dashboard_shows_a_runs_card_in_its_drill_down(runs):
    from workbench.dashboard import app as dash

    html = dash._card_part(runs["a"].parent, runs["a"].name).objects[0].object
    assert "budgets.max_turns" in html and "methods.search_r1.prompt_sha256" in html and "SQuAD" in html
    rows = dict(cards.card_rows(cards.read_card(runs["a"])))
    assert len(rows["methods.search_r1.prompt_sha256"]) == 12 and rows["data.n_questions"] == "3"
