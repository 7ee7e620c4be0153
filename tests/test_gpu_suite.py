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


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    """``bench/gpu/device_check.sh`` with ``DEVICE=cpu`` at toy sizes, once for this file: the tests below read what
    its stages wrote (the profile and the suite on their ``--tiny`` configs, the suite at groups 1 and 4)."""
    out = tmp_path_factory.mktemp("gpucheck") / "out"
    _device_check(out, PROFILE_LIMIT="150", SUITE_LIMIT="120", SUITE_ARGS="--groups 1,4")  # this machine may be busy
    return out


def test_tiny_suite_measures_every_group(dry_run):
    rows = json.loads((dry_run / "suite-tiny.json").read_text())["rows"]
    assert [(r["model"], r["group"]) for r in rows] == [("tiny", 1), ("tiny", 4)]
    for r in rows:
        assert r["rollout_tokens_per_s"] > 0 and r["train_tokens_per_s"] > 0 and r["train_step_s"] > 0
        assert 0 < r["mfu"] < 1 and r["peak_memory_gib"] > 0
        assert r["largest_fit"] == "4 x (24+16)"  # both tried lengths fit in a CPU's memory
        assert r["held_plain_mib"] >= 0 and r["held_ckpt_mib"] >= 0  # measured, not compared (bench/RESULTS.md)
    table = (dry_run / "log.txt").read_text()
    assert "| tiny | 4 |" in table and "MFU" in table and "checkpointed" in table


def test_real_architectures_are_written_out():
    suite = load_suite()
    cfg = suite.CONFIGS["qwen2.5-7b"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (3584, 28, 4)
    with pytest.raises(SystemExit):  # argparse's one-line error, exit 2
        suite.main(["--models", "qwen9"])


PROFILE = SUITE.with_name("rollout_profile.py")
H200 = SUITE.parent / "results" / "h200-first"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_rollout_profile_times_every_engine(dry_run):
    res = json.loads((dry_run / "rollout_profile.json").read_text())
    assert list(res["engines"]) == ["transformers.generate", "hf", "hf+lora", "hf+lora merged", "graph", "graph, eager"]
    timed = [*res["engines"].values(), *(r for g in res["groups"].values() for r in g.values())]
    for r in timed:  # every engine decoded every row to the full length
        rows = r["tokens"] // res["new_tokens"]
        assert r["tokens"] == rows * res["new_tokens"] and r["decode_steps"] == res["new_tokens"]
        assert r["ms_per_step"] > 0
    assert list(res["groups"]) == ["2"] and res["groups"]["2"]["graph"]["tokens"] == 2 * res["new_tokens"]
    assert res["engines"]["graph"]["stats"]["merged_layers"] > 0  # the LoRA was merged for the graph engine's calls
    agree = res["agreement"]  # greedy: the graph engine's tokens are the unmerged LoRA model's, weights as they were
    assert agree["identical_rows"] == agree["rows"] == 4 and agree["weights_restored"] and agree["max_logprob_gap"] < 1e-3
    prof = res["profile_hf+lora"]
    assert prof["wall_ms"] > 0 and prof["top_ops"] and all(o["calls"] > 0 for o in prof["top_ops"])
    assert "| hf+lora merged |" in (dry_run / "log.txt").read_text()


def test_results_gpu_tables_are_the_recorded_runs():
    """The figures RESULTS and the README quote from the H200 run are the ones in its saved JSON files."""
    root = SUITE.parents[2]
    results = (root / "bench" / "RESULTS.md").read_text()
    readme = (root / "README.md").read_text() + "".join(p.read_text() for p in sorted((root / "docs").rglob("*.md")))  # README and the guide
    prof = json.loads((H200 / "rollout_profile.json").read_text())["engines"]
    base = prof["transformers.generate"]["tokens_per_s"]
    for name, label in (("transformers.generate", "transformers.generate (the peer)"), ("hf", "HFBackend, bare model")):
        r = prof[name]
        assert f"| {label} | {r['ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / base:.2f}× |" in results
    assert f"takes {prof['hf+lora']['ms_per_step']:.1f} ms against {prof['transformers.generate']['ms_per_step']:.1f} ms" in readme
    for model in ("qwen2.5-0.5b", "qwen2.5-7b"):
        for r in json.loads((H200 / f"suite-{model}.json").read_text())["rows"]:
            row = (f"| {model} | {r['group']} | {r['rollout_tokens_per_s']:,.0f} | {r['train_tokens_per_s']:,.0f} | "
                   f"{r['train_step_s']:.2f} | {100 * r['mfu']:.1f}% | {r['peak_memory_gib']:.1f} | "
                   f"{r['held_plain_mib'] / 1024:.1f} → {r['held_ckpt_mib'] / 1024:.2f} | "
                   f"{r['step_peak_plain_gib']:.1f} → {r['step_peak_ckpt_gib']:.1f} |")
            assert row in results, row
    steps = [json.loads(line) for line in (H200 / "device_check_train_metrics.jsonl").read_text().splitlines()]
    assert ", ".join(f"{s['time_step_s']:.1f}" for s in steps[:4]) + f" and {steps[4]['time_step_s']:.1f} s a step" in results


def test_device_check_script_says_how_to_run_it(tmp_path):
    import subprocess

    script = SUITE.with_name("device_check.sh")
    helped = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "GGUF=" in helped.stdout and "OUT=" in helped.stdout
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)}
    bare = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=30)
    assert bare.returncode != 0 and "set GGUF" in bare.stderr and not list(tmp_path.iterdir())


def _device_check(out: Path, **env: str):
    import os
    import subprocess
    import sys

    from workbench.core.models import packaged_gguf_path

    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "GGUF": str(packaged_gguf_path("smollm2-135m")),
           "OUT": str(out), **env}
    return subprocess.run(["bash", str(SUITE.with_name("device_check.sh"))], cwd=SUITE.parents[2], env=env,
                          capture_output=True, text=True, timeout=900)


def _stages(out: Path) -> dict[str, str]:
    import re

    return dict(re.findall(r"^\[([\w.-]+)\] (rc=\d+|skipped)", (out / "log.txt").read_text(), re.M))


def test_device_check_dry_run_on_cpu_runs_every_stage(dry_run):
    """The device script end to end with DEVICE=cpu at toy sizes: each stage runs and leaves its results (everything
    a GPU loan returns but the CUDA figures), the carried GGUF file standing for the adapters' packaged model."""
    import tarfile

    out = dry_run
    assert _stages(out) == {"profile": "rc=0", "eval-shipped": "rc=0", "eval-profiled": "skipped", "train": "rc=0",
                            "eval-trained": "rc=0", "suite-tiny": "rc=0"}, (out / "log.txt").read_text()[-3000:]
    prof = json.loads((out / "rollout_profile.json").read_text())
    assert list(prof["engines"]) == ["transformers.generate", "hf", "hf+lora", "hf+lora merged", "graph", "graph, eager"]
    rows = json.loads((out / "suite-tiny.json").read_text())["rows"]
    assert rows and all(r["model"] == "tiny" and r["rollout_tokens_per_s"] > 0 for r in rows)
    with tarfile.open(out / "eval.tgz") as t:
        evals = {m.name.split("/")[1].split("-", 2)[2].rsplit("-", 1)[0]: json.load(t.extractfile(m))
                 for m in t.getmembers() if m.name.endswith("/metrics.json")}
    assert sorted(evals) == ["gpu-shipped", "gpu-trained"]
    assert all(m["n_examples"] == 2 and "search_r1+lora" in m["methods"] for m in evals.values())
    with tarfile.open(out / "train.tgz") as t:
        names = t.getnames()
        steps = [json.loads(line) for m in t.getmembers() if m.name.endswith("/metrics.jsonl")
                 for line in t.extractfile(m).read().decode().splitlines()]
    assert [s["step"] for s in steps] == [1] and steps[0]["time_step_s"] > 0
    assert not any(n.endswith("trainer_state.safetensors") for n in names)


def test_device_check_ends_within_its_budget(tmp_path):
    """BUDGET bounds the whole script: a stage gets what is left of it, and once it is spent the rest are skipped
    (said in the log), so one device call returns whatever finished."""
    import time

    out = tmp_path / "out"
    t0 = time.perf_counter()
    _device_check(out, BUDGET="5")
    stages = _stages(out)
    assert time.perf_counter() - t0 < 45
    # the machine stage takes some of the 5 s; the tiny profile needs more than the rest (it loads torch and the
    # model, then times six engines; ~10 s at its toy sizes on a quiet 2-core machine): stopped (or skipped)
    assert stages["profile"] in ("rc=124", "skipped")
    assert all(stages[s] == "skipped" for s in ("eval-shipped", "eval-profiled", "train", "suite-tiny"))
    assert "budget is spent" in (out / "log.txt").read_text()


def test_device_check_runs_the_stages_asked_for_without_the_gguf(tmp_path):
    """STAGES=suite with MODEL_DIR (config and tokenizer) and no GGUF: the suite runs, nothing else does; eval or
    train without GGUF is refused by name."""
    from workbench.core.models import resolve_model_path

    out = tmp_path / "out"
    r = _device_check(out, STAGES="suite", GGUF="", MODEL_DIR=resolve_model_path(), SUITE_LIMIT="120",
                      SUITE_ARGS="--groups 1 --fit-lengths 8")  # the stage runs; its figures are checked above
    assert r.returncode == 0 and _stages(out) == {"suite-tiny": "rc=0"}, (out / "log.txt").read_text()[-2000:]
    r = _device_check(tmp_path / "out2", STAGES="eval", GGUF="")
    assert r.returncode != 0 and "set GGUF" in r.stderr


def test_results_graph_engine_figures_are_the_recorded_run():
    """The graph engine's H200 figures RESULTS, the README and the guide quote are the ones in its saved files."""
    root = SUITE.parents[2]
    rec = SUITE.parent / "results" / "h200-graph"
    results = (root / "bench" / "RESULTS.md").read_text()
    guide = (root / "README.md").read_text() + "".join(p.read_text() for p in sorted((root / "docs").rglob("*.md")))
    prof = json.loads((rec / "graph_profile.json").read_text())

    def cell(r):
        return f"{r['ms_per_step']:.1f} ms, {r['tokens_per_s']:,.0f} tok/s"

    ratios = []
    for n in (8, 24, 32):
        cells = " | ".join(cell(prof[f"{k} {n}"]) for k in ("generate", "hf+lora", "graph eager", "graph"))
        ratios.append(prof[f"graph {n}"]["tokens_per_s"] / prof[f"generate {n}"]["tokens_per_s"])
        assert f"| {n} | {cells} | **{ratios[-1]:.2f}×** |" in results
    assert f"**{ratios[0]:.2f}× / {ratios[1]:.2f}× / {ratios[2]:.2f}×**" in results
    span = f"{min(ratios):.1f}–{max(ratios):.1f}× `transformers.generate` at groups of 8–32"
    assert span in guide and prof["stats"]["graph_fallback"] is None and prof["agreement"]["weights_restored"]
    shipped = json.loads((rec / "eval_shipped_metrics.json").read_text())
    trained = json.loads((rec / "eval_trained_metrics.json").read_text())
    cem = shipped["methods"]["search_r1+lora"]["cem"]
    assert f"**{shipped['rollout_seconds']:.1f} s** of rollouts, cover-EM {cem:.3f}" in results
    assert f"{shipped['rollout_seconds']:.1f} s, cover-EM {cem:.3f}" in guide
    assert f"cover-EM **{trained['methods']['search_r1+lora']['cem']:.3f}**" in results
    steps = [json.loads(line) for line in (rec / "device_check_train_metrics.jsonl").read_text().splitlines()]
    mean_step = sum(s["time_step_s"] for s in steps) / len(steps)
    assert len(steps) == 8 and f"**{mean_step:.1f} s a step**" in results
