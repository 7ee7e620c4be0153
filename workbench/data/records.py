"""Dataset records in their published layouts → ``Example``: reading JSON / JSONL files, field
helpers, and one parser per layout (HotpotQA, 2WikiMultiHopQA, MuSiQue, FlashRAG). The loaders
(:mod:`workbench.data.loaders`) and corpora (:mod:`workbench.data.corpora`) build on these."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from workbench.core.types import Triple
from workbench.data.example import Example

PathLike = str | os.PathLike

#: Names :func:`load_dataset` accepts (aliases map onto these).
DATASETS = ("hotpotqa", "2wiki", "musique", "bamboogle", "flashrag")
_ALIASES = {
    "hotpotqa": "hotpotqa",
    "hotpot": "hotpotqa",
    "hotpot_qa": "hotpotqa",
    "2wiki": "2wiki",
    "2wikimultihopqa": "2wiki",
    "2wikimqa": "2wiki",
    "2wikimhqa": "2wiki",
    "musique": "musique",
    "musique_ans": "musique",
    "bamboogle": "bamboogle",
    "flashrag": "flashrag",
}
_SPLITS = {"train": "train", "dev": "dev", "validation": "dev", "val": "dev", "test": "test"}


# ----------------------------------------------------------------------------- reading


def _check_file(path: PathLike, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} file not found: {path}")
    if not path.is_file():
        raise ValueError(f"{what} path is not a file: {path}")
    return path


#: The longest line a JSON-lines dataset or corpus may have (a question or passage record is kilobytes): a longer one,
#: or a file of one line of zeros (a sparse file), is refused as it is read instead of being held whole in memory.
MAX_LINE_CHARS = 64 << 20


def bounded_lines(f: Any, where: PathLike, max_chars: int | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the open text file ``f``, each read with at most ``max_chars`` characters held
    (default :data:`MAX_LINE_CHARS`): a longer line is a ``ValueError`` naming ``where`` and the line."""
    max_chars = MAX_LINE_CHARS if max_chars is None else max_chars
    lineno = 0
    while True:
        line = f.readline(max_chars + 1)
        if not line:
            return
        lineno += 1
        if len(line) > max_chars:
            raise ValueError(f"{where}:{lineno}: a line longer than {max_chars:,} characters; a question or passage "
                             "record is a few KB, so this is not a JSON-lines record: check the file")
        yield lineno, line


def iter_records(path: PathLike, what: str = "dataset") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` from a JSON list or a JSON-lines file, in file order.

    ``where`` names the file and the line (JSONL) or record number (JSON list), for error
    messages. A file whose first line is not a JSON object is read as one JSON document; one that starts with
    neither ``[`` nor ``{`` is refused before it is read (a binary or sparse file is never held in memory), and a
    JSON-lines line longer than :data:`MAX_LINE_CHARS` is refused as it is reached.
    """
    path = _check_file(path, what)
    if path.suffix.lower() == ".parquet":
        yield from _iter_parquet(path)
        return
    try:
        with path.open(encoding="utf-8-sig") as f:
            head = ""
            while not head:
                ch = f.read(1)
                if not ch:
                    return  # empty file: no records
                head = ch.strip()
            if head not in "[{":
                raise ValueError(f"{path}: not valid JSON or JSON lines: it starts with {head!r}, where a JSON list "
                                 "of records starts with '[' and a JSON-lines file with '{'")
            f.seek(0)
            first_line = f.readline(MAX_LINE_CHARS + 1) if head == "{" else ""
            if head == "{" and len(first_line) <= MAX_LINE_CHARS and _is_json_object(first_line):
                f.seek(0)
                for lineno, line in bounded_lines(f, path):
                    if not line.strip():
                        continue
                    rec = parse_json(line, f"{path}:{lineno}")
                    if not isinstance(rec, dict):
                        raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
                    yield f"{path}:{lineno}", rec
                return
            del first_line
            f.seek(0)
            doc = parse_json(f.read(), path, "not valid JSON or JSON lines")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from e
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        doc = doc["data"]
    elif isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a JSON list of records or JSON lines, got {type(doc).__name__}")
    for i, rec in enumerate(doc, 1):
        if not isinstance(rec, dict):
            raise ValueError(f"{path} [record {i}]: expected a JSON object, got {type(rec).__name__}")
        yield f"{path} [record {i}]", rec


def _iter_parquet(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Rows of a Parquet file (e.g. a Hugging Face ``datasets`` export) as plain Python dicts."""
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a non-Parquet file
        raise ValueError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from e
    n = 0
    for batch in pf.iter_batches(batch_size=1024):
        for rec in batch.to_pylist():
            n += 1
            yield f"{path} [row {n}]", rec


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def parse_json(text: str, where: str | os.PathLike, invalid: str = "not valid JSON") -> Any:
    """``json.loads`` of a dataset or corpus file's text, every failure a ``ValueError`` naming ``where`` (the file
    and line): invalid JSON, and JSON nested deeper than Python's reader goes (a ``RecursionError`` otherwise)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deep to read; a question or passage record is a few levels deep, "
                         "so this is not one: check the file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {invalid} ({e})") from None


def _guess_split(path: PathLike) -> str:
    """``dev`` for ``hotpotqa_dev_distractor.json`` or ``hotpotqa/dev.jsonl``; ``unknown`` if no token says."""
    for tok in re.split(r"[^a-z]+", Path(path).name.lower()):
        if tok in _SPLITS:
            return _SPLITS[tok]
    return "unknown"


def _guess_dataset(path: PathLike) -> str | None:
    """A known dataset name from the file name or its folder (FlashRAG: ``<dataset>/<split>.jsonl``)."""
    p = Path(path)
    for part in (p.name.lower(), p.parent.name.lower()):
        for tok in sorted(_ALIASES, key=len, reverse=True):
            if part.startswith(tok) and _ALIASES[tok] != "flashrag":
                return _ALIASES[tok]
    return None


# ----------------------------------------------------------------------------- field helpers


def dedup_answers(*groups: Any) -> list[str]:
    """Gold answers from strings / lists, in order, without blanks or case/space duplicates.

    A dict (TriviaQA-style ``{"value", "aliases"}``) contributes its value, then its aliases.

    >>> dedup_answers("Paris", ["paris", " Paris ", "City of Light"], None, [])
    ['Paris', 'City of Light']
    >>> dedup_answers({"value": "Mars", "aliases": ["Red Planet"]})
    ['Mars', 'Red Planet']
    """
    out: list[str] = []
    seen: set[str] = set()
    for g in groups:
        if isinstance(g, dict):
            g = [g.get("value"), *(g.get("aliases") or [])]
        items = [g] if isinstance(g, (str, int, float)) else (g or [])
        for a in items:
            if a is None or isinstance(a, (dict, list)):
                continue
            a = str(a).strip()
            key = " ".join(a.casefold().split())
            if a and key not in seen:
                seen.add(key)
                out.append(a)
    return out


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _join_sentences(sentences: Any) -> str:
    """HotpotQA sentences carry their leading space (``" The film..."``); 2Wiki's do not."""
    if isinstance(sentences, str):
        return sentences.strip()
    parts: list[str] = []
    for s in sentences or []:
        s = str(s)
        parts.append(s if not parts or s[:1].isspace() else " " + s)
    return "".join(parts).strip()


def _flatten_flashrag(rec: dict[str, Any]) -> dict[str, Any]:
    """Lift a FlashRAG record's ``metadata`` fields to the top level (top-level keys win)."""
    md = rec.get("metadata")
    if not isinstance(md, dict):
        return rec
    return {**md, **{k: v for k, v in rec.items() if k != "metadata"}}


#: Field names that hold a record's id, in the order they are tried (``idx``: R1-Searcher / Search-o1;
#: ``question_id``: IRCoT; ``test_id``, ``qid``: other eval sets).
ID_FIELDS = ("id", "_id", "idx", "question_id", "qid", "test_id", "example_id")
#: Field names that hold the question text.
QUESTION_FIELDS = ("question", "question_text")
#: Field names that hold gold answers (a string or a list of aliases each).
ANSWER_FIELDS = ("answer", "answers", "golden_answers", "answer_aliases", "aliases", "possible_answers", "gold_answers")


def _record_number(where: str) -> str | None:
    """The line (JSONL) or record / row number (JSON list, Parquet) at the end of ``where``."""
    m = re.search(r"(?::|record |row )(\d+)\]?$", where)
    return m.group(1) if m else None


def _show(value: Any) -> str:
    """A field's value as the file has it, shortened, for an error message."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a value that nests back into itself cannot come from a file
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _id_question(rec: dict[str, Any], where: str) -> tuple[str, str]:
    """The record's id (the first of :data:`ID_FIELDS`, else its line / record number) and question.

    The id must be a string or a number (not NaN, which Python's JSON reader takes and a pandas export writes for a
    missing value: every such record would share the id ``"nan"``); the question a string that is not blank."""
    key = next((k for k in ID_FIELDS if rec.get(k) is not None and str(rec[k]) != ""), None)
    rid = rec[key] if key is not None else _record_number(where)
    if rid is None:
        raise ValueError(f"{where}: record has no id field ({', '.join(ID_FIELDS)}) (keys: {', '.join(sorted(rec))})")
    if key is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int, float))
                            or (isinstance(rid, float) and not math.isfinite(rid))):
        raise ValueError(f"{where}: {key} must be a string or a number, got {_show(rid)}; give the record its own id "
                         "(or drop the field to use the line number)")
    q = next((rec[k] for k in QUESTION_FIELDS if k in rec), None)
    if not isinstance(q, str):
        raise ValueError(f"{where}: record {str(rid)!r} has no string 'question' field")
    if not q.strip():
        raise ValueError(f"{where}: record {str(rid)!r} has an empty question; give it its question or remove the record")
    return str(rid), q


def _is_strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(a, str) for a in v)


def gold_answers(rec: dict[str, Any], fields: Iterable[str], where: str, rid: str) -> list[str]:
    """The gold answers in ``rec``'s answer ``fields`` (:func:`dedup_answers` of them, in order). Each field present
    must hold a string, a list of strings, or a TriviaQA-style ``{"value", "aliases"}`` object: a number, a nested
    list or another object is an error naming the record and the field, not an answer no metric could match (``5``
    read as ``"5"``, an object read as no answer at all)."""
    groups = []
    for k in fields:
        v = rec.get(k)
        if v is None:
            continue
        if not (isinstance(v, str) or _is_strings(v) or (isinstance(v, dict) and isinstance(v.get("value"), str)
                                                           and _is_strings(v.get("aliases") or []))):
            raise ValueError(f"{where}: record {rid!r}: {k} must be a string or a list of strings, got {_show(v)}")
        groups.append(v)
    return dedup_answers(*groups)


def _text(v: Any, what: str, where: str) -> str:
    """A text field: a string (a null or a number is an error naming ``what``, not the text "None")."""
    if not isinstance(v, str):
        raise ValueError(f"{where}: {what} must be a string, got {_show(v)}")
    return v


def _objects(v: Any, what: str, where: str) -> list[dict[str, Any]]:
    """A list of objects (null or missing: none); an entry that is not an object is an error naming it, not skipped
    (skipping would shift the positions other fields point at)."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"{where}: {what} must be a list of objects, got {_show(v)}")
    for i, x in enumerate(v):
        if not isinstance(x, dict):
            raise ValueError(f"{where}: {what}[{i}] must be an object, got {_show(x)}")
    return v


def _context_pairs(ctx: Any, where: str) -> list[tuple[str, str]]:
    """``[[title, [sentences]]]`` (original) or ``{"title": [...], "sentences": [[...]]}`` (HF) → (title, text)."""
    if not ctx:
        return []
    if isinstance(ctx, dict):  # HF datasets: columns; 2Wiki exports name the sentences "content"
        titles = ctx.get("title") or []
        sents = ctx.get("sentences") if ctx.get("sentences") is not None else ctx.get("content") or []
        if not isinstance(titles, list) or not isinstance(sents, list):
            raise ValueError(f"{where}: context must hold a list of titles and a list of sentence lists, got "
                             f"{_show(ctx)}")
        if len(titles) != len(sents):
            raise ValueError(f"{where}: context has {len(titles)} titles but {len(sents)} sentence lists")
        pairs = list(zip(titles, sents))
    elif isinstance(ctx, list):  # [[title, sentences]] or [{"title", "sentences" | "content" | "paragraph_text" | "text"}]
        pairs = [_context_entry(c) if isinstance(c, dict) else tuple(c) if isinstance(c, (list, tuple)) else (c,)
                 for c in ctx]
    else:
        raise ValueError(f"{where}: context must be a list of [title, sentences] pairs, got {_show(ctx)}")
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"{where}: a context entry is not [title, sentences]: {str(pair)[:80]}")
        title, body = pair
        if not isinstance(title, str) or not (isinstance(body, str) or _is_strings(body)):
            raise ValueError(f"{where}: a context entry must be [title, sentences] with a string title and a string or "
                             f"a list of strings, got {_show([title, body])}")
        out.append((title, _join_sentences(body)))
    return out


def _context_entry(c: dict[str, Any]) -> tuple[Any, Any]:
    body = next((c[k] for k in ("sentences", "content", "paragraph_text", "text") if c.get(k) is not None), "")
    return c.get("title", ""), body


def _fact_pairs(facts: Any, where: str) -> list[tuple[str, int]]:
    """``[[title, sent_idx]]`` (original) or ``{"title": [...], "sent_id": [...]}`` (HF)."""
    if not facts:
        return []
    if isinstance(facts, dict):
        titles, ids = facts.get("title") or [], facts.get("sent_id") or []
        if not isinstance(titles, list) or not isinstance(ids, list):
            raise ValueError(f"{where}: supporting_facts must hold a list of titles and a list of sent_ids, got "
                             f"{_show(facts)}")
        if len(titles) != len(ids):
            raise ValueError(f"{where}: supporting_facts has {len(titles)} titles but {len(ids)} sent_ids")
        pairs = list(zip(titles, ids))
    elif isinstance(facts, list):
        pairs = facts
    else:
        raise ValueError(f"{where}: supporting_facts must be a list of [title, sentence index] pairs, got {_show(facts)}")
    out = []
    for f in pairs:
        if (not isinstance(f, (list, tuple)) or len(f) != 2 or not isinstance(f[0], str) or isinstance(f[1], bool)
                or not isinstance(f[1], int)):
            raise ValueError(f"{where}: a supporting fact is not [title, sentence index]: {_show(f)}")
        out.append((f[0], f[1]))
    return out


def _contexts(pairs: list[tuple[str, str]], supporting_titles: list[str]) -> list[dict[str, Any]]:
    sup = set(supporting_titles)
    return [{"title": t, "text": x, "supporting": t in sup} for t, x in pairs]


# ----------------------------------------------------------------------------- record parsers
# Each takes a (FlashRAG-flattened) record and returns an Example; ``where`` names the input.


def hotpotqa_example(
    rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "hotpotqa"
) -> Example:
    """One HotpotQA record (original or Hugging Face layout). Hops are 2 by construction."""
    rec = _flatten_flashrag(rec)
    rid, question = _id_question(rec, where)
    facts = _fact_pairs(rec.get("supporting_facts"), where)
    titles = _unique(t for t, _ in facts)
    meta: dict[str, Any] = {
        "contexts": _contexts(_context_pairs(rec.get("context"), where), titles),
        "supporting_facts": [[t, i] for t, i in facts],
    }
    if rec.get("level") is not None:
        meta["level"] = rec["level"]
    return Example(
        id=rid,
        question=question,
        answers=gold_answers(rec, ("answer", "golden_answers"), where, rid),
        dataset=dataset,
        split=split,
        hops=2,
        qtype=rec.get("type"),
        supporting_titles=titles,
        meta=meta,
    )


def twowiki_example(rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "2wiki") -> Example:
    """One 2WikiMultiHopQA record; ``evidences`` become ``kg_path`` and hops = max(2, #evidences)."""
    rec = _flatten_flashrag(rec)
    rid, question = _id_question(rec, where)
    facts = _fact_pairs(rec.get("supporting_facts"), where)
    titles = _unique(t for t, _ in facts)
    kg_path = [_path_step(t) for t in _evidence_triples(rec, where)]
    meta: dict[str, Any] = {
        "contexts": _contexts(_context_pairs(rec.get("context"), where), titles),
        "supporting_facts": [[t, i] for t, i in facts],
    }
    for k in ("entity_ids", "answer_id"):
        if rec.get(k) is not None:
            meta[k] = rec[k]
    answers = gold_answers(rec, ("answer", "answer_aliases", "aliases", "golden_answers"), where, rid)
    return Example(
        id=rid,
        question=question,
        answers=answers,
        dataset=dataset,
        split=split,
        hops=max(2, len(kg_path)),
        qtype=rec.get("type"),
        kg_path=kg_path,
        supporting_titles=titles,
        meta=meta,
    )


def _evidence_triples(rec: dict[str, Any], where: str) -> list[Triple]:
    ev = rec.get("evidences") or []
    if isinstance(ev, dict):  # HF export: {"fact": [...], "relation": [...], "entity": [...]} columns
        cols = [ev.get(k) or [] for k in ("fact", "relation", "entity")]
        if not len(cols[0]) == len(cols[1]) == len(cols[2]):
            raise ValueError(f"{where}: evidences columns fact/relation/entity differ in length")
        ev = [list(t) for t in zip(*cols)]
    ev_ids = rec.get("evidences_id") or []
    if len(ev_ids) != len(ev):
        ev_ids = [None] * len(ev)
    out = []
    for e, eid in zip(ev, ev_ids):
        if not isinstance(e, (list, tuple)) or len(e) != 3:
            raise ValueError(f"{where}: an evidence is not [head, relation, tail]: {str(e)[:80]}")
        ids = [str(x) for x in eid] if isinstance(eid, (list, tuple)) and len(eid) == 3 else ["", "", ""]
        out.append(Triple(str(e[0]), str(e[1]), str(e[2]), head_id=ids[0], relation_id=ids[1], tail_id=ids[2]))
    return out


def _path_step(t: Triple) -> dict[str, str]:
    """``{"head", "relation", "tail"}`` plus ``*_id`` keys where the dataset gives ids."""
    step = {"head": t.head, "relation": t.relation, "tail": t.tail}
    step.update(
        {k: v for k, v in (("head_id", t.head_id), ("relation_id", t.relation_id), ("tail_id", t.tail_id)) if v}
    )
    return step


_HOP_ID_RE = re.compile(r"^(\d+)hop(\d*)__")


def musique_example(
    rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "musique"
) -> Example:
    """One MuSiQue record; hops = #sub-questions (the id prefix ``3hop1__`` is kept as ``meta["id_hops"]``)."""
    rec = _flatten_flashrag(rec)
    rid, question = _id_question(rec, where)
    decomp = _objects(rec.get("question_decomposition"), "question_decomposition", where)
    paras = _objects(rec.get("paragraphs"), "paragraphs", where)
    m = _HOP_ID_RE.match(rid)
    id_hops = int(m.group(1)) if m else None
    pos = {p.get("idx", i): i for i, p in enumerate(paras)}  # paragraph idx -> position
    hop_idx = [d.get("paragraph_support_idx") for d in decomp]
    # supporting paragraphs in hop order, then any other flagged ones
    sup_pos = list(
        dict.fromkeys(
            [pos[i] for i in hop_idx if i in pos] + [i for i, p in enumerate(paras) if p.get("is_supporting")]
        )
    )
    contexts = [
        {"title": _text(p.get("title", ""), f"paragraphs[{i}].title", where),
         "text": _text(p.get("paragraph_text", ""), f"paragraphs[{i}].paragraph_text", where).strip(),
         "supporting": i in sup_pos}
        for i, p in enumerate(paras)
    ]
    titles = _unique(contexts[i]["title"] for i in sup_pos)
    meta: dict[str, Any] = {
        "contexts": contexts,
        "decomposition_answers": [str(d.get("answer", "")) for d in decomp],
        "decomposition_support_idx": hop_idx,
        "decomposition_support_pos": [pos.get(i) for i in hop_idx],  # each hop's paragraph in ``contexts``
        "id_hops": id_hops,
    }
    if "answerable" in rec:
        meta["answerable"] = bool(rec["answerable"])
    return Example(
        id=rid,
        question=question,
        answers=gold_answers(rec, ("answer", "answer_aliases", "golden_answers"), where, rid),
        dataset=dataset,
        split=split,
        hops=len(decomp) or id_hops,
        qtype=(m.group(0).rstrip("_") if m else None),
        decomposition=[str(d.get("question", "")) for d in decomp],
        supporting_titles=titles,
        meta=meta,
    )


def flashrag_example(
    rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "flashrag"
) -> Example:
    """One plain FlashRAG record (``id, question, golden_answers[, metadata]``)."""
    rid, question = _id_question(rec, where)
    meta: dict[str, Any] = {}
    if rec.get("metadata"):
        meta["metadata"] = rec["metadata"]
    ex = Example(
        id=rid,
        question=question,
        answers=gold_answers(rec, ("golden_answers", "answer"), where, rid),
        dataset=dataset,
        split=split,
        meta=meta,
    )
    if dataset == "bamboogle":  # Press et al. 2023: every Bamboogle question is a 2-hop compositional one
        ex.hops, ex.qtype = 2, "compositional"
    return ex


def ircot_example(rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "ircot") -> Example:
    """One record of IRCoT's processed data (``question_id, question_text, answers_objects, contexts``),
    the format IRCoT, Adaptive-RAG and many RAG papers share. Answers are each answer object's
    ``spans``, its ``number`` and its ``date`` (``day month year``); hops are the MuSiQue id prefix
    (``2hop__``) when there is one, else the number of supporting contexts."""
    rid, question = _id_question(rec, where)
    answers: list[Any] = []
    for i, obj in enumerate(_objects(rec.get("answers_objects"), "answers_objects", where)):
        spans = obj.get("spans") or []
        if not _is_strings(spans):
            raise ValueError(f"{where}: record {rid!r}: answers_objects[{i}].spans must be a list of strings, got "
                             f"{_show(spans)}")
        answers += spans
        if str(obj.get("number") or "").strip():
            answers.append(str(obj["number"]))
        date = obj.get("date") or {}
        if isinstance(date, dict):
            answers.append(" ".join(str(date.get(k) or "").strip() for k in ("day", "month", "year")).strip())
    contexts = [
        {"title": _text(c.get("title", ""), f"contexts[{i}].title", where),
         "text": _text(c.get("paragraph_text", c.get("text", "")), f"contexts[{i}].paragraph_text", where).strip(),
         "supporting": bool(c.get("is_supporting"))}
        for i, c in enumerate(_objects(rec.get("contexts"), "contexts", where))
    ]
    titles = _unique(c["title"] for c in contexts if c["supporting"])
    m = _HOP_ID_RE.match(rid)
    meta: dict[str, Any] = {"contexts": contexts}
    if rec.get("level") is not None:
        meta["level"] = rec["level"]
    return Example(
        id=rid,
        question=question,
        answers=dedup_answers(answers, gold_answers(rec, ("answer", "answers"), where, rid)),
        dataset=dataset,
        split=split,
        hops=int(m.group(1)) if m else (sum(c["supporting"] for c in contexts) or None),
        qtype=rec.get("type") or (m.group(0).rstrip("_") if m else None),
        supporting_titles=titles,
        meta=meta,
    )


def qa_example(rec: dict[str, Any], split: str = "dev", where: str = "record", dataset: str = "qa") -> Example:
    """A plain question-answer record: R1-Searcher / Search-o1 eval sets (``idx, question, answer``,
    optional ``gen_text_store``) and others. The id is the first of :data:`ID_FIELDS` (else the line
    number); answers come from every field of :data:`ANSWER_FIELDS` (a string or a list of aliases)."""
    rid, question = _id_question(rec, where)
    ex = Example(
        id=rid,
        question=question,
        answers=gold_answers(rec, ANSWER_FIELDS, where, rid),
        dataset=dataset,
        split=split,
    )
    if rec.get("type") is not None:
        ex.qtype = str(rec["type"])
    if dataset == "bamboogle":
        ex.hops, ex.qtype = 2, "compositional"
    return ex


_PARSERS: dict[str, Callable[..., Example]] = {
    "hotpotqa": hotpotqa_example,
    "2wiki": twowiki_example,
    "musique": musique_example,
    "ircot": ircot_example,
    "bamboogle": flashrag_example,
    "flashrag": flashrag_example,
    "qa": qa_example,
}

#: Question-file layouts ``--format`` accepts, in the order auto-detection tries them: what each needs
#: (every group, one field of each) and what it is.
LAYOUTS: dict[str, tuple[tuple[tuple[str, ...], ...], str]] = {
    "ircot": ((("question_text",), ("answers_objects", "contexts")),
              "IRCoT processed data: question_id, question_text, answers_objects, contexts"),
    "musique": ((QUESTION_FIELDS, ("paragraphs", "question_decomposition")),
                "MuSiQue: id, question, answer, paragraphs, question_decomposition"),
    "2wiki": ((QUESTION_FIELDS, ("evidences",)),
              "2WikiMultiHopQA: _id, question, answer, context, supporting_facts, evidences"),
    "hotpotqa": ((QUESTION_FIELDS, ("context",), ("supporting_facts",)),
                 "HotpotQA (original or Hugging Face datasets): question, answer, context, supporting_facts"),
    "flashrag": ((QUESTION_FIELDS, ("golden_answers",)), "FlashRAG dataset: id, question, golden_answers"),
    "qa": ((QUESTION_FIELDS, ANSWER_FIELDS),
           "plain QA (R1-Searcher, Search-o1, ...): an id (idx, qid, test_id, ... or the line number), "
           "question, answer (a string or a list of aliases)"),
}
_2WIKI_TYPES = ("compositional", "inference", "bridge_comparison")


def _lacks(rec: dict[str, Any], layout: str) -> list[str]:
    """The field groups of ``layout`` that ``rec`` has none of, as ``a`` or ``a|b``."""
    return ["|".join(group) for group in LAYOUTS[layout][0] if not any(k in rec for k in group)]


def is_corpus_record(rec: dict[str, Any]) -> bool:
    """A passage, not a question: FlashRAG ``contents``, or ``title`` + ``text`` without a question."""
    if any(k in rec for k in QUESTION_FIELDS):
        return False
    return "contents" in rec or ("text" in rec and "title" in rec)


def detect_layout(rec: dict[str, Any]) -> str:
    """Which parser a record needs: one of :data:`LAYOUTS`, or ``corpus`` for a passage record.

    Raises ``ValueError`` listing every layout tried and the fields each lacked.

    >>> detect_layout({"id": "1", "question": "q", "golden_answers": ["a"]})
    'flashrag'
    >>> detect_layout({"_id": "x", "question": "q", "context": [], "supporting_facts": [], "evidences": []})
    '2wiki'
    >>> detect_layout({"idx": 3, "question": "q", "answer": "a", "gen_text_store": "..."})
    'qa'
    """
    flat = _flatten_flashrag(rec)
    if is_corpus_record(flat):
        return "corpus"
    if not _lacks(flat, "hotpotqa") and flat.get("type") in _2WIKI_TYPES:
        return "2wiki"
    for name in LAYOUTS:
        if not _lacks(flat, name):
            return name
    raise ValueError(explain_layouts(flat))


def explain_layouts(rec: dict[str, Any]) -> str:
    """Why no layout fits ``rec``: each layout tried and the fields it lacked."""
    tried = "; ".join(f"{name} lacks {', '.join(_lacks(rec, name))}" for name in LAYOUTS)
    return (f"no known question layout fits this record (keys: {', '.join(sorted(rec)) or 'none'}); tried: {tried}. "
            f"Force one with --format ({', '.join(LAYOUTS)}); a passage corpus goes to --corpus")
