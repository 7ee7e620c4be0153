"""Which engine generates the rollouts (``TrainConfig.rollout_backend``) and how it gets the current adapter.

- ``hf``: :class:`~workbench.rollout.backends.hf.HFBackend` over the trained ``PeftModel`` itself, or (``rollout_engine``
  int4 / auto on a CPU) :class:`~workbench.rollout.backends.quant.QuantBackend` over its int4 copy, which reads the
  live LoRA weights: either way it samples from the current adapter, nothing to hand over.
- ``openai``: any OpenAI-compatible server that loads LoRA adapters at run time — vLLM
  (``vllm serve MODEL --enable-lora --max-lora-rank R`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``) or
  ``python -m workbench.rollout.server --enable-lora``. Before a rollout with new weights the trainer saves
  the adapter as a PEFT directory, asks the server to load it (``POST /v1/load_lora_adapter`` with
  ``{"lora_name", "lora_path"}``, vLLM's documented API), samples with ``model=<lora_name>`` and unloads
  the previous one. The path must be readable by the server (same machine or shared storage).
- ``vllm``: a colocated offline ``vllm.LLM(enable_lora=True)`` in this process; each new adapter is
  served with a new ``LoRARequest`` id; with ``rollout_kwargs={"sleep_mode": True}`` it sleeps (level 1)
  between a rollout and the next, so training and generation share one GPU. Written to vLLM's documented API; **not yet run on hardware**.

Token-in/token-out holds for every backend: the trajectories keep the ids and logprobs the backend
returned, and the update logs how far they are from the trainer's own (:mod:`workbench.rl.update`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.core.choices import ROLLOUT_BACKENDS

if TYPE_CHECKING:
    from workbench.rl.policy import LoRAPolicy
    from workbench.rl.train_config import TrainConfig
    from workbench.rollout.backends.base import Backend


def make_rollout_backend(config: TrainConfig, policy: LoRAPolicy) -> Backend:
    """The rollout backend ``config.rollout_backend`` names, for ``policy`` (a LoRAPolicy): ``TrainConfig``'s fields
    handed to :func:`workbench.rollout.backends.make_backend`, and a served one checked for being reachable."""
    from workbench.rollout.backends import make_backend

    kind = config.rollout_backend
    kw = dict(config.rollout_kwargs)
    if kind == "hf":  # the trained model itself (fp32, graph) or its int4 copy (config.rollout_engine)
        return make_backend("hf", policy.model, tokenizer=policy.tokenizer, engine=config.rollout_engine, **kw)
    if kind == "openai":
        from workbench.rollout.backends.openai import RequestFailed

        backend = make_backend("openai", kw.pop("model", config.model), tokenizer=policy.tokenizer,
                               base_url=config.server, **kw)
        try:
            backend.models()
        except RequestFailed as e:
            raise ValueError(f"TrainConfig.server {config.server!r}: cannot reach the rollout server ({e}); start one, "
                             "e.g. `python -m workbench.rollout.server --enable-lora --port 8000`, or fix --server") from None
        return backend
    if kind == "vllm":
        # a merged init adapter is served stacked under the trained one (LoRAPolicy.save_adapter): their summed rank
        stacked = json.loads((policy.merged_init / "adapter_config.json").read_text())["r"] if policy.merged_init else 0
        kw.setdefault("max_lora_rank", config.lora_r + int(stacked))
        backend = make_backend("vllm", config.model, tokenizer=policy.tokenizer, enable_lora=True, **kw)
        print(f"rollout backend vllm: {backend.dtype} ({backend.dtype_why})", flush=True)
        return backend
    raise ValueError(f"TrainConfig.rollout_backend {kind!r} is not one of {ROLLOUT_BACKENDS}")


class AdapterSync:
    """Hands the policy's current adapter to a serving backend (``openai`` / ``vllm``) when its weights
    changed since the last hand-over; a no-op for ``hf``.

    Args:
        backend: the rollout backend.
        policy: the LoRAPolicy whose adapter is served.
        directory: where adapters are saved (``<run>/rollout_adapters``; a temporary one if None).
        keep: adapter directories kept on disk (the served one and the one before).
    """

    def __init__(self, backend: Backend, policy: LoRAPolicy, directory: str | Path | None = None, keep: int = 2):
        self.backend, self.policy, self.keep = backend, policy, keep
        self.kind = getattr(backend, "name", "hf")
        if self.kind in ("int4", "graph"):  # in process, reading the live LoRA weights as hf does: nothing to hand over
            self.kind = "hf"
        self._tmp = None
        if directory is None and self.kind != "hf":
            self._tmp = tempfile.TemporaryDirectory(prefix="wb-adapters-")
            directory = self._tmp.name
        self.directory = Path(directory) if directory is not None else None
        self.tag = uuid.uuid4().hex[:8]  # a long-lived server may hold a killed run's names
        self.version: int | None = None
        """The optimizer step whose weights are served (None: none handed over yet)."""
        self.saved: list[Path] = []
        self.name: str | None = None
        """The served adapter's name."""
        self.count = 0
        """Adapters handed over so far."""

    def __call__(self, version: int) -> str | None:
        """Serve the adapter at optimizer step ``version`` unless it already is; returns the served name."""
        if self.kind == "hf":
            return None
        if self.version == version and self.name is not None:
            return self.name
        name = f"policy-{self.tag}-{version}"
        path = self.directory / name
        self.policy.save_adapter(path)
        if self.kind == "openai":
            self.backend.load_lora_adapter(name, str(path.resolve()))
            self.backend.model = name  # requests sample from the adapter from now on
            if self.name is not None:
                self.backend.unload_lora_adapter(self.name)
        else:
            self.backend.set_adapter(path, name=name)
        self.name, self.version = name, version
        self.count += 1
        self.saved.append(path)
        while len(self.saved) > self.keep:
            shutil.rmtree(self.saved.pop(0), ignore_errors=True)
        return name
