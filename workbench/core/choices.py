"""The string choices a configuration takes, as ``Literal`` types: the annotation says what a field accepts, and the
tuples the configs' own checks and the CLI's ``choices`` read are derived from the same types, so the two cannot
drift apart. A light module (no torch), so the CLI and the configs read it without loading an engine.

    >>> ROLLOUT_ENGINES
    ('auto', 'fp32', 'int4', 'graph')
"""

from __future__ import annotations

from typing import Literal, get_args

RolloutBackend = Literal["hf", "openai", "vllm"]
"""Where rollouts are generated: the in-process HF model, an OpenAI-compatible server, or vLLM in the process."""
RolloutEngine = Literal["auto", "fp32", "int4", "graph"]
"""The in-process engine of the hf backend (``auto``: the fastest one this machine runs)."""
MicroBatching = Literal["sequential", "bucket", "shared_prefix"]
"""How a step's sequences are grouped into micro-batches for the update."""
Amp = Literal["auto", "bf16", "off"]
"""Mixed precision of the update (``auto``: bf16 on CUDA, off on CPU)."""

ROLLOUT_BACKENDS: tuple[str, ...] = get_args(RolloutBackend)
ROLLOUT_ENGINES: tuple[str, ...] = get_args(RolloutEngine)
MICRO_BATCHING: tuple[str, ...] = get_args(MicroBatching)
AMP_MODES: tuple[str, ...] = get_args(Amp)
