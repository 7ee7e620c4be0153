"""R-Search's cross-family evidence reward (file 001, Eq. 4): ``r_evid = F1(α_cf, gold)``.

A frozen model of a *different family* than the policy reads only the question and the
evidence the policy wrote (``<original_evidence>``, in ``traj.flags["evidence"]``) and
answers with the paper's evidence template (Table 5). Its answer's F1 against the gold
answers is the ``evidence_f1`` feature.

The model can be a local path / HF id (loaded with ``HFBackend.from_pretrained``), any
``Backend`` (HF, vLLM, an OpenAI-compatible server), or a ``str -> str`` callable. With
none configured, ``base_backend`` (the policy's base model; for a peft model the adapter
is disabled during the call) answers instead, with a warning: the paper's design asks for
a different family, so that the reward does not share the policy's biases.

Replies are cached by (model id, prompt) in the feature cache. A trajectory without evidence
(an empty ``evidence`` flag: no well-formed box) gets ``evidence_f1 = 0`` without a model
call, as in ``workbench.methods.rsearch_evidence.protocol.rstool_answer``: there is nothing to reward.
A failed call (the model cannot be reached, times out, returns an HTTP error) is never an
empty answer: ``answer`` is None, ``error`` the backend's message, ``evidence_f1`` NaN, and
nothing is cached (it is asked again next time).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from workbench.rewards.cache import CacheLike, as_cache
from workbench.rewards.llm import LLM, batch_caller, cached_calls, guess_model_id
from workbench.rewards.metrics import f1_score

#: R-Search Table 5 (Zhao et al., 2025): the evidence template for the cross-family model, verbatim.
EVIDENCE_TEMPLATE = (
    "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\n"
    "The following are given passages: {evidence}\n\nQuestion: {query}\n\nAnswer:"
)

_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER_TAG_RE = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.IGNORECASE | re.DOTALL)
_PREFIX_RE = re.compile(r"^\s*(?:final\s+)?answer\s*[:：-]\s*", re.IGNORECASE)


def extract_short_answer(reply: str) -> str:
    """The answer in a reply to the evidence template: ``\\boxed{}`` or ``<answer>`` content if present,
    else the first non-empty line without an "Answer:" prefix.

    >>> extract_short_answer("Answer: Paris\\nBecause ...")
    'Paris'
    >>> extract_short_answer("<answer> Oslo </answer>"), extract_short_answer("")
    ('Oslo', '')
    """
    m = _BOXED_RE.search(reply) or _ANSWER_TAG_RE.search(reply)
    if m:
        return m.group(1).strip()
    for line in reply.splitlines():
        line = _PREFIX_RE.sub("", line).strip()
        if line:
            return line
    return ""


@dataclass
class EvidenceAnswer:
    """The cross-family model's answer (None when the call failed; ``error`` says why)."""

    answer: str | None
    raw: str
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.answer is not None


def base_model_llm(base_backend: LLM) -> Callable[[list[str]], list[str]]:
    """``prompts -> replies`` with the policy's base model: a Backend whose model is a peft model
    runs with the adapter disabled (and its KV prefix cache cleared around the call); a plain
    Backend or a callable is used as is."""
    call = batch_caller(base_backend)
    model = getattr(base_backend, "model", None)
    if model is None or not hasattr(model, "disable_adapter"):
        return call

    def run(prompts: list[str]) -> list[str]:
        clear = getattr(base_backend, "clear_cache", None)
        if clear:
            clear()
        try:
            with model.disable_adapter():
                return call(prompts)
        finally:
            if clear:
                clear()

    return run


class EvidenceScorer:
    """Answers questions from evidence alone with a (cross-family) model, and scores them by F1.

    Args:
        model: a model path / HF id, a ``Backend``, or a ``str -> str`` callable.
        base_backend: the policy's base model, used (with a warning) when ``model`` is None.
        model_id: name for cache keys (guessed when not given).
        cache: this scorer's cache; None: the cache of the call (``compute_features``' own),
            or the shared on-disk cache when called directly.
        max_evidence_chars: evidence is cut to this length in the prompt (marked).
    """

    def __init__(self, model: str | os.PathLike | LLM | None = None, *, base_backend: LLM | None = None,
                 model_id: str | None = None, cache: CacheLike = None, max_evidence_chars: int = 8000,
                 template: str = EVIDENCE_TEMPLATE):
        if model is None and base_backend is None:
            raise ValueError(
                "EvidenceScorer needs a cross-family model (a path, a Backend or a str -> str callable) "
                "or, as a fallback, the policy's base model as base_backend="
            )
        if model is None:
            warnings.warn(
                "R-Search's evidence reward asks for a frozen model of a *different family* than the policy; "
                "no evidence model is configured, so the policy's base model answers from the evidence.",
                UserWarning, stacklevel=2,
            )
            self._call = base_model_llm(base_backend)
            self.model_id = model_id or f"base:{guess_model_id(base_backend)}"
            self._path = None
        elif isinstance(model, (str, os.PathLike)):
            self._call = None  # loaded on first use
            self._path = str(model)
            self.model_id = model_id or self._path
        else:
            self._call = batch_caller(model)
            self._path = None
            self.model_id = model_id or guess_model_id(model)
        self.cache = cache
        self.max_evidence_chars = max_evidence_chars
        self.template = template
        self.calls = 0

    def __repr__(self) -> str:
        return f"EvidenceScorer(model_id={self.model_id!r})"

    def _llm(self) -> Callable[[list[str]], list[str]]:
        if self._call is None:
            from workbench.rollout.backends.hf import HFBackend

            self._call = batch_caller(HFBackend.from_pretrained(self._path))
        return self._call

    def prompt(self, question: str, evidence: str) -> str:
        ev = evidence if len(evidence) <= self.max_evidence_chars else evidence[: self.max_evidence_chars] + " …[truncated]"
        return self.template.format(evidence=ev, query=question)

    def answer_many(self, items: Sequence[tuple[str, str]], cache: CacheLike = None) -> list[EvidenceAnswer]:
        """Answer ``(question, evidence)`` pairs; one batched call for the uncached prompts."""
        store = as_cache(self.cache if self.cache is not None else True if cache is None else cache)
        prompts = [self.prompt(q or "", e or "") for q, e in items]

        def counting(ps: list[str]) -> list[str]:
            self.calls += len(ps)
            return self._llm()(ps)

        out = []
        for raw, err, hit in cached_calls(counting, prompts, ("evidence", self.model_id), store):
            if err is not None:
                out.append(EvidenceAnswer(None, raw or "", err, hit))
            else:
                out.append(EvidenceAnswer(extract_short_answer(raw or ""), raw or "", None, hit))
        return out

    def score(self, question: str, evidence: str, golds: Sequence[str] | str, cache: CacheLike = None) -> float:
        """``F1(α_cf, gold)`` for one trajectory (NaN if the model call failed)."""
        a = self.answer_many([(question, evidence)], cache=cache)[0]
        return f1_score(a.answer, golds) if a.ok else float("nan")


EvidenceModel: TypeAlias = EvidenceScorer | str | os.PathLike | LLM | None
"""R-Search's evidence model as features take it: a scorer, a model path / HF id, a ``Backend`` or a ``str -> str``
callable (None: the policy's base model, given as ``base_backend``)."""


def as_evidence_scorer(model: EvidenceModel, base_backend: LLM | None = None) -> EvidenceScorer:
    """An :class:`EvidenceScorer` from a scorer, a model path, a Backend or a callable."""
    if isinstance(model, EvidenceScorer):
        return model
    return EvidenceScorer(model, base_backend=base_backend)
