"""Hugging Face transformers backend: batched sampling with left padding and a KV cache.

A small custom decoding loop instead of ``model.generate`` so that it (a) records the
logprob of each sampled token as it goes (no batch x steps x vocab tensor is kept),
(b) honours stop strings and per-sequence token limits, and (c) drops finished rows from
the batch and the cache, so a group whose members finish early gets cheaper.
Works on CPU (fp32) and CUDA (bf16); with a peft model it samples from the current adapter.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.rollout.backends.base import (
    EOS,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    eos_ids,
    find_stop,
)

_STOP_WINDOW = 16  # tokens decoded from the end of each sequence to look for stop strings


class HFBackend(Backend):
    """Generate with a transformers causal LM.

    Args:
        model: a causal LM (optionally a ``peft.PeftModel``), already on its device.
        tokenizer: its tokenizer.
        batch_size: at most this many sequences per forward pass (larger batches are chunked).
    """

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 32):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self._eos = eos_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self._eos or {0})

    @classmethod
    def from_pretrained(cls, name_or_path: str | None = None, device: str = "auto", dtype: Any = None, **kw: Any) -> HFBackend:
        from workbench.models import load_policy

        model, tok = load_policy(name_or_path, device=device, dtype=dtype)
        return cls(model, tok, **kw)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def generate(self, prompts, params: SamplingParams, max_new_tokens=None) -> list[Generation]:
        if not prompts:
            return []
        limits = list(max_new_tokens) if max_new_tokens is not None else [params.max_new_tokens] * len(prompts)
        gen = None
        if params.seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(int(params.seed))
        out: list[Generation] = []
        for i in range(0, len(prompts), self.batch_size):
            out += self._generate_chunk(prompts[i : i + self.batch_size], limits[i : i + self.batch_size], params, gen)
        return out

    @torch.inference_mode()
    def _generate_chunk(self, prompts, limits, params: SamplingParams, gen) -> list[Generation]:
        B = len(prompts)
        results: list[Generation | None] = [None] * B
        ids_out: list[list[int]] = [[] for _ in range(B)]
        lps_out: list[list[float]] = [[] for _ in range(B)]
        for i, lim in enumerate(limits):
            if lim <= 0:
                results[i] = Generation([], [], LENGTH)
        rows = [i for i in range(B) if results[i] is None]
        if not rows:
            return results  # type: ignore[return-value]

        dev = self.device
        L = max(len(prompts[i]) for i in rows)
        input_ids = torch.full((len(rows), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), L), dtype=torch.long)
        for r, i in enumerate(rows):
            p = prompts[i]
            input_ids[r, L - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[r, L - len(p) :] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        pos = pos[:, -1:]
        row_of = list(rows)

        while True:
            next_tok, tok_lp = _sample(logits, params.temperature, params.top_p, gen)
            keep: list[int] = []
            for j, (t, lp) in enumerate(zip(next_tok.tolist(), tok_lp.tolist())):
                i = row_of[j]
                ids_out[i].append(t)
                lps_out[i].append(lp)
                if t in self._eos:
                    results[i] = Generation(ids_out[i], lps_out[i], EOS)
                elif params.stop and (s := find_stop(self.tokenizer.decode(ids_out[i][-_STOP_WINDOW:]), params.stop)):
                    results[i] = Generation(ids_out[i], lps_out[i], STOP, stop_string=s)
                elif len(ids_out[i]) >= limits[i]:
                    results[i] = Generation(ids_out[i], lps_out[i], LENGTH)
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(row_of):  # drop finished rows from the batch and the cache
                sel = torch.tensor(keep, device=dev)
                past.batch_select_indices(sel)
                attn, pos, next_tok = attn[sel], pos[sel], next_tok[sel]
                row_of = [row_of[j] for j in keep]
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
            pos = pos + 1
            out = self.model(
                input_ids=next_tok[:, None], attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True
            )
            past, logits = out.past_key_values, out.logits[:, -1, :]
        return results  # type: ignore[return-value]


def _sample(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None):
    """Sample one token per row; return (ids, logprob of each id under the raw distribution)."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        nxt = logits.argmax(dim=-1)
    else:
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            sp, si = probs.sort(dim=-1, descending=True)
            cum = sp.cumsum(-1)
            sp[(cum - sp) > top_p] = 0.0  # keep the smallest prefix whose mass reaches top_p
            probs = torch.zeros_like(probs).scatter_(-1, si, sp)
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)
