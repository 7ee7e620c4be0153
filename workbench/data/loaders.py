"""Real-data loaders: benchmark files in their published layouts → ``Example`` / ``Passage``.

Datasets (each loader also reads the FlashRAG packaging of the same dataset, where the
native fields sit under ``metadata``):

- FlashRAG dataset JSONL (``id, question, golden_answers, metadata``): :func:`load_flashrag_dataset`
- HotpotQA, original JSON list *and* the Hugging Face layout, JSON list or JSONL: :func:`load_hotpotqa`
- 2WikiMultiHopQA (``evidences`` become ``kg_path``): :func:`load_2wiki`, :func:`load_2wiki_kg`
- MuSiQue (``question_decomposition`` becomes ``decomposition``): :func:`load_musique`
- Bamboogle (FlashRAG packaging): :func:`load_bamboogle`
- any of them by name or by sniffing the file: :func:`load_dataset`

Corpora: :func:`load_flashrag_corpus` reads FlashRAG corpus JSONL (``contents`` = ``"Title"\\ntext``);
:func:`corpus_from_contexts` builds a passage corpus from the datasets' own context paragraphs
(kept by the loaders in ``Example.meta["contexts"]``) and points each example's
``supporting_ids`` at it, so retrieval recall can be computed.

``Example.meta`` keys set here: ``source_file`` (always); ``contexts`` (list of
``{"title", "text", "supporting"}``; HotpotQA, 2Wiki, MuSiQue); ``supporting_facts``
(``[[title, sent_idx], ...]``; HotpotQA, 2Wiki); ``level`` (HotpotQA); ``entity_ids``,
``answer_id`` (2Wiki, when present); ``answerable``, ``decomposition_answers``,
``decomposition_support_idx``, ``id_hops`` (MuSiQue); ``metadata`` (FlashRAG records whose
metadata is not a known layout).

>>> parse_flashrag_contents('"Ed Wood"\\nEdward Davis Wood Jr. was a filmmaker.')
('Ed Wood', 'Edward Davis Wood Jr. was a filmmaker.')
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from workbench.data.example import Example
from workbench.io import stable_hash
from workbench.tools.base import Passage, Triple

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


def iter_records(path: PathLike, what: str = "dataset") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` from a JSON list or a JSON-lines file, in file order.

    ``where`` names the file and the line (JSONL) or record number (JSON list), for error
    messages. A file whose first line is not a JSON object is read as one JSON document.
    """
    path = _check_file(path, what)
    try:
        with path.open(encoding="utf-8-sig") as f:
            head = ""
            while not head:
                ch = f.read(1)
                if not ch:
                    return  # empty file: no records
                head = ch.strip()
            f.seek(0)
            first_line = f.readline()
            if head == "{" and _is_json_object(first_line):
                f.seek(0)
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e
                    if not isinstance(rec, dict):
                        raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
                    yield f"{path}:{lineno}", rec
                return
            f.seek(0)
            try:
                doc = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON or JSON lines ({e})") from e
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


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


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

    >>> dedup_answers("Paris", ["paris", " Paris ", "City of Light"], None, [])
    ['Paris', 'City of Light']
    """
    out: list[str] = []
    seen: set[str] = set()
    for g in groups:
        items = [g] if isinstance(g, (str, int, float)) else (g or [])
        for a in items:
            if a is None:
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


def _id_question(rec: dict[str, Any], where: str) -> tuple[str, str]:
    rid = rec.get("id", rec.get("_id"))
    if rid is None or str(rid) == "":
        raise ValueError(f"{where}: record has no 'id' or '_id' field (keys: {', '.join(sorted(rec))})")
    q = rec.get("question")
    if not isinstance(q, str):
        raise ValueError(f"{where}: record {rid!r} has no string 'question' field")
    return str(rid), q


def _context_pairs(ctx: Any, where: str) -> list[tuple[str, str]]:
    """``[[title, [sentences]]]`` (original) or ``{"title": [...], "sentences": [[...]]}`` (HF) → (title, text)."""
    if not ctx:
        return []
    if isinstance(ctx, dict):
        titles, sents = ctx.get("title") or [], ctx.get("sentences") or []
        if len(titles) != len(sents):
            raise ValueError(f"{where}: context has {len(titles)} titles but {len(sents)} sentence lists")
        pairs = list(zip(titles, sents))
    else:
        pairs = [tuple(c) for c in ctx]
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"{where}: a context entry is not [title, sentences]: {str(pair)[:80]}")
        out.append((str(pair[0]), _join_sentences(pair[1])))
    return out


def _fact_pairs(facts: Any, where: str) -> list[tuple[str, int]]:
    """``[[title, sent_idx]]`` (original) or ``{"title": [...], "sent_id": [...]}`` (HF)."""
    if not facts:
        return []
    if isinstance(facts, dict):
        titles, ids = facts.get("title") or [], facts.get("sent_id") or []
        if len(titles) != len(ids):
            raise ValueError(f"{where}: supporting_facts has {len(titles)} titles but {len(ids)} sent_ids")
        return [(str(t), int(i)) for t, i in zip(titles, ids)]
    out = []
    for f in facts:
        if not isinstance(f, (list, tuple)) or len(f) != 2:
            raise ValueError(f"{where}: a supporting fact is not [title, sent_idx]: {str(f)[:80]}")
        out.append((str(f[0]), int(f[1])))
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
        answers=dedup_answers(rec.get("answer"), rec.get("golden_answers")),
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
    answers = dedup_answers(rec.get("answer"), rec.get("answer_aliases"), rec.get("aliases"), rec.get("golden_answers"))
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
    decomp = [d for d in rec.get("question_decomposition") or [] if isinstance(d, dict)]
    paras = [p for p in rec.get("paragraphs") or [] if isinstance(p, dict)]
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
        {"title": str(p.get("title", "")), "text": str(p.get("paragraph_text", "")).strip(), "supporting": i in sup_pos}
        for i, p in enumerate(paras)
    ]
    titles = _unique(contexts[i]["title"] for i in sup_pos)
    meta: dict[str, Any] = {
        "contexts": contexts,
        "decomposition_answers": [str(d.get("answer", "")) for d in decomp],
        "decomposition_support_idx": hop_idx,
        "id_hops": id_hops,
    }
    if "answerable" in rec:
        meta["answerable"] = bool(rec["answerable"])
    return Example(
        id=rid,
        question=question,
        answers=dedup_answers(rec.get("answer"), rec.get("answer_aliases"), rec.get("golden_answers")),
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
        answers=dedup_answers(rec.get("golden_answers"), rec.get("answer")),
        dataset=dataset,
        split=split,
        meta=meta,
    )
    if dataset == "bamboogle":  # Press et al. 2023: every Bamboogle question is a 2-hop compositional one
        ex.hops, ex.qtype = 2, "compositional"
    return ex


_PARSERS: dict[str, Callable[..., Example]] = {
    "hotpotqa": hotpotqa_example,
    "2wiki": twowiki_example,
    "musique": musique_example,
    "bamboogle": flashrag_example,
    "flashrag": flashrag_example,
}


def detect_layout(rec: dict[str, Any]) -> str:
    """Which parser a record needs: ``hotpotqa``, ``2wiki``, ``musique``, ``flashrag`` (or ``corpus``).

    >>> detect_layout({"id": "1", "question": "q", "golden_answers": ["a"]})
    'flashrag'
    >>> detect_layout({"_id": "x", "question": "q", "context": [], "supporting_facts": [], "evidences": []})
    '2wiki'
    """
    flat = _flatten_flashrag(rec)
    if "contents" in flat and "question" not in flat:
        return "corpus"
    if "paragraphs" in flat or "question_decomposition" in flat:
        return "musique"
    if "evidences" in flat or flat.get("type") in ("compositional", "inference", "bridge_comparison"):
        return "2wiki"
    if "context" in flat and "supporting_facts" in flat:
        return "hotpotqa"
    return "flashrag"


# ----------------------------------------------------------------------------- dataset loaders


def _load(
    path: PathLike, parser: str | None, dataset: str | None, split: str | None, limit: int | None
) -> list[Example]:
    """Read records and parse them; ``parser=None`` sniffs the first record's layout."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    split = split or _guess_split(path)
    out: list[Example] = []
    mismatched = 0
    for where, rec in iter_records(path):
        if limit is not None and len(out) >= limit:
            break
        kind = parser or detect_layout(rec)
        if kind == "corpus":
            raise ValueError(f"{where}: this is a corpus file (records have 'contents'); use load_flashrag_corpus")
        name = dataset or (kind if kind != "flashrag" else _guess_dataset(path) or "flashrag")
        ex = _PARSERS[kind](rec, split=split, where=where, dataset=name)
        ex.meta["source_file"] = str(path)
        if kind == "musique" and ex.meta.get("id_hops") and ex.hops != ex.meta["id_hops"]:
            mismatched += 1
        out.append(ex)
    if mismatched:
        warnings.warn(
            f"{path}: {mismatched} MuSiQue record(s) whose id prefix disagrees with the number of "
            "sub-questions; hops uses the sub-question count",
            stacklevel=3,
        )
    return out


def load_hotpotqa(path: PathLike, split: str | None = None, limit: int | None = None) -> list[Example]:
    """HotpotQA: original JSON list, Hugging Face layout (JSON list or JSONL), or FlashRAG packaging.

    ``split`` defaults to the token in the file name (``train``/``dev``/``test``), else ``unknown``.
    """
    return _load(path, "hotpotqa", "hotpotqa", split, limit)


def load_2wiki(path: PathLike, split: str | None = None, limit: int | None = None) -> list[Example]:
    """2WikiMultiHopQA (original fields or FlashRAG packaging)."""
    return _load(path, "2wiki", "2wiki", split, limit)


def load_musique(path: PathLike, split: str | None = None, limit: int | None = None) -> list[Example]:
    """MuSiQue (``musique_ans_dev.jsonl`` / ``musique_full_*`` or FlashRAG packaging)."""
    return _load(path, "musique", "musique", split, limit)


def load_bamboogle(path: PathLike, split: str | None = None, limit: int | None = None) -> list[Example]:
    """Bamboogle in FlashRAG packaging (``id, question, golden_answers``); hops = 2."""
    return _load(path, "bamboogle", "bamboogle", split, limit)


def load_flashrag_dataset(
    path: PathLike, split: str | None = None, limit: int | None = None, dataset: str | None = None
) -> list[Example]:
    """Any FlashRAG dataset JSONL. Records whose ``metadata`` holds a known layout (HotpotQA, 2Wiki,
    MuSiQue) get that dataset's annotations; ``dataset`` defaults to a known name in the file or
    folder name (FlashRAG keeps ``<dataset>/<split>.jsonl``), else ``flashrag``."""
    return _load(path, None, dataset, split, limit)


def load_2wiki_kg(path: PathLike, limit: int | None = None) -> list[Triple]:
    """The evidence triples of every 2Wiki example in ``path`` (first ``limit`` examples), deduplicated, in file order."""
    seen: set[tuple[str, str, str]] = set()
    out: list[Triple] = []
    for n, (where, rec) in enumerate(iter_records(path)):
        if limit is not None and n >= limit:
            break
        for t in _evidence_triples(_flatten_flashrag(rec), where):
            key = (t.head, t.relation, t.tail)
            if key not in seen:
                seen.add(key)
                out.append(t)
    return out


_LOADERS: dict[str, Callable[..., list[Example]]] = {
    "hotpotqa": load_hotpotqa,
    "2wiki": load_2wiki,
    "musique": load_musique,
    "bamboogle": load_bamboogle,
    "flashrag": load_flashrag_dataset,
}


def data_dirs(data_dir: PathLike | None = None) -> list[Path]:
    """Where :func:`load_dataset` looks for a dataset given by name, in order: ``data_dir``,
    ``$WORKBENCH_DATA``, ``<cache>/datasets``, then the shared real-format samples (``fixtures``)."""
    from workbench.paths import cache_dir, shared_dir

    dirs = [Path(d) for d in (data_dir, os.environ.get("WORKBENCH_DATA")) if d]
    dirs.append(cache_dir() / "datasets")
    shared = shared_dir()
    if shared is not None:
        dirs.append(shared / "fixtures")
    return dirs


def find_dataset_file(name: str, split: str | None = None, data_dir: PathLike | None = None) -> Path:
    """The first file for dataset ``name`` (and ``split``) under :func:`data_dirs`.

    Matches FlashRAG's ``<dir>/<name>/<split>.jsonl`` and files named ``<name>*<split>*.json[l]``
    (any alias, e.g. ``2wikimultihopqa_dev.jsonl``). Raises ``FileNotFoundError`` listing the folders.
    """
    canon = _ALIASES.get(name.lower(), name.lower())
    aliases = sorted(a for a, c in _ALIASES.items() if c == canon)
    want = _SPLITS.get(split.lower(), split.lower()) if split else None
    dirs = data_dirs(data_dir)
    for d in dirs:
        if not d.is_dir():
            continue
        cands = []
        for a in aliases:
            cands += list((d / a).glob("*.json*")) if (d / a).is_dir() else []
            cands += list(d.glob(f"{a}*.json*"))
        cands = sorted({c for c in cands if c.suffix in (".json", ".jsonl") and _guess_dataset(c) == canon})
        if want:
            cands = [c for c in cands if _guess_split(c) == want]
        if cands:
            return cands[0]
    raise FileNotFoundError(
        f"no {name!r} file{f' for split {split!r}' if split else ''} in {', '.join(str(d) for d in dirs)}; "
        f"pass path=... or put it at <dir>/{canon}/<split>.jsonl"
    )


def load_dataset(
    name_or_path: PathLike,
    split: str | None = None,
    limit: int | None = None,
    *,
    path: PathLike | None = None,
    data_dir: PathLike | None = None,
) -> list[Example]:
    """Load a dataset by name (``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``, ``flashrag``) or by file.

    - ``load_dataset("musique", path="musique_ans_dev.jsonl")``: that dataset's loader on that file.
    - ``load_dataset("hotpotqa", split="dev")``: the file found by :func:`find_dataset_file`.
    - ``load_dataset("some/file.jsonl")``: the layout is sniffed from the first record.
    """
    key = str(name_or_path).lower()
    if path is not None:
        if key not in _ALIASES:
            raise ValueError(f"unknown dataset {str(name_or_path)!r}; valid names: {', '.join(DATASETS)}")
        return _LOADERS[_ALIASES[key]](path, split=split, limit=limit)
    if key in _ALIASES:
        canon = _ALIASES[key]
        if canon == "flashrag":
            raise ValueError("'flashrag' is a file format, not a dataset: pass path=... (or the file path itself)")
        found = find_dataset_file(canon, split, data_dir)
        if found.parent.name == "fixtures":
            warnings.warn(f"load_dataset({canon!r}): no full copy found; using the small sample {found}", stacklevel=2)
        return _LOADERS[canon](found, split=split, limit=limit)
    p = Path(name_or_path)
    if p.is_file():
        return _load(p, None, None, split, limit)
    if p.suffix in (".json", ".jsonl") or os.sep in str(name_or_path) or "/" in str(name_or_path):
        raise FileNotFoundError(f"dataset file not found: {p}")
    raise ValueError(
        f"unknown dataset {str(name_or_path)!r}; valid names: {', '.join(DATASETS)} (or a path to a .json/.jsonl file)"
    )


# ----------------------------------------------------------------------------- corpora


def parse_flashrag_contents(contents: str) -> tuple[str, str]:
    """Split FlashRAG ``contents`` into (title, text): first line is the title, in quotes or not.

    >>> parse_flashrag_contents('Absalon\\nunited. It was...')
    ('Absalon', 'united. It was...')
    >>> parse_flashrag_contents('"The ""Best"" Band"\\nA band.')
    ('The "Best" Band', 'A band.')
    """
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1].replace('""', '"')  # CSV-style quoting of the DPR wiki dump
    return title, text.strip()


def iter_flashrag_corpus(
    path: PathLike, skip_bad: bool = False, source: str = "wiki", skipped: list[str] | None = None
) -> Iterator[Passage]:
    """Stream ``Passage`` objects from a FlashRAG corpus JSONL (``id``, ``contents``).

    A line without ``contents`` (or ``id``), or not a JSON object, raises ``ValueError`` naming
    the file and line; with ``skip_bad=True`` it is skipped and its ``path:line: reason`` appended
    to ``skipped``.
    """
    path = _check_file(path, "corpus")
    with path.open(encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
                if not isinstance(rec.get("contents"), str):
                    raise ValueError(f"no 'contents' field (keys: {', '.join(sorted(rec)) or 'none'})")
                if rec.get("id") is None:
                    raise ValueError("no 'id' field")
            except ValueError as e:  # JSONDecodeError is a ValueError
                msg = f"{path}:{lineno}: bad corpus line: {e}"
                if not skip_bad:
                    raise ValueError(msg + " (pass skip_bad=True to skip such lines)") from e
                if skipped is not None:
                    skipped.append(msg)
                continue
            title, text = parse_flashrag_contents(rec["contents"])
            yield Passage(id=str(rec["id"]), title=title, text=text, source=str(rec.get("source") or source))


def load_flashrag_corpus(
    path: PathLike, limit: int | None = None, skip_bad: bool = False, source: str = "wiki"
) -> list[Passage]:
    """Read a FlashRAG corpus JSONL into passages (first ``limit``); ``skip_bad=True`` skips bad
    lines and warns once with their count and the first one."""
    skipped: list[str] = []
    out: list[Passage] = []
    for p in iter_flashrag_corpus(path, skip_bad=skip_bad, source=source, skipped=skipped):
        if limit is not None and len(out) >= limit:
            break
        out.append(p)
    if skipped:
        warnings.warn(f"{path}: skipped {len(skipped)} bad corpus line(s); first: {skipped[0]}", stacklevel=2)
    return out


def context_passage_id(title: str, text: str) -> str:
    """Stable, content-derived id of a context paragraph (same (title, text) → same id, in any corpus)."""
    return "ctx-" + stable_hash([title, text], 16)


def corpus_from_contexts(
    examples: Iterable[Example | dict[str, Any]], *, fill_supporting: bool = True, source: str = "wiki"
) -> list[Passage]:
    """Build a passage corpus from the examples' own context paragraphs.

    ``examples``: ``Example`` objects (their ``meta["contexts"]``) or raw dataset records (any
    layout the loaders read). Passages are deduplicated by (title, text), in first-seen order,
    with ids from :func:`context_passage_id`. With ``fill_supporting``, each ``Example``'s
    ``supporting_ids`` is set **in place** to the ids of its supporting paragraphs (ordered as
    its ``supporting_titles``), so it points into the returned corpus. Examples without
    contexts (e.g. Bamboogle) are left as they are.
    """
    corpus: dict[str, Passage] = {}
    for n, item in enumerate(examples):
        if isinstance(item, Example):
            ex: Example | None = item
            contexts = item.meta.get("contexts") or []
        elif isinstance(item, dict):
            ex = None
            kind = detect_layout(item)
            contexts = (
                _PARSERS[kind](item, where=f"record {n + 1}").meta.get("contexts", []) if kind != "corpus" else []
            )
        else:
            raise TypeError(
                f"corpus_from_contexts: item {n} is a {type(item).__name__}, not an Example or a record dict"
            )
        sup: list[tuple[str, str]] = []
        for c in contexts:
            title, text = str(c.get("title", "")), str(c.get("text", ""))
            pid = context_passage_id(title, text)
            if pid not in corpus:
                corpus[pid] = Passage(id=pid, title=title, text=text, source=source)
            if c.get("supporting"):
                sup.append((title, pid))
        if ex is not None and fill_supporting and contexts:
            rank = {t: i for i, t in enumerate(ex.supporting_titles)}
            ordered = sorted(sup, key=lambda tp: rank.get(tp[0], len(rank)))  # stable within a title
            ex.supporting_ids = _unique(pid for _, pid in ordered)
    return list(corpus.values())
