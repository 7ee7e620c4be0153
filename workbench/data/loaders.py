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
``decomposition_support_idx`` and ``decomposition_support_pos`` (each hop's paragraph: its ``idx`` and its place in
``contexts``), ``id_hops`` (MuSiQue); ``metadata`` (FlashRAG records whose
metadata is not a known layout).

>>> parse_flashrag_contents('"Ed Wood"\\nEdward Davis Wood Jr. was a filmmaker.')
('Ed Wood', 'Edward Davis Wood Jr. was a filmmaker.')
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

from workbench.core.types import Triple
from workbench.data.corpora import (
    context_passage_id,
    corpus_from_contexts,
    iter_flashrag_corpus,
    load_corpus,
    load_flashrag_corpus,
    parse_flashrag_contents,
)
from workbench.data.example import Example
from workbench.data.records import (
    _ALIASES,
    _PARSERS,
    _SPLITS,
    DATASETS,
    LAYOUTS,
    PathLike,
    _evidence_triples,
    _flatten_flashrag,
    _guess_dataset,
    _guess_split,
    dedup_answers,
    detect_layout,
    flashrag_example,
    hotpotqa_example,
    ircot_example,
    is_corpus_record,
    iter_records,
    musique_example,
    qa_example,
    twowiki_example,
)
from workbench.util.paths import cache_dir, samples_dir

__all__ = [
    "DATASETS",
    "context_passage_id",
    "corpus_from_contexts",
    "data_dirs",
    "dedup_answers",
    "detect_layout",
    "find_dataset_file",
    "flashrag_example",
    "LAYOUTS",
    "hotpotqa_example",
    "ircot_example",
    "iter_flashrag_corpus",
    "iter_records",
    "load_2wiki",
    "load_2wiki_kg",
    "load_bamboogle",
    "load_corpus",
    "load_dataset",
    "load_flashrag_corpus",
    "load_flashrag_dataset",
    "load_hotpotqa",
    "load_musique",
    "musique_example",
    "parse_flashrag_contents",
    "qa_example",
    "twowiki_example",
]

# ----------------------------------------------------------------------------- dataset loaders

#: Layouts that are file formats rather than datasets: the dataset name comes from the file name.
_FILE_FORMATS = ("flashrag", "ircot", "qa")


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
        if parser is None and is_corpus_record(_flatten_flashrag(rec)):
            raise ValueError(
                f"{where}: this is a passage corpus (records have {'contents' if 'contents' in rec else 'title, text'}"
                ", no question): pass it with --corpus FILE, and a question file with --dataset"
            )
        try:
            kind = parser or detect_layout(rec)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        name = dataset or (kind if kind not in _FILE_FORMATS else _guess_dataset(path) or kind)
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
    ``$WORKBENCH_DATA``, ``<cache>/datasets``, then the benchmark samples in ``data/samples``."""
    dirs = [Path(d) for d in (data_dir, os.environ.get("WORKBENCH_DATA")) if d]
    dirs.append(cache_dir() / "datasets")
    samples = samples_dir()
    if samples.is_dir():
        dirs.append(samples)
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
    format: str | None = None,
) -> list[Example]:
    """Load a dataset by name (``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``, ``flashrag``) or by file
    (:func:`_load_dataset`); questions that share an id are an error naming the id and the file, said before any
    work (an eval's per-question tables and a training run's groups key on the id)."""
    examples = _load_dataset(name_or_path, split, limit, path=path, data_dir=data_dir, format=format)
    seen: dict[str, int] = {}
    for e in examples:
        seen[e.id] = seen.get(e.id, 0) + 1
    shared = {k: n for k, n in seen.items() if n > 1}
    if shared:
        first, n = next(iter(shared.items()))
        more = f" (and {len(shared) - 1} other shared ids)" if len(shared) > 1 else ""
        raise ValueError(f"{path or name_or_path}: {n} questions share the id {first!r}{more}; give each question its "
                         "own id (the tables of an eval and the groups of a training run are keyed by it)")
    return examples


def _load_dataset(
    name_or_path: PathLike,
    split: str | None = None,
    limit: int | None = None,
    *,
    path: PathLike | None = None,
    data_dir: PathLike | None = None,
    format: str | None = None,
) -> list[Example]:
    """Load a dataset by name (``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``, ``flashrag``) or by file.

    - ``load_dataset("musique", path="musique_ans_dev.jsonl")``: that dataset's loader on that file.
    - ``load_dataset("hotpotqa", split="dev")``: the file found by :func:`find_dataset_file`.
    - ``load_dataset("some/file.jsonl")``: each record's layout is detected (:data:`LAYOUTS`:
      IRCoT, MuSiQue, 2Wiki, HotpotQA, FlashRAG, plain QA); JSON list, JSONL or Parquet.
    - ``format="ircot"`` (any key of :data:`LAYOUTS`) forces one layout instead of detecting it.
    """
    key = str(name_or_path).lower()
    if format is not None:
        if format not in LAYOUTS:
            raise ValueError(f"unknown format {format!r}; valid: {', '.join(LAYOUTS)}")
        if path is None and key in _ALIASES and _ALIASES[key] != "flashrag":
            path = find_dataset_file(_ALIASES[key], split, data_dir)
        p = Path(path if path is not None else name_or_path)
        if not p.is_file():
            raise FileNotFoundError(f"dataset file not found: {p}")
        return _load(p, format, _ALIASES.get(key) if path is not None else None, split, limit)
    if path is not None:
        if key not in _ALIASES:
            raise ValueError(f"unknown dataset {str(name_or_path)!r}; valid names: {', '.join(DATASETS)}")
        return _LOADERS[_ALIASES[key]](path, split=split, limit=limit)
    if key in _ALIASES:
        canon = _ALIASES[key]
        if canon == "flashrag":
            raise ValueError("'flashrag' is a file format, not a dataset: pass path=... (or the file path itself)")
        found = find_dataset_file(canon, split, data_dir)
        if found.parent == samples_dir():
            warnings.warn(f"load_dataset({canon!r}): no full copy found; using the small sample {found}", stacklevel=2)
        return _LOADERS[canon](found, split=split, limit=limit)
    p = Path(name_or_path)
    if p.is_file():
        return _load(p, None, None, split, limit)
    if p.suffix in (".json", ".jsonl", ".parquet") or os.sep in str(name_or_path) or "/" in str(name_or_path):
        raise FileNotFoundError(f"dataset file not found: {p}")
    raise ValueError(
        f"unknown dataset {str(name_or_path)!r}; valid names: {', '.join(DATASETS)} (or a path to a .json/.jsonl/.parquet file)"
    )
