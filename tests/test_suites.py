"""``workbench eval --suite``: a paper's table of datasets from a FlashRAG-layout folder (``tests/fixtures/flashrag_suite``,
six of Search-R1's seven datasets: PopQA left out), the table's arithmetic, and its Markdown, CSV and LaTeX."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest

from tests.test_dashboard import _eval_run
from workbench.apps import cli
from workbench.data.example import Example
from workbench.eval import suites

FOLDER = Path(__file__).resolve().parent / "fixtures" / "flashrag_suite"
SUITE = suites.get_suite("search-r1")


def test_the_folder_is_found_in_flashrags_layout_and_what_it_lacks_is_named():
    found, missing = suites.find_files(SUITE, FOLDER)
    assert [d.name for d, _ in found] == ["nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"]
    assert {d.name: p.name for d, p in found}["hotpotqa"] == "dev.jsonl"  # no test answers: dev, as the paper
    assert {d.name: p.name for d, p in found}["nq"] == "test.jsonl"
    assert [(d.name, w) for d, w in missing] == [("popqa", "popqa/test.jsonl or popqa/dev.jsonl")]
    found, missing = suites.find_files(SUITE, FOLDER, split="dev")  # a forced split
    assert [d.name for d, _ in found] == ["hotpotqa", "2wikimultihopqa", "musique"]


def test_a_wrong_suite_or_folder_is_one_line_naming_it(tmp_path, capsys):
    with pytest.raises(ValueError, match="no such suite; one of: search-r1"):
        suites.get_suite("search-r2")
    with pytest.raises(ValueError, match="not a directory"):
        suites.find_files(SUITE, tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"none of the suite 'search-r1'.s datasets is there \(looked for nq/test"):
        suites.find_files(SUITE, tmp_path)
    for argv, needle in ((["--suite", "search-r1"], "--suite and --data-dir go together"),
                         (["--suite", "search-r1", "--data-dir", str(FOLDER), "--dataset", "x.jsonl"], "drop --dataset"),
                         (["--suite", "nope", "--data-dir", str(FOLDER)], "no such suite")):
        assert cli.main(["eval", "--method", "direct", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("workbench eval: error: ") and needle in err and err.count("\n") == 1, err


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tokenizer):
    """Eval runs standing for two datasets of the suite (a scripted policy): on "nq" direct answers 2 of 4 questions
    right, and so does search_r1; on "musique" direct 0 of 2, search_r1 1 of 2."""
    root = tmp_path_factory.mktemp("suite-runs")
    nq = [Example(f"n{i}", f"Who is {i}?", ["Ada Quist" if i < 2 else "Bo Lind"], dataset="nq") for i in range(4)]
    mu = [Example(f"m{i}", f"Where is {i}?", ["Ostrevia" if i == 0 else "Hallervik"], dataset="musique", hops=2)
          for i in range(2)]
    _eval_run(root, "20261204-000000-eval-nq", tokenizer, nq, {
        "direct": ["<answer> Ada Quist </answer>"], "search_r1": ["<answer> Ada Quist </answer>"]}, "nq")
    _eval_run(root, "20261204-000001-eval-mu", tokenizer, mu, {
        "direct": ["<answer> nobody </answer>"], "search_r1": ["<answer> Ostrevia </answer>"]}, "musique")
    return {"nq": root / "20261204-000000-eval-nq", "musique": root / "20261204-000001-eval-mu"}


def test_the_table_has_a_cell_per_method_and_dataset_and_the_papers_averages(two_runs):
    from workbench.eval.paired import wilson

    t = suites.suite_table(SUITE, two_runs, ["direct", "search_r1"])
    assert [d["name"] for d in t["datasets"]] == ["nq", "musique"]  # the suite's order, only what ran
    direct = t["rows"]["direct"]
    assert direct["cells"]["nq"]["mean"] == 0.5 and direct["cells"]["nq"]["n"] == 4
    assert (direct["cells"]["nq"]["lo"], direct["cells"]["nq"]["hi"]) == pytest.approx(wilson(2, 4))
    assert direct["averages"] == {"general": 0.5, "multi-hop": 0.0, "all": 0.25}  # means of the datasets' means
    assert t["rows"]["search_r1"]["averages"]["all"] == pytest.approx((0.5 + 0.5) / 2)
    md = suites.to_markdown(t, ["PopQA (popqa/test.jsonl)"], "Settings: x.")
    assert "| method | NQ | MuSiQue | general avg | multi-hop avg | avg |" in md
    assert "| direct | 0.500 [0.15, 0.85] (n=4) | 0.000 [0.00, 0.66] (n=2) | 0.500 | 0.000 | 0.250 |" in md
    assert ("Not in the folder, so not in the table: PopQA (popqa/test.jsonl). So the general average is over 1 of its 3 "
            "datasets and the multi-hop average is over 1 of its 4 datasets, not the paper's.") in md
    assert "Retrieval recall" not in md  # no question of these runs names its gold passages
    rows = list(csv.DictReader(io.StringIO(suites.to_csv(t))))
    assert {(r["method"], r["dataset"]): r["em"] for r in rows}[("direct", "musique")] == "0.000000"
    assert [r["dataset"] for r in rows if r["method"] == "direct"] == [
        "nq", "musique", "general average", "multi-hop average", "all average"]
    tex = suites.to_latex(t)
    assert r"\begin{tabular}{lccccc}" in tex and r"search\_r1 & 0.500" in tex and tex.rstrip().endswith(r"\end{tabular}")


@pytest.mark.slow
def test_the_suite_runs_the_real_model_once_over_every_dataset_the_folder_has(tmp_path, capsys):
    """The real model over the six datasets of the fixture folder, one question each, with the folder's corpus:
    one eval run a dataset, the model loaded once, the paper's top-3 passages, one table in three formats."""
    rc = cli.main(["eval", "--suite", "search-r1", "--data-dir", str(FOLDER), "--corpus", str(FOLDER / "wiki.jsonl"),
                   "--method", "direct,search_r1", "--limit", "1", "--max-new-tokens", "24", "--max-turns", "2",
                   "--out", str(tmp_path), "--no-progress", "--threads", "1"])
    printed = capsys.readouterr().out
    assert rc == 0
    (folder,) = tmp_path.glob("*-suite-search-r1")
    js = json.loads((folder / "suite.json").read_text())
    assert list(js["runs"]) == ["nq", "triviaqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"]
    assert js["missing"] == ["PopQA (popqa/test.jsonl or popqa/dev.jsonl)"]
    assert printed.count("[model]") == 6 and printed.count("loaded for an earlier dataset") == 5
    for name, run in js["runs"].items():
        config = json.loads((Path(run) / "config.json").read_text())
        assert config["eval"]["protocol_kwargs"]["top_k"] == 3 and config["n_passages"] == 8, name
        assert config["split"] == ("dev" if name in ("hotpotqa", "2wikimultihopqa", "musique") else "test"), name
        card = json.loads((Path(run) / "card.json").read_text())  # the eval card, with the files' hashes
        assert len(card["model"]["sha256"]) == 64 and card["retrieval"]["n_passages"] == 8
        assert card["retrieval"]["sha256"] == hashlib.sha256((FOLDER / "wiki.jsonl").read_bytes()).hexdigest()
        assert card["data"]["sha256"] == hashlib.sha256(Path(config["dataset_path"]).read_bytes()).hexdigest()
    for d in js["datasets"]:
        assert all(row["cells"][d["name"]]["n"] == 1 for row in js["rows"].values())
    md = (folder / "table.md").read_text()
    assert "| method | NQ | TriviaQA | HotpotQA | 2Wiki | MuSiQue | Bamboogle | general avg | multi-hop avg | avg |" in md
    assert "corpus" in md and "model `smollm2-135m`" in md and md in printed
    assert (folder / "table.csv").read_text().count("\n") == 1 + 2 * (6 + 3)
    # HotpotQA's records name their supporting facts: each method's recall of them, over its one question
    assert "Retrieval recall" in md and "| method | HotpotQA |" in md
    recall = {m: row["cells"]["hotpotqa"]["recall"] for m, row in js["rows"].items()}
    assert recall["direct"] == 0.0 and 0.0 <= recall["search_r1"] <= 1.0  # no search, no gold passage
    assert js["rows"]["search_r1"]["cells"]["nq"]["recall"] is None  # NQ names no supporting facts
    assert r"\toprule" in (folder / "table.tex").read_text()
