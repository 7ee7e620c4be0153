"""``World``: the knowledge graph, corpus and questions of one config, and its files (save, load, fingerprint)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.data.world.config import WorldConfig
from workbench.data.world.schema import (
    SPLITS,
    WORLD_FORMAT,
    Entity,
    Relation,
    surface_forms,
)
from workbench.util.io import atomic_write_json, atomic_write_text

#: Files of the KG and corpus written by :meth:`World.save` (then ``<split>.jsonl`` and ``world.json``).
_KG_FILES = (
    "wikidata5m_entity.txt",
    "wikidata5m_relation.txt",
    "wikidata5m_all_triplet.txt",
    "qualifiers.jsonl",
    "entity_types.tsv",
    "corpus.jsonl",
)






@dataclass(repr=False)
class World:
    """The knowledge graph, the corpus and the questions of one config."""

    config: WorldConfig
    entities: dict[str, Entity]
    relations: dict[str, Relation]
    triples: list[tuple[str, str, str]]
    qualifiers: dict[int, dict[str, str]]
    """Triple index -> qualifiers, e.g. ``{AWARD_YEAR: "1987"}`` on an award-received triple."""
    passages: list[Passage]
    examples: list[Example]
    _pid: dict[str, Passage] = field(init=False, repr=False, compare=False)
    _name: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._pid = {p.id: p for p in self.passages}
        self._name = {}
        for e in self.entities.values():  # aliases first so that canonical names win
            for a in e.aliases:
                self._name.setdefault(a.lower(), e.id)
        for e in self.entities.values():
            self._name[e.name.lower()] = e.id

    def __repr__(self) -> str:
        return (
            f"World(seed={self.config.seed}, entities={len(self.entities)}, triples={len(self.triples)}, "
            f"passages={len(self.passages)}, examples={len(self.examples)})"
        )

    def split(self, name: str) -> list[Example]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; valid: {', '.join(SPLITS)}")
        return [e for e in self.examples if e.split == name]

    def passage(self, pid: str) -> Passage:
        try:
            return self._pid[pid]
        except KeyError:
            raise KeyError(f"no passage {pid!r} in the world ({len(self._pid)} passages)") from None

    def entity_by_name(self, name: str) -> Entity:
        """Look an entity up by canonical name or alias (case-insensitive)."""
        eid = self._name.get(name.strip().lower())
        if eid is None:
            raise KeyError(f"no entity named {name!r}")
        return self.entities[eid]

    # ---- files

    def _texts(self) -> dict[str, str]:
        """File name -> content of every content file (all but ``world.json``)."""

        def lines(rows):
            return "".join(r + "\n" for r in rows)

        def jsonl(objs):
            return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs)

        out = {  # keys in the order of _KG_FILES
            "wikidata5m_entity.txt": lines("\t".join([e.id, *surface_forms(e)]) for e in self.entities.values()),
            "wikidata5m_relation.txt": lines("\t".join([r.id, r.name, *r.aliases]) for r in self.relations.values()),
            "wikidata5m_all_triplet.txt": lines("\t".join(t) for t in self.triples),
            "qualifiers.jsonl": jsonl(
                {
                    "triple": i,
                    "head": self.triples[i][0],
                    "relation": self.triples[i][1],
                    "tail": self.triples[i][2],
                    "qualifiers": self.qualifiers[i],
                }
                for i in sorted(self.qualifiers)
            ),  # fmt: skip
            "entity_types.tsv": lines(f"{e.id}\t{e.type}" for e in self.entities.values()),
            "corpus.jsonl": jsonl(
                {"id": p.id, "contents": f'"{p.title}"\n{p.text}', "title": p.title, "text": p.text, "source": p.source}
                for p in self.passages
            ),
        }
        for s in SPLITS:  # the format of save_examples / load_examples
            out[f"{s}.jsonl"] = jsonl(e.to_dict() for e in self.examples if e.split == s)
        return out

    def fingerprint(self) -> str:
        """A short sha256 over the content files (what :meth:`save` writes, ``world.json`` aside)."""
        return _digest(self._texts())

    def counts(self) -> dict[str, Any]:
        def tally(items):
            c: dict[str, int] = {}
            for k in items:
                c[k] = c.get(k, 0) + 1
            return dict(sorted(c.items()))

        return {
            "entities": len(self.entities),
            "named_entities": sum(e.type != "value" for e in self.entities.values()),
            "entity_types": tally(e.type for e in self.entities.values()),
            "relations": len(self.relations),
            "triples": len(self.triples),
            "qualifiers": len(self.qualifiers),
            "passages": len(self.passages),
            "passage_sources": tally(p.source for p in self.passages),
            "questions": len(self.examples),
            "qtypes": tally(e.qtype for e in self.examples),
            "splits": {s: sum(e.split == s for e in self.examples) for s in SPLITS},
        }

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the KG, corpus, splits and ``world.json`` (config, counts, fingerprint) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        texts = self._texts()
        for name, text in texts.items():
            atomic_write_text(directory / name, text)
        meta = {
            "format": WORLD_FORMAT,
            "config": self.config.to_dict(),
            "counts": self.counts(),
            "fingerprint": _digest(texts),
        }
        atomic_write_json(directory / "world.json", meta)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> World:
        """Read a world written by :meth:`save`; a fingerprint mismatch (edited or torn files) is an error."""
        directory = Path(directory)
        meta_path = directory / "world.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"not a saved world (no world.json): {directory}")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        names = [*_KG_FILES, *(f"{s}.jsonl" for s in SPLITS)]
        texts = {name: (directory / name).read_text(encoding="utf-8") for name in names}
        if _digest(texts) != meta.get("fingerprint"):
            raise ValueError(
                f"{directory}: files do not match the fingerprint in world.json "
                f"({_digest(texts)} != {meta.get('fingerprint')}); delete the folder to rebuild it"
            )

        def rows(name):
            return [line.split("\t") for line in texts[name].split("\n") if line]

        def jsonl(name):
            return [json.loads(line) for line in texts[name].split("\n") if line]

        types = dict(rows("entity_types.tsv"))
        entities = {r[0]: Entity(r[0], r[1], r[2:], types[r[0]]) for r in rows("wikidata5m_entity.txt")}
        relations = {r[0]: Relation(r[0], r[1], r[2:]) for r in rows("wikidata5m_relation.txt")}
        triples = [(h, r, t) for h, r, t in rows("wikidata5m_all_triplet.txt")]
        qualifiers = {int(d["triple"]): dict(d["qualifiers"]) for d in jsonl("qualifiers.jsonl")}
        passages = [
            Passage(id=d["id"], title=d["title"], text=d["text"], source=d["source"]) for d in jsonl("corpus.jsonl")
        ]
        examples = [Example.from_dict(d) for s in SPLITS for d in jsonl(f"{s}.jsonl")]
        world = cls(WorldConfig(**meta["config"]), entities, relations, triples, qualifiers, passages, examples)
        return world


def _digest(texts: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name, text in sorted(texts.items()):
        data = text.encode("utf-8")
        h.update(f"{name}\n{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()[:16]
