"""A trained LoRA adapter evaluated beside the untrained model (``workbench eval --adapter DIR``).

A method name with the suffix ``+lora`` (``search_r1+lora``; :class:`~workbench.eval.config.EvalEntry` reads it) is
the method rolled out with the adapter; the plain name (``search_r1``) is the same model with the adapter disabled. Both go in one
run, so every table, the dashboard and the inspector's diff view compare them question by question::

    workbench eval --method search_r1,search_r1+lora --adapter runs/<sft or train run> --split dev

``--adapter`` takes an adapter directory (``adapter_model.safetensors`` + ``adapter_config.json``, as
``workbench sft``/``train`` checkpoints and ``data/adapters/*`` hold) or a run directory (its newest
checkpoint). Only safetensors adapters are loaded.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from workbench.rollout.lora_serving import AdapterError, check_adapter_files, check_adapter_fits, check_adapter_kinds
from workbench.util.paths import repo_root

#: The trained adapter shipped with the project (``data/adapters/README.md`` says how it was made): SFT then GRPO of
#: the default model on Search-R1's protocol. The demo compares it with the untrained model; ``workbench ask`` asks it.
TRAINED_ADAPTER = repo_root() / "data" / "adapters" / "search_r1-sft-grpo"


def resolve_adapter(path: str | os.PathLike) -> Path:
    """The adapter directory ``path`` names (an adapter directory, or a run's newest checkpoint);
    a one-line error naming the path and what it lacks otherwise."""
    from workbench.rl.policy import adapter_dir

    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"--adapter {path}: no such file or directory (give a LoRA adapter directory or an "
                         "sft/train run directory)")
    try:
        return check_adapter_kinds(adapter_dir(p))  # a FIFO for a file: said now, before anything opens it
    except (FileNotFoundError, AdapterError) as e:
        raise ValueError(f"--adapter {path}: {e}") from None


def attach_adapter(model: Any, path: str | os.PathLike) -> Any:
    """``model`` with the adapter at ``path`` loaded (a ``peft.PeftModel``, in eval mode); a one-line ``ValueError``
    for weights that would load silently as something else (no LoRA tensors, NaN, made for other modules:
    :func:`~workbench.rollout.lora_serving.check_adapter_files`)."""
    from peft import PeftModel

    d = resolve_adapter(path)
    try:
        names = check_adapter_files(d)
        peft_model = PeftModel.from_pretrained(model, str(d), is_trainable=False)
        check_adapter_fits(peft_model, names, d)
    except AdapterError as e:
        raise ValueError(f"--adapter {path}: {e}") from None
    peft_model.eval()
    return peft_model


def adapter_state(model: Any, trained: bool) -> contextlib.AbstractContextManager[Any]:
    """A context in which ``model`` samples with (``trained``) or without its adapter."""
    if trained or not hasattr(model, "disable_adapter"):
        return contextlib.nullcontext()
    return model.disable_adapter()
