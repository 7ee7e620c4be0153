"""LoRA adapters loaded at run time onto the HF model behind ``workbench.rollout.server`` (vLLM's API).

vLLM serves adapters by name: ``POST /v1/load_lora_adapter`` with ``{"lora_name", "lora_path"}`` loads a
PEFT directory, ``POST /v1/unload_lora_adapter`` with ``{"lora_name"}`` drops it, and a completion request
with ``model=<lora_name>`` samples from it (``model=<base name>`` from the base model). :class:`LoRAAdapters`
does the same with peft on an :class:`~workbench.rollout.backends.hf.HFBackend`: the first adapter wraps
the backend's model in a ``PeftModel``, later ones are added to it, the last one unloaded gives the plain
model back. Loading, unloading and generating hold one lock, and switching adapters clears the
backend's prefix cache (its keys/values were computed with other weights).

Every adapter the workbench loads (here, ``eval``/``ask``'s ``--adapter``, a policy's ``init_adapter`` and resumed
checkpoints) is checked first by :func:`check_adapter_files` and, where peft loads it, after by
:func:`check_adapter_fits`: a FIFO or device in place of a file is refused before it is opened (nothing waits on it),
and so are weights with no LoRA tensors, with a NaN or an infinity, or that leave some of the model's adapted
modules without weights (peft only warns, and the "adapter" is then partly or wholly the base model).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.util.io import read_json, regular_file

if TYPE_CHECKING:
    from peft import PeftModel

    from workbench.rollout.backends.base import Backend


ADAPTER_CONFIG, ADAPTER_WEIGHTS = ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
#: The most an ``adapter_config.json`` may hold (peft writes about 1 KB).
MAX_CONFIG_BYTES = 1 << 20
_RESAVE = "save it again from its training run, or point at another checkpoint"


class AdapterError(ValueError):
    """A load/unload request that cannot be honoured (``status``: the HTTP status to answer with); as a ``ValueError``,
    the command line's one-line error."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def check_adapter_kinds(directory: str | os.PathLike) -> Path:
    """``directory``, if its two adapter files are regular files (``os.stat`` only: a FIFO is never opened, so nothing
    waits on it); else an :class:`AdapterError` naming the file. Cheap: for checks before any model loads."""
    d = Path(directory)
    for name in ADAPTER_FILES:
        try:
            regular_file(d / name, "PEFT adapter file")
        except FileNotFoundError:
            raise AdapterError(f"{d} is not a PEFT adapter directory: {name} is missing (it needs "
                               f"{' and '.join(ADAPTER_FILES)}, as a training run's checkpoints hold)") from None
        except (OSError, ValueError) as e:  # a FIFO, a device, a directory; a link it may not follow
            raise AdapterError(str(e)) from None
    return d


def check_adapter_files(directory: str | os.PathLike) -> set[str]:
    """The tensor names of the PEFT adapter in ``directory``, after checking it can be loaded as one: both files
    regular (:func:`check_adapter_kinds`), ``adapter_config.json`` a JSON object, the weights a safetensors file with
    at least one LoRA tensor and every value finite. Anything else is one :class:`AdapterError` line naming the file
    and the fix."""
    d = check_adapter_kinds(directory)
    try:
        config = read_json(d / ADAPTER_CONFIG, MAX_CONFIG_BYTES, "PEFT adapter config")
    except (OSError, ValueError) as e:
        raise AdapterError(f"{d / ADAPTER_CONFIG}: not readable ({e}); {_RESAVE}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{d / ADAPTER_CONFIG}: not a JSON object; {_RESAVE}")
    import torch
    from safetensors import safe_open

    weights = d / ADAPTER_WEIGHTS
    try:
        with safe_open(str(weights), framework="pt", device="cpu") as f:
            names = set(f.keys())
            lora = sorted(k for k in names if "lora_" in k)
            if not lora:
                raise AdapterError(f"{weights}: no LoRA tensors among its {len(names)} (no lora_A / lora_B names): "
                                   f"not a PEFT LoRA adapter; {_RESAVE}")
            for name in sorted(names):
                t = f.get_tensor(name)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise AdapterError(f"{weights}: tensor {name} holds NaN or infinite values (a diverged update?); "
                                       f"{_RESAVE}")
    except AdapterError:
        raise
    except Exception as e:  # safetensors' own errors: a truncated file, a header that does not parse
        raise AdapterError(f"{weights}: not a safetensors file ({type(e).__name__}: {e}); {_RESAVE}") from None
    return names


def check_adapter_fits(model: PeftModel, names: set[str], directory: str | os.PathLike,
                       adapter_name: str = "default") -> None:
    """An :class:`AdapterError` if peft's ``model`` now holds adapter ``adapter_name`` with LoRA weights that the
    adapter's file (tensor ``names``, :func:`check_adapter_files`) did not supply: peft warns and leaves those
    modules at their initial weights (B = 0: the base model there)."""
    from peft import get_peft_model_state_dict

    wanted = [k for k in get_peft_model_state_dict(model, adapter_name=adapter_name, save_embedding_layers=False)
              if "lora_" in k]
    missing = [k for k in wanted if k not in names]
    if missing:
        raise AdapterError(f"{Path(directory) / ADAPTER_WEIGHTS}: no weights for {len(missing)} of the model's "
                           f"{len(wanted)} LoRA tensors (e.g. {missing[0]}): it was saved for another model or other "
                           f"target_modules; load it onto the model it was trained on")


class LoRAAdapters:
    """Named LoRA adapters on an HF backend's model.

    Args:
        backend: an ``HFBackend`` (anything with ``.model`` and ``.clear_cache()``).
        max_loras: adapters resident at once (vLLM's ``--max-loras``); loading one more is refused.
        root: the directory adapters may be loaded from (its subdirectories, links resolved); a path outside it is
            refused with one answer whether it exists or not, so a client learns nothing about the server's files.
    """

    def __init__(self, backend: Backend, max_loras: int = 8, root: str | Path = "."):
        if not hasattr(backend, "model"):
            raise ValueError(f"runtime LoRA loading needs an HF backend (with .model), got {type(backend).__name__}")
        self.backend = backend
        self.max_loras = max_loras
        self.root = Path(root).resolve()
        self.lock = threading.RLock()
        self.paths: dict[str, str] = {}
        self._base = backend.model
        self._active: str | None = None

    def names(self) -> list[str]:
        with self.lock:
            return list(self.paths)

    def load(self, name: str, path: str) -> None:
        """Load the PEFT adapter directory ``path`` as ``name`` (AdapterError if it cannot)."""
        if not isinstance(name, str) or not name.strip():
            raise AdapterError("lora_name must be a non-empty string")
        p = self.resolve(path)
        if not all((p / f).exists() for f in ADAPTER_FILES):
            raise AdapterError(f"lora_path {path!r} is not a PEFT adapter directory (needs {', '.join(ADAPTER_FILES)})")
        names = check_adapter_files(p)  # before peft opens anything: a FIFO, no LoRA tensors, NaN weights
        with self.lock:
            if name in self.paths:
                raise AdapterError(f"The lora adapter '{name}' has already been loaded.")
            if len(self.paths) >= self.max_loras:
                raise AdapterError(f"{len(self.paths)} adapters are loaded (max_loras={self.max_loras}); unload one first")
            from peft import PeftModel

            try:
                if not self.paths:
                    self.backend.model = PeftModel.from_pretrained(self._base, str(p), adapter_name=name, is_trainable=False)
                else:
                    self.backend.model.load_adapter(str(p), adapter_name=name, is_trainable=False)
            except Exception as e:  # a broken or mismatched adapter: the request fails, the server goes on
                raise AdapterError(f"could not load adapter {name!r} from {p}: {type(e).__name__}: {e}") from e
            try:
                check_adapter_fits(self.backend.model, names, p, adapter_name=name)
            except AdapterError:  # loaded, but not all of it fits: taken off again
                self._drop(name)
                raise
            self.backend.model.eval()
            self.paths[name] = str(p)
            self._active = None  # peft made the new adapter active: switch explicitly before the next batch
            self.backend.clear_cache()

    def resolve(self, path: object) -> Path:
        """``path`` (relative ones from :attr:`root`) with links resolved, if it lies under :attr:`root`; else one
        AdapterError that says the same whether the path exists or not."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise AdapterError("lora_path must be a non-empty string: a PEFT adapter directory under the server's "
                               "--lora-dir")
        p = (self.root / path).resolve()
        if p != self.root and self.root not in p.parents:
            raise AdapterError(f"lora_path {path!r} is outside this server's adapter directory (--lora-dir): save the "
                               "adapter under it", 403)
        return p

    def unload(self, name: str) -> None:
        """Drop adapter ``name`` (AdapterError 404 if it is not loaded)."""
        with self.lock:
            if name not in self.paths:
                raise AdapterError(f"The lora adapter '{name}' cannot be found.", 404)
            del self.paths[name]
            self._drop(name)

    def _drop(self, name: str) -> None:
        """Take adapter ``name`` (no longer in :attr:`paths`) off the model; under the lock."""
        model = self.backend.model
        if not self.paths:  # the last one: the plain model back (peft cannot run with no adapter)
            self.backend.model = model.unload()
            self._base = self.backend.model
        else:
            if name in model.active_adapters:
                model.set_adapter(next(iter(self.paths)))
            model.delete_adapter(name)
        self._active = None
        self.backend.clear_cache()

    @contextmanager
    def active(self, name: str | None) -> Iterator[None]:
        """Generate with adapter ``name`` (None: the base model) inside the block, holding the lock."""
        with self.lock:
            if name is not None and name not in self.paths:
                raise AdapterError(f"The model `{name}` does not exist.", 404)
            if name != self._active:
                self.backend.clear_cache()
                self._active = name
            if name is None and self.paths:
                with self.backend.model.disable_adapter():
                    yield
                return
            if name is not None:
                self.backend.model.set_adapter(name)
            yield
