"""Answer metrics shared by all five systems (SQuAD / FlashRAG conventions).

Normalization: lowercase; drop ASCII punctuation; drop the articles a/an/the as words;
collapse whitespace. Every metric is maxed over the gold aliases.

>>> normalize_answer("The  Eiffel-Tower!")
'eiffeltower'
>>> exact_match("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])
1.0
>>> cover_exact_match("It is in Paris, France.", ["paris"])
1.0
>>> round(f1_score("Paris France", ["Paris"]), 3)
0.667
>>> f1_score("yes", ["no"]), f1_score("no", ["no"])
(0.0, 1.0)
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(s: str | None) -> str:
    """Lowercase, drop ASCII punctuation, drop articles a/an/the, collapse whitespace."""
    if s is None:
        return ""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _golds(golds: str | Iterable[str] | None) -> list[str]:
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    return [str(g) for g in golds if g is not None]


def exact_match(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """1.0 if the normalized prediction equals a normalized gold alias."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(golds)))


def cover_exact_match(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """Cover-EM (= subEM = CEM = "acc"): 1.0 if a normalized gold alias is a substring of the prediction.

    An empty normalized gold never counts (it would be a substring of everything).
    """
    p = normalize_answer(pred)
    return float(any((g := normalize_answer(x)) and g in p for x in _golds(golds)))


#: DSPO's reward name for the same quantity.
sub_exact_match = cover_exact_match


def _f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in _SPECIAL or g in _SPECIAL) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def f1_score(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """Token-overlap F1, maxed over gold aliases; 0 if either side is yes/no/noanswer and they differ."""
    if pred is None:
        return 0.0
    return max((_f1(str(pred), g) for g in _golds(golds)), default=0.0)


def word_count(s: str | None) -> int:
    """Words in the normalized string (the L of DynaSearcher Eq. 2)."""
    return len(normalize_answer(s).split())


def answer_metrics(pred: str | None, golds: str | Iterable[str] | None) -> dict[str, float]:
    """All string metrics at once: ``em``, ``cem`` (cover-EM / subEM), ``f1``."""
    return {"em": exact_match(pred, golds), "cem": cover_exact_match(pred, golds), "f1": f1_score(pred, golds)}
