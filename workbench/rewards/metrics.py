"""Answer metrics shared by all five systems (SQuAD / FlashRAG conventions).

Normalization: lowercase; drop ASCII punctuation; drop the articles a/an/the as words;
collapse whitespace. Every metric is maxed over the gold aliases.

A gold that normalization empties (the option letter "A", "The") is compared on its
lowercased, stripped form instead (:func:`loose_normalize`), and only as a whole: cover-EM
is exact match for it (the letter "a" is a substring of nearly every answer). No answer
(None) scores 0 on every metric; with no gold answers :func:`answer_metrics` is NaN (nothing to
score against), the single metrics 0.

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
>>> answer_metrics(None, ["A"]), answer_metrics("(A)", ["A"])
({'em': 0.0, 'cem': 0.0, 'f1': 0.0}, {'em': 1.0, 'cem': 1.0, 'f1': 1.0})
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


def loose_normalize(s: str | None) -> str:
    """The form a gold that :func:`normalize_answer` empties is compared on: lowercased, whitespace
    collapsed, punctuation stripped from both ends.

    >>> loose_normalize(" (A). "), loose_normalize("The"), normalize_answer("The")
    ('a', 'the', '')
    """
    if s is None:
        return ""
    return " ".join(str(s).lower().split()).strip(string.punctuation + " ")


def _norm_pair(pred: str, gold: str) -> tuple[str, str]:
    """Prediction and gold in the form they are compared on (loose when the gold normalizes to "")."""
    g = normalize_answer(gold)
    if g:
        return normalize_answer(pred), g
    return loose_normalize(pred), loose_normalize(gold)


def _golds(golds: str | Iterable[str] | None) -> list[str]:
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    return [str(g) for g in golds if g is not None]


def exact_match(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """1.0 if the normalized prediction equals a normalized gold alias (0 for no answer)."""
    if pred is None:
        return 0.0
    return float(any((pg := _norm_pair(str(pred), g))[1] and pg[0] == pg[1] for g in _golds(golds)))


def cover_exact_match(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """Cover-EM (= subEM = CEM = "acc"): 1.0 if a normalized gold alias is a substring of the prediction.

    A gold that normalizes to "" counts by exact match on its loose form (a substring test would
    match nearly everything); an empty gold never counts; no answer is 0.
    """
    if pred is None:
        return 0.0
    p = normalize_answer(pred)
    return float(any((g := normalize_answer(x)) and g in p or (not g and exact_match(pred, [x])) for x in _golds(golds)))


#: DSPO's reward name for the same quantity.
sub_exact_match = cover_exact_match


def _f1(pred: str, gold: str) -> float:
    p, g = _norm_pair(pred, gold)
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


def matching_gold(pred: str | None, golds: str | Iterable[str] | None) -> str | None:
    """The gold alias a prediction is judged against: the one it matches best (None without golds).

    Best is cover-EM first, then F1, then the shorter alias; with no answer, or no alias matching at
    all, the first alias (the canonical answer). DynaSearcher Eq. 2 takes ``L_gt`` from this alias, so
    the reward does not depend on the order the aliases are listed in.

    >>> matching_gold("Paris", ["City of Paris, France", "Paris"])
    'Paris'
    >>> matching_gold(None, ["Paris", "City of Paris"])
    'Paris'
    """
    gs = _golds(golds)
    if not gs:
        return None
    if pred is None:
        return gs[0]
    scored = [(cover_exact_match(pred, [g]), _f1(str(pred), g), -word_count(g), -i) for i, g in enumerate(gs)]
    best = max(range(len(gs)), key=lambda i: scored[i])
    return gs[best] if scored[best][0] or scored[best][1] else gs[0]


def word_count(s: str | None) -> int:
    """Words in the normalized string (the L of DynaSearcher Eq. 2)."""
    return len(normalize_answer(s).split())


def answer_metrics(pred: str | None, golds: str | Iterable[str] | None) -> dict[str, float]:
    """All string metrics at once: ``em``, ``cem`` (cover-EM / subEM), ``f1``; NaN each without a gold answer."""
    if not _golds(golds):
        nan = float("nan")
        return {"em": nan, "cem": nan, "f1": nan}
    return {"em": exact_match(pred, golds), "cem": cover_exact_match(pred, golds), "f1": f1_score(pred, golds)}


# ============================================================================= comparison questions


def _contains(haystack: str, needle: str) -> bool:
    """Whether normalized ``needle`` occurs in normalized ``haystack`` as whole words."""
    n = normalize_answer(needle)
    return bool(n) and f" {n} " in f" {normalize_answer(haystack)} "


#: Words a capitalized option may contain in lowercase ("Arthur's Magazine or First for Women").
_CONNECTORS = {"of", "the", "for", "and", "de", "del", "la", "le", "von", "van", "in", "on", "a", "an", "&", "to", "at"}


def _cap(word: str) -> bool:
    w = word.lstrip("(\"'“‘")
    return bool(w) and (w[0].isupper() or w[0].isdigit())


def comparison_options(question: str | None) -> list[str]:
    """The two options of a choice question ("Which film came out first, X or Y?"), or [] if it has none.

    The options follow the question head's first comma ("..., X or Y?"); without a comma they are the
    capitalized spans around " or " ("Which magazine was started first Arthur's Magazine or First for
    Women?"). Only the first " or " splits, so an option keeps its own commas and colons.

    >>> comparison_options("Which film came out first, Forbidden Ground or Free Guy?")
    ['Forbidden Ground', 'Free Guy']
    >>> comparison_options("Which film has the director born earlier, The Adventures Of Priscilla, Queen Of The Desert or Harvest: 3,000 Years?")
    ['The Adventures Of Priscilla, Queen Of The Desert', 'Harvest: 3,000 Years']
    >>> comparison_options("Which magazine was started first Arthur's Magazine or First for Women?")
    ["Arthur's Magazine", 'First for Women']
    >>> comparison_options("Who directed Free Guy?")
    []
    """
    q = " ".join(str(question or "").split()).rstrip("?. ").strip()
    if " or " not in q:
        return []
    head, comma, rest = q.partition(", ")
    if comma and " or " in rest:
        left, _, right = rest.partition(" or ")
        opts = [left.strip(), right.strip()]
    else:
        before, _, after = q.partition(" or ")
        lw, rw = before.split(), after.split()
        i = len(lw)
        while i > 1 and (_cap(lw[i - 1]) or lw[i - 1].lower() in _CONNECTORS):  # word 0 is the question word
            i -= 1
        left_words = lw[i:]
        while left_words and not _cap(left_words[0]):
            left_words = left_words[1:]
        j = 0
        while j < len(rw) and (_cap(rw[j]) or rw[j].lower() in _CONNECTORS):
            j += 1
        right_words = rw[:j]
        while right_words and not _cap(right_words[-1]):
            right_words = right_words[:-1]
        opts = [" ".join(left_words), " ".join(right_words)]
    opts = [o.strip(" ,;:") for o in opts]
    if not all(normalize_answer(o) for o in opts) or normalize_answer(opts[0]) == normalize_answer(opts[1]):
        return []
    return opts


def multi_option(pred: str | None, question: str | None, golds: str | Iterable[str] | None = None) -> float:
    """1.0 if the answer names more than one option of a choice question (cover-EM would credit
    "Forbidden Ground or Free Guy" for the gold "Free Guy"); 0.0 otherwise, also for a question with
    no options. A gold alias that itself names several options makes it 0 (the answer may repeat it).

    >>> q = "Which film came out first, Forbidden Ground or Free Guy?"
    >>> multi_option("Forbidden Ground or Free Guy", q, ["Free Guy"]), multi_option("Free Guy", q, ["Free Guy"])
    (1.0, 0.0)
    """
    opts = comparison_options(question)
    if pred is None or len(opts) < 2:
        return 0.0
    if any(sum(_contains(g, o) for o in opts) > 1 for g in _golds(golds)):
        return 0.0
    return float(sum(_contains(str(pred), o) for o in opts) > 1)


# ============================================================================= multiple-choice questions

#: An option label where an option starts: "A.", "A)", "(A)", "A:" at the start of a line or after whitespace.
_OPTION_LABEL = re.compile(r"(?:^|(?<=\s))\(?([A-H])[.):]\)?\s+", re.MULTILINE)
#: A label written in an answer: a lone capital letter, optionally in parentheses or followed by "." or ")".
_ANSWER_LABEL = re.compile(r"(?<![A-Za-z])\(?([A-H])(?:[.):]|\)|(?![A-Za-z']))")


def choice_options(question: str | None) -> dict[str, str]:
    """The lettered options of a multiple-choice question ("... A. Paris B. Lyon C. Nice"), label → text;
    {} for a question with fewer than two, or labels out of order (A, B, C, ...).

    >>> choice_options("Which are French cities? A. Paris B. Berlin (C) Lyon")
    {'A': 'Paris', 'B': 'Berlin', 'C': 'Lyon'}
    >>> choice_options("Who directed Free Guy?")
    {}
    """
    if not question:
        return {}
    marks = list(_OPTION_LABEL.finditer(question))
    # Keep the run of labels A, B, C, ... (a stray "I." earlier in the text is not an option).
    start = next((i for i, m in enumerate(marks) if m.group(1) == "A"), None)
    if start is None:
        return {}
    run = [marks[start]]
    for m in marks[start + 1:]:
        if ord(m.group(1)) == ord(run[-1].group(1)) + 1:
            run.append(m)
    if len(run) < 2:
        return {}
    ends = [m.start() for m in run[1:]] + [len(question)]
    return {m.group(1): question[m.end():e].strip().rstrip(";,") for m, e in zip(run, ends)}


def _option_set(text: str, options: dict[str, str]) -> set[str]:
    """Option labels an answer or gold names: its labels, else the options whose text it contains."""
    labels = {m.group(1) for m in _ANSWER_LABEL.finditer(text) if m.group(1) in options}
    if labels:
        return labels
    return {k for k, v in options.items() if _contains(text, v)}


def option_set_f1(pred: str | None, golds: str | Iterable[str] | None, question: str | None) -> float:
    """F1 between the predicted and the correct option sets of a multiple-choice question (R-Search
    NL-DAG, paper 003: "for multiple choice questions, F1 scores are calculated between the predicted and
    correct option sets"); NaN for a question without lettered options or a gold naming none; 0 for no answer.
    Labels ("A, C") and option texts both count; the best gold alias is used.

    >>> q = "Which are French cities? A. Paris B. Berlin C. Lyon D. Rome"
    >>> option_set_f1("A and C", ["A, C"], q), option_set_f1("(A)", ["A, C"], q), option_set_f1("Paris", ["A"], q)
    (1.0, 0.6666666666666666, 1.0)
    """
    options = choice_options(question)
    gold_sets = [g for g in (_option_set(x, options) for x in _golds(golds)) if g] if options else []
    if not gold_sets:
        return float("nan")
    if pred is None:
        return 0.0
    p = _option_set(str(pred), options)
    return max((2 * len(p & g) / (len(p) + len(g)) for g in gold_sets), default=0.0)


# ============================================================================= few-shot leakage

_BOXED_IN = re.compile(r"\\boxed\s*\{([^{}]*)\}")
#: What an instruction writes inside a box instead of an answer: "<answer> ANSWER </answer>", and the "and" of
#: Search-R1's "inside <answer> and </answer>".
_PLACEHOLDERS = {"and", "or", "answer", "final answer", "your answer", "answer here", "final answer here", "short answer"}
_ANSWER_SPAN = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.IGNORECASE | re.DOTALL)


def in_context_answers(prompt_text: str | None) -> list[str]:
    """The answers shown in a prompt (demonstrations and the instruction's example): the contents of its
    complete ``<answer>`` boxes (``\\boxed{}`` unwrapped), without placeholders ("...", "ANSWER") and
    empty boxes. These are what a small policy copies instead of answering (see :func:`demo_leak`).

    >>> in_context_answers("inside <answer> and </answer>. For example, <answer> Beijing </answer>. <answer> Ira Velt "
    ...                    "</answer> <answer></answer>")
    ['Beijing', 'Ira Velt']
    >>> in_context_answers(r"<answer> The final answer is \\boxed{Elsa Brandvik} </answer>")
    ['Elsa Brandvik']
    """
    out: list[str] = []
    for m in _ANSWER_SPAN.finditer(prompt_text or ""):
        body = m.group(1)
        boxed = _BOXED_IN.findall(body)
        for a in boxed or [body]:
            a = " ".join(a.split())
            if normalize_answer(a) and normalize_answer(a) not in _PLACEHOLDERS and a not in out:
                out.append(a)
    return out


def name_set(names: Iterable[str]) -> frozenset[str]:
    """Names normalized (:func:`normalize_answer`) for :func:`names_leak`; empty ones dropped."""
    return frozenset(n for n in map(normalize_answer, names) if n)


def names_leak(pred: str | None, names: frozenset[str], question: str | None = None) -> float:
    """1.0 if the answer names, as whole words, one of ``names`` (a :func:`name_set`) that the question does not:
    on real questions, a name of the synthetic world the policy brought from its training (``world_leak`` in
    ``workbench.eval.paired``).

    >>> world = name_set(["Ira Velt", "Tarnhollow"])
    >>> names_leak("It was Ira Velt.", world), names_leak("Paris", world), names_leak("Tarnhollow", world, "Tarnhollow?")
    (1.0, 0.0, 0.0)
    """
    if pred is None or not names:
        return 0.0
    words = normalize_answer(str(pred)).split()
    asked = f" {normalize_answer(question or '')} "
    longest = max(len(n.split()) for n in names)
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + longest) + 1):
            gram = " ".join(words[i:j])
            if gram in names and f" {gram} " not in asked:
                return 1.0
    return 0.0


def demo_leak(pred: str | None, demo_answers: Iterable[str], golds: str | Iterable[str] | None = None) -> float:
    """1.0 if the answer equals or contains (whole words, normalized) an answer shown in the prompt that no
    gold alias contains: the policy copied its demonstration ("Ira Velt") instead of answering.

    >>> demo_leak("Ira Velt", ["Beijing", "Ira Velt"], ["Ada Quist"]), demo_leak("Beijing", ["Beijing"], ["Beijing"])
    (1.0, 0.0)
    """
    if pred is None:
        return 0.0
    golds = _golds(golds)
    for d in demo_answers:
        if _contains(str(pred), d) and not any(_contains(g, d) for g in golds):
            return 1.0
    return 0.0
