"""LLM judges: DynaSearcher's 0–5 accuracy judge, When-to-Search's YES/NO judge, a [0, 1] similarity judge.

A judge wraps any model: a ``Backend`` (its ``chat_batch`` is used, one batch per call) or
a ``str -> str`` callable. Replies are parsed robustly ("Score: 4/5", "**4**", "YES.",
"yes, it matches"...). A reply that cannot be parsed, or a model call that fails, is a
*missing* judgment: ``value`` NaN (never 0) with the raw text or the error kept, so the
rubric breakdown counts it.

Replies are cached by ``(judge name, model id, prompt)`` in the feature cache: re-scoring
the same trajectories does not call the model again. What is cached is the raw reply, so
a better parser applies to cached replies too. Failed calls are not cached (they are retried),
and their ``error`` is the backend's message (connection refused, timeout, HTTP status...).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.rewards.cache import CacheLike, as_cache
from workbench.rewards.llm import LLM, batch_caller, cached_calls, guess_model_id
from workbench.rewards.metrics import normalize_answer

# ----------------------------------------------------------------------------- prompts

#: DynaSearcher Table 7 (file 000): LLM-as-judge accuracy score, 0–5.
LASJ_PROMPT = """You will be provided with three pieces of content: the questioner’s question, the user’s response, and the reference answer list. Your task is to score the accuracy of the user’s response based on the criteria outlined below. Please ensure that you carefully read and understand these instructions.

Evaluation Criteria:

Accuracy - Whether the user’s answer is consistent with the reference answer and answers the questioner’s question. We define this dimension as “whether the user’s response includes all the key points from the reference answer and answers the questioner’s question.”

Evaluation Steps:

1. Carefully read the questioner’s question and understand its key points.
2. Carefully read the reference answer and understand the key points relevant to the question.
3. Check whether the user’s response includes all the key points from the reference answer and answers the questioner’s question.
4. Based on the evaluation criteria, assign a score in the range of 0 to 5, where 0 indicates that the user’s response does not include any of the key points from the reference answer and completely fails to answer the questioner’s question; 5 indicates that the user’s response includes all the key points from the reference answer and fully and correctly answers the questioner’s question.

Example:

Questioner’s question:

{question}

Reference answer:

{answer}

User’s response:

{response}

Evaluation result (output only the score between 0 and 5):"""

#: When-to-Search appendix B.4 (file 004): semantic match, YES/NO. Prediction and references are normalized.
YESNO_PROMPT = """You are an evaluation assistant. Your task is to determine whether the given prediction semantically matches any of the reference answers. This is a flexible match: even if the wording is different, if the meaning is the same, consider it a match.
Prediction: {prediction}
Reference Answers: {references}
Please answer with a single word:
- YES → if the prediction expresses the same meaning as any of the reference answers.
- NO → otherwise.
Only respond with YES or NO."""

#: Shi & Shen (file 003) use a judge "computing continuous similarity scores in [0, 1] based on
#: semantic alignment" but print no prompt; this is the project's wording.
SIMILARITY_PROMPT = """You are an evaluation assistant. Rate how well the predicted answer matches the reference answers in meaning, for the question below.
Question: {question}
Reference answers: {references}
Predicted answer: {prediction}
Give a similarity score between 0 and 1: 1 means the prediction states the same answer as a reference (wording may differ), 0 means it is wrong or unrelated, values in between mean partially correct or incomplete.
Output only the score, a number between 0 and 1."""

_NO_ANSWER = "(no answer)"
_NO_GOLD = "(no gold answers)"


# ----------------------------------------------------------------------------- parsers

_MARKUP_RE = re.compile(r"[*_`#>]+")
_NUM = r"[-+]?\d+(?:\.\d+)?"
_FRACTION_RE = re.compile(rf"({_NUM})\s*(?:/|out\s+of)\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_KEYWORD_RE = re.compile(rf"\b(?:score|rating|result|grade|evaluation|similarity)\b[^0-9+-]{{0,24}}({_NUM})", re.IGNORECASE)
_PERCENT_RE = re.compile(rf"({_NUM})\s*%")
_NUMBER_RE = re.compile(_NUM)


def _clean(text: str | None) -> str:
    return _MARKUP_RE.sub(" ", str(text or "")).strip()


def parse_scaled_score(text: str | None, top: float) -> float | None:
    """A score in ``[0, top]`` from a judge reply, or None when it cannot be found unambiguously.

    Tried in order: a fraction ("4/5", "8 out of 10": rescaled to ``top``); a percentage
    (rescaled); a number after a keyword ("Score: 4", "Evaluation result - 3"); a bare number;
    otherwise the single distinct number in range in the text. Several candidate numbers, or
    one outside ``[0, top]``, give None.

    >>> [parse_scaled_score(t, 5) for t in ["4", "Score: 4/5", "**3**", "8 out of 10", "I'd say 2.5.", "7", "good"]]
    [4.0, 4.0, 3.0, 4.0, 2.5, None, None]
    """
    t = _clean(text)
    if not t:
        return None

    def ok(v: float) -> float | None:
        return v if 0.0 <= v <= top and math.isfinite(v) else None

    m = _FRACTION_RE.search(t)
    if m and float(m.group(2)) > 0:
        return ok(float(m.group(1)) / float(m.group(2)) * top)
    m = _PERCENT_RE.search(t)
    if m:
        return ok(float(m.group(1)) / 100.0 * top)
    m = _KEYWORD_RE.search(t)
    if m:
        return ok(float(m.group(1)))
    stripped = t.rstrip(".").strip()
    if _NUMBER_RE.fullmatch(stripped):
        return ok(float(stripped))
    nums = {float(x) for x in _NUMBER_RE.findall(t)}
    return ok(nums.pop()) if len(nums) == 1 else None


def parse_yes_no(text: str | None) -> float | None:
    """1.0 for YES, 0.0 for NO, None when the reply says neither or both.

    >>> [parse_yes_no(t) for t in ["YES", "**YES**", "yes.", "No", "Answer: NO", "Yes, it matches.", "maybe", "", "yes or no"]]
    [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, None, None, None]
    """
    words = re.findall(r"[a-z]+", _clean(text).lower())
    if not words:
        return None
    if words[0] in ("yes", "no") and not ({"yes", "no"} <= set(words[:3])):
        return 1.0 if words[0] == "yes" else 0.0
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return 1.0 if has_yes else 0.0
    return None


# ----------------------------------------------------------------------------- judgments


@dataclass
class Judgment:
    """One judgment: ``score`` on the judge's scale, ``value`` in [0, 1]; NaN both when missing."""

    score: float
    value: float
    raw: str
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return not math.isnan(self.value)

    @property
    def failed(self) -> bool:
        """The judgment failed: the model call failed (``error`` says how) or its reply was unparseable.
        A missing gold answer is not a failure (there is nothing to judge against)."""
        return self.error is not None and self.raw != _NO_GOLD


# ----------------------------------------------------------------------------- judges


class Judge:
    """Base class: a prompt template, a parser, a scale. Subclasses set ``name``, ``scale``, ``template``.

    Args:
        llm: a ``Backend`` or a ``str -> str`` callable.
        model_id: the model's name for cache keys (guessed from ``llm`` if not given).
        cache: this judge's cache (as in ``compute_features``); None: the cache of the call
            (``compute_features``' own), or the shared on-disk cache when called directly.
        max_chars: the response is cut to this many characters in the prompt (a 10k-word
            answer would not fit a judge's context); the cut is marked.
    """

    name: str = ""
    scale: float = 1.0
    template: str = ""

    def __init__(self, llm: LLM, model_id: str | None = None, cache: CacheLike = None, max_chars: int = 4000):
        self.llm = llm
        self.model_id = model_id or guess_model_id(llm)
        self._call = batch_caller(llm)
        self.cache = cache
        self.max_chars = max_chars
        self.calls = 0
        """Prompts sent to the model so far (cache hits excluded)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"

    def _cut(self, s: str) -> str:
        return s if len(s) <= self.max_chars else s[: self.max_chars] + " …[truncated]"

    def prompt(self, question: str, golds: Sequence[str], response: str) -> str:
        raise NotImplementedError

    def parse(self, text: str | None) -> float | None:
        """The score on the judge's scale, or None."""
        raise NotImplementedError

    def score(self, question: str, golds: Sequence[str] | str, response: str | None,
              cache: CacheLike = None) -> Judgment:
        return self.score_many([(question, golds, response)], cache=cache)[0]

    def score_many(self, items: Sequence[tuple[str, Sequence[str] | str, str | None]],
                   cache: CacheLike = None) -> list[Judgment]:
        """Judge ``(question, gold answers, response)`` triples; one batched model call for the uncached ones.

        No gold answers → missing (nothing to judge against). No response (the agent never
        answered) → score 0 without a model call (raw text "(no answer)").
        """
        store = as_cache(self.cache if self.cache is not None else True if cache is None else cache)
        prompts: list[str | None] = []
        for q, golds, resp in items:
            g = [golds] if isinstance(golds, str) else [str(x) for x in golds or []]
            prompts.append(self.prompt(q or "", g, self._cut(str(resp))) if g and resp is not None and str(resp).strip()
                           else None)

        def counting(ps: list[str]) -> list[str]:
            self.calls += len(ps)
            return self._call(ps)

        replies = cached_calls(counting, prompts, ("judge", self.name, self.model_id), store)
        out = []
        nan = float("nan")
        for (_, golds, _resp), p, (raw, err, hit) in zip(items, prompts, replies):
            if p is None:
                g = [golds] if isinstance(golds, str) else list(golds or [])
                out.append(Judgment(0.0, 0.0, _NO_ANSWER) if g else Judgment(nan, nan, _NO_GOLD, "no gold answers"))
                continue
            if err is not None:
                out.append(Judgment(nan, nan, raw or "", err, hit))
                continue
            s = self.parse(raw)
            if s is None:
                out.append(Judgment(nan, nan, raw or "", "unparseable judgment", hit))
            else:
                out.append(Judgment(s, s / self.scale, raw or "", None, hit))
        return out


class AccuracyJudge(Judge):
    """DynaSearcher's LLM-as-judge (LasJ; file 000, Table 7): accuracy 0–5, normalized /5 to [0, 1]."""

    name = "lasj"
    scale = 5.0
    template = LASJ_PROMPT

    def prompt(self, question: str, golds: Sequence[str], response: str) -> str:
        return self.template.format(question=question, answer=json.dumps(list(golds), ensure_ascii=False),
                                    response=response)

    def parse(self, text: str | None) -> float | None:
        return parse_scaled_score(text, 5.0)


class YesNoJudge(Judge):
    """When-to-Search's semantic-match judge (file 004, appendix B.4): YES → 1, NO → 0 (normalized inputs)."""

    name = "yesno"
    scale = 1.0
    template = YESNO_PROMPT

    def prompt(self, question: str, golds: Sequence[str], response: str) -> str:
        refs = json.dumps([normalize_answer(g) for g in golds], ensure_ascii=False)
        return self.template.format(prediction=normalize_answer(response), references=refs)

    def parse(self, text: str | None) -> float | None:
        return parse_yes_no(text)


class SimilarityJudge(Judge):
    """Shi & Shen's answer judge (file 003, F_ans of Eq. 3): semantic similarity in [0, 1]."""

    name = "similarity"
    scale = 1.0
    template = SIMILARITY_PROMPT

    def prompt(self, question: str, golds: Sequence[str], response: str) -> str:
        return self.template.format(question=question, references=json.dumps(list(golds), ensure_ascii=False),
                                    prediction=response)

    def parse(self, text: str | None) -> float | None:
        return parse_scaled_score(text, 1.0)


JUDGES: dict[str, type[Judge]] = {"lasj": AccuracyJudge, "yesno": YesNoJudge, "similarity": SimilarityJudge}


def get_judge(name: str, llm: LLM, **kwargs: Any) -> Judge:
    """A judge by name (``lasj``, ``yesno``, ``similarity``) over a Backend or ``str -> str`` callable."""
    if name not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; valid names: {', '.join(sorted(JUDGES))}")
    return JUDGES[name](llm, **kwargs)
