"""Checkpoints of a training run, in formats that cannot execute code when loaded.

``checkpoints/step_<n>/`` holds:

- ``adapter_model.safetensors`` + ``adapter_config.json``: the LoRA adapter (PEFT; loadable by
  ``PeftModel`` and vLLM);
- ``trainer_state.safetensors``: every tensor of the trainer state (optimizer moments and step
  counts, the torch / CUDA RNG states);
- ``trainer_state.json``: everything else (step, optimizer step, reward stage, optimizer param
  groups, the Python and NumPy RNG states, the data cursor of every process, the config).

A checkpoint is written into ``step_<n>.tmp/`` and renamed, and ``checkpoints/latest`` names the
newest complete one, so a killed run never leaves a half checkpoint that resume would pick.
Loading reads safetensors and JSON only — never pickle — so a crafted checkpoint cannot run code;
an old ``trainer_state.pt`` (pickle) or a file of another format is refused with an error naming
the file and the fix.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from workbench.util.io import atomic_path, atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    from workbench.rl.data_stream import DataStream
    from workbench.rl.train_config import TrainConfig
    from workbench.storage.runs import Run

STATE_JSON = "trainer_state.json"
STATE_TENSORS = "trainer_state.safetensors"
LEGACY_STATE = "trainer_state.pt"
STATE_FILE = STATE_JSON  # the file whose presence marks a complete checkpoint
LATEST = "latest"
BEST = "best"
"""``checkpoints/best``: the adapter of the best validation round (``TrainConfig.keep_best``), the run's adapter."""
SELECTION_FILE = "selection.json"
"""Beside the best adapter: which step it is and why (:func:`selection_note`)."""
FORMAT = "workbench-trainer-state"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot (or must not) be loaded."""


class AdapterFiles(Protocol):
    """The policy's part of a checkpoint: a :class:`~workbench.rl.policy.LoRAPolicy` (which imports this module)."""

    def save_adapter(self, directory: str | os.PathLike) -> Path: ...

    def load_adapter(self, directory: str | os.PathLike) -> None: ...


class Checkpointed(Protocol):
    """What a checkpoint saves of a :class:`~workbench.rl.trainer.Trainer` (which imports this module) and restores."""

    step: int
    opt_step: int
    stage: int
    best: dict[str, Any] | None

    @property
    def config(self) -> TrainConfig: ...

    @property
    def data(self) -> DataStream: ...

    @property
    def policy(self) -> AdapterFiles: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def run(self) -> Run | None: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...


# ----------------------------------------------------------------------------- RNG
def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (the same LoRA init on every process)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(json part, tensors)`` of the Python, NumPy, torch and CUDA RNG states."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    js = {"python": [version, list(internal), gauss],
          "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, t in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = t
    return js, tensors


def set_rng_state(js: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    version, internal, gauss = js["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = js["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.split(".")[-1]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


# ----------------------------------------------------------------------------- optimizer
def optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``optimizer.state_dict()`` split into JSON (param groups, plain values) and tensors."""
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, dict[str, Any]] = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"optimizer.{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                plain.setdefault(str(pid), {})[k] = v
    return {"param_groups": sd["param_groups"], "plain": plain}, tensors


def load_optimizer_state(opt: torch.optim.Optimizer, js: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, t in tensors.items():
        if key.startswith("optimizer."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = t
    for pid, st in js.get("plain", {}).items():
        state.setdefault(int(pid), {}).update(st)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in js["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


# ----------------------------------------------------------------------------- files
def write_state(directory: Path, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """``trainer_state.json`` + ``trainer_state.safetensors`` in ``directory`` (each atomically)."""
    from safetensors.torch import save_file

    with atomic_path(directory / STATE_TENSORS) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata={"format": FORMAT, "version": str(VERSION)})
    atomic_write_json(directory / STATE_JSON, {"format": FORMAT, "version": VERSION, **state}, indent=None)


def read_state(directory: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The ``(json, tensors)`` of a checkpoint written by :func:`write_state`; anything else is refused."""
    from safetensors import safe_open

    d = Path(directory)
    js_path, t_path = d / STATE_JSON, d / STATE_TENSORS
    if not js_path.exists():
        if (d / LEGACY_STATE).exists():
            raise CheckpointError(
                f"{d / LEGACY_STATE} is an old pickle checkpoint, which can execute code when loaded, so it is not "
                f"loaded. Fix: start a new run (its adapter {d / 'adapter_model.safetensors'} can be loaded with "
                "PeftModel), or finish this run with the workbench version that wrote it")
        raise FileNotFoundError(f"{js_path} is missing: not a checkpoint written by Trainer.save_checkpoint")
    try:
        js = json.loads(js_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{js_path} is not a workbench trainer state (invalid JSON: {e}); "
                              "resume from another checkpoint or start a new run") from e
    if not isinstance(js, dict) or js.get("format") != FORMAT:
        raise CheckpointError(f"{js_path} is not a workbench trainer state (no format={FORMAT!r}); "
                              "resume from another checkpoint or start a new run")
    if js.get("version") != VERSION:
        raise CheckpointError(f"{js_path} has trainer-state version {js.get('version')!r}; this workbench reads "
                              f"version {VERSION}: resume it with the workbench version that wrote it")
    if not t_path.exists():
        raise CheckpointError(f"{t_path} is missing (incomplete checkpoint); resume from another checkpoint")
    try:
        with safe_open(str(t_path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for malformed files
        raise CheckpointError(f"{t_path} is not a readable safetensors file ({e}); resume from another checkpoint") from e
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{t_path} is not a workbench trainer state (metadata format={meta.get('format')!r})")
    return js, tensors


def selection_note(best: dict[str, Any]) -> dict[str, Any]:
    """What ``selection.json`` and ``metrics.json`` say of the kept checkpoint: step, metric, value, and why."""
    return {"step": best["step"], "metric": best["metric"], "value": best["value"],
            "why": f"the best greedy validation {best['metric']} ({best['value']:.3f} on {best.get('n', '?')} questions "
                   "set aside from the training split) of the rounds every eval_every steps (keep_best)"
                   + (f"; tied since step {best['first']}, the latest round kept"
                      if best.get("first", best["step"]) != best["step"] else "")}


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(trainer: Checkpointed) -> Path | None:
    """Adapter, optimizer, RNG states, data cursors and reward stage of ``trainer``, atomically
    (rank 0 writes; every process takes part in gathering the data cursors)."""
    cursors = [trainer.data.state_dict()]
    if trainer.world_size > 1:
        gathered: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(gathered, trainer.data.state_dict())
        cursors = gathered
    if trainer.rank != 0:
        return None
    final = checkpoint_dir(trainer.run.path, trainer.step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    trainer.policy.save_adapter(tmp)
    opt_js, tensors = optimizer_state(trainer.optimizer)
    rng_js, rng_t = rng_state()
    tensors.update(rng_t)
    write_state(tmp, {"step": trainer.step, "opt_step": trainer.opt_step, "stage": trainer.stage,
                      "optimizer": opt_js, "rng": rng_js, "data": cursors, "world_size": trainer.world_size,
                      "config": trainer.config.to_dict(), "best": getattr(trainer, "best", None)}, tensors)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    atomic_write_text(final.parent / LATEST, final.name + "\n")
    olds = sorted(p for p in final.parent.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for p in olds[: max(0, len(olds) - trainer.config.keep_checkpoints)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def load_checkpoint(trainer: Checkpointed, path: str | os.PathLike) -> None:
    """Restore ``trainer`` from checkpoint directory ``path`` (safetensors + JSON only)."""
    p = Path(path)
    js, tensors = read_state(p)
    if js.get("world_size", 1) != trainer.world_size:
        raise CheckpointError(f"checkpoint {p} was written by {js.get('world_size')} processes; resume it with "
                              f"the same number (this run has {trainer.world_size})")
    trainer.policy.load_adapter(p)
    load_optimizer_state(trainer.optimizer, js["optimizer"], tensors)
    trainer.step, trainer.opt_step, trainer.stage = int(js["step"]), int(js["opt_step"]), int(js["stage"])
    trainer.data.load_state_dict(js["data"][trainer.rank])
    trainer.best = js.get("best")  # keep_best's state (None in a checkpoint from before it)
    set_rng_state(js["rng"], tensors)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run (``None`` if there is none). A directory holding only
    an old ``trainer_state.pt`` counts (loading it then says why it is refused)."""
    d = Path(run_dir) / "checkpoints"

    def complete(p: Path) -> bool:
        return (p / STATE_JSON).exists() or (p / LEGACY_STATE).exists()

    pointer = d / LATEST
    if pointer.exists():
        p = d / pointer.read_text().strip()
        if complete(p):
            return p
    done = sorted(p for p in d.glob("step_*") if complete(p) and not p.name.endswith(".tmp"))
    return done[-1] if done else None
