"""A backend that replays fixed model turns: deterministic engine tests without a model.

It is never used in the demo or the end-to-end tests (those run the real model). The
scripted text is tokenized with the real tokenizer and cut at the first stop string at
token granularity, exactly as a real backend would stop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workbench.rollout.backends.base import EOS, LENGTH, STOP, Backend, Generation, SamplingParams, find_stop
from workbench.util.textsafe import clean_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Script = Callable[[str, int], str] | list[str]


class ScriptedBackend(Backend):
    """Replay scripted turns.

    Args:
        tokenizer: the (real) tokenizer.
        script: either a list of turn texts (the n-th call for a sequence gets item n) or a
            function ``(prompt_text, turn_index) -> text``.
        logprob: the logprob reported for every token (a constant; tests only).
        append_eos: end each scripted turn that hits no stop string with EOS.
    """

    name = "scripted"

    def __init__(self, tokenizer: PreTrainedTokenizerBase, script: Script, logprob: float = -1.0,
                 append_eos: bool = True):
        self.tokenizer = tokenizer
        self.script = script
        self.logprob = logprob
        self.append_eos = append_eos
        self.calls: list[list[list[int]]] = []

    def _turn_text(self, prompt_ids: list[int]) -> str:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        turn = self._turn_index(prompt_ids)
        if callable(self.script):
            return self.script(text, turn)
        return self.script[turn] if turn < len(self.script) else ""

    def _turn_index(self, prompt_ids: list[int]) -> int:
        """A sequence's n-th call is turn n: count the distinct earlier prompts that prefix this one."""
        seen: set[tuple[int, ...]] = self.__dict__.setdefault("_seen", set())
        p = tuple(prompt_ids)
        n = sum(1 for q in seen if len(q) < len(p) and p[: len(q)] == q)
        seen.add(p)
        return n

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        self.calls.append([list(p) for p in prompts])
        limits = max_new_tokens or [params.max_new_tokens] * len(prompts)
        eos = sorted(self.eos_token_ids())
        out = []
        for prompt, limit in zip(prompts, limits):
            ids = self.tokenizer.encode(clean_text(self._turn_text(prompt)), add_special_tokens=False)
            gen, reason, stop = [], LENGTH, None
            for tid in ids:
                if len(gen) >= limit:
                    break
                gen.append(tid)
                stop = find_stop(self.tokenizer.decode(gen[-16:]), params.stop)
                if stop:
                    reason = STOP
                    break
            else:
                if self.append_eos and eos and len(gen) < limit:
                    gen.append(eos[0])
                    reason = EOS
            out.append(Generation(gen, [self.logprob] * len(gen), reason, stop))
        return out
