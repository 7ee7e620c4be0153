"""``bench/search_depth.py``: searches per question against the gold hop count, per hop level."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "search_depth.py"


def _depth():
    spec = importlib.util.spec_from_file_location("search_depth", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(parent: Path, name: str, rows: list[tuple[int, int, float, str]], method: str = "search_r1+lora") -> Path:
    run = parent / name
    run.mkdir(parents=True)
    pd.DataFrame([{"example_id": f"q{i}", "method": method, "hops": h, "n_searches": s, "cem": c, "finish_reason": f}
                  for i, (h, s, c, f) in enumerate(rows)]).to_parquet(run / "trajectories.parquet")
    return run


def test_gap_and_shares_per_hop_level(tmp_path, capsys):
    _run(tmp_path, "a", [(1, 2, 1.0, "answer"), (1, 1, 0.0, "answer"), (3, 2, 0.0, "answer"), (3, 3, 1.0, "max_turns")])
    _run(tmp_path, "b", [(1, 2, 1.0, "answer"), (3, 4, 0.0, "answer")])
    _run(tmp_path, "other", [(1, 9, 0.0, "answer")], method="direct")
    out = tmp_path / "depth.json"
    t = _depth().main([str(tmp_path / "*"), "--method", "search_r1+lora", "--out", str(out)])
    one, three = t.loc[1], t.loc[3]
    assert one.answers == 3 and one.searches == pytest.approx(5 / 3) and one.gap == pytest.approx(2 / 3)
    assert one.exact == pytest.approx(1 / 3) and one.enough == 1.0 and one.cover_em == pytest.approx(2 / 3)
    assert three.gap == pytest.approx(0.0) and three.exact == pytest.approx(1 / 3) and three.enough == pytest.approx(2 / 3)
    assert three.cem_enough == pytest.approx(0.5) and three.cut == pytest.approx(1 / 3)
    saved = json.loads(out.read_text())
    assert [r["hops"] for r in saved["rows"]] == [1, 3] and len(saved["runs"]) == 2  # "other" has no such answer
    assert "| 3 | 3 | 0.333 | 3.00 | +0.00 |" in capsys.readouterr().out


def test_no_usable_run_is_one_line_naming_what_was_skipped(tmp_path, capsys):
    bad = tmp_path / "old"
    bad.mkdir()
    pd.DataFrame({"example_id": ["q"], "cem": [1.0]}).to_parquet(bad / "trajectories.parquet")
    with pytest.raises(SystemExit, match=r"no eval run with hops.*skipped: .*old.*pass eval run directories"):
        _depth().main([str(bad)])
    _run(tmp_path, "good", [(2, 2, 1.0, "answer")])
    t = _depth().main([str(bad), str(tmp_path / "good")])  # the good one is read, the old one named on stderr
    assert list(t.index) == [2] and "skipped" in capsys.readouterr().err


def test_answers_from_the_middle_of_the_chain_are_counted(tmp_path, capsys):
    """``short``: the answer names a tail of the question's KG path before the last hop (the policy stopped early);
    the final tail or anything else does not count; without ``examples.jsonl`` the column is empty."""
    run = tmp_path / "r"
    run.mkdir()
    chain = [{"head": "A", "relation": "father", "tail": "Bo Fenn"}, {"head": "Bo Fenn", "relation": "father",
             "tail": "Cy Fenn"}, {"head": "Cy Fenn", "relation": "place of birth", "tail": "Dunmore"}]
    examples = [{"id": f"q{i}", "question": "?", "answers": ["Dunmore"], "hops": 3, "kg_path": chain} for i in range(4)]
    (run / "examples.jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples))
    pd.DataFrame({"example_id": [f"q{i}" for i in range(4)], "method": "m", "hops": 3, "n_searches": [2, 1, 3, 2],
                  "cem": [0.0, 0.0, 1.0, 0.0], "finish_reason": "answer",
                  "answer": ["Cy Fenn", "Bo Fenn", "Dunmore", "somewhere"]}).to_parquet(run / "trajectories.parquet")
    t = _depth().main([str(run)])
    assert t.loc[3].short == pytest.approx(0.5)
    assert "| answered mid-chain |" in capsys.readouterr().out
    (run / "examples.jsonl").unlink()
    t = _depth().main([str(run)])
    assert t.loc[3].short != t.loc[3].short and "| – |" in capsys.readouterr().out
