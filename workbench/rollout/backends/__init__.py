"""Generation backends behind one interface (see ``base.Backend``), built by one factory.

``make_backend(kind, model, tokenizer=..., engine=..., **kw)`` is how every caller gets one (the eval, ``ask``, the
trainer, the benchmarks):

- ``hf``: transformers on CPU or GPU. ``model`` is an alias, path or HF id (loaded with
  ``workbench.core.models.load_policy``) or an already loaded model (a ``PeftModel`` too) with its ``tokenizer``.
  ``engine`` picks the implementation: ``fp32`` (:class:`~workbench.rollout.backends.hf.HFBackend`), ``int4``
  (:class:`~workbench.rollout.backends.quant.QuantBackend` over an int4 copy that reads the live LoRA weights) or
  ``graph`` (:class:`~workbench.rollout.backends.graph.GraphBackend`: the LoRA merged for each call and the decode
  step replayed as a CUDA graph) or ``auto`` (:func:`~workbench.rollout.backends.quant.choose_engine` decides from the
  device, the CPU and the model);
- ``vllm``: ``VLLMBackend(model, tokenizer=..., **kw)`` (offline vLLM; needs CUDA and ``pip install -e .[gpu]``);
- ``openai``: ``OpenAIBackend(base_url=..., model=model, tokenizer=..., **kw)`` (any OpenAI-compatible server;
  ``tokenizer`` defaults to ``load_tokenizer(model)``).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from workbench.rollout.backends.base import ENGINES, Backend, Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from workbench.rollout.backends.base import CausalLM

BACKEND_KINDS = ("hf", "vllm", "openai")
#: backends loaded on first use (an HTTP client, vLLM's wrapper): ``from workbench.rollout.backends import X`` works
_LAZY = {"OpenAIBackend": "openai", "ScriptedBackend": "scripted", "VLLMBackend": "vllm"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'workbench.rollout.backends' has no attribute {name!r}")
    return getattr(importlib.import_module(f"workbench.rollout.backends.{_LAZY[name]}"), name)


def make_backend(kind: str = "hf", model: str | os.PathLike | CausalLM | None = None, *,
                 tokenizer: PreTrainedTokenizerBase | None = None, engine: str = "fp32", **kw: Any) -> Backend:
    """A rollout backend by ``kind`` (``hf`` | ``vllm`` | ``openai``).

    Args:
        kind: which engine generates.
        model: an alias, local path or HF id (default: the default model); for ``hf`` also a loaded model, with
            ``tokenizer``; for ``openai`` the served model name, which must also name a loadable tokenizer unless
            ``tokenizer`` is given.
        tokenizer: the model's tokenizer (``hf`` with a loaded model: required).
        engine: ``hf`` only: ``fp32``, ``int4``, ``graph`` or ``auto`` (see the module docstring).
        **kw: the backend's own options (``batch_bytes=``, ``base_url=``, ``enable_lora=``, ...).
    """
    if kind == "hf":
        from workbench.rollout.backends.hf import HFBackend
        from workbench.rollout.backends.quant import QuantBackend, choose_engine

        if model is None or isinstance(model, (str, os.PathLike)):
            from workbench.core.models import load_policy

            model, tokenizer = load_policy(None if model is None else str(model), device=kw.pop("device", "auto"),
                                           dtype=kw.pop("dtype", None))
        elif tokenizer is None:
            raise ValueError("make_backend('hf', <a loaded model>) needs tokenizer=, the model's own tokenizer")
        engine, _ = choose_engine(engine, model)
        if engine == "graph":
            from workbench.rollout.backends.graph import GraphBackend

            return GraphBackend(model, tokenizer, **kw)
        return (QuantBackend if engine == "int4" else HFBackend)(model, tokenizer, **kw)
    if kind == "vllm":
        from workbench.rollout.backends.vllm import VLLMBackend

        return VLLMBackend(model, tokenizer=tokenizer, **kw)
    if kind == "openai":
        if "base_url" not in kw:
            raise ValueError("make_backend('openai') needs base_url=, e.g. 'http://127.0.0.1:8000/v1'")
        if model is None:
            from workbench.core.models import DEFAULT_MODEL

            model = DEFAULT_MODEL
        from workbench.rollout.backends.openai import OpenAIBackend

        return OpenAIBackend(model=model, tokenizer=tokenizer, **kw)
    raise ValueError(f"unknown backend kind {kind!r}; valid kinds: {', '.join(BACKEND_KINDS)}")


__all__ = [
    "BACKEND_KINDS",
    "ENGINES",
    "Backend",
    "Generation",
    "OpenAIBackend",
    "SamplingParams",
    "ScriptedBackend",
    "VLLMBackend",
    "make_backend",
]
