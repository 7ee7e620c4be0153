"""``bench/gpu/suite.py`` runs on CPU with its tiny config, so the GPU suite cannot rot between GPU loans."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "suite.py"


def load_suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_suite_measures_every_group(tmp_path, one_thread, capsys):
    suite = load_suite()
    out = tmp_path / "gpu.json"
    rows = suite.main(["--tiny", "--groups", "1,4", "--out", str(out)])
    assert [(r["model"], r["group"]) for r in rows] == [("tiny", 1), ("tiny", 4)]
    for r in rows:
        assert r["rollout_tokens_per_s"] > 0 and r["train_tokens_per_s"] > 0 and r["train_step_s"] > 0
        assert 0 < r["mfu"] < 1 and r["peak_memory_gib"] > 0
        assert r["largest_fit"] == "4 x (24+16)"  # both tried lengths fit in a CPU's memory
        assert r["held_plain_mib"] >= 0 and r["held_ckpt_mib"] >= 0  # measured, not compared (bench/RESULTS.md)
    assert json.loads(out.read_text())["rows"] == rows
    table = capsys.readouterr().out
    assert "| tiny | 4 |" in table and "MFU" in table and "checkpointed" in table


def test_real_architectures_are_written_out():
    suite = load_suite()
    cfg = suite.CONFIGS["qwen2.5-7b"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (3584, 28, 4)
    with pytest.raises(SystemExit):  # argparse's one-line error, exit 2
        suite.main(["--models", "qwen9"])
