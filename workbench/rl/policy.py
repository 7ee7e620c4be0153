"""``LoRAPolicy``: a causal LM with a LoRA adapter (peft), its reference policy, and logprobs
of the sampled tokens without a float32 batch × tokens × vocab tensor.

- The reference policy is the same model with the adapter disabled
  (``with model.disable_adapter():``): no second copy of the weights in memory.
- bf16 on CUDA, fp32 on CPU (``workbench.core.models.load_policy``); adapter weights stay fp32.
- ``amp`` (``TrainConfig.amp``): the transformer body runs under ``torch.autocast(bf16)`` (``auto``: on
  CUDA only), the LoRA weights stay fp32 (their master copy and gradients), and the head's log-softmax
  stays fp32 (:func:`selective_logprobs`, outside autocast).
- ``gradient_checkpointing`` (``TrainConfig.gradient_checkpointing``): each decoder layer's activations are
  recomputed in backward instead of kept (transformers' non-reentrant checkpointing), for forwards with
  gradient only; the shared-prefix forward needs the prefix's key/value cache, which checkpointed layers
  drop, so the two are refused together.
- :func:`selective_logprobs` runs the transformer body once, then applies ``lm_head`` +
  float32 log-softmax to a chunk of positions at a time and keeps only the sampled token's
  logprob (and its logsumexp). Backward recomputes each chunk's logits instead of keeping all
  of them (a fused function with a hand-written backward for a plain linear head; activation
  checkpointing otherwise): peak memory holds one chunk's ``chunk_size × V`` logits, not
  ``B × T × V`` (``bench/bench_logprobs.py`` measures it). Splitting the forward into chunks
  without recomputation would not help in training: autograd would keep every chunk's logits.
- Alignment: see :mod:`workbench.rl.batch`; column t of the result is log π(input_ids[:, t] | prefix).
- Logprobs are of the raw distribution (temperature 1), as the HF backend records them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from workbench.core.choices import AMP_MODES
from workbench.core.models import DEFAULT_MODEL, load_policy, portable_model_name
from workbench.rollout.lora_serving import check_adapter_files, check_adapter_fits

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

ATTN_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_TARGETS = ["gate_proj", "up_proj", "down_proj"]
#: ``config.model_type`` -> LoRA target module names (attention projections; see ``include_mlp``).
DEFAULT_TARGETS: dict[str, list[str]] = {
    **{t: ATTN_TARGETS for t in ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "qwen2_moe", "qwen3_moe")},
    "gpt2": ["c_attn", "c_proj"],
}
_HAS_MLP = {t for t, v in DEFAULT_TARGETS.items() if v is ATTN_TARGETS}
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
#: Where a run that merged its initial adapter keeps the trained adapter alone (:meth:`LoRAPolicy.save_adapter`).
TRAINED_PART = "trained_part"
#: What a stacked adapter is made of (:func:`stack_adapters`), beside its PEFT files.
STACKED_NOTE = "stacked.json"


# ---------------------------------------------------------------------------- logprob kernels
def _upcast(z: Tensor) -> Tensor:
    """At least float32 (bf16/fp16 logits are upcast; float64 stays float64)."""
    return z.to(torch.promote_types(z.dtype, torch.float32))


def naive_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """Reference implementation: full (at least float32) ``log_softmax`` over ``(B, T, V)``
    logits, then gather. Column t = log p(input_ids[:, t]) from the logits at t − 1; column 0 is 0."""
    B, T, V = logits.shape
    lp = torch.log_softmax(_upcast(logits[:, :-1]), dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.cat([lp.new_zeros(B, 1), lp], dim=1)


def _chunk(head: Callable[[Tensor], Tensor], with_entropy: bool, h: Tensor, tgt: Tensor) -> tuple[Tensor, ...]:
    z = _upcast(head(h))  # (C, V): the only vocabulary-sized tensor, one chunk at a time
    lse = torch.logsumexp(z, dim=-1)
    lp = z.gather(-1, tgt[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return (lp,)
    return lp, lse - (torch.softmax(z, dim=-1) * z).sum(-1)


class _LinearLogprobs(torch.autograd.Function):
    """``log_softmax(h @ W.T + b)[target]`` chunk by chunk with a hand-written backward.

    Forward keeps only the per-row logsumexp; backward recomputes each chunk's logits once and
    turns them in place into ``g·(onehot − softmax)``, the gradient of the logits
    (d lp / d z = onehot(target) − softmax(z)). One ``C × V`` buffer at a time, three matmuls in
    all (naive: two), and fewer passes over the buffer than checkpointing the generic path.
    """

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, tgt: Tensor, chunk: int) -> Tensor:
        N = h.shape[0]
        out_dtype = torch.promote_types(h.dtype, torch.float32)
        lp, lse = torch.empty(N, dtype=out_dtype, device=h.device), torch.empty(N, dtype=out_dtype, device=h.device)
        for i in range(0, N, chunk):
            z = _upcast(nn.functional.linear(h[i : i + chunk], weight, bias))  # (C, V)
            lse[i : i + chunk] = torch.logsumexp(z, dim=-1)
            lp[i : i + chunk] = z.gather(-1, tgt[i : i + chunk, None]).squeeze(-1) - lse[i : i + chunk]
        ctx.save_for_backward(h, weight, bias, tgt, lse)
        ctx.chunk = chunk
        return lp

    @staticmethod
    def backward(ctx, g: Tensor):
        h, weight, bias, tgt, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        gh = torch.zeros_like(h) if need_h else None
        gw = torch.zeros_like(weight) if need_w else None
        gb = torch.zeros_like(bias) if need_b else None
        for i in range(0, h.shape[0], ctx.chunk):
            hc, gc = h[i : i + ctx.chunk], g[i : i + ctx.chunk, None].to(lse.dtype)
            z = _upcast(nn.functional.linear(hc, weight, bias))
            z.sub_(lse[i : i + ctx.chunk, None]).exp_().mul_(-gc)  # −g·softmax(z)
            z.scatter_add_(1, tgt[i : i + ctx.chunk, None], gc)  # + g·onehot(target)
            dz = z.to(h.dtype)
            if need_h:
                gh[i : i + ctx.chunk] = dz @ weight
            if need_w:
                gw += (dz.T @ hc).to(gw.dtype)
            if need_b:
                gb += dz.sum(0).to(gb.dtype)
        return gh, gw, gb, None, None


def selective_logprobs(hidden: Tensor, head: Callable[[Tensor], Tensor], targets: Tensor, chunk_size: int = 512,
                       with_entropy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """log-softmax(head(hidden))[target] for ``N`` rows, ``chunk_size`` rows at a time.

    Args:
        hidden: ``(N, H)`` final hidden states (the rows that predict ``targets``).
        head: maps ``(C, H)`` to ``(C, V)`` logits (``lm_head``, any dtype; bf16/fp16 made float32 here).
        targets: ``(N,)`` token ids.
        chunk_size: rows per chunk; peak memory ~ a few × ``chunk_size × V`` float32.
        with_entropy: also return the entropy of each row's distribution.

    Returns ``(N,)`` logprobs (and ``(N,)`` entropies) in float32 (float64 for a float64 model).
    No ``N × V`` tensor is kept for backward: a plain ``nn.Linear`` head without entropy uses a
    fused function with a hand-written backward (:class:`_LinearLogprobs`); any other head (a
    soft-capped or adapted one) or ``with_entropy`` checkpoints each chunk, so backward
    recomputes that chunk's logits through autograd.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    N = hidden.shape[0]
    if N == 0:
        empty = _upcast(hidden.new_zeros(0))
        return (empty, empty.clone()) if with_entropy else empty
    if type(head) is nn.Linear and not with_entropy:
        return _LinearLogprobs.apply(hidden, head.weight, head.bias, targets, chunk_size)
    outs: list[tuple[Tensor, ...]] = []
    grad = torch.is_grad_enabled()
    for i in range(0, N, chunk_size):
        h, t = hidden[i : i + chunk_size], targets[i : i + chunk_size]
        if grad:
            outs.append(checkpoint(_chunk, head, with_entropy, h, t, use_reentrant=False))
        else:
            outs.append(_chunk(head, with_entropy, h, t))
    lp = torch.cat([o[0] for o in outs])
    if with_entropy:
        return lp, torch.cat([o[1] for o in outs])
    return lp


# ---------------------------------------------------------------------------- LoRA targets
def default_target_modules(model: nn.Module, include_mlp: bool = False) -> list[str]:
    """LoRA targets for ``model``: per architecture (llama/qwen2/mistral... → q,k,v,o (+ gate,
    up, down with ``include_mlp``); gpt2 → c_attn, c_proj), else every ``nn.Linear`` except the
    output layer, with a logged message saying so."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in DEFAULT_TARGETS:
        targets = list(DEFAULT_TARGETS[model_type])
        if include_mlp and model_type in _HAS_MLP:
            targets += MLP_TARGETS
        return targets
    out_layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
                    if isinstance(mod, nn.Linear) and mod is not out_layer and name.rsplit(".", 1)[-1] != "lm_head"})
    if not names:
        raise ValueError(f"no nn.Linear layers to put LoRA on in model_type={model_type!r}; pass target_modules=[...]")
    log.warning(
        "LoRA: no default target modules for model_type=%r; targeting every nn.Linear except the output layer: %s. "
        "Pass target_modules=[...] to choose.", model_type, names,
    )
    return names


# ---------------------------------------------------------------------------- stacked adapters
def _lora_scale(cfg: dict[str, Any], where: Path) -> float:
    """peft's scaling of one LoRA adapter's update (α / r, or α / √r with rsLoRA); a one-line error for the
    variants whose update is not ``B @ A`` times a constant (DoRA, per-module ranks)."""
    from workbench.rollout.lora_serving import AdapterError

    for key in ("use_dora", "rank_pattern", "alpha_pattern"):
        if cfg.get(key):
            raise AdapterError(f"{where / ADAPTER_CONFIG}: {key} is set; only plain LoRA adapters can be stacked")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    return alpha / (r ** 0.5 if cfg.get("use_rslora") else r)


def stack_adapters(first: str | os.PathLike, second: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write to ``out`` one PEFT adapter whose update is ``first``'s plus ``second``'s: their A matrices stacked and
    their B matrices side by side, each scaled by its own α / r (rank r₁ + r₂, α = r₁ + r₂, so the scaling is 1);
    a module only one of them adapts gets zeros for the other's rows. So base + ``out`` is base with ``first`` merged
    plus ``second``: what a run with ``merge_init`` trained, loadable where only the plain base model is."""
    from safetensors.torch import load_file, save_file

    from workbench.util.io import atomic_write_json

    dirs = [Path(first), Path(second)]
    cfgs = [json.loads((d / ADAPTER_CONFIG).read_text()) for d in dirs]
    scales = [_lora_scale(c, d) for c, d in zip(cfgs, dirs)]
    ranks = [int(c["r"]) for c in cfgs]
    parts = [load_file(str(d / ADAPTER_WEIGHTS)) for d in dirs]
    modules = sorted({k.rsplit(".lora_", 1)[0] for w in parts for k in w if ".lora_A." in k})
    out_w: dict[str, Tensor] = {}
    for m in modules:
        a_key, b_key = f"{m}.lora_A.weight", f"{m}.lora_B.weight"
        shape_a = next(w[a_key].shape for w in parts if a_key in w)
        shape_b = next(w[b_key].shape for w in parts if b_key in w)
        a_rows, b_cols = [], []
        dtype = next(w[a_key].dtype for w in parts if a_key in w)
        for w, r, s in zip(parts, ranks, scales):
            if a_key in w:
                a_rows.append(w[a_key].to(dtype))
                b_cols.append(w[b_key].to(dtype) * s)
            else:
                a_rows.append(torch.zeros(r, shape_a[1], dtype=dtype))
                b_cols.append(torch.zeros(shape_b[0], r, dtype=dtype))
        out_w[a_key], out_w[b_key] = torch.cat(a_rows, 0).contiguous(), torch.cat(b_cols, 1).contiguous()
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    save_file(out_w, str(d / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    targets = sorted(set(cfgs[0].get("target_modules") or []) | set(cfgs[1].get("target_modules") or []))
    atomic_write_json(d / ADAPTER_CONFIG, {**cfgs[1], "r": sum(ranks), "lora_alpha": sum(ranks), "use_rslora": False,
                                           "target_modules": targets})
    atomic_write_json(d / STACKED_NOTE, {"first": str(dirs[0]), "second": str(dirs[1]), "ranks": ranks,
                                         "scales": scales})
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG, STACKED_NOTE):
        (d / name).chmod(0o644)
    return d


# ---------------------------------------------------------------------------- the policy
def adapter_dir(path: str | os.PathLike) -> Path:
    """The adapter directory ``path`` names: itself when it holds ``adapter_model.safetensors``, else the run
    directory ``path``'s adapter (an SFT or RL run): its kept best checkpoint (``checkpoints/best``, where the run
    chose one by validation: ``TrainConfig.keep_best``), else its newest checkpoint."""
    from workbench.rl.checkpoint import BEST, latest_checkpoint

    p = Path(path)
    if (p / ADAPTER_WEIGHTS).exists():
        return p
    if (p / "checkpoints" / BEST / ADAPTER_WEIGHTS).exists():
        return p / "checkpoints" / BEST
    ck = latest_checkpoint(p) if p.is_dir() else None
    if ck is not None and (ck / ADAPTER_WEIGHTS).exists():
        return ck
    raise FileNotFoundError(f"no adapter at {p}: expected a directory with {ADAPTER_WEIGHTS} (e.g. "
                            "<run>/checkpoints/step_000010) or a run directory with checkpoints")


class LoRAPolicy:
    """A causal LM with one trainable LoRA adapter; the reference policy is the adapter disabled.

    Args:
        model_name_or_path: alias, local path or cached hub id (``workbench.core.models.load_policy``).
        r: LoRA rank.
        alpha: LoRA α (the update is scaled by α / r).
        dropout: LoRA dropout; active only while ``policy.model.train()`` (the model is left in
            eval mode, so rollouts and old/ref logprobs never see dropout).
        target_modules: module names to adapt; ``None`` = :func:`default_target_modules`.
        device: ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda:0"``...
        dtype: ``None`` = bf16 on CUDA, fp32 on CPU.
        include_mlp: with default targets, also adapt gate/up/down projections.
        model, tokenizer: wrap an already loaded model instead of loading one (it is modified in place).
        init_adapter: start from this saved adapter (:func:`adapter_dir`: an adapter or run directory),
            e.g. an SFT run's, instead of a fresh one.
        merge_init: merge ``init_adapter`` into the base weights and put a fresh adapter on top (the
            reference policy is then the initial policy, not the base model).
        amp: ``auto`` (bf16 autocast on CUDA, none on CPU), ``bf16`` (everywhere: CPU autocast too) or ``off``.
        gradient_checkpointing: recompute each decoder layer in backward (less activation memory, one more
            forward of the body per backward).
    """

    def __init__(self, model_name_or_path: str | os.PathLike | None = DEFAULT_MODEL, r: int = 16, alpha: int = 32,
                 dropout: float = 0.0, target_modules: Sequence[str] | None = None, device: str | None = "auto",
                 dtype: torch.dtype | str | None = None, *, include_mlp: bool = False, model: nn.Module | None = None,
                 tokenizer: PreTrainedTokenizerBase | None = None, init_adapter: str | os.PathLike | None = None,
                 merge_init: bool = False, amp: str = "auto", gradient_checkpointing: bool = False):
        from peft import LoraConfig, get_peft_model

        if model is None:
            model, tokenizer = load_policy(model_name_or_path, device=device, dtype=dtype)
        init = adapter_dir(init_adapter) if init_adapter is not None else None
        if init is not None and merge_init:
            from peft import PeftModel

            names = check_adapter_files(init)
            peft_model = PeftModel.from_pretrained(model, str(init))
            check_adapter_fits(peft_model, names, init)
            model = peft_model.merge_and_unload()
        targets = list(target_modules) if target_modules else default_target_modules(model, include_mlp)
        self.lora_config = LoraConfig(
            r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none", task_type="CAUSAL_LM",
            fan_in_fan_out=getattr(model.config, "model_type", None) == "gpt2",  # gpt2 uses Conv1D (weights transposed)
        )
        self.model = get_peft_model(model, self.lora_config)
        self.model.eval()
        self.tokenizer = tokenizer
        self.init_adapter = None if init is None else str(init)
        self.merged_init: Path | None = init if merge_init else None
        """The adapter merged into the base weights (``merge_init``): saved adapters stack it under the trained one."""
        if init is not None and not merge_init:
            self.load_adapter(init)
        self.amp_dtype: torch.dtype | None = None
        self.set_amp(amp)
        self.gradient_checkpointing = False
        self._ckpt_layers: list[nn.Module] = []
        if gradient_checkpointing:
            self.enable_gradient_checkpointing()

    # ------------------------------------------------------------------ precision and memory
    def set_amp(self, amp: str) -> None:
        """Autocast the body's forward to bf16: ``auto`` on CUDA only, ``bf16`` on any device, ``off`` never."""
        if amp not in AMP_MODES:
            raise ValueError(f"amp {amp!r} is not one of {AMP_MODES}")
        on = amp == "bf16" or (amp == "auto" and self.device.type == "cuda")
        self.amp_dtype = torch.bfloat16 if on else None

    def enable_gradient_checkpointing(self) -> None:
        """Recompute every decoder layer in backward (transformers' non-reentrant activation checkpointing).

        transformers checkpoints a layer only while it is in training mode; the policy stays in eval mode
        (no dropout), so :meth:`logprobs` flags the decoder layers alone as training for forwards with
        gradient (their submodules, dropout included, keep their mode).
        """
        from transformers.modeling_layers import GradientCheckpointingLayer

        lm = self.base
        enable = getattr(lm, "activation_checkpointing_enable", None)  # transformers >= 5.2x; the old name warns
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:  # pragma: no cover - older transformers (the GPU machines' 5.17)
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._ckpt_layers = [m for m in lm.modules() if isinstance(m, GradientCheckpointingLayer)]
        if not self._ckpt_layers:
            raise ValueError(f"gradient checkpointing: {type(lm).__name__} has no checkpointable decoder layers")
        self.gradient_checkpointing = True

    def disable_gradient_checkpointing(self) -> None:
        """Keep every layer's activations again (undoes :meth:`enable_gradient_checkpointing`)."""
        if self.gradient_checkpointing:
            disable = getattr(self.base, "activation_checkpointing_disable", None) or self.base.gradient_checkpointing_disable
            disable()
        self.gradient_checkpointing, self._ckpt_layers = False, []

    @contextlib.contextmanager
    def _forward_mode(self) -> Iterator[None]:
        """Autocast (``amp``) and, for a forward with gradient, checkpointed decoder layers."""
        layers = self._ckpt_layers if self.gradient_checkpointing and torch.is_grad_enabled() else []
        was = [m.training for m in layers]
        for m in layers:
            m.training = True  # only the layer itself: transformers checks it; its dropouts keep eval mode
        try:
            with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                                enabled=self.amp_dtype is not None):
                yield
        finally:
            for m, w in zip(layers, was):
                m.training = w

    # ------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def base(self) -> nn.Module:
        """The wrapped causal LM (LoRA layers injected in place)."""
        return self.model.get_base_model()

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The LoRA parameters (everything else is frozen): hand these to the optimizer."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def num_parameters(self) -> tuple[int, int]:
        """``(trainable, total)`` parameter counts."""
        return (sum(p.numel() for p in self.trainable_parameters()), sum(p.numel() for p in self.model.parameters()))

    # ------------------------------------------------------------------ logprobs
    def _head(self) -> Callable[[Tensor], Tensor]:
        lm = self.base
        lm_head = lm.get_output_embeddings()
        cap = getattr(lm.config, "final_logit_softcapping", None)
        if getattr(lm.config, "logit_scale", None) not in (None, 1, 1.0):
            raise NotImplementedError("models with config.logit_scale are not supported by the chunked logprobs")
        if not cap:
            return lm_head
        return lambda h: torch.tanh(_upcast(lm_head(h)) / cap) * cap  # gemma2-style soft-capping

    def _hidden(self, input_ids: Tensor, attention_mask: Tensor, prefix_len: int = 0) -> Tensor:
        lm = self.base
        body = getattr(lm, lm.base_model_prefix)
        if prefix_len > 0:  # rows share their first prefix_len tokens: run them once (workbench.rl.shared_prefix)
            from workbench.rl.shared_prefix import shared_prefix_hidden

            return shared_prefix_hidden(body, input_ids, attention_mask, prefix_len)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # right or left padding alike
        out = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def logprobs(self, input_ids: Tensor, attention_mask: Tensor | None = None, target_mask: Tensor | None = None,
                 chunk_size: int = 512, with_entropy: bool = False, prefix_len: int = 0) -> Tensor | tuple[Tensor, Tensor]:
        """log π_θ of each target token, ``(B, T)`` float32 (float64 for a float64 model), aligned with ``input_ids``.

        Column t is ``log π(input_ids[:, t] | input_ids[:, :t])``, from the hidden state at t − 1.
        Only positions in ``target_mask`` (default: every real token but the first) go through
        the head; the others are 0. Pass ``batch.loss_mask`` to compute policy tokens only.
        Differentiable w.r.t. the adapter when grad is enabled. ``with_entropy`` also returns the
        ``(B, T)`` entropy of the predicted distribution at the same positions. ``prefix_len > 0``: the
        right-padded rows share their first ``prefix_len`` tokens (a group's prompt), which are run once
        (:mod:`workbench.rl.shared_prefix`; same values and gradients, less work).
        """
        B, T = input_ids.shape  # sequences, tokens
        dev = self.device
        ids = input_ids.to(dev)
        am = torch.ones_like(ids) if attention_mask is None else attention_mask.to(dev).long()
        if target_mask is None:
            tm = am.bool().clone()
            tm[:, 0] = False
        else:
            tm = target_mask.to(dev).bool() & am.bool()
            if tm[:, 0].any():
                raise ValueError("target_mask[:, 0] is set, but nothing predicts the first token of a sequence")
        if prefix_len > 0 and self.gradient_checkpointing and torch.is_grad_enabled():
            raise ValueError("prefix_len > 0 (micro_batching='shared_prefix') cannot be combined with gradient "
                             "checkpointing: checkpointed layers drop the shared prefix's key/value cache; use "
                             "micro_batching='bucket' or turn gradient_checkpointing off")
        with self._forward_mode():
            h = self._hidden(ids, am, prefix_len)  # (B, T, H)
        head_dtype = self.base.get_output_embeddings().weight.dtype
        b_idx, t_idx = tm.nonzero(as_tuple=True)
        rows = h[b_idx, t_idx - 1].to(head_dtype)  # outside autocast: the head in the weights' dtype, log-softmax fp32
        res = selective_logprobs(rows, self._head(), ids[b_idx, t_idx], chunk_size, with_entropy)
        lp, ent = res if with_entropy else (res, None)
        out = lp.new_zeros(B, T).index_put((b_idx, t_idx), lp)
        if ent is None:
            return out
        return out, ent.new_zeros(B, T).index_put((b_idx, t_idx), ent)

    @torch.no_grad()
    def ref_logprobs(self, input_ids: Tensor, attention_mask: Tensor | None = None, target_mask: Tensor | None = None,
                     chunk_size: int = 512, with_entropy: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """:meth:`logprobs` of the reference policy (base model: the adapter disabled), no grad."""
        with self.model.disable_adapter():
            return self.logprobs(input_ids, attention_mask, target_mask, chunk_size, with_entropy)

    # ------------------------------------------------------------------ adapter files
    def save_adapter(self, directory: str | os.PathLike) -> Path:
        """Write ``adapter_model.safetensors`` + ``adapter_config.json`` (PEFT format, loadable by
        ``PeftModel.from_pretrained`` and vLLM's LoRA support).

        With a merged ``init_adapter`` (``merge_init``) those files hold the whole policy for the plain base model
        (:func:`stack_adapters`: the initial adapter and the trained one as one adapter of their summed rank), so
        ``eval``, ``ask``, a served model and an exported run need nothing else; the trained adapter alone goes
        in ``TRAINED_PART/`` beside them, which :meth:`load_adapter` (a resumed run) reads."""
        d = Path(directory)
        if self.merged_init is None:
            return self._save_own(d)
        self._save_own(d / TRAINED_PART)
        stack_adapters(self.merged_init, d / TRAINED_PART, d)
        return d

    def _save_own(self, d: Path) -> Path:
        """This policy's own adapter, as peft writes it, with the base model named portably."""
        from workbench.util.io import atomic_write_json

        self.model.save_pretrained(d, safe_serialization=True)
        for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
            if not (d / name).exists():
                raise RuntimeError(f"save_adapter: peft did not write {d / name}")
            (d / name).chmod(0o644)  # safetensors writes 0600: a colleague or a web server must read a run
        # the base model by its alias or HF id, not this machine's cache path (set after saving: peft
        # looks the name up while saving, which would try the hub for an alias)
        cfg = json.loads((d / ADAPTER_CONFIG).read_text())
        cfg["base_model_name_or_path"] = portable_model_name(self.base, cfg.get("base_model_name_or_path"))
        atomic_write_json(d / ADAPTER_CONFIG, cfg)
        return d

    def load_adapter(self, directory: str | os.PathLike) -> None:
        """Load adapter weights saved by :meth:`save_adapter` into this policy's adapter.

        The saved rank, α and target modules must match this policy's (else a ValueError says which).
        """
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        d = Path(directory)
        if self.merged_init is not None:  # the trained part of a stacked adapter (save_adapter)
            if not (d / TRAINED_PART / ADAPTER_WEIGHTS).exists():
                raise FileNotFoundError(
                    f"load_adapter: {d / TRAINED_PART} is missing: {d} was not saved by a run that merged its "
                    f"--init-adapter ({self.merged_init}); resume it without --init-adapter-merge")
            d = d / TRAINED_PART
        for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
            if not (d / name).exists():
                raise FileNotFoundError(f"load_adapter: {d / name} is missing (expected a directory from save_adapter)")
        check_adapter_files(d)  # a FIFO, no LoRA tensors or NaN weights: refused before they are read
        saved = json.loads((d / ADAPTER_CONFIG).read_text())
        mine = self.model.peft_config["default"]
        checks = {"r": (saved.get("r"), mine.r), "lora_alpha": (saved.get("lora_alpha"), mine.lora_alpha),
                  "target_modules": (sorted(saved.get("target_modules") or []), sorted(mine.target_modules or []))}
        wrong = {k: v for k, v in checks.items() if v[0] != v[1]}
        if wrong:
            raise ValueError(
                "load_adapter: the saved adapter does not fit this policy: "
                + "; ".join(f"{k} saved={a!r} vs policy={b!r}" for k, (a, b) in wrong.items())
                + ". Build the LoRAPolicy with the saved settings."
            )
        res = set_peft_model_state_dict(self.model, load_file(str(d / ADAPTER_WEIGHTS), device=str(self.device)))
        missing = [k for k in res.missing_keys if "lora_" in k]
        if res.unexpected_keys or missing:
            raise RuntimeError(f"load_adapter: unexpected keys {res.unexpected_keys[:5]}, missing LoRA keys {missing[:5]}")
