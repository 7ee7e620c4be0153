"""FLOPs of the training forward and backward of a LoRA policy (what ``metrics.jsonl`` reports per step).

Counted per token of real (non-padding) work, the way Kaplan et al. (2020, Table 1) and the PaLM paper
(Chowdhery et al., 2022, App. B) count model FLOPs, adapted to a LoRA adapter over frozen weights:

- forward: ``2·N`` per token for the body's weight matrices (``N``: their parameters; embeddings are
  lookups), ``4·d_attn`` per (query, key) pair and layer for attention scores and values (causal pairs
  only), ``2·H·V`` per *target* token for the output head (the chunked logprobs run it on targets only);
- backward with **frozen** base weights: ``2·N`` per token (gradients of the activations only; no weight
  gradients are computed for frozen weights — the issue's "≈ 4·N" counts them), ``8·d_attn`` per pair,
  ``4·H·V`` per target (the head's activation gradient + its recomputation by the checkpointed chunks);
- the adapter itself: ``2·N_lora`` forward, ``4·N_lora`` backward per token (its weights do get gradients).

Padding and recomputation of shared prompts are not counted (they are not useful work): a shared-prefix
micro-batch counts its prompt once.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs count needs to know about a causal LM."""

    body_params: int
    """Parameters of the frozen weight matrices of the transformer layers (no embeddings, no head)."""
    lora_params: int
    """Parameters of the LoRA adapter (0 without one)."""
    n_layers: int
    attn_dim: int
    """Query heads × head dim (the width of attention scores and values)."""
    head_params: int
    """hidden × vocabulary: the output head's matrix."""


def model_shape(model: nn.Module) -> ModelShape:
    """The :class:`ModelShape` of a (peft-wrapped or plain) HF causal LM."""
    cfg = model.config
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = lora = 0
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or mod is out or name.endswith("lm_head"):
            continue
        if "lora_" in name:
            lora += mod.weight.numel()
        else:
            body += mod.weight.numel()
    heads = getattr(cfg, "num_attention_heads", 1)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return ModelShape(body_params=body, lora_params=lora, n_layers=cfg.num_hidden_layers, attn_dim=heads * head_dim,
                      head_params=cfg.hidden_size * cfg.vocab_size)


def causal_pairs(n: int, past: int = 0) -> int:
    """(query, key) pairs of ``n`` new tokens attending causally to ``past`` earlier ones and themselves."""
    return n * past + n * (n + 1) // 2


def forward_flops(shape: ModelShape, tokens: int, pairs: int, targets: int) -> float:
    """FLOPs of one forward over ``tokens`` positions with ``pairs`` attention pairs and ``targets`` head rows."""
    s = shape
    return (2.0 * (s.body_params + s.lora_params) * tokens + 4.0 * s.n_layers * s.attn_dim * pairs
            + 2.0 * s.head_params * targets)


def backward_flops(shape: ModelShape, tokens: int, pairs: int, targets: int) -> float:
    """FLOPs of the backward of :func:`forward_flops` with frozen base weights and a trained adapter."""
    s = shape
    return (2.0 * s.body_params * tokens + 4.0 * s.lora_params * tokens + 8.0 * s.n_layers * s.attn_dim * pairs
            + 4.0 * s.head_params * targets)


def work_of(lengths: list[int], targets: int, prefix_len: int = 0) -> tuple[int, int, int]:
    """``(tokens, pairs, targets)`` of one forward over rows of ``lengths`` real tokens whose first
    ``prefix_len`` tokens are shared (computed once) — the arguments of :func:`forward_flops`.

    >>> work_of([10, 12], targets=8)
    (22, 133, 8)
    >>> work_of([10, 12], targets=8, prefix_len=6)
    (16, 112, 8)
    """
    P = prefix_len
    tokens = P + sum(n - P for n in lengths)
    pairs = causal_pairs(P) + sum(causal_pairs(n - P, P) for n in lengths)
    return tokens, pairs, targets
