"""The multi-turn rollout engine and generation backends (each name loaded on first use, so that a light submodule
such as ``workbench.rollout.backends.base`` imports neither the engine nor an HTTP client)."""

from __future__ import annotations

import importlib
from typing import Any

_MODULE = {"Backend": "backends.base", "Generation": "backends.base", "SamplingParams": "backends.base",
           "RolloutConfig": "engine", "rollout": "engine"}

__all__ = ["Backend", "Generation", "RolloutConfig", "SamplingParams", "rollout"]


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module 'workbench.rollout' has no attribute {name!r}")
    return getattr(importlib.import_module(f"workbench.rollout.{_MODULE[name]}"), name)
