"""Copy a run's adapter into the project (``data/adapters/<name>/``), cast to bf16, with its provenance.

    .venv/bin/python bench/ship_adapter.py RUN_DIR --name search_r1-sft [--dtype bfloat16]

Writes ``adapter_model.safetensors`` (the LoRA weights of the run's newest checkpoint, cast to
``--dtype``: bf16 halves the file, LoRA deltas lose nothing that greedy decoding notices — the demo's
comparison is measured with the shipped file), ``adapter_config.json`` (base model by its alias) and
``provenance.json`` (the run's config, its SFT/RL metrics per step, the checkpoint step, the git commit
of the code that trained it, and for an RL run started from an adapter, that adapter's run and commit), with the
``command`` that trains the same run again (every config value that is not the default, as flags) and the
``data`` it was trained on (dataset, split, question types, expert traces, the world's config).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

#: Per-step figures kept in provenance.json: SFT's loss, RL's reward, cover-EM and searches.
STEP_KEYS = ("step", "loss", "tokens", "grad_norm", "reward_mean", "cem", "searches_mean", "format_ok")
#: Config keys that say what a run was trained on.
DATA_KEYS = ("dataset", "split", "question_types", "traces", "trace_hops", "max_traces", "world")


def command(config: dict) -> str:
    """``workbench train|sft --method M`` with every config field that differs from what ``--method M`` alone
    gives (the method's declaration over the defaults), as flags (JSON for lists and dicts): the command that trains
    the same run again."""
    import dataclasses
    import shlex

    from workbench import methods
    from workbench.rl.sft import SFTConfig
    from workbench.rl.train_config import TrainConfig

    kind = "sft" if config.get("kind") == "sft" else "train"
    cls = SFTConfig if kind == "sft" else TrainConfig
    method = config.get("method")
    data = {"traces": config["traces"]} if kind == "sft" and config.get("traces") else {}  # SFT needs data
    base = methods.get_method(method).train_config(cls, **data) if method else cls(**data)
    args = ["workbench", kind] + (["--method", method] if method else [])
    for f in dataclasses.fields(cls):
        if f.name == "method" or f.name not in config:
            continue
        value = config[f.name]
        if value is None or (value == getattr(base, f.name) and f.name not in data):
            continue
        text = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
        args += [f"--{f.name.replace('_', '-')}", text]
    return " ".join(shlex.quote(a) for a in args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--name", required=True, help="folder under data/adapters/")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--commit", default=None, help="commit that trained it (default: git rev-parse HEAD)")
    ap.add_argument("--root", default=None, help="folder the adapter folder is written in (default: data/adapters/)")
    args = ap.parse_args()
    import torch
    from safetensors.torch import load_file, save_file

    from workbench.rl.policy import adapter_dir
    from workbench.util.io import atomic_write_json
    from workbench.util.paths import repo_root

    src = adapter_dir(args.run_dir)
    out = (Path(args.root) if args.root else repo_root() / "data" / "adapters") / args.name
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(getattr(torch, args.dtype)).contiguous() for k, v in load_file(src / "adapter_model.safetensors").items()}
    save_file(tensors, out / "adapter_model.safetensors", metadata={"format": "pt"})
    (out / "adapter_model.safetensors").chmod(0o644)
    atomic_write_json(out / "adapter_config.json", json.loads((src / "adapter_config.json").read_text()))
    run = Path(args.run_dir)
    commit = args.commit or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           cwd=repo_root()).stdout.strip()
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    config = json.loads((run / "config.json").read_text())
    record = {
        "run_id": run.name, "checkpoint": src.name, "dtype": args.dtype, "commit": commit, "config": config,
        "command": command(config), "data": {k: config[k] for k in DATA_KEYS if k in config},
        "metrics": [{k: r[k] for k in STEP_KEYS if k in r} for r in steps if "step" in r],
    }
    init = config.get("init_adapter")  # an RL run on top of an adapter: name the stage before it too
    if init:
        init_dir = Path(init) if Path(init).is_absolute() else repo_root() / init
        prov = init_dir / "provenance.json"
        before = json.loads(prov.read_text()) if prov.exists() else {}
        record["init_adapter"] = {"path": str(init), **{k: before[k] for k in ("run_id", "checkpoint", "commit")
                                                         if k in before}}
    atomic_write_json(out / "provenance.json", record)
    size = (out / "adapter_model.safetensors").stat().st_size
    print(f"{out}: {size / 1e6:.1f} MB ({args.dtype}), from {src} (commit {commit[:12]})")


if __name__ == "__main__":
    main()
