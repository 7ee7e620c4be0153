"""Rollouts that move fewer bytes per token on a CPU: int4 weights for decode steps, bf16 (or fp32) for prefill.

A decode step multiplies every weight matrix by the 1-16 rows being decoded, and on a CPU the fp32 products at
that size run far below the read bandwidth (``bench/RESULTS.md``, "Why generation stops at ~3.8x"). This backend
decodes from a copy of the model whose linear layers hold their weights twice over, both smaller than fp32:

- **int4, groups of 32 inputs** (scale and offset per group, torch's ``_weight_int4pack_mm_for_cpu`` with bf16
  activations): the decode products, 8x fewer bytes than fp32. The default model ships as a Q4_1 GGUF (int4, groups
  of 32, scale and minimum per group), so its linear weights lie on this grid and are re-packed, not approximated
  (:func:`int4_step_error` says how far a matrix is from its grid). A matrix off the grid (the GGUF's Q8_0 head, any
  other model) gets a second int4 level that quantizes the first one's residual: about 8 bits a weight.
- **bf16** (oneDNN's GEMM): products of more than ``decode_rows`` rows, i.e. prefills, where fp32 is compute-bound.
  On a CPU without native bf16 (AVX2 x86-64, where oneDNN emulates it) prefills use the source's fp32 weights, and
  every decode step, of any row count, goes to the C step (torch's int4 kernel there is slower than fp32).

Everything else (embedding, norms, rotary, attention, the key/value cache) is the model's own fp32 code, shared
with it (a Llama-architecture copy takes its decode steps through :class:`LeanDecode`: the same operations on the
same modules, bit-equal, without transformers' per-module Python), and the LoRA adapter stays unmerged: each layer
adds ``B(A(x)) * scaling`` from the live peft modules, in fp32, whenever peft would (the adapter enabled, not merged).
So the copy follows ``disable_adapter()`` and every optimizer step with nothing handed over, and the trainer's own
fp32 logprobs stay the reference (``rollout_logprob_diff``, ``--tis-cap``).

:class:`QuantBackend` is :class:`~workbench.rollout.backends.hf.HFBackend` (prefix caching, memory budgets, stop
strings, logprobs) over that copy, plus one saving the fp32 path does not make: a batch's new prompts that start
with the same tokens (the system prompt and demonstrations every question of an eval shares) have that prefix
prefilled once, and a decode step of up to 8 rows (``ask``, a GRPO group, an eval batch's last rows) runs in one C
call where this machine can build it with vector kernels, AVX-512 with bf16 dot products or AVX2 with FMA
(:mod:`workbench.rollout.backends.native`: the same int4 grid, close to the torch step but not bit-equal;
``QuantBackend(native=False)`` keeps every step in torch). :func:`choose_engine` picks the engine
for ``--rollout-engine auto``.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.rollout.backends.base import (  # noqa: F401 (ENGINES re-exported: the engine names, kept light)
    ENGINES,
    Generation,
    SamplingParams,
)
from workbench.rollout.backends.hf import HFBackend

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from transformers.cache_utils import Cache

    from workbench.rollout.backends.base import CausalLM

GROUP_SIZE = 32  # inputs per int4 scale/offset: Q4_1's block, and the smallest group torch's CPU kernel takes
DECODE_ROWS = 10  # rows up to which a product runs the int4 kernel (a decode step: int4 faster at 8 rows, bf16 at 16)
ON_GRID = 0.05  # mean distance to the int4 grid, in quantization steps, below which a matrix counts as int4 already
SHARED_PREFIX_MIN = 32  # shortest common prompt prefix that is prefilled once for a batch


def int4_groups(w: Tensor, group: int = GROUP_SIZE) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric int4 quantization of ``w`` (N x K) in groups of ``group`` inputs: ``(q, step, low)`` with ``q`` in
    0..15 (N x K int32) and ``w ~ q * step + low`` per group (N x K/group each), ``low`` the group's minimum and
    ``step`` its range / 15 (Q4_1's rule)."""
    N, K = w.shape
    g = w.detach().float().reshape(N, K // group, group)
    low, high = g.amin(-1), g.amax(-1)
    step = (high - low) / 15
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = (g - low[..., None]).div_(safe[..., None]).round_().clamp_(0, 15).to(torch.int32)
    return q.reshape(N, K), step, low


def dequantize(q: Tensor, step: Tensor, low: Tensor, group: int = GROUP_SIZE) -> Tensor:
    N, K = q.shape
    return q.reshape(N, K // group, group).to(torch.float32, copy=True).mul_(step[..., None]).add_(low[..., None]).reshape(N, K)


def int4_step_error(w: Tensor, group: int = GROUP_SIZE,
                    groups: tuple[Tensor, Tensor, Tensor] | None = None) -> float:
    """Mean distance of ``w``'s entries to their group's int4 grid, in quantization steps: about 0.25 for weights that
    were never int4 (uniform rounding error), near 0 for a 4-bit model's (the default GGUF's Q4_1 layers: only the
    bf16 rounding of the stored weights moves them off it). ``groups``: ``int4_groups(w, group)`` if already made."""
    q, step, low = groups if groups is not None else int4_groups(w, group)
    err = dequantize(q, step, low, group).sub_(w.float()).abs_().reshape(step.shape[0], step.shape[1], group)
    live = step > 0
    err.div_(torch.where(live, step, torch.ones_like(step))[..., None])
    if bool(live.all()):
        return float(err.mean())
    return float(err[live].mean()) if live.any() else 0.0


@dataclass
class Int4Weight:
    """A weight matrix as ``levels`` stacked int4 matrices (each quantizing the residual of those before) in
    torch's CPU int4 layout; ``matmul(x)`` is ``x @ W.T`` with ``x`` rounded to bf16 and fp32 accumulation."""

    packed: Tensor
    scales_zeros: Tensor
    out_features: int
    levels: int

    @classmethod
    def quantize(cls, w: Tensor, levels: int = 1, group: int = GROUP_SIZE,
                 first: tuple[Tensor, Tensor, Tensor] | None = None) -> Int4Weight:
        """``first``: ``int4_groups(w, group)`` if already made (the first level's grid)."""
        rest, qs, szs = w.detach().float(), [], []
        for level in range(levels):
            q, step, low = first if level == 0 and first is not None else int4_groups(rest, group)
            if level + 1 < levels:  # the next level quantizes what this one leaves
                rest = rest - dequantize(q, step, low, group)
            qs.append(q)
            # the kernel computes (q - 8) * scale + zero
            szs.append(torch.stack([step, low + 8 * step], -1).transpose(0, 1))
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.cat(qs), 2)
        sz = torch.cat(szs, dim=1).contiguous().to(torch.bfloat16)  # K/group x levels*N x 2
        return cls(packed, sz, w.shape[0], levels)

    @classmethod
    def concat(cls, parts: list[Int4Weight]) -> Int4Weight:
        """One matrix of one-level ``parts`` stacked by output (q, k and v; gate and up): the same outputs, side by
        side, in one kernel call (the CPU layout packs each output row on its own, so the packs stack as they are)."""
        if any(p.levels != 1 for p in parts):
            raise ValueError("only one-level int4 matrices concatenate")
        return cls(torch.cat([p.packed for p in parts]), torch.cat([p.scales_zeros for p in parts], 1).contiguous(),
                   sum(p.out_features for p in parts), 1)

    def matmul(self, x: Tensor) -> Tensor:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), self.packed, GROUP_SIZE, self.scales_zeros)
        if self.levels > 1:
            y = y.view(x.shape[0], self.levels, self.out_features).sum(1)
        return y.float()


def _lora_source(module: nn.Module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A") and hasattr(module, "scaling")


class QuantLinear(nn.Module):
    """A linear layer of the rollout copy: int4 for up to ``decode_rows`` rows, bf16 above (``prefill_bf16``; by
    default where :func:`cpu_has_bf16`, else the source's fp32 weight, and then ``decode_rows`` defaults to 0), plus
    the LoRA of ``source`` (a peft LoRA ``Linear``, read live) when peft would add it. ``source`` may be a plain
    ``nn.Linear``."""

    def __init__(self, source: nn.Module, decode_rows: int | None = None, levels: int | None = None,
                 prefill_bf16: bool | None = None):
        super().__init__()
        base = source.base_layer if _lora_source(source) else source
        if not isinstance(base, nn.Linear):
            raise TypeError(f"QuantLinear needs an nn.Linear (or a peft LoRA layer over one), got {type(base).__name__}")
        w = base.weight.detach()
        self.in_features, self.out_features = base.in_features, base.out_features
        bf16 = cpu_has_bf16() if prefill_bf16 is None else prefill_bf16
        # without native bf16, torch's int4 kernel is slower than fp32 (the C step takes the decode steps there)
        self.decode_rows = decode_rows if decode_rows is not None else DECODE_ROWS if bf16 else 0
        grid = int4_groups(w)  # the first level's grid, which also measures how far ``w`` lies from it
        self.step_error = int4_step_error(w, groups=grid)
        self.levels = levels or (1 if self.step_error < ON_GRID else 2)
        # torch's int4 matrix where its products run (``decode_rows``), else on first use (:attr:`int4`: without
        # native bf16 the C step takes the decode steps); the grid is kept (levels as bytes) for the C step to pack
        self._grid: tuple[Tensor, Tensor, Tensor] | None = (grid[0].to(torch.uint8), grid[1], grid[2])
        self._int4 = Int4Weight.quantize(w, self.levels, first=grid) if self.decode_rows else None
        # larger products: bf16 where the CPU runs it natively, else the source's own fp32 weight (no copy)
        self.weight16 = w.to(torch.bfloat16) if bf16 else None
        self.bias = None if base.bias is None else base.bias.detach()
        self.lora = source if _lora_source(source) else None
        self._weight, self._version = base.weight, base.weight._version

    @property
    def int4(self) -> Int4Weight:
        """The weight as torch's int4 matrix (``levels`` levels), made on first use."""
        if self._int4 is None:
            self._int4 = Int4Weight.quantize(self._weight.detach(), self.levels, first=self.grid())
        return self._int4

    def grid(self) -> tuple[Tensor, Tensor, Tensor]:
        """The source weight's first int4 level, :func:`int4_groups` (what the C decode step packs)."""
        if self._grid is None:
            return int4_groups(self._weight.detach())
        q, step, low = self._grid
        return q.to(torch.int32), step, low

    def drop_grid(self) -> None:
        """Forget the kept grid (:meth:`grid` computes it again if asked): once what packs it has."""
        self._grid = None

    @property
    def stale(self) -> bool:
        """The source's base weight changed in place since it was quantized, or its LoRA was merged into it."""
        return self._weight._version != self._version or (self.lora is not None and bool(self.lora.merged))

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] <= self.decode_rows:
            y = self.int4.matmul(x2)
        elif self.weight16 is None:
            y = F.linear(x2, self._weight)
        else:
            y = F.linear(x2.to(torch.bfloat16), self.weight16).float()
        if self.bias is not None:
            y = y + self.bias
        return self.add_lora(y, x2).view(*shape[:-1], self.out_features)

    def add_lora(self, y: Tensor, x2: Tensor) -> Tensor:
        """``y`` plus the source's LoRA term for the rows ``x2``, where peft would add it (enabled, not merged)."""
        lora = self.lora
        if lora is not None and not lora.disable_adapters and not lora.merged:
            for name in lora.active_adapters:
                if name in lora.lora_A:
                    y = y + F.linear(F.linear(x2, lora.lora_A[name].weight), lora.lora_B[name].weight) * lora.scaling[name]
        return y


ATTENTION = "workbench_int4"
"""The copy's attention (a transformers attention implementation, registered by :func:`quantize_model`): SDPA in
bf16 for prefills on a CPU with native bf16 (2-3x faster than fp32 there; emulated and slower elsewhere), fp32 SDPA
over the fp32 cache for decode steps."""


def _attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
               **kw: Any) -> tuple[Tensor, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] == 1 or not getattr(getattr(module, "config", None), "workbench_bf16", False):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)
    bf = torch.bfloat16
    out, weights = sdpa_attention_forward(module, query.to(bf), key.to(bf), value.to(bf), attention_mask, **kw)
    return out.float(), weights


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def quantize_model(model: nn.Module, decode_rows: int | None = None, prefill_bf16: bool | None = None) -> nn.Module:
    """The rollout copy of ``model`` (a transformers causal LM, or a peft model over one): its modules copied, its
    parameters and buffers shared, every linear layer (and peft LoRA layer) replaced by a :class:`QuantLinear` over
    the original. ``prefill_bf16``: whether prefills run in bf16 (weights and attention; default
    :func:`cpu_has_bf16`). Raises ``ValueError`` for what it cannot copy faithfully (weights not fp32, LoRA
    variants)."""
    bf16 = cpu_has_bf16() if prefill_bf16 is None else prefill_bf16
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if any(p.dtype != torch.float32 for p in base.parameters()):
        raise ValueError("the int4 rollout engine quantizes an fp32 model (this one is not fp32); use the fp32 engine")
    shared = {id(t): t for t in list(base.parameters()) + list(base.buffers())}
    qmodel = copy.deepcopy(base, memo=shared)
    targets, lora_names = [], []
    for name, src in base.named_modules():
        if any(name.startswith(n + ".") for n in lora_names):
            continue  # a LoRA layer's own base / A / B linears
        if _lora_source(src):
            lora_names.append(name)
            if any(getattr(src, "lora_variant", {}) or {}) or any((getattr(src, "lora_bias", {}) or {}).values()):
                raise ValueError(f"{name}: LoRA variants (DoRA...) and LoRA biases are not supported by the int4 engine")
            linear = src.base_layer
        elif isinstance(src, nn.Linear):
            linear = src
        else:
            continue
        if linear.in_features % GROUP_SIZE == 0:  # torch's int4 kernel needs whole groups: else the layer stays fp32
            targets.append((name, src))
    for name, src in targets:
        parent_name, _, child = name.rpartition(".")
        parent = qmodel.get_submodule(parent_name) if parent_name else qmodel
        setattr(parent, child, QuantLinear(src, decode_rows, prefill_bf16=bf16))
    if getattr(getattr(qmodel, "config", None), "_attn_implementation", None) == "sdpa":
        _register_attention()
        qmodel.config._attn_implementation = ATTENTION
    qmodel.workbench_bf16 = bf16  # what QuantBackend reports and its prefill reads
    if getattr(qmodel, "config", None) is not None:  # the copy's own config (deep-copied), shared by its modules:
        qmodel.config.workbench_bf16 = bf16  # what _attention reads from the attention module it is called for
    qmodel.eval()
    return qmodel


class LeanDecode:
    """A one-token decode step of a Llama-architecture copy without transformers' per-module machinery.

    The same operations as ``LlamaForCausalLM.forward`` for one new token over a cache, in the same order on the same
    modules (the copy's :class:`QuantLinear` layers, its norms' weights, its rotary embedding, transformers' causal
    mask and SDPA call), so its logits are the model's; what it drops is the Python around them (module calls, hooks,
    keyword plumbing, output records): about 15 calls a layer, most of a one-row step's time outside the products
    (``bench/bench_decode_split.py``). A layer's q, k and v products run as one int4 call, and gate and up as another
    (:meth:`Int4Weight.concat`: bit-equal outputs, 5 kernel calls a layer instead of 7), each projection's LoRA term
    added to its slice. :meth:`build` returns ``None`` for anything else (another architecture, a layer that is not a
    :class:`QuantLinear`), and the backend then steps through the model itself."""

    def __init__(self, qmodel: nn.Module):
        import inspect

        from transformers.masking_utils import create_causal_mask
        from transformers.models.llama import modeling_llama as ml

        from workbench.rollout.backends.hf import CACHE_ARG

        if CACHE_ARG not in inspect.signature(create_causal_mask).parameters:
            raise TypeError(f"this transformers' create_causal_mask takes no {CACHE_ARG!r}")
        self._causal_mask, self._cache_arg = create_causal_mask, CACHE_ARG
        inner = getattr(qmodel, "model", None)
        if type(qmodel) is not ml.LlamaForCausalLM or type(inner) is not ml.LlamaModel:
            raise TypeError("not a transformers LlamaForCausalLM")
        self.model, self.inner, self.config = qmodel, inner, qmodel.config
        self.layers = []
        for layer in inner.layers[: self.config.num_hidden_layers]:
            a, mlp = layer.self_attn, layer.mlp
            parts = (type(layer) is ml.LlamaDecoderLayer, type(a) is ml.LlamaAttention, type(mlp) is ml.LlamaMLP,
                     type(layer.input_layernorm) is ml.LlamaRMSNorm, type(layer.post_attention_layernorm) is ml.LlamaRMSNorm)
            linears = (a.q_proj, a.k_proj, a.v_proj, a.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            if not all(parts) or not all(isinstance(m, QuantLinear) for m in linears):
                raise TypeError("a decoder layer that is not Llama's with int4 linear layers")
            self.layers.append((layer.input_layernorm, a, layer.post_attention_layernorm, mlp.act_fn, linears,
                                self._fuse(linears[:3]), self._fuse(linears[4:6])))
        if type(inner.norm) is not ml.LlamaRMSNorm or not isinstance(qmodel.lm_head, nn.Module):
            raise TypeError("an unexpected final norm or head")

    @classmethod
    def build(cls, qmodel: nn.Module) -> LeanDecode | None:
        try:
            return cls(qmodel)
        except (TypeError, AttributeError, ImportError):
            return None

    @staticmethod
    def _fuse(linears: tuple[QuantLinear, ...]) -> _Fused | None:
        """The one-level, bias-free ``linears`` as one int4 matrix (made on first use) and each one's width; ``None``
        if they are not."""
        if any(m.levels != 1 or m.bias is not None or m.in_features != linears[0].in_features for m in linears):
            return None
        return _Fused(linears)

    @staticmethod
    def _products(x: Tensor, linears: tuple[QuantLinear, ...], fused: _Fused | None) -> list[Tensor]:
        """Each of ``linears`` applied to the rows ``x`` (B x 1 x in): one fused kernel call when there is one, then
        each projection's LoRA term on its slice, as :meth:`QuantLinear.forward` would give it."""
        x2 = x.reshape(-1, x.shape[-1])
        if fused is None or x2.shape[0] > linears[0].decode_rows:
            return [m.forward(x) for m in linears]
        return [m.add_lora(y, x2).reshape(*x.shape[:-1], -1)
                for m, y in zip(linears, fused.weight.matmul(x2).split(fused.widths, dim=-1))]

    @staticmethod
    def _norm(norm: nn.Module, h: Tensor) -> Tensor:  # LlamaRMSNorm.forward on fp32 activations
        h = h.to(torch.float32)
        return norm.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))

    @staticmethod
    def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:  # apply_rotary_pos_emb for one of q, k
        half = x.shape[-1] // 2
        return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)

    def __call__(self, tokens: Tensor, attn: Tensor, pos: Tensor, past: Cache) -> tuple[Cache, Tensor]:
        inner = self.inner
        h = inner.embed_tokens(tokens[:, None])
        mask = self._causal_mask(config=self.config, inputs_embeds=h, attention_mask=attn, position_ids=pos,
                                 **{self._cache_arg: past})
        cos, sin = inner.rotary_emb(h, position_ids=pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        B = h.shape[0]
        for li, (norm1, a, norm2, act, linears, qkv, gate_up) in enumerate(self.layers):
            x = self._norm(norm1, h)
            q, k, v = (y.reshape(B, 1, -1, a.head_dim).transpose(1, 2) for y in self._products(x, linears[:3], qkv))
            k, v = past.update(self._rotate(k, cos, sin), v, li)
            out, _ = _attention(a, self._rotate(q, cos, sin), k, v, mask, dropout=0.0, scaling=a.scaling)
            h = h + linears[3].forward(out.reshape(B, 1, -1).contiguous())
            gate, up = self._products(self._norm(norm2, h), linears[4:6], gate_up)
            h = h + linears[6].forward(act(gate) * up)
        return past, self.model.lm_head(self._norm(inner.norm, h))[:, -1, :]


class _Fused:
    """One-level projections side by side as one int4 matrix (:meth:`Int4Weight.concat`), made on first use."""

    def __init__(self, linears: tuple[QuantLinear, ...]):
        self.linears, self.widths = linears, [m.out_features for m in linears]

    @functools.cached_property
    def weight(self) -> Int4Weight:
        return Int4Weight.concat([m.int4 for m in self.linears])


def quant_layers(model: nn.Module) -> list[QuantLinear]:
    return [m for m in model.modules() if isinstance(m, QuantLinear)]


def cpu_has_bf16() -> bool:
    """Whether oneDNN runs bf16 natively here (AVX512-BF16 / AMX): else bf16 prefill is emulated and slow. False
    where ``$WORKBENCH_CPU`` asks for a lesser CPU than the host (:mod:`workbench.util.cpu`)."""
    from workbench.util.cpu import below_native

    return not below_native() and _onednn_bf16()


@functools.cache
def _onednn_bf16() -> bool:
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:  # pragma: no cover - a build without oneDNN
        return False


def choose_engine(engine: str, model: CausalLM) -> tuple[str, str]:
    """``(engine, why)`` for ``--rollout-engine ENGINE``: ``fp32``, ``int4`` and ``graph`` as asked; ``auto`` is ``graph``
    for a model on CUDA (:mod:`workbench.rollout.backends.graph`), ``int4`` for an fp32 model on a CPU with native bf16,
    or on one whose C decode step builds with vector kernels (AVX2 + FMA: most x86-64 CPUs since 2013; NEON: every
    ARM64 CPU) for a Llama-architecture model, whose decode steps then all run in C; ``fp32`` elsewhere (another
    accelerator, bf16 weights on a CPU, the plain C loops)."""
    if engine not in ENGINES:
        raise ValueError(f"rollout engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine != "auto":
        return engine, "asked for"
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "config", None) is None:
        return "fp32", "auto: not a transformers model (no config), the int4 engine copies one"
    p = next(model.parameters())
    if p.device.type == "cuda":
        return "graph", "auto: the model is on cuda: the LoRA merged for each call, the decode step in a CUDA graph"
    if p.device.type != "cpu":
        return "fp32", f"auto: the model is on {p.device.type}, the int4 engine is for CPUs"
    if p.dtype != torch.float32:
        return "fp32", f"auto: the model is {p.dtype}, the int4 engine quantizes fp32 weights"
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return "fp32", "auto: this torch build has no CPU int4 kernels"
    if cpu_has_bf16():
        return "int4", "auto: a CPU with native bf16"
    from workbench.util.cpu import ENV, cpu_level

    engine, why = _without_native_bf16(base)
    level = cpu_level()
    return engine, why if level == "native" else f"{why} (${ENV}={level})"


def _without_native_bf16(base: Any) -> tuple[str, str]:
    from workbench.rollout.backends.native import SIMD, library

    lib, why = library()
    if lib is None:
        return "fp32", f"auto: no native bf16 and no vector C decode step ({why})"
    if getattr(base.config, "model_type", None) != "llama":
        return "fp32", (f"auto: no native bf16, and the C decode step takes Llama-architecture models "
                        f"(this one is {getattr(base.config, 'model_type', None)!r})")
    why = f"auto: no native bf16, so fp32 prefill and every decode step in C ({SIMD[lib.wb_simd()]})"
    if lib.wb_simd() == 128:
        why += "; its NEON kernels are not yet timed on ARM hardware: --rollout-engine fp32 if this is slower"
    return "int4", why


class QuantBackend(HFBackend):
    """:class:`HFBackend` over :func:`quantize_model`'s copy of ``model`` (see the module docstring); ``model``
    itself (with its adapter) is left as it is and stays the fp32 reference. ``prefill_bf16``: bf16 prefills
    (weights and attention) or fp32 ones, one prompt's rows a call (default :func:`cpu_has_bf16`: a test or a
    benchmark names the path it takes). Other keyword arguments are HFBackend's."""

    name = "int4"

    def __init__(self, model: CausalLM, tokenizer: PreTrainedTokenizerBase, decode_rows: int | None = None,
                 lean: bool = True, native: bool = True, prefill_bf16: bool | None = None, **kw: Any):
        from workbench.rollout.backends.native import NativeDecode

        self.source = model
        qmodel = quantize_model(model, decode_rows, prefill_bf16)
        self.layers = quant_layers(qmodel)
        self.lean = LeanDecode.build(qmodel) if lean else None
        self.native = NativeDecode.build(self.lean) if native and self.lean is not None else None
        for m in self.layers:  # the C step has packed the grids it needs
            m.drop_grid()
        self.native_why = ("" if self.native is not None else "not asked for" if not native
                           else "no lean step (not a Llama)" if self.lean is None else NativeDecode.why_not)
        self.prefill_bf16 = qmodel.workbench_bf16
        if self.native is not None and not self.prefill_bf16:  # torch's other steps would be fp32 or emulated int4
            self.native.max_rows = 1 << 30
        super().__init__(qmodel, tokenizer, **kw)
        self.stats["shared_prefix_tokens"] = 0
        self.stats["native_steps"] = 0

    def describe(self) -> str:
        one = sum(1 for m in self.layers if m.levels == 1)
        from workbench.rollout.backends.native import MAX_ROWS, SIMD

        if self.native is None:
            small = f"decode steps of up to {MAX_ROWS} rows through torch ({self.native_why})"
        else:
            simd = SIMD.get(self.native.lib.wb_simd(), "plain C loops")
            small = (f"decode steps of up to {MAX_ROWS} rows" if self.native.max_rows <= MAX_ROWS
                     else f"every decode step, {MAX_ROWS} rows a call,") + f" in C (decode_step.c, {simd})"
        return (f"int4 decode / {'bf16' if self.prefill_bf16 else 'fp32'} prefill: {one} of {len(self.layers)} "
                f"linear layers on the int4 grid, {len(self.layers) - one} with two int4 levels; {small}")

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        stale = [m for m in self.layers if m.stale]
        if stale:
            raise RuntimeError(f"{len(stale)} base weights changed in place (or took a LoRA merge) since the int4 copy "
                               "was made: build a new QuantBackend")
        return super().generate(prompts, params, max_new_tokens)

    def _adapter_model(self) -> Any:
        return self.source  # the copy's LoRA layers are the source's

    def _decode_step(self, tokens, attn, pos, past):
        if self.native is not None and self.native.takes(tokens, attn, past):
            self.stats["native_steps"] += 1
            return self.native(tokens, attn, pos, past)
        if self.lean is not None:
            return self.lean(tokens, attn, pos, past)
        return super()._decode_step(tokens, attn, pos, past)

    @torch.inference_mode()
    def _generate_chunk(self, prompts, limits, params, gen, t0):
        self._share_prefix([p for p, lim in zip(prompts, limits) if lim > 0])
        if self.native is not None:  # the adapter's state as peft applies it for this call (enabled, merged, which)
            self.native.active = self.native.refresh()
        return super()._generate_chunk(prompts, limits, params, gen, t0)

    def _prefill(self, prompts, entries):
        """Without native bf16 the prefill is fp32 and compute-bound, so a batch's prompts are prefilled apart, one
        call per kept cache they extend (rows extending the same one, such as a batch's shared prefix, go together;
        a row with none goes alone): a batch pads every row's new tokens to the longest and its cached ones to the
        longest, a quarter to a half of a multi-turn eval's prefill work. The calls' keys and values are then laid
        side by side, each row right-aligned, as one batch's cache (its padding masked, as in a batched prefill)."""
        if self.prefill_bf16 or len(prompts) < 2:
            return super()._prefill(prompts, entries)
        from transformers import DynamicCache

        groups: dict[Any, list[int]] = {}
        for i, e in enumerate(entries):
            groups.setdefault(id(e) if e is not None else ("alone", i), []).append(i)
        parts = [(rows, super(QuantBackend, self)._prefill([prompts[i] for i in rows], [entries[i] for i in rows]))
                 for rows in groups.values()]
        B, L = len(prompts), max(int(a.shape[1]) for _, (_, a, _, _) in parts)
        attn = torch.zeros((B, L), dtype=torch.long)
        pos = torch.zeros((B, 1), dtype=torch.long)
        logits = parts[0][1][3].new_empty((B, parts[0][1][3].shape[-1]))
        for rows, (_, a, last, lg) in parts:
            attn[rows, L - a.shape[1]:] = a.cpu()
            pos[rows] = last.cpu()
            logits[rows] = lg
        layers = []
        for li in range(len(parts[0][1][0].layers)):
            ref = parts[0][1][0].layers[li].keys
            shape = (B, ref.shape[1], L, ref.shape[3])
            k, v = ref.new_zeros(shape), ref.new_zeros(shape)
            for rows, (past, a, _, _) in parts:
                layer = past.layers[li]
                k[rows, :, L - a.shape[1]:], v[rows, :, L - a.shape[1]:] = layer.keys, layer.values
                layer.keys = layer.values = None  # each call's copy goes as soon as it is laid in
            layers.append((k, v))
        past = DynamicCache(ddp_cache_data=layers, config=getattr(self.model, "config", None))
        return past, attn.to(ref.device), pos.to(ref.device), logits

    def _share_prefix(self, prompts: list[list[int]]) -> None:
        """Prefill the longest prefix that the batch's distinct new prompts share (and that no kept cache already
        covers) once, keeping it as the pinned cache entry that each prompt's prefill then starts from, and the
        later calls' new prompts too (until another batch shares another prefix)."""
        if not self.prefix_cache:
            return
        uniq = [p for p in {tuple(p): None for p in prompts} if self._lookup(list(p)) is None]  # new prompts only
        if len(uniq) < 2:
            return
        n = min(len(p) for p in uniq) - 1  # a proper prefix: each prompt keeps a new token to prefill
        first = uniq[0]
        for p in uniq[1:]:
            k = 0
            while k < n and p[k] == first[k]:
                k += 1
            n = k
        if n < SHARED_PREFIX_MIN:
            return
        prefix = list(first[:n])
        past, attn, _, _ = self._prefill([prefix], [None])
        self._save(prefix, past, 0, attn[0].nonzero().squeeze(-1), pin=True)
        self.stats["shared_prefix_tokens"] += n * (len(uniq) - 1)
