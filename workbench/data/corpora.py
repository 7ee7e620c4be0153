"""Passage corpora: FlashRAG corpus JSONL, and a corpus built from the datasets' own context paragraphs."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.data.records import (
    _PARSERS,
    QUESTION_FIELDS,
    PathLike,
    _check_file,
    _join_sentences,
    _unique,
    bounded_lines,
    detect_layout,
    iter_records,
)
from workbench.util.io import stable_hash

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


def loads_line(line: str) -> Any:
    """One JSON line of a corpus; JSON nested past what Python's reader goes is a ``ValueError`` like bad JSON."""
    try:
        return json.loads(line)
    except RecursionError:
        raise ValueError("JSON nested too deep to read; a corpus record is an object of strings") from None


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
        for lineno, line in bounded_lines(f, path):
            if not line.strip():
                continue
            try:
                rec = loads_line(line)
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


#: Corpus layouts :func:`load_corpus` reads.
CORPUS_LAYOUTS = {
    "flashrag": "FlashRAG JSONL: {id, contents} with contents = '\"Title\"\\ntext'",
    "title_text": "records with title and text (HippoRAG *_corpus.json: a JSON array of {title, text}; "
                  "or JSONL, optionally with an id)",
    "title_sentences": "one JSON object mapping each title to its sentences (a list) or its text",
}


def load_corpus(path: PathLike, limit: int | None = None, source: str = "wiki") -> list[Passage]:
    """A passage corpus in any of :data:`CORPUS_LAYOUTS`, detected from the file.

    Passages without an ``id`` get :func:`context_passage_id` of their title and text, the ids
    :func:`corpus_from_contexts` gives the same paragraphs (so a HippoRAG corpus built from a
    dataset's contexts and the dataset's own ``supporting_ids`` agree). A question file raises a
    ``ValueError`` that says to pass it with ``--dataset``.
    """
    path = _check_file(path, "corpus")
    try:
        first = next(iter_records(path, "corpus"), None)
    except ValueError as e:
        raise ValueError(f"{e}; a corpus must be {_corpus_layouts()}") from None
    if first is None:
        return []
    where, rec = first
    if "contents" in rec and not _is_question(rec):
        return load_flashrag_corpus(path, limit=limit, source=source)
    if _is_question(rec):
        raise ValueError(f"{where}: this is a question file (records have a question): pass it with --dataset, "
                         "and a passage corpus with --corpus")
    if "title" in rec and "text" in rec:
        out = []
        for where, rec in iter_records(path, "corpus"):
            if limit is not None and len(out) >= limit:
                break
            if not isinstance(rec.get("text"), str):
                raise ValueError(f"{where}: corpus record has no string 'text' (keys: {', '.join(sorted(rec))})")
            title, text = str(rec.get("title") or ""), rec["text"].strip()
            pid = rec.get("id", rec.get("_id"))
            out.append(Passage(id=str(pid) if pid is not None else context_passage_id(title, text), title=title,
                               text=text, source=str(rec.get("source") or source)))
        return out
    if all(isinstance(v, (str, list)) for v in rec.values()) and len(list(iter_records(path, "corpus"))) == 1:
        out = []
        for title, body in rec.items():
            if limit is not None and len(out) >= limit:
                break
            text = _join_sentences(body)
            out.append(Passage(id=context_passage_id(str(title), text), title=str(title), text=text, source=source))
        return out
    raise ValueError(f"{where}: not a known corpus layout (keys: {', '.join(sorted(rec))[:200]}); "
                     f"a corpus must be {_corpus_layouts()}")


def _is_question(rec: dict[str, Any]) -> bool:
    return any(k in rec for k in QUESTION_FIELDS)


def _corpus_layouts() -> str:
    return "; or ".join(CORPUS_LAYOUTS.values())


def context_passage_id(title: str, text: str) -> str:
    """Stable, content-derived id of a context paragraph (same (title, text) → same id, in any corpus)."""
    return "ctx-" + stable_hash([title, text], 16)


def check_own_paragraphs(examples: Sequence[Example], source: str | None = None) -> None:
    """A one-line ``ValueError`` unless every question carries paragraphs of its own (``meta["contexts"]``), what
    ``--corpus per-question`` searches; ``source`` names the dataset in the message."""
    bare = [e.id for e in examples if not e.meta.get("contexts")]
    if bare:
        of = f" of {source!r}" if source else ""
        raise ValueError(f"--corpus per-question: {len(bare)} of {len(examples)} questions{of} have no paragraphs of "
                         f"their own (e.g. {bare[0]!r}); use --corpus pooled or --corpus FILE")


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
