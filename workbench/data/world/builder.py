"""The seeded generator: ``build_world(config)`` draws the entities, facts, passages and questions of a world."""

from __future__ import annotations

import random
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.data.world.config import WorldConfig, default_world_config
from workbench.data.world.model import World
from workbench.data.world.names import (
    AWARD_FORMS,
    BOOK_FORMS,
    CITY_ENDINGS,
    COMPANY_KINDS,
    COUNTRY_ENDINGS,
    FILM_FORMS,
    STATE_FORMS,
    UNIVERSITY_FORMS,
    Namer,
)
from workbench.data.world.schema import (
    AWARD_YEAR,
    MONTHS,
    QTYPE_SHARE,
    QTYPES,
    RELATIONS,
    SPLITS,
    Entity,
    Relation,
    mentions,
    surface_forms,
    value_key,
)
from workbench.data.world.templates import TEMPLATES, Template, sub_question


def build_world(config: WorldConfig | None = None) -> World:
    """Generate the world of ``config`` (default: :func:`default_world_config`). Pure: no files."""
    return World(*_Builder(config or default_world_config()).build())






@dataclass
class _Person:
    id: str
    gender: str
    first: str
    middle: str
    surname: str
    birth: tuple[int, int, int]
    home: str
    occupation: str = ""


@dataclass(eq=False)
class _Draft:
    subject: str
    source: str
    title: str
    sentences: list[str] = field(default_factory=list)
    pid: str = ""


@dataclass
class _Cand:
    tpl: Template
    question: str
    anchors: list[str]
    idxs: list[int]
    answers: list[str]
    answer_id: str


def _sizes(n: int) -> dict[str, int]:
    c = {
        "country": max(3, round(n * 0.03)),
        "university": max(3, round(n * 0.05)),
        "company": max(3, round(n * 0.06)),
        "award": max(3, round(n * 0.04)),
        "film": max(3, round(n * 0.06)),
        "book": max(3, round(n * 0.06)),
    }
    c["city"] = max(2 * c["country"], round(n * 0.12))
    c["person"] = n - sum(c.values())
    return c


def _adjective(country: str) -> str:
    """Demonym-style adjective: Ostrevia -> Ostrevian, Kelland -> Kellandic, Morstan -> Morstani."""
    if country.endswith("ia"):
        return country + "n"
    if country.endswith(("land", "mark")):
        return country + "ic"
    if country.endswith("stan"):
        return country + "i"
    if country[-1] in "aeiouy":
        return country[:-1] + "an"
    return country + "ian"


def _listing(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


_GENERIC_JOBS = ("farmer", "painter", "physician", "lawyer", "architect", "teacher", "merchant", "sailor", "pharmacist",
                 "surveyor", "musician", "translator")  # fmt: skip
_TOPICS = ("river sediments", "early printing", "coastal trade", "glass making", "railway finance", "folk music",
           "tidal energy", "grain storage", "textile dyes", "mountain weather", "bridge design", "old maps",
           "bee keeping", "salt mining", "clockwork", "lighthouse optics")  # fmt: skip
_GENRES_FILM = ("drama", "comedy", "war", "crime", "romance", "mystery", "adventure", "silent")
_GENRES_BOOK = ("novel", "memoir", "history", "poetry collection", "essay collection", "travelogue")


class _Builder:
    """Builds the world of one config in stages: the graph, its passages and distractors, the questions
    (:meth:`build`). Every stage draws from its own seeded ``random.Random``."""

    def __init__(self, config: WorldConfig):
        self.cfg = config
        self.namer = Namer(self._rng("names"))
        self.entities: dict[str, Entity] = {}
        self.by_type: dict[str, list[str]] = defaultdict(list)
        self.triples: list[tuple[str, str, str]] = []
        self.tindex: dict[tuple[str, str, str], int] = {}
        self.qualifiers: dict[int, dict[str, str]] = {}
        self.out: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.into: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.people: dict[str, _Person] = {}
        self.values: dict[str, str] = {}
        self.adjective: dict[str, str] = {}
        self.n_q = 0
        self.n_v = 0
        self.drafts: dict[tuple[str, str], _Draft] = {}
        self.fact_drafts: dict[int, list[_Draft]] = defaultdict(list)
        self.primary: dict[int, _Draft] = {}
        self.titles: set[str] = set()
        self.extra: list[_Draft] = []

    def _rng(self, stage: str) -> random.Random:
        return random.Random(f"{self.cfg.seed}:{stage}")

    # ---- KG primitives

    def add(self, type_: str, name: str, aliases: list[str]) -> str:
        if type_ == "value":
            self.n_v += 1
            eid = f"V{self.n_v}"
        else:
            self.n_q += 1
            eid = f"Q{self.n_q}"
        self.entities[eid] = Entity(eid, name, list(aliases), type_)
        self.by_type[type_].append(eid)
        return eid

    def fact(self, h: str, r: str, t: str, qualifiers: dict[str, str] | None = None) -> int:
        key = (h, r, t)
        if key in self.tindex:
            return self.tindex[key]
        idx = len(self.triples)
        self.triples.append(key)
        self.tindex[key] = idx
        self.out[(h, r)].append(idx)
        self.into[(t, r)].append(idx)
        if qualifiers:
            self.qualifiers[idx] = dict(qualifiers)
        return idx

    def date(self, y: int, m: int, d: int) -> str:
        name = f"{d} {MONTHS[m - 1]} {y}"
        if name not in self.values:
            self.values[name] = self.add("value", name, [f"{MONTHS[m - 1]} {d}, {y}", f"{y:04d}-{m:02d}-{d:02d}"])
        return self.values[name]

    def year(self, y: int) -> str:
        name = str(y)
        if name not in self.values:
            self.values[name] = self.add("value", name, [])
        return self.values[name]

    def tail(self, h: str, r: str) -> str | None:
        idxs = self.out.get((h, r), [])
        return self.triples[idxs[0]][2] if idxs else None

    def heads(self, t: str, r: str) -> list[str]:
        return [self.triples[i][0] for i in self.into.get((t, r), [])]

    def name(self, eid: str) -> str:
        return self.entities[eid].name

    def short(self, eid: str) -> str:
        e = self.entities[eid]
        return e.aliases[0] if e.type in ("person", "country") and e.aliases else e.name

    # ---- the graph

    def build_graph(self) -> None:
        sizes = _sizes(self.cfg.n_entities)
        rng = self._rng("graph")
        nm = self.namer
        for _ in range(sizes["country"]):
            state = rng.choice(STATE_FORMS)

            def make(state=state):
                r = nm.root(1, COUNTRY_ENDINGS)
                return f"{state} {r}", [r]

            name, aliases = nm.named(make)
            cid = self.add("country", name, aliases)
            short = aliases[0]
            self.adjective[cid] = _adjective(short)
        countries = self.by_type["country"]
        city_country = [countries[i % len(countries)] for i in range(sizes["city"])]
        for k in range(sizes["city"]):
            name, _ = nm.named(lambda: (nm.root(0, CITY_ENDINGS), []))
            city = self.add("city", name, [])
            self.fact(city, "P131", city_country[k])
        for cid in countries:  # the first city of each country is its capital
            cap = next(c for c in self.by_type["city"] if self.tail(c, "P131") == cid)
            self.fact(cap, "P1376", cid)
            self.fact(cid, "P36", cap)
        for _ in range(sizes["university"]):
            form = rng.choice(UNIVERSITY_FORMS)

            def make(form=form):
                r = nm.root(1)
                name = form.format(r=r)
                alias = f"{r} University" if form != "{r} University" else f"University of {r}"
                if "Technology" in form:
                    alias = f"{r} Tech"
                return name, [alias]

            name, aliases = nm.named(make)
            uid = self.add("university", name, aliases)
            city = rng.choice(self.by_type["city"])
            self.fact(uid, "P131", city)
            self.fact(uid, "P17", self.tail(city, "P131"))
            self.fact(uid, "P571", self.year(rng.randint(1550, 1815)))
        for _ in range(sizes["company"]):
            kind = rng.choice(COMPANY_KINDS)

            def make(kind=kind):
                r = nm.root(rng.randint(0, 1), ("ex", "on", "ar", "ix", "um", "a", "ia"))
                return f"{r} {kind}", [r]

            name, aliases = nm.named(make)
            self.add("company", name, aliases)
        for _ in range(sizes["award"]):
            form = rng.choice(AWARD_FORMS)

            def make(form=form):
                r = nm.root(1)
                name = form.format(r=r)
                aliases = [f"{r} Award"] if "Award for" in form else []
                return name, aliases

            name, aliases = nm.named(make)
            aid = self.add("award", name, aliases)
            self.fact(aid, "P571", self.year(rng.randint(1860, 1935)))
            self.fact(aid, "P17", rng.choice(countries))
        self._people(sizes["person"])
        self._roles()
        self._works(sizes["film"], sizes["book"])
        self._occupations()

    def _person(self, gender: str, surname: str, year: int, home: str) -> str:
        rng = self._rng_people
        nm = self.namer
        year = min(year, 2000)

        def make():
            first, middle = nm.first_name(gender), nm.first_name(gender)
            while middle == first:
                middle = nm.first_name(gender)
            return f"{first} {middle} {surname}", [f"{first} {surname}", f"{first[0]}. {middle[0]}. {surname}"]

        name, aliases = nm.named(make)
        first, middle = name.split(" ")[:2]
        pid = self.add("person", name, aliases)
        birth = (year, rng.randint(1, 12), rng.randint(1, 28))
        self.people[pid] = _Person(pid, gender, first, middle, surname, birth, home)
        countries = self.by_type["country"]
        country = home if rng.random() < 0.8 else rng.choice(countries)
        cities = [c for c in self.by_type["city"] if self.tail(c, "P131") == country]
        city = rng.choice(cities)
        self.fact(pid, "P569", self.date(*birth))
        self.fact(pid, "P19", city)
        citizenship = country if rng.random() < 0.88 else rng.choice(countries)
        self.fact(pid, "P27", citizenship)
        return pid

    def _marry(self, a: str, b: str) -> None:
        self.fact(a, "P26", b)
        self.fact(b, "P26", a)

    def _people(self, budget: int) -> None:
        rng = self._rng_people = self._rng("people")
        countries = self.by_type["country"]
        made = 0
        while budget - made >= 4:
            cap = min(budget - made, rng.randint(10, 18))
            if budget - made - cap < 4:  # no runt family at the end
                cap = budget - made
            made += self._family(cap)
        while made < budget:  # one or two people without a family
            g = rng.choice("mf")
            self._person(g, self.namer.surname(), rng.randint(1850, 1980), rng.choice(countries))
            made += 1

    def _family(self, cap: int) -> int:
        """A family tree of at most ``cap`` people; with ``cap >= 10`` it always reaches a third generation."""
        rng = self._rng_people
        countries = self.by_type["country"]
        home = rng.choice(countries)
        y0 = rng.randint(1820, 1865)
        head = self._person("m", self.namer.surname(), y0, home)
        wife = self._person(
            "f", self.namer.surname(), y0 + rng.randint(-6, 3), home if rng.random() < 0.7 else rng.choice(countries)
        )
        self._marry(head, wife)
        made = 2
        queue = deque([(head, wife, 0)])
        while queue and made < cap:
            father, mother, gen = queue.popleft()
            fy, my = self.people[father].birth[0], self.people[mother].birth[0]
            base = max(fy + 20, my + 19)
            n_kids = rng.randint(2, 3) if gen == 0 else rng.randint(1, 3)
            for k, year in enumerate(sorted(rng.sample(range(base, base + 19), n_kids))):
                if made >= cap or year > 2000:
                    break
                gender = "m" if (gen == 0 and k == 0) else rng.choice("mf")
                child = self._person(gender, self.people[father].surname, year, self.people[father].home)
                self.fact(child, "P22", father)
                self.fact(child, "P25", mother)
                made += 1
                first_line = gen == 0 and k == 0
                if made < cap and gen < 3 and year <= 1975 and (first_line or rng.random() < 0.65):
                    other = "f" if gender == "m" else "m"
                    where = self.people[father].home if rng.random() < 0.6 else rng.choice(countries)
                    spouse = self._person(other, self.namer.surname(), year + rng.randint(-5, 5), where)
                    self._marry(child, spouse)
                    made += 1
                    queue.append((child, spouse, gen + 1) if gender == "m" else (spouse, child, gen + 1))
        return made

    def _roles(self) -> None:
        """Education, company founders and employees, awards (all date-consistent)."""
        rng = self._rng("roles")
        persons = self.by_type["person"]
        unis = self.by_type["university"]
        for pid in persons:
            if rng.random() < 0.78:
                home = [u for u in unis if self.tail(u, "P17") == self.tail(pid, "P27")]
                self.fact(pid, "P69", rng.choice(home) if home and rng.random() < 0.65 else rng.choice(unis))
        founders = [p for p in persons if 1830 <= self.people[p].birth[0] <= 1965]
        inception: dict[str, int] = {}
        founders = founders or persons
        n_co = len(self.by_type["company"])
        picked = rng.sample(founders, n_co) if len(founders) >= n_co else [rng.choice(founders) for _ in range(n_co)]
        for co, founder in zip(self.by_type["company"], picked):
            y = min(self.people[founder].birth[0] + rng.randint(25, 50), 2018)
            inception[co] = y
            country = self.tail(founder, "P27") if rng.random() < 0.75 else rng.choice(self.by_type["country"])
            city = rng.choice([c for c in self.by_type["city"] if self.tail(c, "P131") == country])
            self.fact(co, "P112", founder)
            self.fact(co, "P571", self.year(y))
            self.fact(co, "P159", city)
            self.fact(co, "P17", country)
        for pid in persons:
            if rng.random() >= 0.6:
                continue
            born = self.people[pid].birth[0]
            cos = [c for c in self.by_type["company"] if inception[c] <= born + 50 and self.tail(c, "P112") != pid]
            if cos and rng.random() < 0.7:
                self.fact(pid, "P108", rng.choice(cos))
            else:
                self.fact(pid, "P108", rng.choice(unis))
        awards = self.by_type["award"]
        for pid in persons:
            r = rng.random()
            k = 2 if r < 0.08 else 1 if r < 0.4 else 0
            born = self.people[pid].birth[0]
            for aid in rng.sample(awards, k):
                lo = max(born + 25, int(self.name(self.tail(aid, "P571"))) + 1)
                hi = min(born + 80, 2024)
                if lo <= hi:
                    self.fact(pid, "P166", aid, {AWARD_YEAR: str(rng.randint(lo, hi))})

    def _works(self, n_film: int, n_book: int) -> None:
        rng = self._rng("works")
        nm = self.namer
        persons = self.by_type["person"]
        for kind, n, forms, lo_b, hi_b, rel in (
            ("film", n_film, FILM_FORMS, 1860, 1985, "P57"),
            ("book", n_book, BOOK_FORMS, 1820, 1990, "P50"),
        ):
            eligible = [p for p in persons if lo_b <= self.people[p].birth[0] <= hi_b] or persons
            educated = [p for p in eligible if self.tail(p, "P69")]
            pool = educated if len(educated) >= n else eligible
            makers = rng.sample(pool, min(len(pool), max(1, round(n * 0.75))))
            for k in range(n):
                maker = makers[k] if k < len(makers) else rng.choice(makers)
                form = rng.choice(forms)
                name, aliases = nm.named(lambda form=form: (form.format(r=nm.root(1)), []))
                wid = self.add(kind, name, aliases)
                born = self.people[maker].birth[0]
                lo = max(born + (25 if kind == "film" else 22), 1905 if kind == "film" else 0)
                y = rng.randint(lo, max(lo, min(born + (60 if kind == "film" else 75), 2024)))
                self.fact(wid, rel, maker)
                self.fact(wid, "P577", self.year(y))

    def _occupations(self) -> None:
        rng = self._rng("occupations")
        for pid, p in self.people.items():
            employer = self.tail(pid, "P108")
            if self.heads(pid, "P57"):
                p.occupation = "film director"
            elif self.heads(pid, "P50"):
                p.occupation = rng.choice(("writer", "novelist", "historian", "poet"))
            elif self.heads(pid, "P112"):
                p.occupation = rng.choice(("industrialist", "entrepreneur"))
            elif employer and self.entities[employer].type == "university":
                p.occupation = rng.choice(("professor", "scholar", "lecturer"))
            elif employer:
                p.occupation = rng.choice(("engineer", "accountant", "manager", "chemist"))
            else:
                p.occupation = rng.choice(_GENERIC_JOBS)

    # ---- passages

    def draft(self, subject: str, source: str, title: str) -> _Draft:
        key = (subject, source)
        if key not in self.drafts:
            if title in self.titles:
                raise RuntimeError(f"duplicate passage title {title!r}")  # pragma: no cover
            self.titles.add(title)
            self.drafts[key] = _Draft(subject, source, title)
        return self.drafts[key]

    def say(self, d: _Draft, sentence: str, facts: list[int] = (), primary: bool = True) -> None:
        """Add a sentence to ``d`` that states ``facts``; the primary statement of a fact is its supporting passage."""
        d.sentences.append(sentence)
        for i in facts:
            if primary:
                self.primary.setdefault(i, d)
            if d not in self.fact_drafts[i]:
                self.fact_drafts[i].append(d)

    def idx(self, h: str, r: str, t: str) -> int:
        return self.tindex[(h, r, t)]

    def write_passages(self) -> None:
        rng = self._rng("passages")
        # Primary statements: every triple is stated once in its head's passage of the mapped source.
        for cid in self.by_type["country"]:
            self._country(cid, rng)
        for cid in self.by_type["city"]:
            self._city(cid, rng)
        for uid in self.by_type["university"]:
            self._university(uid, rng)
        for co in self.by_type["company"]:
            self._company(co, rng)
        for aid in self.by_type["award"]:
            self._award(aid, rng)
        for wid in self.by_type["film"] + self.by_type["book"]:
            self._work(wid, rng)
        for pid in self.by_type["person"]:
            self._person_passages(pid, rng)
        missing = [i for i in range(len(self.triples)) if i not in self.primary]
        if missing:
            raise RuntimeError(f"facts without a passage: {[self.triples[i] for i in missing[:5]]}")  # pragma: no cover

    def _country(self, cid: str, rng: random.Random) -> None:
        d = self.draft(cid, "wiki", self.name(cid))
        cap = self.tail(cid, "P36")
        self.say(
            d, f"The {self.name(cid)} is a country whose capital is {self.name(cap)}.", [self.idx(cid, "P36", cap)]
        )
        others = [c for c in self.heads(cid, "P131") if c != cap and self.entities[c].type == "city"]
        if others:
            shown = others[:3]
            listed = _listing([self.name(c) for c in shown])
            self.say(
                d,
                f"Other cities of {self.short(cid)} include {listed}.",
                [self.idx(c, "P131", cid) for c in shown],
                primary=False,
            )
        self.say(d, f"The {self.adjective[cid]} economy is known for {rng.choice(_TOPICS)}.")

    def _city(self, cid: str, rng: random.Random) -> None:
        d = self.draft(cid, "wiki", self.name(cid))
        country = self.tail(cid, "P131")
        self.say(d, f"{self.name(cid)} is a city in {self.short(country)}.", [self.idx(cid, "P131", country)])
        if self.tail(cid, "P1376"):
            self.say(d, f"It is the capital of {self.short(country)}.", [self.idx(cid, "P1376", country)])
        self.say(
            d, f"It has a population of about {rng.randint(8, 900) * 1000:,} and is known for {rng.choice(_TOPICS)}."
        )

    def _university(self, uid: str, rng: random.Random) -> None:
        d = self.draft(uid, "wiki", self.name(uid))
        city, country, year = self.tail(uid, "P131"), self.tail(uid, "P17"), self.tail(uid, "P571")
        self.say(
            d,
            f"{self.name(uid)} is a university in {self.name(city)}, {self.short(country)}, established in {self.name(year)}.",
            [self.idx(uid, "P131", city), self.idx(uid, "P17", country), self.idx(uid, "P571", year)],
        )
        self.say(d, f"It is known for its research on {rng.choice(_TOPICS)}.")

    def _company(self, co: str, rng: random.Random) -> None:
        d = self.draft(co, "news", self.name(co))
        founder, year = self.tail(co, "P112"), self.tail(co, "P571")
        city, country = self.tail(co, "P159"), self.tail(co, "P17")
        self.say(d, f"{self.name(co)} is a company founded in {self.name(year)} by {self.name(founder)}.",
                 [self.idx(co, "P571", year), self.idx(co, "P112", founder)])  # fmt: skip
        self.say(d, f"It is headquartered in {self.name(city)}, {self.short(country)}.",
                 [self.idx(co, "P159", city), self.idx(co, "P17", country)])  # fmt: skip
        self.say(d, f"Analysts say its business in {rng.choice(_TOPICS)} grew last year.")

    def _award(self, aid: str, rng: random.Random) -> None:
        d = self.draft(aid, "news", self.name(aid))
        year, country = self.tail(aid, "P571"), self.tail(aid, "P17")
        self.say(d, f"The {self.name(aid)} is an award established in {self.name(year)} in {self.short(country)}.",
                 [self.idx(aid, "P571", year), self.idx(aid, "P17", country)])  # fmt: skip
        recipients = [i for i in self.into.get((aid, "P166"), []) if rng.random() < 0.5][:3]
        if recipients:  # a secondary statement of award facts (with their years)
            listed = _listing(
                [f"{self.short(self.triples[i][0])} ({self.qualifiers[i][AWARD_YEAR]})" for i in recipients]
            )
            self.say(d, f"Recipients include {listed}.", recipients, primary=False)

    def _work(self, wid: str, rng: random.Random) -> None:
        e = self.entities[wid]
        year = self.tail(wid, "P577")
        if e.type == "film":
            maker = self.tail(wid, "P57")
            d = self.draft(wid, "wiki", e.name)
            genre = rng.choice(_GENRES_FILM)
            self.say(d, f"{e.name} is a {self.name(year)} {genre} film directed by {self.name(maker)}.",
                     [self.idx(wid, "P577", year), self.idx(wid, "P57", maker)])  # fmt: skip
            self.say(d, f"The film is set in a small town and deals with {rng.choice(_TOPICS)}.")
        else:
            maker = self.tail(wid, "P50")
            d = self.draft(wid, "academic", e.name)
            genre = rng.choice(_GENRES_BOOK)
            self.say(d, f"{e.name} is {_a(genre)} by {self.name(maker)}, first published in {self.name(year)}.",
                     [self.idx(wid, "P50", maker), self.idx(wid, "P577", year)])  # fmt: skip
            self.say(d, f"Scholars have read it as a study of {rng.choice(_TOPICS)}.")

    def _person_passages(self, pid: str, rng: random.Random) -> None:
        p = self.people[pid]
        name, short = self.name(pid), self.short(pid)
        he, his = ("He", "His") if p.gender == "m" else ("She", "Her")
        dob, pob, cit = self.tail(pid, "P569"), self.tail(pid, "P19"), self.tail(pid, "P27")
        # wiki: biography
        bio = self.draft(pid, "wiki", name)
        self.say(
            bio,
            f"{name} (born {self.name(dob)}) is {_a(self.adjective[cit])} {p.occupation}.",
            [self.idx(pid, "P569", dob)],
        )
        self.say(bio, rng.choice((f"{he} was born in {self.name(pob)}.", f"{short} was born in {self.name(pob)}.")),
                 [self.idx(pid, "P19", pob)])  # fmt: skip
        self.say(bio, rng.choice((f"{short} holds citizenship of {self.short(cit)}.", f"{he} is a citizen of {self.short(cit)}.")),
                 [self.idx(pid, "P27", cit)])  # fmt: skip
        father, mother = self.tail(pid, "P22"), self.tail(pid, "P25")
        if father and mother:
            child = "son" if p.gender == "m" else "daughter"
            self.say(bio, f"{he} is the {child} of {self.name(father)} and {self.name(mother)}.",
                     [self.idx(pid, "P22", father), self.idx(pid, "P25", mother)])  # fmt: skip
        spouse = self.tail(pid, "P26")
        if spouse:
            self.say(bio, rng.choice((f"{he} married {self.name(spouse)}.", f"{short} is married to {self.name(spouse)}.")),
                     [self.idx(pid, "P26", spouse)])  # fmt: skip
        kids = self.heads(pid, "P22") + self.heads(pid, "P25")
        if kids:  # secondary: the children's parent facts
            rel = "P22" if p.gender == "m" else "P25"
            listed = _listing([self.name(k) for k in kids[:3]])
            self.say(bio, f"{his} children include {listed}.", [self.idx(k, rel, pid) for k in kids[:3]], primary=False)
        uni = self.tail(pid, "P69")
        if uni and rng.random() < 0.3:  # secondary, other source than the academic profile
            self.say(bio, f"{he} was educated at {self.name(uni)}.", [self.idx(pid, "P69", uni)], primary=False)
        for i in self.out.get((pid, "P166"), []):
            if rng.random() < 0.3:
                aw = self.triples[i][2]
                self.say(
                    bio, f"{he} received the {self.name(aw)} in {self.qualifiers[i][AWARD_YEAR]}.", [i], primary=False
                )
        for co in self.heads(pid, "P112"):
            if rng.random() < 0.4:
                self.say(bio, f"{he} founded {self.name(co)}.", [self.idx(co, "P112", pid)], primary=False)
        # academic: education, books, university posts
        employer = self.tail(pid, "P108")
        books = self.heads(pid, "P50")
        if uni or books or (employer and self.entities[employer].type == "university"):
            ac = self.draft(pid, "academic", f"{name} (academic profile)")
            if uni:
                self.say(ac, rng.choice((f"{short} studied at {self.name(uni)}.", f"{short} was educated at {self.name(uni)}.",
                                         f"{short} graduated from {self.name(uni)}.")),
                         [self.idx(pid, "P69", uni)])  # fmt: skip
            for b in books:
                y = self.tail(b, "P577")
                self.say(
                    ac,
                    f"{he} wrote {self.name(b)} ({self.name(y)}).",
                    [self.idx(b, "P50", pid), self.idx(b, "P577", y)],
                    primary=False,
                )
            if employer and self.entities[employer].type == "university" and rng.random() < 0.5:
                self.say(
                    ac,
                    f"{he} later held a post at {self.name(employer)}.",
                    [self.idx(pid, "P108", employer)],
                    primary=False,
                )
            self.say(ac, f"{his} research focused on {rng.choice(_TOPICS)}.")
        # news: employment, awards, founding, films
        awards = self.out.get((pid, "P166"), [])
        founded, films = self.heads(pid, "P112"), self.heads(pid, "P57")
        if employer or awards or founded or films:
            nw = self.draft(pid, "news", f"{name} (career)")
            if rng.random() < 0.3:  # secondary birth facts in another source
                self.say(nw, f"{short} was born on {self.name(dob)} in {self.name(pob)}.",
                         [self.idx(pid, "P569", dob), self.idx(pid, "P19", pob)], primary=False)  # fmt: skip
            if employer:
                self.say(nw, rng.choice((f"{short} works for {self.name(employer)}.", f"{short} is employed by {self.name(employer)}.",
                                         f"{short} joined {self.name(employer)} as {_a(p.occupation)}.")),
                         [self.idx(pid, "P108", employer)])  # fmt: skip
            for i in awards:
                aw, y = self.triples[i][2], self.qualifiers[i][AWARD_YEAR]
                self.say(
                    nw,
                    rng.choice(
                        (
                            f"In {y}, {short} received the {self.name(aw)}.",
                            f"{short} was awarded the {self.name(aw)} in {y}.",
                        )
                    ),
                    [i],
                )
            for co in founded:
                y = self.tail(co, "P571")
                self.say(
                    nw,
                    f"{short} founded {self.name(co)} in {self.name(y)}.",
                    [self.idx(co, "P112", pid), self.idx(co, "P571", y)],
                    primary=False,
                )
            for f in films:
                y = self.tail(f, "P577")
                self.say(
                    nw,
                    f"{short} directed {self.name(f)} ({self.name(y)}).",
                    [self.idx(f, "P57", pid), self.idx(f, "P577", y)],
                    primary=False,
                )
            if books and rng.random() < 0.5:
                b = books[0]
                self.say(
                    nw, f"{short}'s book {self.name(b)} drew wide attention.", [self.idx(b, "P50", pid)], primary=False
                )

    # ---- distractors

    def write_distractors(self, n: int) -> None:
        rng = self._rng("distractors")
        kinds = (self._similar_person, self._similar_place, self._similar_company, self._similar_work,
                 self._festival, self._symposium, self._interview, self._soundtrack, self._review)  # fmt: skip
        weights = (4, 1, 1, 1, 2, 2, 2, 1, 1)
        made = 0
        for _ in range(50 * n + 100):
            if made >= n:
                break
            d = rng.choices(kinds, weights)[0](rng)
            if d is not None and d.title not in self.titles:
                self.titles.add(d.title)
                self.extra.append(d)
                made += 1

    def _similar_person(self, rng):
        base = self.people[rng.choice(self.by_type["person"])]
        first = self.namer.mutate(base.first)
        forms = [
            f"{first} {base.middle} {base.surname}",
            f"{first} {base.surname}",
            f"{first[0]}. {base.middle[0]}. {base.surname}",
        ]
        if first == base.first or not self.namer.free(forms):
            return None
        self.namer.claim(forms)
        he = "He" if base.gender == "m" else "She"
        y = base.birth[0] + rng.randint(-30, 30)
        date = f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {y}"
        city, uni = rng.choice(self.by_type["city"]), rng.choice(self.by_type["university"])
        co = rng.choice(self.by_type["company"])
        text = (f"{forms[0]} (born {date}) was {_a(rng.choice(_GENERIC_JOBS))} from {self.name(city)}. "
                f"{he} studied at {self.name(uni)} and later worked for {self.name(co)}. "
                f"{forms[1]} is sometimes confused with relatives of the same name.")  # fmt: skip
        return _Draft("", rng.choice(("wiki", "wiki", "news")), forms[0], [text])

    def _similar_place(self, rng):
        city = rng.choice(self.by_type["city"])
        fake = self.namer.mutate(self.name(city))
        if fake == self.name(city) or not self.namer.free([fake]):
            return None
        self.namer.claim([fake])
        country = rng.choice(self.by_type["country"])
        text = (f"{fake} is a village in {self.short(country)}, not to be confused with a larger town of a similar name. "
                f"It is known for {rng.choice(_TOPICS)}.")  # fmt: skip
        return _Draft("", "wiki", fake, [text])

    def _similar_company(self, rng):
        co = self.entities[rng.choice(self.by_type["company"])]
        root = self.namer.mutate(co.aliases[0])
        fake = f"{root} {co.name.split(' ', 1)[1]}"
        if root == co.aliases[0] or not self.namer.free([fake, root]):
            return None
        self.namer.claim([fake, root])
        person, city = rng.choice(self.by_type["person"]), rng.choice(self.by_type["city"])
        text = (f"{fake} is a small firm based in {self.name(city)}, founded in {rng.randint(1880, 2015)}. "
                f"Its director {self.short(person)} told reporters that the firm is unrelated to larger companies of a similar name.")  # fmt: skip
        return _Draft("", "news", fake, [text])

    def _similar_work(self, rng):
        wid = rng.choice(self.by_type["film"] + self.by_type["book"])
        e = self.entities[wid]
        words = e.name.replace(":", "").split()
        roots = [w for w in words if w.lower() in self.namer.words]
        if not roots:
            return None
        fake = e.name.replace(roots[0], self.namer.mutate(roots[0]))
        if fake == e.name or not self.namer.free([fake]):
            return None
        self.namer.claim([fake])
        person = rng.choice(self.by_type["person"])
        what = "short film" if e.type == "film" else "pamphlet"
        text = (f"{fake} is a {rng.randint(1905, 2020)} {what} credited to {self.name(person)}. "
                f"Critics noted that it shares little with {e.name} beyond its title.")  # fmt: skip
        return _Draft("", "academic" if e.type == "book" else "wiki", fake, [text])

    def _festival(self, rng):
        city = rng.choice(self.by_type["city"])
        y = rng.randint(1900, 2023)
        a, b = rng.sample(self.by_type["person"], 2)
        aw = rng.choice(self.by_type["award"])
        text = (f"The annual festival in {self.name(city)} drew large crowds in {y}. Guests included {self.short(a)} "
                f"and {self.short(b)}, and organisers discussed the history of the {self.name(aw)}.")  # fmt: skip
        return _Draft("", "news", f"{self.name(city)} festival ({y})", [text])

    def _symposium(self, rng):
        uni = rng.choice(self.by_type["university"])
        y = rng.randint(1900, 2023)
        topic = rng.choice(_TOPICS)
        ps = rng.sample(self.by_type["person"], 3)
        text = (f"In {y}, {self.name(uni)} hosted a symposium on {topic}. Invited speakers included "
                f"{self.short(ps[0])}, {self.short(ps[1])} and {self.short(ps[2])}, who presented short papers.")  # fmt: skip
        return _Draft("", "academic", f"Symposium on {topic} ({self.name(uni)}, {y})", [text])

    def _interview(self, rng):
        pid = rng.choice(self.by_type["person"])
        y = rng.randint(1950, 2023)
        he = "He" if self.people[pid].gender == "m" else "She"
        city = rng.choice(self.by_type["city"])
        text = (f"In a {y} interview, {self.short(pid)} spoke about {rng.choice(_TOPICS)} and a recent visit to "
                f"{self.name(city)}. {he} declined to discuss family matters.")  # fmt: skip
        return _Draft("", "news", f"Interview with {self.short(pid)} ({y})", [text])

    def _soundtrack(self, rng):
        film = rng.choice(self.by_type["film"])
        composer = rng.choice([p for p in self.by_type["person"] if p != self.tail(film, "P57")])
        text = (f"The soundtrack of {self.name(film)} was written by the composer {self.name(composer)} "
                f"and recorded in {self.name(rng.choice(self.by_type['city']))}.")  # fmt: skip
        return _Draft("", "wiki", f"{self.name(film)} (soundtrack)", [text])

    def _review(self, rng):
        book = rng.choice(self.by_type["book"])
        critic = rng.choice([p for p in self.by_type["person"] if p != self.tail(book, "P50")])
        y = int(self.name(self.tail(book, "P577"))) + rng.randint(1, 30)
        text = (f"In a {y} review, {self.name(critic)} described {self.name(book)} as a careful study of "
                f"{rng.choice(_TOPICS)}.")  # fmt: skip
        return _Draft("", "academic", f"Review of {self.name(book)}", [text])

    def assign_ids(self) -> list[Passage]:
        rng = self._rng("order")
        drafts = list(self.drafts.values()) + self.extra
        rng.shuffle(drafts)
        width = max(4, len(str(len(drafts))))
        out = []
        for k, d in enumerate(drafts, 1):
            d.pid = f"p{k:0{width}d}"
            out.append(Passage(id=d.pid, title=d.title, text=" ".join(d.sentences), source=d.source))
        return out

    # ---- questions

    def _walk(self, anchor: str, tpl: Template) -> list[int] | None:
        cur, seen, idxs = anchor, {anchor}, []
        for rel, ttype in tpl.path:
            cands = self.out.get((cur, rel), [])
            if len(cands) != 1:
                return None
            t = self.triples[cands[0]][2]
            if (ttype and self.entities[t].type != ttype) or t in seen:
                return None
            seen.add(t)
            idxs.append(cands[0])
            cur = t
        return idxs

    def _answers(self, eid: str, rel: str) -> list[str]:
        e = self.entities[eid]
        out = surface_forms(e)
        if e.type == "value" and rel == "P569":
            out.append(value_key(e)[:4])
        return out

    def _surface(self, eid: str, rng: random.Random) -> str:
        e = self.entities[eid]
        return rng.choice([e.name, e.aliases[0]]) if e.type == "person" else e.name

    def _candidates(self, tpl: Template, rng: random.Random, limit: int) -> list[_Cand]:
        anchors = self.by_type[tpl.anchor]
        out: list[_Cand] = []
        if tpl.qtype == "comparison":
            rel = tpl.path[0][0]
            have = [(a, self.out[(a, rel)][0]) for a in anchors if len(self.out.get((a, rel), [])) == 1]
            if len(have) < 2:
                return []
            seen: set[tuple[str, str]] = set()
            want_yes = True
            by_tail: dict[str, list[tuple[str, int]]] = defaultdict(list)
            for a, i in have:
                by_tail[self.triples[i][2]].append((a, i))
            groups = [g for g in by_tail.values() if len(g) >= 2]
            for _ in range(limit * 20):
                if len(out) >= limit:
                    break
                yes = tpl.compare == "same" and want_yes and bool(groups)
                (a, ia), (b, ib) = rng.sample(rng.choice(groups) if yes else have, 2)
                ta, tb = self.triples[ia][2], self.triples[ib][2]
                key = (min(a, b), max(a, b))
                if key in seen:
                    continue
                if tpl.compare == "earlier":
                    ka, kb = value_key(self.entities[ta]), value_key(self.entities[tb])
                    if ka[:4] == kb[:4]:  # different years, so "first" is never a matter of days
                        continue
                    winner = a if ka < kb else b
                    answers, answer_id = surface_forms(self.entities[winner]), winner
                else:
                    if not yes and ta == tb:
                        continue
                    answers, answer_id = (["yes"] if yes else ["no"]), ""
                    want_yes = not want_yes
                seen.add(key)
                q = tpl.text.format(a=self._surface(a, rng), b=self._surface(b, rng))
                out.append(_Cand(tpl, q, [a, b], [ia, ib], answers, answer_id))
            return out
        for a in anchors:
            if tpl.name == "award_year":
                for i in self.out.get((a, "P166"), []):
                    aw = self.triples[i][2]
                    q = tpl.text.format(a=self._surface(a, rng), b=self.name(aw))
                    out.append(_Cand(tpl, q, [a, aw], [i], [self.qualifiers[i][AWARD_YEAR]], ""))
                continue
            idxs = self._walk(a, tpl)
            if idxs is None:
                continue
            end = self.triples[idxs[-1]][2]
            q = tpl.text.format(a=self._surface(a, rng))
            if any(mentions(q, self.entities[self.triples[i][2]]) for i in idxs):
                continue  # an intermediate or final entity would leak into the question
            out.append(_Cand(tpl, q, [a], idxs, self._answers(end, tpl.path[-1][0]), end))
        rng.shuffle(out)
        return out

    def make_questions(self) -> list[Example]:
        rng = self._rng("questions")
        n = self.cfg.n_questions
        pools: dict[str, list[deque[_Cand]]] = {q: [] for q in QTYPES}
        for tpl in TEMPLATES:
            pools[tpl.qtype].append(deque(self._candidates(tpl, rng, limit=n)))
        target = {q: int(QTYPE_SHARE[q] * n) for q in QTYPES}
        for q in QTYPES[: n - sum(target.values())]:  # hand out the remainder
            target[q] += 1
        chosen: dict[str, list[_Cand]] = {q: [] for q in QTYPES}
        texts: set[str] = set()

        def take(qtype: str, k: int) -> int:
            got = 0
            queues = pools[qtype]
            while got < k and any(queues):
                for dq in queues:
                    if got >= k:
                        break
                    while dq:
                        c = dq.popleft()
                        if c.question not in texts:
                            texts.add(c.question)
                            chosen[qtype].append(c)
                            got += 1
                            break
            return got

        short = sum(target[q] - take(q, target[q]) for q in QTYPES)
        for q in QTYPES:  # a tiny world may run out of one type: fill from the others
            if short <= 0:
                break
            short -= take(q, short)
        fractions = self.cfg.splits
        by_split: dict[str, list[_Cand]] = {s: [] for s in SPLITS}
        for q in QTYPES:
            cands = chosen[q]
            rng.shuffle(cands)
            n_train = round(len(cands) * fractions[0])
            n_dev = round(len(cands) * fractions[1])
            by_split["train"] += cands[:n_train]
            by_split["dev"] += cands[n_train : n_train + n_dev]
            by_split["test"] += cands[n_train + n_dev :]
        examples = []
        for s in SPLITS:
            cands = by_split[s]
            rng.shuffle(cands)
            width = max(4, len(str(len(cands))))
            for k, c in enumerate(cands, 1):
                examples.append(self._example(c, f"world-{s}-{k:0{width}d}", s))
        return examples

    def _example(self, c: _Cand, qid: str, split: str) -> Example:
        tpl = c.tpl
        path, decomposition, resolved = [], [], []
        for k, i in enumerate(c.idxs):
            h, r, t = self.triples[i]
            step = {"head": self.name(h), "relation": RELATIONS[r][0], "tail": self.name(t),
                    "head_id": h, "relation_id": r, "tail_id": t}  # fmt: skip
            if i in self.qualifiers:
                ((qk, qv),) = self.qualifiers[i].items()
                step["qualifier"], step["qualifier_value"] = qk, qv
            path.append(step)
            ht, tt = self.entities[h].type, self.entities[t].type
            award = self.name(t) if r == "P166" else ""
            is_anchor = tpl.qtype == "comparison" or k == 0
            decomposition.append(sub_question(r, self.name(h) if is_anchor else f"#{k}", ht, tt, award))
            resolved.append(sub_question(r, self.name(h), ht, tt, award))
        support = [self.primary[i] for i in c.idxs]
        meta: dict[str, Any] = {"template": tpl.name, "anchors": c.anchors, "answer_id": c.answer_id,
                                "decomposition_resolved": resolved}  # fmt: skip
        if tpl.inferred:
            meta["inferred_relation"] = tpl.inferred
        if tpl.compare:
            meta["compare"] = tpl.compare
        return Example(
            id=qid,
            question=c.question,
            answers=c.answers,
            dataset="world",
            split=split,
            hops=len(path),
            qtype=tpl.qtype,
            decomposition=decomposition,
            kg_path=path,
            supporting_ids=[d.pid for d in support],
            supporting_titles=[d.title for d in support],
            sources=sorted({d.source for d in support}),
            meta=meta,
        )

    # ---- all together

    def build(self) -> tuple:
        """Every part of the world, in :class:`World`'s field order."""
        self.build_graph()
        self.write_passages()
        n_facts = len(self.drafts)
        self.write_distractors(max(self.cfg.n_passages - n_facts, round(0.1 * n_facts)))
        passages = self.assign_ids()
        examples = self.make_questions()
        relations = {r: Relation(r, name, list(aliases)) for r, (name, aliases) in RELATIONS.items()}
        return self.cfg, dict(self.entities), relations, list(self.triples), dict(self.qualifiers), passages, examples
