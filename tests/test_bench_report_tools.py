"""The two scripts behind the recipe's figures in ``bench/RESULTS.md``: ``plot_curves.py`` (training curves as
SVG) and ``compare_methods.py`` (per-hop held-out table, also across two eval runs)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _metrics_run(path: Path, rewards: list[float]) -> Path:
    path.mkdir(parents=True)
    lines = [json.dumps({"step": i + 1, "reward_mean": r, "loss": 1.0 / (i + 1)}) for i, r in enumerate(rewards)]
    lines.insert(1, "not json")  # a torn line is skipped
    lines.append(json.dumps({"eval_cem": 0.5}))  # an eval row without a step is not a training point
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_plot_curves_writes_one_line_per_run_and_panel(tmp_path, monkeypatch):
    pc = _load("plot_curves")
    a = _metrics_run(tmp_path / "a", [0.0, 0.5, 1.0, 0.5])
    b = _metrics_run(tmp_path / "b", [0.2, 0.2])
    assert pc.read_metric(str(a), "reward_mean") == [(1, 0.0), (2, 0.5), (3, 1.0), (4, 0.5)]
    assert pc.moving_average([0.0, 0.5, 1.0, 0.5], 2) == [0.0, 0.25, 0.75, 0.75]
    out = tmp_path / "fig" / "c.svg"
    monkeypatch.setattr(sys, "argv", ["plot_curves", str(a), str(b), "--metric", "reward_mean", "--metric", "loss",
                                      "--label", "A", "--label", "B", "--out", str(out)])
    pc.main()
    root = ET.fromstring(out.read_text())  # well-formed SVG
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}polyline")) == 2 * 2 * 2  # (raw + smoothed) x runs x panels
    assert {t.text for t in root.findall(f"{ns}text")} >= {"A", "B", "reward_mean", "loss"}


def test_plot_curves_names_a_missing_run(tmp_path):
    pc = _load("plot_curves")
    with pytest.raises(SystemExit, match="metrics.jsonl does not exist"):
        pc.read_metric(str(tmp_path / "nope"), "loss")


def _eval_run(path: Path, method: str, cem: dict[str, float]) -> Path:
    from workbench.storage.runs import Run

    run = Run.create(path, kind="eval", name="t", config={"kind": "eval"}, run_id="r")
    ids = list(cem)
    df = pd.DataFrame({"example_id": ids, "method": method, "hops": [1 + i % 2 for i in range(len(ids))],
                       "cem": [cem[i] for i in ids], "n_searches": 1, "format_ok": True, "answer": "x"})
    df.to_parquet(run.path / "trajectories.parquet")
    return run.path


def test_compare_methods_pairs_two_eval_runs_by_question(tmp_path, monkeypatch, capsys):
    cm = _load("compare_methods")
    a = _eval_run(tmp_path / "a", "m+lora", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    b = _eval_run(tmp_path / "b", "m+lora", {"q4": 1.0, "q3": 1.0, "q2": 1.0, "q1": 0.0})  # other order
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m+lora", "--b-run", str(b), "--b", "m+lora"])
    cm.main()
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| all")]
    assert rows and "| 0.250 " in rows[0] and "| 0.750 " in rows[0] and "+0.500" in rows[0]
    lo, hi = cm.paired_interval(np.array([0.0, 1, 0, 0]), np.array([0.0, 1, 1, 1]))
    assert 0 <= lo <= 0.75 <= hi <= 1.0

    c = _eval_run(tmp_path / "c", "m+lora", {"q1": 1.0, "q9": 1.0})
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m+lora", "--b-run", str(c), "--b", "m+lora"])
    with pytest.raises(SystemExit, match="in one run only"):
        cm.main()
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "other"])
    with pytest.raises(SystemExit, match="no trajectories of method 'other'"):
        cm.main()
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m+lora", "--metric", "cover_em"])
    with pytest.raises(SystemExit, match=r"--metric 'cover_em' is not a column of .*; one of: .*\bcem\b"):
        cm.main()


def test_compare_methods_compares_a_reward_from_the_features(tmp_path, monkeypatch, capsys):
    cm = _load("compare_methods")
    runs = []
    for name, em in (("a", [0.0, 1.0, 0.0, 0.0]), ("b", [1.0, 1.0, 1.0, 0.0])):
        run = _eval_run(tmp_path / name, "m", {f"q{i}": 0.5 for i in range(4)})  # cem 0.5: not what is compared
        df = pd.read_parquet(run / "trajectories.parquet").assign(id=[f"{name}{i}" for i in range(4)])
        df.to_parquet(run / "trajectories.parquet")
        pd.DataFrame({"id": df["id"], "em": em, "f1": em, "cem": em, "format_ok": True, "answered": True,
                      "has_gold": True}).to_parquet(run / "features.parquet")
        runs.append(run)
    monkeypatch.setattr(sys, "argv", ["cm", str(runs[0]), "--a", "m", "--b-run", str(runs[1]), "--b", "m",
                                      "--reward", "search_r1"])
    cm.main()
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("| all"))
    assert "reward search_r1" in out and "| 0.250 " in row and "| 0.750 " in row and "+0.500" in row

    feats = pd.read_parquet(runs[1] / "features.parquet")
    feats.loc[0, ["em", "f1", "cem"]] = np.nan  # a feature the reward needs is missing for q0 in B
    feats.to_parquet(runs[1] / "features.parquet")
    cm.main()
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("| all"))
    assert "1 question(s) without a value" in out and "q0" in out and row.startswith("| all | 3 |")
    monkeypatch.setattr(sys, "argv", ["cm", str(runs[0]), "--reward", "nope"])
    with pytest.raises(SystemExit, match="unknown reward preset 'nope'"):
        cm.main()


def test_compare_methods_pools_the_runs_of_two_splits(tmp_path, monkeypatch, capsys):
    cm = _load("compare_methods")
    a_dev = _eval_run(tmp_path / "ad", "m", {"d1": 0.0, "d2": 1.0})
    a_test = _eval_run(tmp_path / "at", "m", {"t1": 0.0, "t2": 0.0})
    b_dev = _eval_run(tmp_path / "bd", "m", {"d1": 1.0, "d2": 1.0})
    b_test = _eval_run(tmp_path / "bt", "m", {"t1": 1.0, "t2": 0.0})
    monkeypatch.setattr(sys, "argv", ["cm", str(a_dev), str(a_test), "--a", "m", "--b-run", str(b_dev), str(b_test),
                                      "--b", "m"])
    cm.main()
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| all")]
    assert rows and "| 4 |" in rows[0] and "| 0.250 " in rows[0] and "| 0.750 " in rows[0]
    monkeypatch.setattr(sys, "argv", ["cm", str(a_dev), str(a_dev), "--a", "m"])  # the same questions twice
    with pytest.raises(SystemExit, match="in more than one of"):
        cm.main()


def test_compare_methods_takes_b_as_the_mean_over_seeds(tmp_path, monkeypatch, capsys):
    """One start (A) against two training seeds of B: each question's B value is its mean over the seeds, and the
    saved comparison keeps both seeds' runs and tables, as ``bench/ablate.py`` saves an arm."""
    from workbench.eval import paired

    cm = _load("compare_methods")
    a = _eval_run(tmp_path / "a", "m", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    s0 = _eval_run(tmp_path / "s0", "m", {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    s1 = _eval_run(tmp_path / "s1", "m", {"q1": 1.0, "q2": 0.0, "q3": 1.0, "q4": 0.0})
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--b", "m", "--b-seed-runs", str(s0),
                                      "--b-seed-runs", str(s1), "--save", str(tmp_path / "res")])
    cm.main()
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| all")]
    assert rows and "| 0.250 " in rows[0] and "| 0.500 " in rows[0] and "+0.250" in rows[0]  # (2 + 2) / 2 of 4
    c = paired.Comparison.load(tmp_path / "res" / "comparison.json")
    assert c.b.runs == [[str(s0)], [str(s1)]] and len(c.b.seeds) == 2
    assert list(c.seed_table()["mean"]) == [0.25, 0.5, 0.5]  # A, then B's two seeds
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--b-run", str(s0), "--b-seed-runs", str(s1)])
    with pytest.raises(SystemExit, match="--b-run and --b-seed-runs"):
        cm.main()
    s2 = _eval_run(tmp_path / "s2", "m", {"q1": 1.0, "q2": 0.0, "q3": 1.0})  # a seed evaluated on fewer questions
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--b", "m", "--b-seed-runs", str(s0), "--b-seed-runs",
                                      str(s2)])
    with pytest.raises(SystemExit, match=re.escape(f"the runs {s2} do not cover the same questions as {s0} (e.g. 'q4')")):
        cm.main()


def test_compare_methods_pairs_two_sides_of_seeds(tmp_path, monkeypatch, capsys):
    """A lever against its control, each with two seeds: each side's question value is its mean over its seeds, and
    the saved comparison keeps both sides' seeds; naming A twice, or A's seeds without B's runs, is a one-line error."""
    from workbench.eval import paired

    cm = _load("compare_methods")
    c0 = _eval_run(tmp_path / "c0", "m", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    c1 = _eval_run(tmp_path / "c1", "m", {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    l0 = _eval_run(tmp_path / "l0", "m", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0})
    l1 = _eval_run(tmp_path / "l1", "m", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 1.0})
    monkeypatch.setattr(sys, "argv", ["cm", "--a", "m", "--b", "m", "--a-seed-runs", str(c0), "--a-seed-runs", str(c1),
                                      "--b-seed-runs", str(l0), "--b-seed-runs", str(l1), "--save", str(tmp_path / "r")])
    cm.main()
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| all")]
    assert rows and "| 0.375 " in rows[0] and "| 0.875 " in rows[0] and "+0.500" in rows[0]  # 1.5 / 4 and 3.5 / 4
    c = paired.Comparison.load(tmp_path / "r" / "comparison.json")
    assert c.a.runs == [[str(c0)], [str(c1)]] and c.b.runs == [[str(l0)], [str(l1)]]
    assert list(c.seed_table()["mean"]) == [0.25, 0.5, 0.75, 1.0]  # A's two seeds, then B's
    assert set(c.provenance["runs"]) == {str(c0), str(c1), str(l0), str(l1)}
    for argv, msg in ((["cm", str(c0), "--a-seed-runs", str(c1), "--b-run", str(l0)], "name A's eval runs once"),
                      (["cm", "--b-run", str(l0)], "name A's eval runs once"),
                      (["cm", "--a-seed-runs", str(c0), "--a-seed-runs", str(c1)], "with --a-seed-runs, name B's")):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit, match=msg):
            cm.main()


def test_ship_adapter_casts_to_bf16_and_names_both_stages(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file, save_file

    sa = _load("ship_adapter")
    sft = tmp_path / "adapters" / "a-sft"  # the stage the RL run started from, shipped before
    sft.mkdir(parents=True)
    (sft / "provenance.json").write_text(json.dumps({"run_id": "sft-run", "checkpoint": "step_000168", "commit": "c0"}))
    ck = tmp_path / "rl-run" / "checkpoints" / "step_000008"
    ck.mkdir(parents=True)
    save_file({"lora_A": torch.full((2, 3), 1 / 3)}, ck / "adapter_model.safetensors")
    (ck / "adapter_config.json").write_text(json.dumps({"r": 16}))
    (ck / "trainer_state.json").write_text("{}")  # a complete checkpoint
    (tmp_path / "rl-run" / "config.json").write_text(json.dumps({"kind": "train", "init_adapter": str(sft)}))
    (tmp_path / "rl-run" / "metrics.jsonl").write_text(
        json.dumps({"step": 8, "loss": 0.0, "reward_mean": 0.8, "cem": 0.4, "time_step_s": 100}) + "\n")
    monkeypatch.setattr(sys, "argv", ["sa", str(tmp_path / "rl-run"), "--name", "a-sft-grpo", "--commit", "c1",
                                      "--root", str(tmp_path / "adapters")])
    sa.main()
    out = tmp_path / "adapters" / "a-sft-grpo"
    w = load_file(out / "adapter_model.safetensors")["lora_A"]
    assert w.dtype == torch.bfloat16 and torch.allclose(w.float(), torch.full((2, 3), 1 / 3), atol=1e-3)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["checkpoint"] == "step_000008" and prov["commit"] == "c1"
    assert prov["metrics"] == [{"step": 8, "loss": 0.0, "reward_mean": 0.8, "cem": 0.4}]
    assert prov["init_adapter"] == {"path": str(sft), "run_id": "sft-run", "checkpoint": "step_000168", "commit": "c0"}


def test_compare_methods_intervals_are_scipys():
    cm = _load("compare_methods")
    lo, hi = cm.wilson(3, 4)  # (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), z = 1.95996
    assert (round(lo, 4), round(hi, 4)) == (0.3006, 0.9544)
    assert cm.wilson(0, 4)[0] == 0.0 and cm.wilson(4, 4)[1] == 1.0
    assert cm.proportion_interval(np.array([0.0, 1, 1, 1])) == cm.wilson(3, 4)
    half = np.array([0.5, 1.0, 0.5, 0.0])  # means over samples: not a proportion per question, so a bootstrap
    assert cm.proportion_interval(half) == cm.mean_interval(half)
    lo, hi = cm.mean_interval(half)
    assert 0.0 <= lo < half.mean() < hi <= 1.0
    assert cm.mean_interval(np.array([0.7])) == (0.7, 0.7)
    assert all(np.isnan(cm.mean_interval(np.array([]))))


@pytest.mark.parametrize("adapter", sorted(p.name for p in (BENCH.parent / "data" / "adapters").iterdir() if p.is_dir()))
def test_a_shipped_adapters_command_rebuilds_its_config(adapter):
    """provenance.json's ``command`` parsed by the real CLI gives the recorded config back, field for field."""
    import dataclasses
    import shlex

    from workbench import methods
    from workbench.apps.cli import build_parser
    from workbench.rl.sft import SFTConfig
    from workbench.rl.train_config import TrainConfig

    prov = json.loads((BENCH.parent / "data" / "adapters" / adapter / "provenance.json").read_text())
    assert prov["command"] == _load("ship_adapter").command(prov["config"])
    argv = shlex.split(prov["command"])
    assert argv[:2] == ["workbench", prov["config"]["kind"] if prov["config"]["kind"] == "sft" else "train"]
    cls = SFTConfig if argv[1] == "sft" else TrainConfig
    args = build_parser().parse_args(argv[1:])
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name) is not None}
    rebuilt = dataclasses.asdict(methods.train_config(config_class=cls, **given))
    recorded = prov["config"]
    differ = {k: (recorded[k], rebuilt[k]) for k in rebuilt if k in recorded and recorded[k] != rebuilt[k]}
    assert not differ
    assert prov["data"]["dataset"] == "world" and prov["data"]["world"] == recorded["world"]
