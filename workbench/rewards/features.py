"""Per-trajectory reward features, computed once and stored as a table.

Rewards are two steps (docs/architecture.md): each ``(Trajectory, Example)`` becomes one row of
parameter-free facts; a :class:`~workbench.rewards.rubric.Rubric` combines them with a paper's
parameters. The table is stored as ``run.path / "features.parquet"`` (``feature_io.py``).

Expensive features (embeddings, judge calls, the cross-family evidence answer) go through
a :class:`FeatureCache` (sqlite under ``cache_dir()/"features"``) keyed by a hash of their
inputs (model id + text or prompt), so recomputing a table only pays for what changed.

Missing inputs are NaN, never 0 (an unwritten flag, no gold, unannotated hops, no encoder, a
failed judgment). A trajectory that never answered is not missing: its answer is wrong (EM = F1 = 0).

Failures are recorded, never scored as answers (:data:`FAILURE_COLUMNS`). A trajectory whose
policy turn failed in the backend (``backend_error``) or whose tool call raised or timed out
(``failed_tool``) is not a sample of what the policy does: a failed search is not a search the
model did badly, and an answer given after one is not the answer it would have given. Such a row
keeps the facts of its question (:data:`QUESTION_COLUMNS`) and its text columns, and every other
numeric column (answer metrics, format flags, retrieval, query and method columns, judges,
evidence) is NaN, so every reward component over it, and the total, is NaN; judges and the
evidence model are not called for it. A failed judgment or evidence call makes only its own
column NaN (``failed_judge``, ``failed_evidence``), and with it the components that read it.
``failure`` says what failed, with the component's error message.

The columns (the contract the Rubric presets, the trainer and the reward playground read) and
what each means are registered in :mod:`workbench.rewards.columns`
(``describe_columns()`` lists them); a method adds a protocol flag or a feature function
there, without editing this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.data.example import Example, as_example
from workbench.rewards import columns
from workbench.rewards.answer_checks import answer_checks
from workbench.rewards.cache import FeatureCache, as_cache, cache_key
from workbench.rewards.embeddings import embed, encoder_id, pairwise_similarity, resolve_encoder
from workbench.rewards.feature_io import FEATURES_FILE, load_features, save_features  # noqa: F401
from workbench.rewards.gold_evidence import gold_retrievals, is_passage, matches_by_id
from workbench.rewards.metrics import (
    cover_exact_match,
    exact_match,
    f1_score,
    matching_gold,
    word_count,
)

if TYPE_CHECKING:
    from workbench.core.types import Passage, ToolCall
    from workbench.rewards.embeddings import EncoderLike
    from workbench.rewards.evidence import EvidenceModel
    from workbench.rewards.judges import Judge
    from workbench.storage.runs import Run

__all__ = [
    "CONCISE_RULES",
    "FEATURES_FILE",
    "FAILURE_COLUMNS",
    "FEATURE_COLUMNS",
    "NUMERIC_COLUMNS",
    "NUMERIC_FLAGS",
    "QUESTION_COLUMNS",
    "TEXT_COLUMNS",
    "ConciseCheck",
    "FeatureCache",
    "as_cache",
    "as_example",
    "cache_key",
    "check_concise",
    "compute_features",
    "embed",
    "encoder_id",
    "featurize_run",
    "load_features",
    "pairwise_similarity",
    "queries_concise",
    "resolve_encoder",
    "save_features",
    "trajectory_failures",
]


# The built-in columns (registered in workbench.rewards.columns); a table also holds the columns
# registered later (by methods) and one set per judge.
#: Numeric feature columns in table order.
NUMERIC_COLUMNS = columns.numeric_columns()
#: Text columns.
TEXT_COLUMNS = columns.text_columns()
#: Every fixed column, in order (judge columns follow, one set per judge).
FEATURE_COLUMNS = columns.feature_columns()
#: Flags read from ``traj.flags`` as numbers (bools → 0/1), NaN when the protocol did not write them.
NUMERIC_FLAGS = columns.numeric_flags()
#: What failed in a row (counts; never NaN). ``backend_error`` or ``failed_tool`` > 0 blanks the row's outcome.
FAILURE_COLUMNS = ("failed_tool", "backend_error", "failed_judge", "failed_evidence")
#: Numeric columns about the question, not the policy: kept on a failed trajectory (with ``sample_idx``).
QUESTION_COLUMNS = ("has_gold", "L_gt", "hops", "n_gold_passages")

# ============================================================================= query conciseness (When-to-Search)

#: Rule ``question_word``: an interrogative word anywhere in the query.
QUESTION_WORDS = ("what", "who", "whom", "whose", "which", "when", "where", "why", "how")
#: Rule ``question_form``: the query opens like a yes/no question ("is X in Y").
QUESTION_OPENERS = ("is", "are", "was", "were", "do", "does", "did", "can", "could", "would", "should", "will",
                    "has", "have", "had")
#: Rule ``filler_phrase``: conversational padding a keyword query does not need.
FILLER_PHRASES = ("tell me", "i want to know", "i need to know", "i would like to know", "can you", "could you",
                  "please", "find out", "search for", "look up", "information about", "information on", "help me",
                  "let me", "i need")
#: Rule ``redundant_preposition``: a preposition opening or closing the query, or two in a row.
PREPOSITIONS = ("about", "above", "across", "after", "against", "along", "among", "around", "at", "before", "behind",
                "below", "beneath", "beside", "between", "beyond", "by", "during", "for", "from", "in", "inside",
                "into", "near", "of", "off", "on", "onto", "outside", "over", "per", "regarding", "since", "through",
                "throughout", "to", "toward", "towards", "under", "until", "upon", "with", "within", "without")
#: Rule ``redundant_modifier``: intensifiers and vague modifiers that add nothing to a search.
REDUNDANT_MODIFIERS = ("very", "really", "actually", "basically", "exactly", "precisely", "specifically",
                       "particularly", "just", "quite", "truly", "literally", "certainly", "definitely", "simply",
                       "extremely", "famous", "well-known", "so-called", "exact", "specific", "particular")
#: Rule ``too_long``: more words than this.
MAX_CONCISE_WORDS = 12
#: The rules in the order they are checked (the first that fires is reported).
CONCISE_RULES = ("empty", "question_mark", "question_word", "question_form", "filler_phrase",
                 "redundant_preposition", "redundant_modifier", "too_long")

_WORD_RE = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*")
_FILLER_RES = [(p, re.compile(rf"\b{re.escape(p)}\b")) for p in FILLER_PHRASES]


class ConciseCheck(NamedTuple):
    concise: bool
    rule: str | None
    """The first rule in ``CONCISE_RULES`` that fired (None if concise)."""
    detail: str = ""
    """What triggered it (the word or phrase)."""


def check_concise(query: str | None) -> ConciseCheck:
    """Rule-based conciseness of one search query (When-to-Search Sec. 3, "Search Reward").

    The paper asks for queries without question words, redundant prepositions or
    irrelevant modifiers; the rules are the module-level word lists above, checked in the
    order of ``CONCISE_RULES``.

    >>> check_concise("Maren Ostvik place of birth")
    ConciseCheck(concise=True, rule=None, detail='')
    >>> check_concise("Where was Maren Ostvik born?").rule
    'question_mark'
    >>> check_concise("birthplace of the very famous author").rule
    'redundant_modifier'
    """
    q = (query or "").strip()
    words = _WORD_RE.findall(q.lower())
    if not words:
        return ConciseCheck(False, "empty", "")
    if "?" in q:
        return ConciseCheck(False, "question_mark", "?")
    for w in words:
        if w in QUESTION_WORDS:
            return ConciseCheck(False, "question_word", w)
    if words[0] in QUESTION_OPENERS and len(words) > 1:
        return ConciseCheck(False, "question_form", words[0])
    low = " ".join(words)
    for phrase, rx in _FILLER_RES:
        if rx.search(low):
            return ConciseCheck(False, "filler_phrase", phrase)
    if words[0] in PREPOSITIONS:
        return ConciseCheck(False, "redundant_preposition", words[0])
    if words[-1] in PREPOSITIONS:
        return ConciseCheck(False, "redundant_preposition", words[-1])
    for a, b in zip(words, words[1:]):
        if a in PREPOSITIONS and b in PREPOSITIONS:
            return ConciseCheck(False, "redundant_preposition", f"{a} {b}")
    for w in words:
        if w in REDUNDANT_MODIFIERS:
            return ConciseCheck(False, "redundant_modifier", w)
    if len(words) > MAX_CONCISE_WORDS:
        return ConciseCheck(False, "too_long", f"{len(words)} words > {MAX_CONCISE_WORDS}")
    return ConciseCheck(True, None, "")


def queries_concise(queries: Sequence[str]) -> tuple[bool, str]:
    """(every query concise, first rule that fired or ""); no queries → (True, "")."""
    for q in queries:
        chk = check_concise(q)
        if not chk.concise:
            return False, chk.rule or ""
    return True, ""

# ============================================================================= per-trajectory inputs


@dataclass
class _Row:
    """What the features of one trajectory are computed from (Trajectory + Example, or parsed text)."""

    traj: Trajectory
    golds: list[str]
    hops: float
    gold_titles: list[str]
    gold_ids: list[str]
    gold_texts: list[str] | None
    hits: list[dict[str, Any]] = field(default_factory=list)
    out: dict[str, Any] = field(default_factory=dict)
    example: Example | None = None


def _flag(flags: Mapping[str, Any], name: str) -> float:
    v = flags.get(name)
    if v is None or isinstance(v, (str, list, dict)):
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _hits(traj: Trajectory) -> list[dict[str, Any]]:
    """Passage hits (dicts with a title or text) over all tool calls; KG triples are skipped."""
    return [r for call in traj.tool_calls for r in call.results if is_passage(r)]


def _example_of(traj: Trajectory, by_id: Mapping[str, Example]) -> Example:
    ex = by_id.get(traj.example_id)
    if ex is None:
        raise KeyError(f"trajectory {traj.id!r}: no example with id {traj.example_id!r} among the {len(by_id)} given")
    return ex

def _gold_texts(ex: Example, passages: Mapping[str, Any] | None) -> list[str] | None:
    texts = ex.meta.get("supporting_texts") if isinstance(ex.meta, dict) else None
    if texts:
        return [str(t) for t in texts]
    if passages is not None and ex.supporting_ids:
        out = []
        for pid in ex.supporting_ids:
            p = passages.get(pid)
            if p is None:
                return None
            out.append(_passage_text(p) if not isinstance(p, str) else p)
        return out
    return None


def _passage_text(p: Any) -> str:
    if isinstance(p, Mapping):
        title, text = str(p.get("title") or ""), str(p.get("text") or "")
    else:
        title, text = str(getattr(p, "title", "") or ""), str(getattr(p, "text", "") or "")
    return f"{title}\n{text}" if title else text


def _make_row(traj: Trajectory, ex: Example, passages: Mapping[str, Any] | None) -> _Row:
    hops = ex.hops if ex.hops is not None else traj.meta.get("hops") if isinstance(traj.meta, dict) else None
    return _Row(
        traj=traj,
        golds=[a for a in ex.answers if a is not None],
        hops=float("nan") if hops is None else float(hops),
        gold_titles=list(ex.supporting_titles or []),
        gold_ids=list(ex.supporting_ids or []),
        gold_texts=_gold_texts(ex, passages),
        hits=_hits(traj),
        example=ex,
    )


# ============================================================================= failures


def failed_tool_calls(traj: Trajectory) -> list[ToolCall]:
    """The tool calls of ``traj`` that raised or timed out (a DAG node skipped as invalid is not one).

    An observation rebuilt from text (``workbench.rewards.from_text``: a call with
    ``meta["parsed_from_text"]``) ran no tool: the protocol's records replayed beside it are not failures.
    """
    out = []
    for turn in traj.turns:
        calls = turn.tool_calls or []
        if any((c.meta or {}).get("parsed_from_text") for c in calls):
            continue
        out += [c for c in calls if c.error is not None and not (c.meta or {}).get("skipped")]
    return out


def trajectory_failures(traj: Trajectory) -> list[str]:
    """What failed while ``traj`` was generated, one line ``"<component> failed: <error>"`` each (empty: nothing).

    >>> from workbench.core.types import ToolCall
    >>> from workbench.core.trajectory import OBSERVATION, Turn
    >>> t = Trajectory("t", "q", "Q?", "search_r1", [], finish_reason="backend_error", meta={"errors": ["HTTP 503"]},
    ...                turns=[Turn(OBSERVATION, "", [], tool_calls=[ToolCall("search", {}, error="timed out")])])
    >>> trajectory_failures(t)
    ['search tool failed: timed out', 'policy backend failed: HTTP 503']
    """
    out = [_line(f"{c.name} tool failed: {c.error}") for c in failed_tool_calls(traj)]
    if traj.finish_reason == "backend_error":
        errors = [e for e in (traj.meta or {}).get("errors", []) if e] if isinstance(traj.meta, dict) else []
        out += [_line(f"policy backend failed: {e}") for e in errors] or ["policy backend failed"]
    return out


def _line(message: str) -> str:
    return " ".join(str(message).split())


def _failed(r: _Row) -> bool:
    """The trajectory's outcome is unknown (its backend or a tool failed): outcome columns NaN, no model calls."""
    return r.out["backend_error"] > 0 or r.out["failed_tool"] > 0


def _add_failure(r: _Row, message: str) -> None:
    r.out["failure"] = _line(message) if not r.out.get("failure") else f"{r.out['failure']}\n{_line(message)}"


def _blank_failed(rows: list[_Row]) -> None:
    """NaN in every numeric column of a failed trajectory but the question's facts and the failure counts."""
    keep = {"sample_idx", *QUESTION_COLUMNS, *FAILURE_COLUMNS}
    for r in rows:
        if not _failed(r):
            continue
        for c, v in r.out.items():
            if c not in keep and columns.column_dtype(c) != "str" and not c.endswith("_raw") and (
                    isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) or v is None):
                r.out[c] = float("nan")


# ============================================================================= cheap features


def _cheap(r: _Row) -> dict[str, Any]:
    t = r.traj
    flags = t.flags or {}
    has_gold = len(r.golds) > 0
    nan = float("nan")
    if has_gold:
        em, cem, f1 = exact_match(t.answer, r.golds), cover_exact_match(t.answer, r.golds), f1_score(t.answer, r.golds)
        L_gt = float(word_count(matching_gold(t.answer, r.golds)))  # the alias the answer matches best
    else:
        em = cem = f1 = L_gt = nan
    queries = t.queries
    concise, rule = queries_concise(queries)
    problems = flags.get("dag_problems")
    answered = flags.get("answered", t.answer is not None)
    n_invalid = flags.get("n_invalid", t.n_invalid)
    out: dict[str, Any] = {
        "id": t.id, "example_id": t.example_id, "group_id": t.group_id or t.example_id, "sample_idx": int(t.sample_idx),
        "protocol": t.protocol, "answer": t.answer,
        "has_gold": float(has_gold), "em": em, "cem": cem, "f1": f1,
        "L_pred": float(word_count(t.answer)), "L_gt": L_gt,
        "n_searches": float(t.n_searches), "hops": r.hops, "n_invalid": float(n_invalid),
        "answered": float(bool(answered)),
        **{k: _flag(flags, k) for k in columns.numeric_flags()},
        "n_dag_problems": float(len(problems)) if isinstance(problems, list) else nan,
        "n_queries": float(len(queries)), "query_concise": float(concise), "concise_rule": rule,
        "query_sim_mean": nan, "query_sim_paper": nan,
        "evidence": flags.get("evidence") if isinstance(flags.get("evidence"), str) else None,
        "evidence_answer": None, "evidence_f1": nan,
        "failed_tool": float(len(failed_tool_calls(t))), "backend_error": float(t.finish_reason == "backend_error"),
        "failed_judge": 0.0, "failed_evidence": 0.0, "failure": "\n".join(trajectory_failures(t)) or None,
    }
    out.update(_recall_exact(r))
    out.update(answer_checks(r.traj, r.golds))
    return out


def _recall_exact(r: _Row) -> dict[str, Any]:
    """Recall by passage id where both sides have ids (the example's ``supporting_ids`` and every hit's id),
    else by title: the share of :func:`~workbench.rewards.gold_evidence.gold_retrievals` retrieved. Titles
    over-count when gold paragraphs share a title (MuSiQue): a hit of one counts for both."""
    nan = float("nan")
    n_gold = max(len(r.gold_titles), len(r.gold_ids))
    out = {"n_gold_passages": float(n_gold), "n_retrieved": float(len(r.hits)), "recall_title": nan, "recall_id": nan,
           "recall_embed": nan, "recall": nan, "recall_by": None}
    if n_gold == 0:
        return out
    if r.gold_titles:
        golds = gold_retrievals(r.traj, r.example, by="title")
        out["recall_title"] = sum(g.retrieved for g in golds) / len(golds)
        out["recall"], out["recall_by"] = out["recall_title"], "title"
    if _by_id(r):
        golds = gold_retrievals(r.traj, r.example, by="id")
        out["recall_id"] = sum(g.retrieved for g in golds) / len(golds)
        out["recall"], out["recall_by"] = out["recall_id"], "id"
    return out


def _by_id(r: _Row) -> bool:
    """Recall is matched by id: the example has gold passage ids and every hit carries one (no hits: nothing matched)."""
    return matches_by_id(r.gold_ids, r.hits)


# ============================================================================= embedding features


def _embedding_features(rows: list[_Row], encoder: Any, cache: FeatureCache, threshold: float) -> None:
    # query similarity (When-to-Search Eq. 7-8): only trajectories with two or more queries need it
    qrows = [r for r in rows if len(r.traj.queries) >= 2]
    qemb = embed([q for r in qrows for q in r.traj.queries], encoder, cache, kind="query")
    for r in qrows:
        mean, paper = pairwise_similarity(np.stack([qemb[q] for q in r.traj.queries]))
        r.out["query_sim_mean"], r.out["query_sim_paper"] = mean, paper
    # recall by embedding (DynaSearcher Eq. 3)
    prows = [r for r in rows if r.gold_titles or r.gold_texts]
    texts: list[str] = []
    plan = []
    for r in prows:
        use_text = r.gold_texts is not None
        gold = r.gold_texts if use_text else r.gold_titles
        hit_side = [_passage_text(h) if use_text else str(h.get("title") or "") for h in r.hits]
        plan.append((r, list(gold), hit_side))
        texts += list(gold) + hit_side
    emb = embed(texts, encoder, cache, kind="passage")
    for r, gold, hit_side in plan:
        if not gold:
            continue
        if hit_side:
            g = np.stack([emb[x] for x in gold])
            h = np.stack([emb[x] for x in hit_side])
            matched = (g @ h.T).max(axis=1) >= threshold
        else:
            matched = np.zeros(len(gold), dtype=bool)
        r.out["recall_embed"] = float(matched.mean())
        if _by_id(r):
            continue  # ids are exact: the embedding is only a column beside them
        if r.gold_titles and len(r.gold_titles) == len(gold):
            by_title = np.array([x.retrieved for x in gold_retrievals(r.traj, r.example, by="title")])
            r.out["recall"] = float((by_title | matched).mean())
        else:
            r.out["recall"] = float(matched.mean())
        r.out["recall_by"] = "embedding"


# ============================================================================= model features


def _judge_features(rows: list[_Row], judges: Iterable[Any], cache: FeatureCache) -> list[str]:
    cols: list[str] = []
    todo = [r for r in rows if not _failed(r)]  # a failed trajectory has no answer to judge
    for judge in judges:
        items = [(r.traj.question, r.golds, r.traj.answer) for r in todo]
        results = judge.score_many(items, cache=cache)
        col = f"judge_{judge.name}"
        names = [col] + ([f"{col}_score"] if judge.scale != 1 else [])
        cols += names + [f"{col}_raw"]
        for r in rows:
            if _failed(r):
                r.out.update({c: float("nan") for c in names}, **{f"{col}_raw": "[not judged] the trajectory failed"})
        for r, res in zip(todo, results):
            r.out[col] = res.value
            if judge.scale != 1:
                r.out[f"{col}_score"] = res.score
            # the reply as given (also when unparseable); the error where there is no reply
            r.out[f"{col}_raw"] = res.raw if (res.raw or res.error is None) else f"[error] {res.error}"
            if getattr(res, "failed", res.error is not None):  # failed; "no gold answers" is not a failure
                r.out["failed_judge"] += 1.0
                _add_failure(r, f"judge {judge.name} failed: {res.error}")
    return cols


def _evidence_features(rows: list[_Row], evidence_model: Any, cache: FeatureCache) -> None:
    from workbench.rewards.evidence import as_evidence_scorer

    scorer = as_evidence_scorer(evidence_model)
    for r in rows:
        if r.out["evidence"] is not None and not r.out["evidence"].strip() and r.golds:
            # no evidence box: nothing to answer from, nothing to reward (no model call)
            r.out["evidence_answer"], r.out["evidence_f1"] = "", 0.0
    todo = [r for r in rows if r.out["evidence"] is not None and r.out["evidence"].strip() and r.golds
            and not _failed(r)]
    answers = scorer.answer_many([(r.traj.question, r.out["evidence"]) for r in todo], cache=cache)
    for r, a in zip(todo, answers):
        r.out["evidence_answer"] = a.answer
        r.out["evidence_f1"] = f1_score(a.answer, r.golds) if a.ok else float("nan")
        if not a.ok:
            r.out["failed_evidence"] = 1.0
            _add_failure(r, f"evidence model failed: {a.error}")


# ============================================================================= public API


def compute_features(
    trajs: Sequence[Trajectory],
    examples: Sequence[Example] | Mapping[str, Example],
    evidence_model: EvidenceModel = None,
    judges: Sequence[Judge] = (),
    encoder: EncoderLike = None,
    cache: bool | str | os.PathLike | FeatureCache = True,
    *,
    passages: Mapping[str, Passage | Mapping[str, Any] | str] | None = None,
    recall_threshold: float = 0.8,
) -> pd.DataFrame:
    """The features table of ``trajs`` (one row each, in order; columns: ``columns.describe_columns()``).

    Args:
        trajs: trajectories (any protocol).
        examples: their examples (a list or an id → Example mapping); every trajectory's
            ``example_id`` must be there.
        evidence_model: the cross-family model for R-Search's evidence reward (a model path,
            a ``Backend``, a ``str -> str`` callable or an ``EvidenceScorer``); None: no
            ``evidence_f1`` (NaN).
        judges: judge objects from ``workbench.rewards.judges`` (``judge_<name>`` columns).
        encoder: sentence encoder for query similarity and embedding recall; None = the
            default all-MiniLM-L6-v2 (loaded only when some trajectory needs it); ``False``
            = no embedding features (NaN; ``recall`` is title matching only).
        cache: True = the shared on-disk cache, False = this call only, or a path / FeatureCache.
        passages: optional id → passage (or text) lookup giving gold passage texts for the
            embedding recall.
        recall_threshold: cosine at or above which a retrieved passage matches a gold one.
    """
    if not 0.0 < recall_threshold <= 1.0:
        raise ValueError(f"recall_threshold must be in (0, 1], got {recall_threshold}")
    by_id = examples if isinstance(examples, Mapping) else {e.id: e for e in examples}
    by_id = {k: as_example(v) for k, v in by_id.items()}
    rows = [_make_row(t, _example_of(t, by_id), passages) for t in trajs]
    for r in rows:
        r.out = _cheap(r)
    store = as_cache(cache)
    needs_emb = any(len(r.traj.queries) >= 2 or ((r.gold_titles or r.gold_texts) and r.hits) for r in rows)
    if encoder is not False and needs_emb:
        _embedding_features(rows, resolve_encoder(encoder), store, recall_threshold)
    elif encoder is not False:
        for r in rows:  # nothing to embed: no hits means nothing matched
            if (r.gold_titles or r.gold_texts) and not r.hits:
                r.out["recall_embed"], r.out["recall"] = 0.0, 0.0
                r.out["recall_by"] = r.out["recall_by"] or "embedding"
    judge_cols = _judge_features(rows, judges, store) if judges else []
    if evidence_model is not None:
        _evidence_features(rows, evidence_model, store)
    for fn, cols in columns.extra_features():
        _registered_features(rows, [_example_of(r.traj, by_id) for r in rows], fn, cols)
    _blank_failed(rows)
    return _frame([r.out for r in rows], judge_cols)


def _registered_features(rows: list[_Row], examples: list[Example], fn: Any, cols: Sequence[str]) -> None:
    """A feature function registered with ``columns.register_feature``: its values, NaN where it gives none."""
    for r, ex in zip(rows, examples):
        got = dict(fn(r.traj, ex) or {})
        unknown = set(got) - set(cols)
        if unknown:
            name = getattr(fn, "__name__", repr(fn))
            raise ValueError(f"feature function {name} returned undeclared columns {sorted(unknown)}; declared: {list(cols)}")
        r.out.update({c: got.get(c, float("nan")) for c in cols})


def _frame(records: list[dict[str, Any]], extra: Sequence[str] = ()) -> pd.DataFrame:
    fixed = columns.feature_columns()
    cols = list(fixed) + [c for c in extra if c not in fixed]
    data: dict[str, Any] = {}
    for c in cols:
        vals = [rec.get(c) for rec in records]
        dtype = columns.column_dtype(c)
        if dtype == "int":
            data[c] = np.array([int(v or 0) for v in vals], dtype=np.int64)
        elif dtype in ("float", "count", "bool") or (c.startswith("judge_") and not c.endswith("_raw")):
            data[c] = np.array([np.nan if v is None else float(v) for v in vals], dtype=np.float64)
        else:
            data[c] = pd.Series(vals, dtype=object)
    return pd.DataFrame(data)


def featurize_run(run: Run | str | os.PathLike, **kwargs: Any) -> pd.DataFrame:
    """Compute the features of a run's trajectories against its examples and save them; returns the table."""
    from workbench.storage.runs import open_run

    run = open_run(run)
    df = compute_features(run.trajectories(), run.examples(), **kwargs)
    save_features(run, df)
    return df
