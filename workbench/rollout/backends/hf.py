"""Hugging Face transformers backend: batched sampling with left padding and a KV cache.

A small custom decoding loop instead of ``model.generate`` so that it

- records the logprob of each sampled token as it goes (no batch x steps x vocab tensor is kept);
- honours stop strings and per-sequence token limits;
- drops finished rows from the batch and the cache, so a group whose members finish early
  gets cheaper;
- reuses key/value caches across calls (``prefix_cache=True``): a multi-turn rollout sends
  prompt + earlier turns + the new observation each turn, and only the new tokens are
  prefilled; identical prompts in one call (the members of a group at turn 0) are prefilled
  once. On a CPU, where prefill dominates, this is most of the rollout time;
- decodes into key/value buffers with room for the coming tokens (doubled when full), instead of
  transformers' ``DynamicCache``, which concatenates (copies) every layer's whole cache at every step.

Works on CPU (fp32) and CUDA (bf16); with a peft model it samples from the current adapter.
Call ``clear_cache()`` after the weights change (the engine does so at the end of each rollout); a change of how
the adapter applies (``disable_adapter()``, another active adapter) drops the kept caches by itself.

Memory (``bench/bench_eval_memory.py``): keys/values are what grows, 46 KB per token for the default
135M model in fp32 (30 layers x 2 x 3 heads x 64 dims x 4 bytes), so 20 prompts of 2,000 tokens hold
1.8 GB. Two budgets bound them, smaller on a CPU (where the RAM is the process's) than on an
accelerator: ``cache_bytes`` for the kept caches between calls, ``batch_bytes`` for the caches of
one forward batch (a call's prompts are split into batches that fit). The prefill computes logits
for the last position only, and a kept cache is freed as it is copied into the batch. A third budget,
``prefill_bytes``, bounds the attention scores of a prefill: on a CPU, SDPA with a padding mask computes
rows x heads x new x all tokens scores and their softmax per layer (6 prompts of 1,000 tokens: 430 MB), so
the new tokens are prefilled in chunks whose scores fit (the result is the same).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch
from transformers.cache_utils import DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from workbench.rollout.backends.base import (
    EOS,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    eos_ids,
    find_stop,
    token_limits,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from transformers.cache_utils import Cache
    from transformers.utils import ModelOutput

    from workbench.rollout.backends.base import CausalLM

_STOP_WINDOW = 16  # tokens decoded from the end of each sequence to look for stop strings
# Budgets on a CPU, where the RAM is the process's (bench/RESULTS.md "Eval memory on real data"):
CPU_CACHE_BYTES = 384 << 20  # kept key/value caches between calls (256 MiB: no lower eval peak, 6 % more CPU)
CPU_BATCH_BYTES = 256 << 20  # key/value caches of one forward batch (384 MiB: MuSiQue eval peaked at 2.15 GB)
CPU_PREFILL_BYTES = 64 << 20  # attention scores (+ softmax) of one prefill forward: sets the chunk length
DECODE_ROOM = 256  # decode tokens the key/value buffers have room for at first; they double when full


#: The keyword a model's forward takes its key/value cache by, and the output field that returns it: ``cache``
#: from transformers 5.24 (``past_key_values`` is deprecated there and warns), ``past_key_values`` before (verl's
#: environment pins an older transformers).
CACHE_ARG = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def output_cache(out: ModelOutput) -> Cache:
    """The key/value cache a forward returned (under :data:`CACHE_ARG`)."""
    return getattr(out, CACHE_ARG)


class _Entry:
    """Cached keys/values of one sequence: ``ids`` covered, and per layer ``(H, n, D)`` tensors."""

    __slots__ = ("ids", "kv", "nbytes")

    def __init__(self, ids: tuple[int, ...], kv: list[tuple[torch.Tensor, torch.Tensor]]):
        self.ids, self.kv = ids, kv
        self.nbytes = sum(k.numel() * k.element_size() * 2 for k, _ in kv)


class HFBackend(Backend):
    """Generate with a transformers causal LM.

    Args:
        model: a causal LM (optionally a ``peft.PeftModel``), already on its device.
        tokenizer: its tokenizer.
        batch_size: at most this many sequences per forward pass (larger batches are chunked).
        prefix_cache: keep each finished sequence's KV cache and reuse it when a later prompt
            extends it (multi-turn rollouts).
        cache_bytes: memory budget of the prefix cache (least recently used entries go first);
            None: 384 MiB on a CPU, 4 GiB on an accelerator.
        batch_bytes: memory budget of the keys/values of one forward batch: a call's prompts are split
            into consecutive batches whose rows x (longest prompt + token limit) fit (a prompt alone may
            exceed it); None: 256 MiB on a CPU, no limit on an accelerator (``batch_size`` only).
        prefill_bytes: memory budget of the attention scores and probabilities of one prefill forward
            (rows x heads x chunk x keys x 2 floats): the new tokens are prefilled in chunks that fit (at
            least one token); None: 64 MiB on a CPU, one forward on an accelerator (fused attention).
        preallocate: decode into key/value buffers with room for the call's token limit, at most ``DECODE_ROOM``
            (256) tokens, doubled when full (:class:`_BufferedLayer`: one token written per step) instead of
            transformers' concatenating ``DynamicCache`` (the reference: the same outputs,
            ``tests/test_hf_backend.py``). A batch's caches then hold rows x (prompt + min(limit, 256)) tokens from
            its first step, within what ``batch_bytes`` budgets (rows x (prompt + limit)).
        by_new_tokens: batch a call's prompts in the order of the tokens each has to prefill (:meth:`_by_new_tokens`),
            not in call order; the results come back in call order either way.
    """

    name = "hf"

    def __init__(self, model: CausalLM, tokenizer: PreTrainedTokenizerBase, batch_size: int = 32,
                 prefix_cache: bool = True, cache_bytes: int | None = None, batch_bytes: int | None = None,
                 prefill_bytes: int | None = None, preallocate: bool = True, by_new_tokens: bool = True):
        self.model = model
        self.by_new_tokens = by_new_tokens
        self.preallocate = preallocate
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prefix_cache = prefix_cache
        on_cpu = self.device.type == "cpu"
        self.cache_bytes = cache_bytes if cache_bytes is not None else (CPU_CACHE_BYTES if on_cpu else 4 << 30)
        self.batch_bytes = batch_bytes if batch_bytes is not None else (CPU_BATCH_BYTES if on_cpu else None)
        self.prefill_bytes = prefill_bytes if prefill_bytes is not None else (CPU_PREFILL_BYTES if on_cpu else None)
        self.kv_bytes_per_token = _kv_bytes_per_token(model)
        self.score_bytes_per_key = _score_bytes_per_key(model)
        self._store: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._store_bytes = 0
        # a prefix that many prompts share (a method's system prompt and demonstrations), kept while rows extend it:
        # the rollout engine's later calls start their new rows from it instead of prefilling it again (``_save(pin=True)``)
        self._pinned: tuple[int, ...] | None = None
        self._store_adapters: tuple[Any, ...] | None = None  # how the LoRA layers applied when the store was filled
        self._keeps_logits: bool | None = None
        self.stats = {"prefill_tokens": 0, "prefill_padded_tokens": 0, "reused_tokens": 0, "decode_steps": 0,
                      "peak_cache_bytes": 0}
        self._eos = eos_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self._eos or {0})

    @classmethod
    def from_pretrained(cls, name_or_path: str | None = None, device: str = "auto",
                        dtype: torch.dtype | str | None = None, **kw: Any) -> HFBackend:
        from workbench.core.models import load_policy

        model, tok = load_policy(name_or_path, device=device, dtype=dtype)
        return cls(model, tok, **kw)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def clear_cache(self) -> None:
        self._store.clear()
        self._store_bytes = 0
        self._pinned = None

    def rows_kept(self, tokens: int) -> int | None:
        """Sequences of ``tokens`` tokens whose caches fit ``cache_bytes`` (at least 1); ``None`` without a prefix
        cache."""
        if not self.prefix_cache or not self.kv_bytes_per_token:
            return None
        return max(1, self.cache_bytes // (self.kv_bytes_per_token * max(1, tokens)))

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        limits = token_limits(prompts, params, max_new_tokens)
        adapters = self._adapter_state()
        if adapters != self._store_adapters:  # kept keys/values were computed with the adapter applied otherwise
            self.clear_cache()
            self._store_adapters = adapters
        gen: Any = None  # one generator for the call, or one per prompt (row seeds: draws that ignore the batching)
        if params.row_seeds is not None:
            gen = [torch.Generator(device=self.device).manual_seed(s) for s in params.row_seeds]
        elif params.seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(int(params.seed))
        order = self._by_new_tokens(prompts) if self.by_new_tokens else list(range(len(prompts)))
        prompts, limits = [prompts[i] for i in order], [limits[i] for i in order]
        if isinstance(gen, list):
            gen = [gen[i] for i in order]
        done: list[Generation] = []
        t0 = time.perf_counter()  # each Generation's meta["seconds"]: from here until its sequence finished
        for i, j in self._batches(prompts, limits):
            done += self._generate_chunk(prompts[i:j], limits[i:j], params, gen[i:j] if isinstance(gen, list) else gen,
                                         t0)
            if self.device.type == "cpu":  # the batch's freed keys/values leave the heap (not the peak's reuse)
                from workbench.core import models

                models.trim_heap()
        out: list[Generation] = [None] * len(done)  # type: ignore[list-item]
        for k, g in zip(order, done):
            out[k] = g
        return out

    def _adapter_model(self) -> Any:
        """The model whose LoRA layers the generations apply (:meth:`_adapter_state`)."""
        return self.model

    def _adapter_state(self) -> tuple[Any, ...]:
        """How each peft LoRA layer applies now (disabled, merged, active adapters): a change (``disable_adapter()``,
        ``set_adapter``) makes every kept cache stale, so ``generate`` drops them."""
        return tuple((bool(m.disable_adapters), bool(getattr(m, "merged", False)), tuple(m.active_adapters))
                     for m in self._adapter_model().modules()
                     if hasattr(m, "lora_A") and hasattr(m, "disable_adapters") and hasattr(m, "active_adapters"))

    def _by_new_tokens(self, prompts: list[list[int]]) -> list[int]:
        """The prompts' indices ordered by the tokens each has to prefill (what no kept cache covers), then by
        length: consecutive batches then pad their new tokens to similar lengths. In a multi-turn rollout the
        observations differ by hundreds of tokens, so in call order much of a later turn's prefill is padding
        (bench/RESULTS.md, "Batches by the tokens to prefill"). Stable: a group's identical prompts stay together."""
        def new(p: list[int]) -> int:
            e = self._lookup(p) if self.prefix_cache else None
            return len(p) - (len(e.ids) if e is not None else 0)

        return sorted(range(len(prompts)), key=lambda i: (new(prompts[i]), len(prompts[i])))

    def _batches(self, prompts: list[list[int]], limits: list[int]) -> list[tuple[int, int]]:
        """``(start, end)`` of consecutive batches of at most ``batch_size`` rows whose keys/values,
        rows x (longest prompt + largest limit) tokens, fit ``batch_bytes`` (one row always goes)."""
        out, i = [], 0
        per_tok = self.kv_bytes_per_token
        while i < len(prompts):
            j, longest = i, 0
            while j < len(prompts) and j - i < self.batch_size:
                longest = max(longest, len(prompts[j]) + max(0, limits[j]))
                if j > i and self.batch_bytes is not None and per_tok and (j - i + 1) * longest * per_tok > self.batch_bytes:
                    break
                j += 1
            out.append((i, j))
            i = j
        return out

    # ------------------------------------------------------------------ prefix cache
    def _lookup(self, prompt: list[int]) -> _Entry | None:
        """The longest cached sequence that is a proper prefix of ``prompt``."""
        best = None
        n = len(prompt)
        for ids, e in self._store.items():
            m = len(ids)
            if m < n and (best is None or m > len(best.ids)) and tuple(prompt[:m]) == ids:
                best = e
        if best is not None:
            self._store.move_to_end(best.ids)
        return best

    def _drop(self, key: tuple[int, ...]) -> None:
        e = self._store.pop(key, None)
        if e is not None:
            self._store_bytes -= e.nbytes

    def _release_layer(self, e: _Entry, li: int) -> None:
        """Free layer ``li`` of a kept cache that was just copied into a batch, and drop it from the store (the
        pinned prefix stays: later prompts start from it too)."""
        if e.ids == self._pinned:
            return
        self._drop(e.ids)
        k = e.kv[li][0]
        empty = k.new_empty((k.shape[0], 0, k.shape[2]))  # not a view: the storage must go
        e.kv[li] = (empty, empty)

    def _save(self, ids: list[int], past: Any, row: int, cols: torch.Tensor, pin: bool = False) -> None:
        """Keep row ``row``'s keys/values at ``cols`` as the cache of ``ids``; ``pin``: as the pinned prefix (the
        one pinned before becomes an ordinary entry)."""
        key = tuple(ids)
        if not key:
            return
        if pin:
            self._pinned = key
        if key in self._store:
            return
        # an entry this sequence extends is superseded: its next prompt extends the new one (one entry per sequence)
        for old in [k for k in self._store if len(k) < len(key) and key[: len(k)] == k and k != self._pinned]:
            self._drop(old)
        kv = [(layer.keys[row][:, cols].clone(), layer.values[row][:, cols].clone()) for layer in past.layers]
        e = _Entry(key, kv)
        self._store[key] = e
        self._store_bytes += e.nbytes
        self.stats["peak_cache_bytes"] = max(self.stats["peak_cache_bytes"], self._store_bytes)
        while self._store_bytes > self.cache_bytes and self._store:  # least recently used first, the pinned last
            oldest = next((k for k in self._store if k != self._pinned), self._pinned)
            self._drop(oldest)
            if oldest == self._pinned:
                self._pinned = None

    def _prefill(self, prompts: list[list[int]], entries: list[_Entry | None]):
        """Prefill ``prompts`` reusing ``entries``; returns (past, attn, last position ids, last logits).

        Row layout: ``[pad | cached c_i][pad | new s_i]``. The cached block is right-aligned in
        the past keys/values, the new tokens are left-padded; pads have attention 0 and every
        real token gets its true position id, so padding never changes the result.
        """
        from transformers import DynamicCache

        dev = self.device
        B = len(prompts)
        cached = [len(e.ids) if e is not None else 0 for e in entries]
        C = max(cached)
        news = [p[c:] for p, c in zip(prompts, cached)]
        S = max(len(s) for s in news)
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, C + S), dtype=torch.long)
        pos = torch.zeros((B, S), dtype=torch.long)
        for r, (s, c) in enumerate(zip(news, cached)):
            input_ids[r, S - len(s) :] = torch.tensor(s, dtype=torch.long)
            attn[r, C - c : C] = 1
            attn[r, C + S - len(s) :] = 1
            pos[r, S - len(s) :] = torch.arange(c, c + len(s))
        past = None
        if C > 0:
            layers = []
            used = [e for e in entries if e is not None]
            for li in range(len(used[0].kv)):
                ref = used[0].kv[li][0]
                H, _, D = ref.shape
                k = ref.new_zeros((B, H, C, D))
                v = ref.new_zeros((B, H, C, D))
                for r, (e, c) in enumerate(zip(entries, cached)):
                    if e is not None:
                        k[r, :, C - c :] = e.kv[li][0]
                        v[r, :, C - c :] = e.kv[li][1]
                layers.append((k, v))
                for e in used:  # copied: the kept layer is freed now (the call saves the extended sequence)
                    self._release_layer(e, li)
            past = DynamicCache(ddp_cache_data=layers, config=getattr(self.model, "config", None))
        self.stats["prefill_tokens"] += sum(len(s) for s in news)
        self.stats["prefill_padded_tokens"] += B * S  # what the forward computes: rows x the longest new part
        self.stats["reused_tokens"] += sum(cached)
        input_ids, attn, pos = input_ids.to(dev), attn.to(dev), pos.to(dev)
        step = self.prefill_chunk(B, C + S)
        for a in range(0, S, step):  # chunks of the new tokens; each attends to the cache and the chunks before
            b = min(S, a + step)
            out = self.model(
                input_ids=input_ids[:, a:b], attention_mask=attn[:, : C + b], position_ids=pos[:, a:b],
                **{CACHE_ARG: past}, use_cache=True, **self._last_logits_only(),
            )
            past = output_cache(out)
        return past, attn, pos[:, -1:], out.logits[:, -1, :]

    def prefill_chunk(self, rows: int, keys: int) -> int:
        """New tokens per prefill forward for ``rows`` prompts of ``keys`` tokens (cached + new) in all: the
        most whose attention scores, rows x heads x chunk x keys x 2 floats, fit ``prefill_bytes`` (at least 1;
        all of them without a budget)."""
        per_token = rows * keys * self.score_bytes_per_key
        if self.prefill_bytes is None or not per_token:
            return max(1, keys)
        return max(1, self.prefill_bytes // per_token)

    def _last_logits_only(self) -> dict[str, Any]:
        """``logits_to_keep=1`` where the model takes it: the prefill's logits for the last position only. All
        positions' logits are B x S x V floats (20 prompts of 1,200 tokens x 49,152 vocabulary: 4.7 GB), and
        only the last is sampled from."""
        if self._keeps_logits is None:
            import inspect

            fwd = getattr(self.model, "forward", None)
            try:
                params = inspect.signature(fwd).parameters if fwd is not None else {}
            except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
                params = {}
            base = getattr(self.model, "get_base_model", None)  # peft passes **kwargs to the base model
            if base is not None and "logits_to_keep" not in params:
                try:
                    params = inspect.signature(base().forward).parameters
                except (TypeError, ValueError):  # pragma: no cover
                    params = {}
            self._keeps_logits = "logits_to_keep" in params
        return {"logits_to_keep": 1} if self._keeps_logits else {}

    # ------------------------------------------------------------------ decoding
    @torch.inference_mode()
    def _generate_chunk(self, prompts, limits, params: SamplingParams, gen, t0: float) -> list[Generation]:
        B = len(prompts)
        results: list[Generation | None] = [None] * B
        ids_out: list[list[int]] = [[] for _ in range(B)]
        lps_out: list[list[float]] = [[] for _ in range(B)]
        for i, lim in enumerate(limits):
            if lim <= 0:
                results[i] = Generation([], [], LENGTH, meta={"seconds": 0.0})
        rows = [i for i in range(B) if results[i] is None]
        if not rows:
            return results  # type: ignore[return-value]

        # identical prompts (a group at turn 0) are prefilled once, then the cache is expanded
        uniq: dict[tuple[int, ...], int] = {}
        expand = [uniq.setdefault(tuple(prompts[i]), len(uniq)) for i in rows]
        u_prompts = [list(k) for k in uniq]
        entries = [self._lookup(p) if self.prefix_cache else None for p in u_prompts]
        past, attn, pos, logits = self._prefill(u_prompts, entries)
        group = expand if len(u_prompts) < len(rows) else None  # a group's rows share one prefilled prompt
        if group is not None:
            sel = torch.tensor(group, device=attn.device)
            attn, pos, logits = attn[sel], pos[sel], logits[sel]
        past = self._decode_cache(past, group, max(limits[i] for i in rows))
        row_of = list(rows)  # batch position -> row
        live = list(range(len(rows)))  # the batch positions still decoding

        while True:
            self.stats["decode_steps"] += 1
            next_tok, tok_lp = _sample(logits, params.temperature, params.top_p,
                                       [gen[i] for i in row_of] if isinstance(gen, list) else gen)
            keep: list[int] = []
            now = {"seconds": time.perf_counter() - t0}
            toks, lps = next_tok.tolist(), tok_lp.tolist()
            for j in live:
                i, t, lp = row_of[j], toks[j], lps[j]
                ids_out[i].append(t)
                lps_out[i].append(lp)
                if t in self._eos:
                    results[i] = Generation(ids_out[i], lps_out[i], EOS, meta=dict(now))
                elif params.stop and (s := find_stop(self.tokenizer.decode(ids_out[i][-_STOP_WINDOW:]), params.stop)):
                    results[i] = Generation(ids_out[i], lps_out[i], STOP, stop_string=s, meta=dict(now))
                elif len(ids_out[i]) >= limits[i]:
                    results[i] = Generation(ids_out[i], lps_out[i], LENGTH, meta=dict(now))
                else:
                    keep.append(j)
            if self.prefix_cache:  # the cache holds prompt + generated[:-1] of each finished row
                for j in sorted(set(live) - set(keep)):
                    i = row_of[j]
                    self._save(prompts[i] + ids_out[i][:-1], past, j, attn[j].nonzero().squeeze(-1))
            if not keep:
                break
            if len(keep) < len(live) and self._drops_rows:  # drop finished rows from the batch and the cache
                sel = torch.tensor(keep, device=attn.device)
                past.batch_select_indices(sel)
                attn, pos, next_tok = attn[sel], pos[sel], next_tok[sel]
                row_of, keep = [row_of[j] for j in keep], list(range(len(keep)))
            live = keep
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
            pos = pos + 1
            past, logits = self._decode_step(next_tok, attn, pos, past)
        return results  # type: ignore[return-value]

    #: whether finished rows leave the batch (and its keys/values) at once; an engine with a fixed-shape decode step
    #: keeps them, decoding tokens nobody reads, until the whole batch is done
    _drops_rows = True

    def _decode_cache(self, past: Any, group: list[int] | None, limit: int) -> Any:
        """The prefill's cache ``past`` made ready for decoding up to ``limit`` tokens a row; ``group``: the prefilled
        row each batch row takes (a group's one prompt becomes its G rows), None when they are the same."""
        if self.preallocate:  # decode steps write in place
            _preallocate(past, group, min(DECODE_ROOM, limit))  # a large limit that EOS cuts short costs no memory
        elif group is not None:
            past.batch_select_indices(torch.tensor(group, device=self.device))
        return past

    def _decode_step(self, tokens: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, past: Any):
        """One decode step: each row's next token (``tokens``, one per row) through the model over ``past``;
        returns ``(past, logits of the next token)``."""
        out = self.model(input_ids=tokens[:, None], attention_mask=attn, position_ids=pos, **{CACHE_ARG: past},
                         use_cache=True)
        return output_cache(out), out.logits[:, -1, :]


class _BufferedLayer(DynamicLayer):
    """A :class:`transformers.DynamicLayer` whose keys/values live in a buffer with room for the tokens still to
    come: ``update`` writes the new token in place, where ``DynamicLayer`` concatenates, copying the whole cache
    (every row, every layer) at every decode step — a third of a batched decode's time on a CPU
    (``bench/RESULTS.md``). Attention reads ``keys``/``values``, views of the filled part: the same values and
    length as the concatenated cache, so the outputs do not change."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int, rows: list[int] | None = None):
        super().__init__()
        _, H, n, D = keys.shape  # rows, heads, tokens, head dim
        rows = list(range(keys.shape[0])) if rows is None else rows
        self._k, self._v = keys.new_empty((len(rows), H, n + room, D)), values.new_empty((len(rows), H, n + room, D))
        for r, src in enumerate(rows):  # row by row: one copy (indexing first would copy twice)
            self._k[r, :, :n], self._v[r, :, :n] = keys[src], values[src]
        self.n = n
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self.n], self._v[:, :, : self.n]

    def reserve(self, m: int) -> None:
        """Room for ``m`` more tokens: when full, the buffer doubles (amortized: one copy per doubling)."""
        if self.n + m > self._k.shape[-2]:
            grow = lambda t: torch.cat([t, t.new_empty((*t.shape[:2], max(m, t.shape[2]), t.shape[3]))], dim=2)  # noqa: E731
            self._k, self._v = grow(self._k), grow(self._v)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        m = key_states.shape[-2]
        self.reserve(m)
        self._k[:, :, self.n : self.n + m] = key_states
        self._v[:, :, self.n : self.n + m] = value_states
        self.n += m
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()


def _preallocate(past: Any, rows: list[int] | None, room: int) -> None:
    """Replace each layer of the ``DynamicCache`` ``past`` by a :class:`_BufferedLayer` with ``room`` more tokens,
    taking its batch rows ``rows`` (all when None: a group's one prefilled prompt becomes its G rows here)."""
    for i, layer in enumerate(past.layers):
        past.layers[i] = _BufferedLayer(layer.keys, layer.values, room, rows)


def _kv_bytes_per_token(model: Any) -> int:
    """Bytes of keys and values per token of ``model`` (0 when its config does not say)."""
    cfg = getattr(model, "config", None)
    try:
        layers, heads = cfg.num_hidden_layers, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        size = next(model.parameters()).element_size()
    except (AttributeError, StopIteration, TypeError):
        return 0
    return int(2 * layers * heads * head_dim * size)


def _score_bytes_per_key(model: Any) -> int:
    """Bytes of attention scores and probabilities per query token and key of ``model`` (0 when its config does
    not say): query heads x 2 floats (scores, then their softmax) in the model's dtype."""
    cfg = getattr(model, "config", None)
    try:
        size = next(model.parameters()).element_size()
        return int(2 * cfg.num_attention_heads * size)
    except (AttributeError, StopIteration, TypeError):
        return 0


def _sample(logits: torch.Tensor, temperature: float, top_p: float,
            gen: torch.Generator | list[torch.Generator] | None):
    """Sample one token per row (``gen``: one generator, or one per row); return (ids, logprob of each id under the
    raw distribution)."""
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
        nxt = draw(probs, gen)
    return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)


def draw(probs: torch.Tensor, gen: torch.Generator | list[torch.Generator] | None) -> torch.Tensor:
    """One index per row of ``probs`` (non-negative; a row need not sum to 1), drawn with probability proportional to
    its entry, by inverse CDF: one uniform per row against the row's cumulative sums, which overwrite ``probs`` (no
    second vocabulary-sized buffer; torch's CPU scan accumulates in float64, so each sum is within half an fp32 ulp).
    The same distribution as ``torch.multinomial(probs, 1)``, which on a CPU draws one exponential per vocabulary
    entry and row, several times slower at a decode step's 3-8 rows over SmolLM2's 49,152 tokens
    (``bench/bench_sampling.py``). A zero entry is never drawn: the index is the first whose cumulative sum exceeds
    the uniform, and the uniform stays below the row's total. ``gen`` a list: row ``r`` draws its uniform from
    ``gen[r]`` alone, so its index does not depend on the other rows."""
    cdf = probs.cumsum_(-1)
    total = cdf[:, -1:]
    if not bool(torch.isfinite(total).all() and (total > 0).all()):
        raise ValueError("sampling probabilities with a NaN, an infinity or no mass in a row (the model's logits are "
                         "not finite): check the model's weights and dtype")
    if isinstance(gen, list):
        if len(gen) != total.shape[0]:
            raise ValueError(f"draw: {len(gen)} generators for {total.shape[0]} rows")
        u = torch.cat([torch.rand((1, 1), dtype=cdf.dtype, device=cdf.device, generator=g) for g in gen]) * total
    else:
        u = torch.rand(total.shape, dtype=cdf.dtype, device=cdf.device, generator=gen) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)
