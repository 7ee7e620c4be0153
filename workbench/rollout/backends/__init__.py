"""Generation backends behind one interface (see ``base.Backend``).

``make_backend(kind, model=..., **kw)`` builds one by name:

- ``hf``: ``HFBackend.from_pretrained(model, **kw)`` (transformers; CPU or GPU);
- ``vllm``: ``VLLMBackend(model, **kw)`` (offline vLLM; needs CUDA and ``pip install -e .[gpu]``);
- ``openai``: ``OpenAIBackend(base_url=..., model=model, tokenizer=..., **kw)`` (any
  OpenAI-compatible server; ``tokenizer`` defaults to ``load_tokenizer(model)``).
"""

from __future__ import annotations

from typing import Any

from workbench.rollout.backends.base import Backend, Generation, SamplingParams
from workbench.rollout.backends.openai import OpenAIBackend
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.backends.vllm import VLLMBackend

BACKEND_KINDS = ("hf", "vllm", "openai")


def make_backend(kind: str, model: str | None = None, **kw: Any) -> Backend:
    """A backend by kind (``hf`` | ``vllm`` | ``openai``); ``model`` is an alias, path or HF id
    (for ``openai``: the served model name, which must also name a loadable tokenizer unless
    ``tokenizer=`` is given)."""
    if kind == "hf":
        from workbench.rollout.backends.hf import HFBackend

        return HFBackend.from_pretrained(model, **kw)
    if kind == "vllm":
        return VLLMBackend(model, **kw)
    if kind == "openai":
        if "base_url" not in kw:
            raise ValueError("make_backend('openai') needs base_url=, e.g. 'http://127.0.0.1:8000/v1'")
        if model is None:
            from workbench.core.models import DEFAULT_MODEL

            model = DEFAULT_MODEL
        return OpenAIBackend(model=model, tokenizer=kw.pop("tokenizer", None), **kw)
    raise ValueError(f"unknown backend kind {kind!r}; valid kinds: {', '.join(BACKEND_KINDS)}")


__all__ = [
    "BACKEND_KINDS",
    "Backend",
    "Generation",
    "OpenAIBackend",
    "SamplingParams",
    "ScriptedBackend",
    "VLLMBackend",
    "make_backend",
]
