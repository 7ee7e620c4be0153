"""Knowledge-graph file readers: Wikidata5M, CoDEx, FB15k-237 and in-memory triples.

:class:`GraphReaders` holds the ``from_*`` constructors; :class:`~workbench.tools.kg.store.KnowledgeGraph`
inherits them, so ``KnowledgeGraph.from_wikidata5m(directory)`` is the entry point.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from workbench.core.types import Triple
from workbench.tools.kg.strings import StringTable, _clean_field, _ptr_from_counts

#: The class a ``from_*`` constructor is called on (:class:`~workbench.tools.kg.store.KnowledgeGraph`).
KG = TypeVar("KG", bound="GraphReaders")


class GraphReaders:
    """The ``from_*`` constructors; mixed into :class:`~workbench.tools.kg.store.KnowledgeGraph`, they return an
    instance of the class they are called on."""

    @classmethod
    def from_triples(
        cls: type[KG],
        triples: Iterable[Any],
        entity_names: Mapping[str, str] | None = None,
        relation_names: Mapping[str, str | Sequence[str]] | None = None,
        entity_aliases: Mapping[str, Sequence[str]] | None = None,
        **options: Any,
    ) -> KG:
        """From in-memory ``(head_id, relation_id, tail_id)`` rows (tuples or :class:`Triple`).

        ``entity_names``: id -> display name; ``entity_aliases``: id -> further aliases;
        ``relation_names``: id -> name or list of aliases (first = display name). Ids without a
        name are their own name. Entities named but not in any triple are kept.
        """
        ents, rels = _Registry(), _Registry()
        entity_names, entity_aliases, relation_names = entity_names or {}, entity_aliases or {}, relation_names or {}
        for eid in dict.fromkeys([*entity_names, *entity_aliases]):
            names = [entity_names[eid]] if eid in entity_names else []
            ents.add(str(eid), [*names, *entity_aliases.get(eid, [])])
        for rid, rn in relation_names.items():
            rels.add(str(rid), [rn] if isinstance(rn, str) else list(rn))
        h, r, t = array("i"), array("i"), array("i")
        for i, row in enumerate(triples):
            if isinstance(row, Triple):
                row = (row.head_id or row.head, row.relation_id or row.relation, row.tail_id or row.tail)
            try:
                a, b, c = (_clean_field(x) for x in row)
            except (TypeError, ValueError) as e:
                raise ValueError(f"from_triples: row {i} is not a (head, relation, tail) triple: {row!r}") from e
            if not (a and b and c):
                raise ValueError(f"from_triples: row {i} has an empty field: {row!r}")
            h.append(ents.get_or_add(a))
            r.append(rels.get_or_add(b))
            t.append(ents.get_or_add(c))
        return cls._from_registries(ents, rels, h, r, t, {"source": "memory"}, options)

    @classmethod
    def from_wikidata5m(
        cls: type[KG],
        directory: str | Path | None = None,
        entity_file: str | Path | None = None,
        relation_file: str | Path | None = None,
        triple_files: Sequence[str | Path] | None = None,
        **options: Any,
    ) -> KG:
        """Wikidata5M files: ``id\\talias1\\talias2...`` (first alias = name) and ``head\\trelation\\ttail``.

        With ``directory``, missing arguments default to ``wikidata5m_entity.txt``,
        ``wikidata5m_relation.txt`` and ``wikidata5m_all_triplet.txt`` there, or, when that is
        absent, every ``wikidata5m_{transductive,inductive}_{train,valid,test}.txt`` found there
        (or in the ``wikidata5m_transductive/`` and ``wikidata5m_inductive/`` folders), merged
        and deduplicated as in DynaSearcher. Triples whose entities have no alias line load with
        the id as name. Malformed triple lines are skipped and counted in ``stats``.
        """
        d = Path(directory) if directory is not None else None
        if d is not None and not d.is_dir():
            raise FileNotFoundError(f"Wikidata5M directory not found: {d}")
        if d is not None:
            entity_file = entity_file or _require(d / "wikidata5m_entity.txt", "Wikidata5M entity alias file")
            relation_file = relation_file or _require(d / "wikidata5m_relation.txt", "Wikidata5M relation alias file")
            if not triple_files:
                triple_files = _wikidata5m_triple_files(d)
        if not triple_files:
            raise ValueError("from_wikidata5m needs a directory or triple_files")
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "wikidata5m", "files": []}
        if entity_file is not None:
            _read_alias_file(Path(entity_file), ents, stats)
        if relation_file is not None:
            _read_alias_file(Path(relation_file), rels, stats)
        h, r, t = array("i"), array("i"), array("i")
        for f in triple_files:
            _read_triple_file(Path(f), ents, rels, h, r, t, stats)
        return cls._from_registries(ents, rels, h, r, t, stats, options)

    @classmethod
    def from_codex(
        cls: type[KG],
        triples_file: str | Path,
        relations_file: str | Path | None,
        entities_file: str | Path | None = None,
        **options: Any,
    ) -> KG:
        """CoDEx: ``Q1\\tP2\\tQ3`` triples, ``relations_en.json`` / ``entities_en.json`` as ``{id: {"label": ...}}``.

        Entities without a label (CoDEx ships no entity labels in some packagings) are named by id.
        """
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "codex", "files": []}
        if entities_file is not None:
            for k, label in _read_label_json(Path(entities_file), stats).items():
                ents.add(k, label)
        if relations_file is not None:
            for k, label in _read_label_json(Path(relations_file), stats).items():
                rels.add(k, label)
        h, r, t = array("i"), array("i"), array("i")
        _read_triple_file(Path(triples_file), ents, rels, h, r, t, stats)
        return cls._from_registries(ents, rels, h, r, t, stats, options)

    @classmethod
    def from_fb15k237(
        cls: type[KG],
        triples_file: str | Path,
        entity2text: str | Path | None = None,
        relation2text: str | Path | None = None,
        **options: Any,
    ) -> KG:
        """FB15k-237: MID triples, ``mid\\tname`` names, optional ``relation\\ttext`` names.

        Without ``relation2text`` a relation is named by the last segment of its path with
        underscores as spaces (``/people/person/place_of_birth`` -> ``place of birth``); with it,
        that readable form is kept as an alias.
        """
        ents, rels = _Registry(), _Registry()
        stats: dict[str, Any] = {"source": "fb15k237", "files": []}
        if entity2text is not None:
            _read_alias_file(Path(entity2text), ents, stats)
        rel_text: dict[str, list[str]] = {}
        if relation2text is not None:
            tmp = _Registry()
            _read_alias_file(Path(relation2text), tmp, stats)
            ids, ptr, al = tmp.tables()
            rel_text = {ids[i]: [al[j] for j in range(ptr[i], ptr[i + 1])] for i in range(len(ids))}
        h, r, t = array("i"), array("i"), array("i")
        _read_triple_file(Path(triples_file), ents, rels, h, r, t, stats)
        # name relations only now: readable path form, after relation2text's text when given
        named = _Registry()
        for rid in rels.ids:
            readable = readable_relation(rid)
            text = [a for a in rel_text.get(rid, []) if a != rid]
            named.add(rid, [*text, readable] if text else [readable])
        return cls._from_registries(ents, named, h, r, t, stats, options)

    @classmethod
    def _from_registries(cls: type[KG], ents, rels, h, r, t, stats, options) -> KG:
        e_ids, e_ptr, e_al = ents.tables()
        r_ids, r_ptr, r_al = rels.tables()
        stats["entities_without_alias"] = ents.n_fallback
        stats["relations_without_alias"] = rels.n_fallback
        stats["duplicate_triples"] = 0
        heads, rels_a, tails = (np.frombuffer(a, np.int32) if len(a) else np.zeros(0, np.int32) for a in (h, r, t))
        return cls(e_ids, e_ptr, e_al, r_ids, r_ptr, r_al, heads, rels_a, tails, stats=stats, **options)


def readable_relation(path: str) -> str:
    """A Freebase relation path's readable form: its last segment, underscores as spaces.

    >>> readable_relation("/people/person/spouse_s./people/marriage/type_of_union")
    'type of union'
    """
    seg = [s for s in re.split(r"[/.]", path) if s]
    return (seg[-1] if seg else path).replace("_", " ").strip() or path


class _Registry:
    """Ids -> dense indices, each with its aliases; ids never named fall back to the id itself."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.ids: list[str] = []
        self.counts = array("i")
        self._buf: list[str] = []
        self._chunks: list[str] = []
        self.n_fallback = 0

    def add(self, eid: str, aliases: Iterable[Any]) -> bool:
        """Register ``eid`` with aliases; False (ignored) if it is already known."""
        if eid in self.index:
            return False
        names = [a for a in dict.fromkeys(_clean_field(a) for a in aliases) if a]
        if not names:
            names = [eid]
            self.n_fallback += 1
        self.index[eid] = len(self.ids)
        self.ids.append(eid)
        self.counts.append(len(names))
        self._buf.append("\n".join(names) + "\n")
        if len(self._buf) >= 65536:
            self._chunks.append("".join(self._buf))
            self._buf = []
        return True

    def get_or_add(self, eid: str) -> int:
        i = self.index.get(eid)
        if i is None:
            self.add(eid, ())
            i = len(self.ids) - 1
        return i

    def tables(self) -> tuple[StringTable, np.ndarray, StringTable]:
        aliases = StringTable.from_text("".join(self._chunks) + "".join(self._buf))
        counts = np.frombuffer(self.counts, np.int32) if len(self.counts) else np.zeros(0, np.int32)
        return StringTable.from_strings(self.ids), _ptr_from_counts(counts), aliases


def _require(p: Path, what: str) -> Path:
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {p}")
    return p


def _wikidata5m_triple_files(d: Path) -> list[Path]:
    allf = d / "wikidata5m_all_triplet.txt"
    if allf.is_file():
        return [allf]
    found = []
    for setting in ("transductive", "inductive"):
        for split in ("train", "valid", "test"):
            name = f"wikidata5m_{setting}_{split}.txt"
            for p in (d / name, d / f"wikidata5m_{setting}" / name):
                if p.is_file():
                    found.append(p)
                    break
    if not found:
        raise FileNotFoundError(
            f"no Wikidata5M triple file in {d}: expected wikidata5m_all_triplet.txt or "
            "wikidata5m_{transductive,inductive}_{train,valid,test}.txt"
        )
    return found


def _open_text(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    return open(path, encoding="utf-8", errors="replace", newline="")


def _read_alias_file(path: Path, reg: _Registry, stats: dict[str, Any]) -> None:
    """``id\\talias1\\talias2...`` lines; a line with an empty id is an error (file and line named)."""
    dup = 0
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            eid = _clean_field(parts[0])
            if not eid:
                raise ValueError(f"{path}:{lineno}: malformed line (empty id before the first tab): {line[:120]!r}")
            if not reg.add(eid, parts[1:]):
                dup += 1
    stats.setdefault("files", []).append(str(path))
    stats["duplicate_alias_lines"] = stats.get("duplicate_alias_lines", 0) + dup


def _read_label_json(path: Path, stats: dict[str, Any]) -> dict[str, list[str]]:
    """``{id: {"label": ...}}`` (or ``{id: "label"}``) -> id -> [label]."""
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(obj, dict):
        raise ValueError(f'{path}:1: expected a JSON object {{id: {{"label": ...}}}}, got {type(obj).__name__}')
    out: dict[str, list[str]] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            label = v.get("label")
            out[str(k)] = [label] if isinstance(label, str) else []
        elif isinstance(v, str):
            out[str(k)] = [v]
        else:
            raise ValueError(f"{path}: entry {k!r} is neither an object with a 'label' nor a string")
    stats.setdefault("files", []).append(str(path))
    return out


def _read_triple_file(
    path: Path,
    ents: _Registry,
    rels: _Registry,
    h: array,
    r: array,
    t: array,
    stats: dict[str, Any],
) -> None:
    """Tab-separated ``head relation tail`` lines; malformed lines are skipped and counted."""
    bad = 0
    examples: list[str] = stats.setdefault("malformed_examples", [])
    eget, rget = ents.index.get, rels.index.get
    n0 = len(h)
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 3:
                if not line.strip():
                    continue
                if "\t" not in line:  # tolerate space-separated ids
                    parts = line.split()
            if len(parts) == 3:
                a, b, c = parts[0].strip(), parts[1].strip(), parts[2].strip()
            if len(parts) != 3 or not (a and b and c):
                bad += 1
                if len(examples) < 5:
                    examples.append(f"{path}:{lineno}: {line.rstrip()[:120]!r}")
                continue
            i = eget(a)
            if i is None:
                i = ents.get_or_add(_clean_field(a))
            j = rget(b)
            if j is None:
                j = rels.get_or_add(_clean_field(b))
            k = eget(c)
            if k is None:
                k = ents.get_or_add(_clean_field(c))
            h.append(i)
            r.append(j)
            t.append(k)
    stats.setdefault("files", []).append(str(path))
    stats["malformed_lines"] = stats.get("malformed_lines", 0) + bad
    if len(h) == n0 and bad:
        raise ValueError(f"{path}: no valid triple line ({bad} malformed; first: {examples[0] if examples else '?'})")
