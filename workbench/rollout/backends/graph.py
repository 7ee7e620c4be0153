"""The HF backend with its decode step captured once per batch and replayed: for a GPU, where a small model's step
waits on Python and kernel launches, not on the GPU (bench/RESULTS.md, "First run on a GPU": ~1,900 kernels a step,
the GPU busy a third of the time, a LoRA step 0.65x transformers.generate).

:class:`GraphBackend` is :class:`~workbench.rollout.backends.hf.HFBackend` (same prefill, prefix cache, sampling,
stop strings, results) with two changes:

- **the LoRA merged for the call**: each peft LoRA layer that applies is merged into its base weight when
  ``generate`` starts (peft's own ``merge``), and the saved base weight is copied back when it returns (exact, where
  peft's ``unmerge`` subtracts and bf16 drifts). The step then runs the base model's kernels only (PEFT's wrappers
  add 72% to a GPU step), and the trainer's model is as it was before every call.
- **a fixed-shape decode step**: each batch decodes into a static key/value cache (every layer's buffer holds
  prompt + the call's token limit, zero-filled) with an additive attention mask opened one column per step, so every
  step runs the same kernels on the same buffers. On CUDA that step is captured in a CUDA graph
  (``torch.cuda.CUDAGraph``) at the batch's first step and replayed after: one launch a step instead of thousands.
  Finished rows stay in the batch until all are done (their tokens are not read): on a GPU a decode step of a small
  model costs about the same for 1 row or 32.

On a CPU there are no CUDA graphs and the static step runs eagerly (the tests check it against ``HFBackend``: same
tokens, logprobs within float error); ``--rollout-engine auto`` picks this engine for a model on CUDA only. If a
capture fails, a warning says so, and from then on the engine decodes eagerly on the same buffers
(``stats["graph_fallback"]`` keeps why).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from workbench.rollout.backends.base import Generation, SamplingParams
from workbench.rollout.backends.hf import CACHE_ARG, HFBackend, _BufferedLayer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from workbench.rollout.backends.base import CausalLM

_ALIGN = 64  # static caches hold a multiple of this many tokens (aligned attention masks, fewer distinct shapes)


def _lora_layers(model: Any) -> list[Any]:
    """The peft LoRA layers of ``model`` that apply now (enabled, not merged, with an active adapter they hold) over a
    floating-point base weight (a quantized one keeps its LoRA unmerged: the forward still applies it)."""
    out = []
    for m in model.modules():
        if not (hasattr(m, "lora_A") and hasattr(m, "merge") and hasattr(m, "merged_adapters")):
            continue
        active = [a for a in getattr(m, "active_adapters", []) if a in m.lora_A]
        weight = getattr(m.get_base_layer(), "weight", None)
        floating = isinstance(weight, torch.Tensor) and weight.dtype.is_floating_point  # not a quantized base
        if active and floating and not m.disable_adapters and not m.merged:
            out.append((m, active))
    return out


@contextlib.contextmanager
def merged_lora(model: CausalLM) -> Iterator[int]:
    """Within the block, ``model``'s applying LoRA adapters are merged into their base weights (peft's ``merge``);
    after it, each base weight is the saved copy again, bit for bit, and no layer counts as merged. Yields how many
    layers were merged (0 for a model without LoRA)."""
    saved = []
    try:
        with torch.no_grad():
            for m, active in _lora_layers(model):
                w = m.get_base_layer().weight
                saved.append((m, w, w.detach().clone()))
                m.merge(adapter_names=active)
        yield len(saved)
    finally:
        with torch.no_grad():
            for m, w, copy in saved:
                w.copy_(copy)
                m.merged_adapters.clear()


class _StaticLayer(_BufferedLayer):
    """A key/value layer of fixed shape ``rows x heads x length x dim`` (the prefill's rows copied in as
    :class:`_BufferedLayer` does): ``update`` writes the step's key and value at the column the shared position tensor
    ``col`` holds and returns the whole buffers (the attention mask hides the columns not yet written, which hold
    zeros)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int, rows: list[int] | None,
                 col: torch.Tensor):
        super().__init__(keys, values, length - keys.shape[-2], rows)
        self._k[:, :, self.n :].zero_()  # masked, but never garbage (0 x NaN would poison the attention)
        self._v[:, :, self.n :].zero_()
        self.col = col

    def _views(self) -> None:
        self.keys, self.values = self._k, self._v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        self._k.index_copy_(2, self.col, key_states)
        self._v.index_copy_(2, self.col, value_states)
        return self._k, self._v

    def batch_select_indices(self, indices: torch.Tensor) -> None:  # pragma: no cover - rows are never dropped
        raise RuntimeError("a static key/value layer keeps its rows (GraphBackend._drops_rows is False)")


class _Static:
    """One batch's decode state: the inputs of the fixed-shape step (token, position, the column it writes), the
    additive attention mask, and the captured graph with its output once captured."""

    def __init__(self, rows: int, width: int, length: int, dtype: torch.dtype, device: torch.device):
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.col = torch.full((1,), width, dtype=torch.long, device=device)
        self.width = width  # columns filled by the prefill; the mask is built from its attention mask at step 1
        self.mask = torch.full((rows, 1, 1, length), torch.finfo(dtype).min, dtype=dtype, device=device)
        self.started = False
        self.graph: Any = None
        self.logits: torch.Tensor | None = None


class GraphBackend(HFBackend):
    """:class:`HFBackend` with the LoRA merged for each call and a fixed-shape decode step, captured in a CUDA graph
    on CUDA (see the module docstring). Keyword arguments are HFBackend's, plus ``graphs`` (capture on CUDA; False:
    the static step eagerly, for timing the capture's share) and ``merge`` (merge the LoRA for each call)."""

    name = "graph"
    _drops_rows = False

    def __init__(self, model: CausalLM, tokenizer: PreTrainedTokenizerBase, graphs: bool = True, merge: bool = True,
                 **kw: Any):
        super().__init__(model, tokenizer, **kw)
        self.graphs = graphs and self.device.type == "cuda"
        self.merge = merge
        self.stats.update(graph_captures=0, graph_replays=0, eager_steps=0, merged_layers=0, graph_fallback=None)

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        with merged_lora(self.model) if self.merge else contextlib.nullcontext(0) as n:
            self.stats["merged_layers"] = n
            return super().generate(prompts, params, max_new_tokens)

    def _decode_cache(self, past: Any, group: list[int] | None, limit: int) -> Any:
        layers = past.layers
        ref = layers[0].keys
        width = ref.shape[-2]
        length = -(-(width + limit) // _ALIGN) * _ALIGN
        rows = len(group) if group is not None else ref.shape[0]
        st = _Static(rows, width, length, ref.dtype, ref.device)
        for i, layer in enumerate(layers):
            layers[i] = _StaticLayer(layer.keys, layer.values, length, group, st.col)
        past.wb_static = st
        return past

    def _forward(self, st: _Static, past: Any) -> torch.Tensor:
        """The fixed-shape step: open the mask's column, run the model on the buffers, the next-token logits."""
        st.mask.index_fill_(3, st.col, 0.0)
        out = self.model(input_ids=st.ids, attention_mask=st.mask, position_ids=st.pos, **{CACHE_ARG: past},
                         use_cache=True)
        return out.logits[:, -1, :]

    def _capture(self, st: _Static, past: Any) -> None:
        """Run the step once on a side stream (lazy initialisations may not happen during a capture), then capture
        it. Both write the same key/value and mask column as the replay that follows, so running it again is
        harmless."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(st, past)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            st.logits = self._forward(st, past)
        st.graph = graph
        self.stats["graph_captures"] += 1

    def _decode_step(self, tokens: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, past: Any):
        st: _Static = past.wb_static
        if not st.started:  # the prefill's padding stays masked; its real columns open now
            st.mask[:, 0, 0, : st.width].masked_fill_(attn[:, : st.width].bool(), 0.0)
            st.started = True
        st.ids.copy_(tokens[:, None])
        st.pos.copy_(pos)
        st.col.fill_(attn.shape[1] - 1)
        if self.graphs and st.graph is None:
            try:
                self._capture(st, past)
            except Exception as e:  # noqa: BLE001 - any capture failure: decode eagerly, say why
                self.graphs = False
                self.stats["graph_fallback"] = f"{type(e).__name__}: {e}"[:300]
                warnings.warn(f"graph engine: the CUDA-graph capture failed ({self.stats['graph_fallback']}); "
                              "decoding eagerly on the same buffers from here on (slower, same outputs)", stacklevel=2)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
        if st.graph is not None:
            st.graph.replay()
            self.stats["graph_replays"] += 1
            return past, st.logits
        self.stats["eager_steps"] += 1
        return past, self._forward(st, past)
