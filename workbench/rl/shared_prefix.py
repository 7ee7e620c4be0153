"""Shared-prompt prefill for the training forward: a group's prompt is run once, its G responses reuse it.

The G responses of one question share their prompt tokens (system prompt, demonstration, question:
~330 tokens for Search-R1 with a demonstration, more than the responses themselves). The plain
forward runs them G times. Here the prompt runs once, **with gradient** (LoRA adapts its keys and
values, so they must carry gradient back from all G responses), its key/value cache is repeated
G times and the responses run on top of it::

    prefix (1, P)  --body-->  hidden (1, P, H), cache (1, heads, P, d) per layer
    cache.repeat(G)  ->  responses (G, S) with positions P..P+S-1  --body-->  hidden (G, S, H)
    hidden of row g = [prefix hidden, response hidden g]   (G, P + S, H)

Autograd sums the G responses' gradients into the one prefix, which is exactly the gradient of the
unshared forward (``tests/test_shared_prefix.py`` checks loss and gradients against it to 1e-5 on
random-initialised Llama and Qwen2 models). Work per group: ``P + G·S`` tokens instead of
``G·(P + S)``.

Rows must be right-padded and agree on their first ``prefix_len`` tokens (:func:`common_prefix_len`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from workbench.rollout.backends.hf import CACHE_ARG, output_cache


def common_prefix_len(input_ids: Tensor, attention_mask: Tensor) -> int:
    """Tokens all rows share at the start, capped so every row keeps at least one token after it
    (the first target of a row is then predicted from the prefix's last hidden state or later).

    >>> common_prefix_len(torch.tensor([[1, 2, 3, 4], [1, 2, 5, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    2
    """
    B, T = input_ids.shape  # rows, tokens
    if B == 0 or T == 0:
        return 0
    lengths = attention_mask.sum(-1)
    same = (input_ids == input_ids[:1]).all(0) & (attention_mask > 0).all(0)  # (T,)
    n = int(same.long().cumprod(0).sum())
    return max(0, min(n, int(lengths.min()) - 1))


def shared_prefix_hidden(body: nn.Module, input_ids: Tensor, attention_mask: Tensor, prefix_len: int) -> Tensor:
    """Final hidden states ``(B, T, H)`` of right-padded ``input_ids`` whose rows share their first
    ``prefix_len`` tokens, with the prefix computed once (see the module docstring).

    ``body``: the transformer body of a causal LM (``lm.model``: embeddings + layers + final norm),
    called as HF calls it (``input_ids``, ``attention_mask``, ``position_ids``, the cache).
    """
    from transformers import DynamicCache

    B, T = input_ids.shape  # rows, tokens
    P = int(prefix_len)
    if not 0 < P < T:
        raise ValueError(f"shared_prefix_hidden: prefix_len must be in [1, {T - 1}] for {T} columns, got {P}")
    if not bool((input_ids[:, :P] == input_ids[:1, :P]).all()) or not bool((attention_mask[:, :P] > 0).all()):
        raise ValueError("shared_prefix_hidden: the rows do not share their first prefix_len tokens")
    dev = input_ids.device
    pos = torch.arange(T, device=dev).unsqueeze(0)
    pre = body(input_ids=input_ids[:1, :P], attention_mask=attention_mask[:1, :P], position_ids=pos[:, :P],
               **{CACHE_ARG: DynamicCache()}, use_cache=True)
    cache = output_cache(pre)
    cache.batch_repeat_interleave(B)  # (1, heads, P, d) -> (B, heads, P, d) per layer; autograd sums back
    out = body(input_ids=input_ids[:, P:], attention_mask=attention_mask, position_ids=pos[:, P:].expand(B, -1),
               **{CACHE_ARG: cache}, use_cache=True)
    h_pre, h_suf = pre.last_hidden_state, out.last_hidden_state  # (1, P, H), (B, T - P, H)
    return torch.cat([h_pre.expand(B, -1, -1), h_suf], dim=1)
