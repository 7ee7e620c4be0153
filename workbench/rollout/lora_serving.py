"""LoRA adapters loaded at run time onto the HF model behind ``workbench.rollout.server`` (vLLM's API).

vLLM serves adapters by name: ``POST /v1/load_lora_adapter`` with ``{"lora_name", "lora_path"}`` loads a
PEFT directory, ``POST /v1/unload_lora_adapter`` with ``{"lora_name"}`` drops it, and a completion request
with ``model=<lora_name>`` samples from it (``model=<base name>`` from the base model). :class:`LoRAAdapters`
does the same with peft on an :class:`~workbench.rollout.backends.hf.HFBackend`: the first adapter wraps
the backend's model in a ``PeftModel``, later ones are added to it, the last one unloaded gives the plain
model back. Loading, unloading and generating hold one lock, and switching adapters clears the
backend's prefix cache (its keys/values were computed with other weights).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.rollout.backends.base import Backend


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class AdapterError(ValueError):
    """A load/unload request that cannot be honoured (``status``: the HTTP status to answer with)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


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
        if not all((p / f).is_file() for f in ADAPTER_FILES):
            raise AdapterError(f"lora_path {path!r} is not a PEFT adapter directory (needs {', '.join(ADAPTER_FILES)})")
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
            self.backend.model.eval()
            self.paths[name] = str(p)
            self._active = None  # peft made the new adapter active: switch explicitly before the next batch
            self.backend.clear_cache()

    def resolve(self, path: Any) -> Path:
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
