"""`workbench eval` and `run_eval`: the CLI on the world with the real default model, its tables and
files, and the clear errors for bad input (checked before the model loads)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from workbench.apps.cli import main
from workbench.eval.config import EvalConfig, field_docs
from workbench.eval.runner import run_eval
from workbench.methods import method_names as valid_methods
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.storage.runs import Run, list_runs

SUMMARY_KEYS = {"n", "em", "cem", "f1", "n_searches", "tokens", "seconds", "tool_seconds", "format_ok", "valid_actions",
                "answered", "wall_seconds", "tool_share", "by_hops",
                # strict cover-EM, the flags behind it, and the throughput view of seconds
                "cem_strict", "multi_option", "demo_leak", "wall_seconds_per_answer"}
HOP_KEYS = {"n", "em", "cem", "f1", "n_searches", "tokens", "seconds", "format_ok"}


pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared


def _hotpot_file(tmp_path, n: int = 2):
    """A HotpotQA file in the original layout: n questions with two context paragraphs each."""
    recs = [
        {
            "_id": f"h{i}", "question": f"Where was the founder of Firm{i} born?", "answer": f"Town{i}",
            "type": "bridge", "level": "easy",
            "supporting_facts": [[f"Firm{i}", 0], [f"Person{i}", 0]],
            "context": [[f"Firm{i}", [f"Firm{i} was founded by Person{i}."]],
                        [f"Person{i}", [f"Person{i} was born in Town{i}."]]],
        }
        for i in range(n)
    ]
    p = tmp_path / "hotpot_dev_sample.json"
    p.write_text(json.dumps(recs), encoding="utf-8")
    return p


def _err(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


# --------------------------------------------------------------------------- the real model on the world


def test_eval_cli_on_world_with_the_real_model(tmp_path, capsys):
    rc = main(["eval", "--method", "direct,search_r1", "--limit", "2", "--max-new-tokens", "24", "--max-turns", "2",
               "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "per method" in printed and "per hop count" in printed and "cover-EM" in printed and "format-valid" in printed
    assert "tools took" in printed
    (run,) = list_runs(tmp_path)
    for f in ("config.json", "trajectories.parquet", "examples.jsonl", "metrics.json", "features.parquet"):
        assert (run.path / f).exists(), f

    cfg = run.config
    assert cfg["kind"] == "eval" and cfg["dataset"] == "world" and cfg["model"] == "smollm2-135m"
    assert cfg["split"] == "dev" and cfg["corpus"] == "world" and cfg["n_passages"] > 0
    assert cfg["methods"]["direct"]["rollout"]["max_turns"] == 1  # no tools: one turn
    assert cfg["methods"]["search_r1"]["rollout"]["max_turns"] == 2

    m = run.metrics()
    assert set(m["methods"]) == {"direct", "search_r1"}
    assert m["n_examples"] == 2 and m["n_trajectories"] == 4
    assert m["rollout_seconds"] > 0 and 0.0 <= m["tool_share"] <= 1.0
    assert m["tool_share"] == pytest.approx(m["tool_seconds"] / m["rollout_seconds"])
    hops = sorted({str(e.hops) for e in run.examples()})
    for method, s in m["methods"].items():
        assert SUMMARY_KEYS <= set(s), method
        assert s["n"] == 2 and 0.0 <= s["f1"] <= 1.0 and s["em"] <= s["cem"] + 1e-9
        assert sorted(s["by_hops"]) == hops
        assert sum(h["n"] for h in s["by_hops"].values()) == 2
        for h in s["by_hops"].values():
            assert HOP_KEYS <= set(h)
    assert m["methods"]["direct"]["n_searches"] == 0.0
    # the per-hop rows printed are the ones in metrics.json
    for method, s in m["methods"].items():
        for h, hs in s["by_hops"].items():
            assert any(line.split()[:3] == [method, h, str(hs["n"])] for line in printed.splitlines())

    feats = pd.read_parquet(run.path / "features.parquet")
    assert len(feats) == 4 and {"em", "f1", "n_searches", "recall_title", "format_ok"} <= set(feats.columns)
    trajs = run.trajectories()
    assert [t.id for t in trajs] == list(feats["id"])
    assert all(t.meta["method"] in ("direct", "search_r1") for t in trajs)


# --------------------------------------------------------------------------- bad input


def test_eval_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--method", "--dataset", "--model", "--limit", "--split", "--retriever", "--corpus", "--group-size",
                 "--temperature", "--max-turns", "--max-new-tokens", "--seed", "--out", "--skip-unavailable"):
        assert flag in out, flag
    assert "examples:" in out and "dynasearcher" in out
    # one source of documentation: every EvalConfig field is documented, and is a flag whose help is that text
    assert set(field_docs(EvalConfig)) == {f for f in EvalConfig.__dataclass_fields__}
    from workbench.apps.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["eval"]
    by_dest = {a.dest: a for a in sub._actions}
    for name, doc in field_docs(EvalConfig).items():
        assert name in by_dest, f"EvalConfig.{name} has no flag"
        assert by_dest[name].help.startswith(doc.replace("``", "")[:40]), name


def test_unknown_method_lists_the_valid_ones(capsys):
    err = _err(capsys, ["eval", "--method", "direct,search-r1"])
    assert "unknown method 'search-r1'" in err
    for name in valid_methods():
        assert name in err
    assert {"direct", "search_r1", "dynasearcher", "rsearch_evidence", "rsearch_dag", "when_to_search",
            "vanilla_rag", "iter_retgen", "ircot"} <= set(valid_methods())


def test_bad_inputs_are_clear_errors(capsys, tmp_path):
    assert "limit must be >= 1" in _err(capsys, ["eval", "--method", "direct", "--limit", "0"])
    assert "not found" in _err(capsys, ["eval", "--method", "direct", "--dataset", str(tmp_path / "nope.json")])
    err = _err(capsys, ["eval", "--method", "search_r1", "--corpus", str(tmp_path / "corpus.jsonl")])
    assert "corpus.jsonl" in err
    assert "max_turns must be >= 1" in _err(capsys, ["eval", "--method", "direct", "--max-turns", "0"])
    assert "unknown split 'valid'" in _err(capsys, ["eval", "--method", "direct", "--split", "valid"])
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_method_without_its_tools_errors_or_is_skipped(capsys, tmp_path, tokenizer):
    path = _hotpot_file(tmp_path)
    err = _err(capsys, ["eval", "--method", "search_r1,dynasearcher", "--dataset", str(path), "--out", str(tmp_path)])
    assert "dynasearcher" in err and "'kg'" in err and "knowledge graph" in err and "--skip-unavailable" in err

    # Bamboogle-like: questions without context paragraphs, so no corpus to search
    bare = tmp_path / "bamboogle_test.jsonl"
    bare.write_text(json.dumps({"id": "b1", "question": "Who?", "golden_answers": ["Ada"]}) + "\n", encoding="utf-8")
    err = _err(capsys, ["eval", "--method", "direct,search_r1", "--dataset", str(bare)])
    assert "search_r1" in err and "--corpus" in err

    # skipped with a message; the rest runs (a scripted model: this is about the plumbing)
    lines: list[str] = []
    backend = ScriptedBackend(tokenizer, ["<search> Firm0 founder </search>", "<answer> Town0 </answer>"])
    run = run_eval("search_r1,dynasearcher", path, backend, out=tmp_path / "runs", skip_unavailable=True,
                   progress=False, log=lines.append)
    assert any(line.startswith("[skip]") and "dynasearcher" in line for line in lines)
    m = run.metrics()
    assert set(m["methods"]) == {"search_r1"}
    s = m["methods"]["search_r1"]
    assert s["n"] == 2 and s["n_searches"] == 1.0
    assert run.config["dataset"] == "hotpotqa" and run.config["corpus"] == "contexts" and run.config["n_passages"] == 4
    feats = pd.read_parquet(run.path / "features.parquet")
    # the search for "Firm0 founder" finds the Firm0 paragraph: a supporting title of h0
    assert feats.loc[feats["example_id"] == "h0", "recall_title"].item() >= 0.5
    assert not math.isnan(m["tool_share"])


def test_demo_notebook_step_reports_failures_and_keeps_the_run(tmp_path, tokenizer):
    """`make demo`'s last step: a missing notebook is skipped, a failing one is reported, the run stays."""
    from workbench.apps.demo import execute_demo_notebooks

    path = _hotpot_file(tmp_path)
    backend = ScriptedBackend(tokenizer, ["<answer> Town0 </answer>"])
    run = run_eval("direct", path, backend, out=tmp_path / "runs", progress=False, log=None)
    before = sorted(p.name for p in run.path.iterdir())
    status = execute_demo_notebooks(run, {
        "99_not_a_notebook": {"run_dir": "{run}"},
        "01_trajectory_inspector": {"run_dir": "{run}/no-such-run"},  # fails in its first code cell
        "02_reward_playground": {"run_dir": "{run}/no-run-here"},  # side by side with the first (2 jobs)
    }, jobs=2)
    assert list(status) == ["99_not_a_notebook", "01_trajectory_inspector", "02_reward_playground"]  # given order
    assert status["99_not_a_notebook"]["status"] == "skipped"
    failed = status["01_trajectory_inspector"]
    assert failed["status"] == "error" and "no-such-run" in failed["error"]
    assert status["02_reward_playground"]["status"] == "error" and "no-run-here" in status["02_reward_playground"]["error"]
    assert (run.path / "notebooks" / "01_trajectory_inspector.ipynb").exists()  # the executed copy shows the cell
    assert set(before) <= {p.name for p in run.path.iterdir()}
    assert run.metrics()["methods"]["direct"]["n"] == 2


def test_demo_notebooks_start_longest_first(tmp_path, monkeypatch):
    """Two at a time, the longest start first (01 + 03 on one worker, 02 + 05 on the other: the pair sums are
    closest); the status keeps the demo's order."""
    from workbench.apps import demo

    started = []
    monkeypatch.setattr(demo, "_execute_one", lambda name, target, params: started.append(name) or {"status": "ok"})
    run = Run(tmp_path / "run")
    status = demo.execute_demo_notebooks(run, jobs=1)
    assert list(status) == list(demo.DEMO_NOTEBOOKS)
    assert started == ["01_trajectory_inspector", "02_reward_playground", "05_results_dashboard", "03_kg_explorer"]
    assert sorted(started) == sorted(demo.DEMO_NOTEBOOK_SECONDS)  # every demo notebook has a time to order by


def test_dynasearcher_runs_on_a_real_kg_from_files(tmp_path, capsys, tokenizer):
    """`--kg FILE...` (CoDEx triples + entity and relation names): DynaSearcher's entity field hits the graph."""
    from pathlib import Path

    fx = Path(__file__).parent / "fixtures"
    kg = [str(fx / "codex" / f) for f in ("test.txt", "entities_en.json", "relations_en.json")]
    request = ('<search> {"query": "Albert Einstein language", "entity": ["the physicist Albert Einstein"], '
               '"relation": ["language"]} </search>')
    backend = ScriptedBackend(tokenizer, [request, "<answer> English </answer>"])
    run = run_eval("dynasearcher", fx / "other_ids_test.jsonl", backend, out=tmp_path / "runs", kg=kg,
                   corpus=str(fx / "flashrag_corpus.jsonl"), limit=2, progress=False, log=None)
    assert run.config["kg"]["triples"] == 28 and run.config["kg"]["labels"] is True
    assert run.config["eval"]["kg"] == kg and run.config["corpus_setting"] == "file"
    df = pd.read_parquet(run.path / "trajectories.parquet")
    assert "(Albert Einstein, languages spoken, written, or signed, English)" in json.dumps(
        df[df["example_id"] == "q-4"].iloc[0].to_dict(), default=str)
    exs = [json.loads(line) for line in (run.path / "examples.jsonl").read_text().splitlines()]
    assert [e["id"] for e in exs[1]["meta"]["kg_entities"]] == ["Q937"]  # "In which city was Albert Einstein born?"

    # from the command line, a wrong label file is a clear error before any model loads
    err = _err(capsys, ["eval", "--method", "dynasearcher", "--dataset", str(fx / "other_ids_test.jsonl"),
                        "--kg", kg[0], str(fx / "codex" / "types_en.json")])
    assert "types file" in err and "entities" in err
