"""The generation backend interface: token ids in, sampled ids + logprobs + finish reason out.

Every backend (HF transformers, vLLM, an OpenAI-compatible server, the scripted test
backend) implements ``generate``. The engine never re-encodes sampled text: it keeps the
returned ids as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from workbench.core.choices import ROLLOUT_ENGINES
from workbench.util.textsafe import clean_text

if TYPE_CHECKING:  # type-only: this module stays light (no transformers or peft when imported)
    from peft import PeftModel
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

CausalLM: TypeAlias = "PreTrainedModel | PeftModel"
"""A loaded causal LM that a backend generates with: a transformers model, or a peft model with its adapter (a name
for annotations: neither library is imported here)."""

#: ``hf``'s implementations (``--rollout-engine``; ``quant.choose_engine`` picks for ``auto``): the ``RolloutEngine``
#: type's values, so that flags and configs check a name without importing torch
ENGINES = ROLLOUT_ENGINES

STOP, EOS, LENGTH, ERROR = "stop", "eos", "length", "error"

#: A temperature below this samples greedily (vLLM's ``_SAMPLING_EPS``): dividing logits by 1e-300 overflows to
#: infinities, and the softmax of those is NaN.
GREEDY_BELOW = 1e-5


@dataclass
class SamplingParams:
    """Sampling settings for one ``generate`` call."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    """0 means greedy; so does anything below :data:`GREEDY_BELOW` (set to 0 here, so every backend sees 0)."""
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    """Generation of a sequence ends once its generated text contains one of these."""
    seed: int | None = None
    row_seeds: tuple[int, ...] | None = None
    """One seed per prompt of the call: prompt ``i`` samples from its own generator seeded ``row_seeds[i]``, so its
    draws do not depend on which prompts it is batched with, nor in what order (the rollout engine gives each
    trajectory's turn its own, :func:`workbench.rollout.engine.sample_seed`). None: the call's one ``seed``."""

    def __post_init__(self) -> None:
        if self.row_seeds is not None:
            self.row_seeds = tuple(int(s) for s in self.row_seeds)
        if self.max_new_tokens < 0:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got "
                             f"{self.temperature}")
        if self.temperature < GREEDY_BELOW:
            self.temperature = 0.0
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        self.stop = tuple(self.stop)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def prompt_seed(self, i: int) -> int | None:
        """The seed prompt ``i`` of a call samples with: its row seed, else ``seed + i`` (a group's identical prompts
        draw apart), else None (unseeded)."""
        if self.row_seeds is not None:
            return self.row_seeds[i]
        return None if self.seed is None else self.seed + i

    def check_rows(self, n: int) -> None:
        """ValueError unless there is a row seed per prompt (or none at all)."""
        if self.row_seeds is not None and len(self.row_seeds) != n:
            raise ValueError(f"SamplingParams.row_seeds: {len(self.row_seeds)} seeds for {n} prompts (one per prompt)")


@dataclass
class Generation:
    """One sampled continuation."""

    token_ids: list[int]
    logprobs: list[float]
    """Logprob of each sampled id under the model's raw (temperature-1) distribution."""
    finish_reason: str
    """``stop`` (a stop string), ``eos``, ``length`` or ``error``."""
    stop_string: str | None = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class ChatError(RuntimeError):
    """Some conversations of a ``chat_batch`` failed in the backend (connection refused, timeout,
    HTTP status...): never an empty reply. ``replies[i]`` is conversation ``i``'s reply (None where
    it failed), ``errors[i]`` the backend's message for it (None where it succeeded)."""

    def __init__(self, replies: list[str | None], errors: list[str | None]):
        self.replies, self.errors = list(replies), list(errors)
        failed = [e for e in self.errors if e is not None]
        msg = failed[0] if len(self.errors) == 1 else f"{len(failed)} of {len(self.errors)} completions failed; first: {failed[0]}"
        super().__init__(msg)


class Backend:
    """Base class. ``tokenizer`` must be the policy's tokenizer (used by the engine to encode
    observations and decode sampled ids for parsing)."""

    name = "backend"
    tokenizer: PreTrainedTokenizerBase

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, max_new_tokens: list[int] | None = None
    ) -> list[Generation]:
        """Continue each prompt. ``max_new_tokens`` optionally overrides the limit per prompt."""
        raise NotImplementedError

    def eos_token_ids(self) -> set[int]:
        return eos_ids(self.tokenizer)

    def clear_cache(self) -> None:
        """Forget any state kept between calls (e.g. KV caches); the engine calls it after a rollout."""

    def rows_kept(self, tokens: int) -> int | None:
        """How many sequences of up to ``tokens`` tokens this backend keeps between calls (their key/value caches,
        so the next turn prefills only what it adds); ``None``: no such bound (nothing kept, or a server's own)."""
        return None

    def chat(self, messages: list[dict[str, str]] | str, params: SamplingParams | None = None) -> str:
        """Convenience for judges and filters: one chat completion, decoded (:class:`ChatError` if it failed)."""
        return self.chat_batch([messages], params)[0]

    def chat_batch(self, conversations: list[list[dict[str, str]] | str], params: SamplingParams | None = None) -> list[str]:
        params = params or SamplingParams(max_new_tokens=128, temperature=0.0)
        prompts = [encode_chat(self.tokenizer, c) for c in conversations]
        gens = self.generate(prompts, params)
        errors = [(g.error or "backend error") if g.finish_reason == ERROR else None for g in gens]
        replies = [None if e is not None else clean_text(self.tokenizer.decode(g.token_ids, skip_special_tokens=True))
                   for g, e in zip(gens, errors)]
        if any(e is not None for e in errors):  # a failed generation is an error, not an empty reply
            raise ChatError(replies, errors)
        return replies

    def as_llm(self, params: SamplingParams | None = None) -> Callable[[str], str]:
        """A ``str -> str`` callable (the prompt sent as one user message), for the KG filter and judges."""
        return lambda prompt: self.chat(prompt, params)


def token_limits(prompts: Sequence[list[int]], params: SamplingParams, max_new_tokens: list[int] | None) -> list[int]:
    """The new-token limit of each prompt: ``max_new_tokens`` per prompt, else ``params.max_new_tokens``. Every
    backend's ``generate`` starts here, so the per-prompt arguments (these limits, ``params.row_seeds``) are checked
    against the prompts once, here."""
    limits = list(max_new_tokens) if max_new_tokens is not None else [params.max_new_tokens] * len(prompts)
    if len(limits) != len(prompts):
        raise ValueError(f"max_new_tokens has {len(limits)} entries for {len(prompts)} prompts")
    params.check_rows(len(prompts))
    return limits


def encode_chat(tokenizer: PreTrainedTokenizerBase, conversation: list[dict[str, str]] | str) -> list[int]:
    """Token ids of a chat prompt (with the generation prompt appended)."""
    msgs = [{"role": "user", "content": conversation}] if isinstance(conversation, str) else conversation
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if hasattr(out, "keys") and "input_ids" in out:  # transformers >= 5 returns a BatchEncoding
            out = out["input_ids"]
        return [int(x) for x in out]
    text = "\n\n".join(m["content"] for m in msgs) + "\n\n"
    return tokenizer.encode(text, add_special_tokens=True)


def eos_ids(tokenizer: PreTrainedTokenizerBase, model_config: GenerationConfig | None = None) -> set[int]:
    """EOS ids from the tokenizer and (if given) a generation config."""
    ids: set[int] = set()
    for src in (tokenizer, model_config):
        e = getattr(src, "eos_token_id", None)
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, (list, tuple)):
            ids.update(int(x) for x in e)
    return ids


def find_stop(tail_text: str, stops: tuple[str, ...]) -> str | None:
    for s in stops:
        if s and s in tail_text:
            return s
    return None
