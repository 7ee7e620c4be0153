"""``verify(world)``: every consistency check of a world (graph, corpus, questions); returns the problems found."""

from __future__ import annotations

import re
from collections import defaultdict

from workbench.data.example import Example
from workbench.data.world.model import World
from workbench.data.world.schema import (
    AWARD_YEAR,
    ENTITY_TYPES,
    QTYPES,
    SIGNATURES,
    SOURCES,
    SPLITS,
    mentions,
    surface_forms,
    value_key,
    year_of,
)


def verify(world: World) -> list[str]:
    """Consistency problems of ``world`` (an empty list when it is consistent).

    Checks names and aliases, triple signatures, geography, dates and family trees,
    passages (ids, titles, sources), and for every question: its KG path exists and
    chains, the path gives the answer, each supporting passage states its hop's fact,
    sources match, and the question names no entity but its anchors.
    """
    problems: list[str] = []
    ents, triples = world.entities, world.triples
    surface: dict[str, str] = {}
    for e in ents.values():
        if e.type not in ENTITY_TYPES:
            problems.append(f"{e.id}: unknown type {e.type!r}")
        for f in surface_forms(e):
            other = surface.setdefault(f.lower(), e.id)
            if other != e.id:
                problems.append(f"name/alias {f!r} used by {other} and {e.id}")
    tset = set(triples)
    if len(tset) != len(triples):
        problems.append("duplicate triples")
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for h, r, t in triples:
        if h not in ents or t not in ents or r not in world.relations:
            problems.append(f"triple with unknown id: {(h, r, t)}")
            continue
        if (ents[h].type, ents[t].type) not in SIGNATURES.get(r, set()):
            problems.append(f"triple {(h, r, t)}: {ents[h].type} -{r}-> {ents[t].type} not allowed")
        out[(h, r)].append(t)
    for i, q in world.qualifiers.items():
        if not 0 <= i < len(triples) or triples[i][1] != "P166" or not re.fullmatch(r"\d{4}", q.get(AWARD_YEAR, "")):
            problems.append(f"qualifier {i}: {q} is not an award year on a P166 triple")

    def one(h, r):
        ts = out.get((h, r), [])
        return ts[0] if len(ts) == 1 else None

    def born(p):
        d = one(p, "P569")
        return year_of(ents[d]) if d else None

    has_grandfather = False
    for e in ents.values():
        if e.type == "person":
            city, country = one(e.id, "P19"), one(e.id, "P27")
            if not city or not country or not one(e.id, "P569"):
                problems.append(f"{e.id}: person without exactly one birthplace, citizenship and birth date")
            elif not one(city, "P131"):
                problems.append(f"{e.id}: birthplace {city} is in no country")
            for rel in ("P22", "P25"):
                parent = one(e.id, rel)
                if parent and None not in (born(parent), born(e.id)) and born(e.id) - born(parent) < 14:
                    problems.append(f"{e.id}: born {born(e.id)}, parent {parent} born {born(parent)}")
            father = one(e.id, "P22")
            has_grandfather |= bool(father and one(father, "P22"))
            for s in out.get((e.id, "P26"), []):
                if e.id not in out.get((s, "P26"), []):
                    problems.append(f"spouse {e.id} -> {s} is not symmetric")
        elif e.type == "country":
            cap = one(e.id, "P36")
            if not cap or one(cap, "P131") != e.id or one(cap, "P1376") != e.id:
                problems.append(f"{e.id}: capital {cap} is not a city of that country")
        elif e.type == "university" and one(one(e.id, "P131") or "", "P131") != one(e.id, "P17"):
            problems.append(f"{e.id}: city and country disagree")
        elif e.type == "company" and one(one(e.id, "P159") or "", "P131") != one(e.id, "P17"):
            problems.append(f"{e.id}: headquarters and country disagree")
    if not has_grandfather:
        problems.append("no person has a paternal grandfather (need three generations)")

    def year(h, r):
        v = one(h, r)
        return year_of(ents[v]) if v in ents else None

    for i, (h, r, t) in enumerate(triples):
        if r == "P166":
            y = int(world.qualifiers.get(i, {}).get(AWARD_YEAR, "0"))
            if y < (born(h) or 9999) or y < (year(t, "P571") or 9999):
                problems.append(
                    f"award {(h, r, t)} in {y}: no year, or before the birth of {h} or the award's inception"
                )
        elif r in ("P57", "P50") and (year(h, "P577") or 0) <= (born(t) or 9999):
            problems.append(f"{h} published before its maker {t} was born")
        elif r == "P112" and (year(h, "P571") or 0) <= (born(t) or 9999):
            problems.append(f"{h} founded before its founder {t} was born")

    ids, titles = set(), set()
    for p in world.passages:
        if p.source not in SOURCES:
            problems.append(f"passage {p.id}: source {p.source!r} not in {SOURCES}")
        if p.id in ids or p.title in titles:
            problems.append(f"passage {p.id}: duplicate id or title {p.title!r}")
        ids.add(p.id)
        titles.add(p.title)

    qids, qtexts = set(), set()
    for ex in world.examples:
        problems += [f"{ex.id}: {m}" for m in _verify_example(world, ex, tset, ids)]
        if ex.id in qids or ex.question in qtexts:
            problems.append(f"{ex.id}: duplicate id or question")
        qids.add(ex.id)
        qtexts.add(ex.question)
    return problems


def _verify_example(world: World, ex: Example, tset: set, pids: set) -> list[str]:
    ents = world.entities
    bad = []
    if ex.split not in SPLITS or ex.qtype not in QTYPES or ex.dataset != "world":
        bad.append(f"split/qtype/dataset {ex.split}/{ex.qtype}/{ex.dataset} invalid")
    path = ex.kg_path
    if not path or ex.hops != len(path) or len(ex.decomposition) != len(path):
        return bad + ["hops, kg_path and decomposition disagree"]
    for s in path:
        key = (s["head_id"], s["relation_id"], s["tail_id"])
        if key not in tset:
            return bad + [f"kg_path triple {key} not in the KG"]
        if (
            s["head"] != ents[key[0]].name
            or s["tail"] != ents[key[2]].name
            or s["relation"] != world.relations[key[1]].name
        ):
            bad.append(f"kg_path names disagree with ids at {key}")
    ends = [ents[s["tail_id"]] for s in path]
    if ex.qtype == "comparison":
        a, b = path
        if ex.meta.get("compare") == "earlier":
            ka, kb = value_key(ends[0]), value_key(ends[1])
            want = ents[a["head_id"] if ka < kb else b["head_id"]].name
        else:
            want = "yes" if a["tail_id"] == b["tail_id"] else "no"
    else:
        for prev, nxt in zip(path, path[1:]):
            if prev["tail_id"] != nxt["head_id"]:
                bad.append("kg_path does not chain head -> tail")
        last = path[-1]
        want = last.get("qualifier_value") or last["tail"]
    if not ex.answers or ex.answers[0] != want:
        bad.append(f"answer {ex.answers[:1]} but the KG path gives {want!r}")
    if len(ex.supporting_ids) != len(path) or len(ex.supporting_titles) != len(path):
        return bad + ["supporting passages are not one per hop"]
    support = []
    for pid, title, s in zip(ex.supporting_ids, ex.supporting_titles, path):
        if pid not in pids:
            bad.append(f"supporting passage {pid} missing")
            continue
        p = world.passage(pid)
        support.append(p)
        text = f"{p.title}\n{p.text}"
        if p.title != title:
            bad.append(f"supporting title {title!r} != {p.title!r}")
        if not mentions(text, ents[s["head_id"]]) or not mentions(text, ents[s["tail_id"]]):
            bad.append(f"passage {pid} does not state {s['head']} -{s['relation']}-> {s['tail']}")
        if "qualifier_value" in s and s["qualifier_value"] not in p.text:
            bad.append(f"passage {pid} does not state the year {s['qualifier_value']}")
    if ex.sources != sorted({p.source for p in support}):
        bad.append(f"sources {ex.sources} != sources of the supporting passages")
    anchors = set(ex.meta.get("anchors", []))
    for s in path:
        for eid in (s["head_id"], s["tail_id"]):
            if eid not in anchors and mentions(ex.question, ents[eid]):
                bad.append(f"question names non-anchor entity {ents[eid].name!r}")
    return bad
