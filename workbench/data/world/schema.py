"""The synthetic world's vocabulary: sources, splits, entity and question types, the Wikidata
relations it uses with their allowed signatures, and the entity / relation records."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Bumped whenever the generator's output changes; part of the cache key.
WORLD_FORMAT = 1

SOURCES = ("wiki", "news", "academic")
SPLITS = ("train", "dev", "test")
ENTITY_TYPES = ("person", "city", "country", "university", "company", "film", "book", "award", "value")
QTYPES = ("1hop", "compositional", "comparison", "inference", "chain")
#: Share of each question type (the brief's 20/35/15/10/20).
QTYPE_SHARE = {"1hop": 0.20, "compositional": 0.35, "comparison": 0.15, "inference": 0.10, "chain": 0.20}
#: Qualifier key of the year an award was received (Wikidata P585 "point in time").
AWARD_YEAR = "P585 point in time"

#: Wikidata P-ids used by the world: id -> (name, aliases).
RELATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "P19": ("place of birth", ("birthplace", "born in")),
    "P569": ("date of birth", ("birth date", "born on")),
    "P27": ("country of citizenship", ("citizenship", "nationality")),
    "P22": ("father", ("has father", "dad")),
    "P25": ("mother", ("has mother", "mom")),
    "P26": ("spouse", ("married to", "husband", "wife")),
    "P69": ("educated at", ("alma mater", "studied at")),
    "P108": ("employer", ("employed by", "works for")),
    "P166": ("award received", ("award", "prize received")),
    "P57": ("director", ("directed by", "film director")),
    "P50": ("author", ("written by", "writer")),
    "P112": ("founded by", ("founder", "established by")),
    "P131": ("located in the administrative territorial entity", ("located in", "is in")),
    "P1376": ("capital of", ("is capital of",)),
    "P36": ("capital", ("capital city", "seat of government")),
    "P17": ("country", ("sovereign state", "in country")),
    "P159": ("headquarters location", ("headquarters", "based in")),
    "P571": ("inception", ("founded in", "established in")),
    "P577": ("publication date", ("release date", "published in")),
}

#: Allowed (head type, tail type) pairs per relation; :func:`verify` checks every triple.
SIGNATURES: dict[str, set[tuple[str, str]]] = {
    "P19": {("person", "city")},
    "P569": {("person", "value")},
    "P27": {("person", "country")},
    "P22": {("person", "person")},
    "P25": {("person", "person")},
    "P26": {("person", "person")},
    "P69": {("person", "university")},
    "P108": {("person", "company"), ("person", "university")},
    "P166": {("person", "award")},
    "P57": {("film", "person")},
    "P50": {("book", "person")},
    "P112": {("company", "person")},
    "P131": {("city", "country"), ("university", "city")},
    "P1376": {("city", "country")},
    "P36": {("country", "city")},
    "P17": {("university", "country"), ("company", "country"), ("award", "country")},
    "P159": {("company", "city")},
    "P571": {("university", "value"), ("company", "value"), ("award", "value")},
    "P577": {("film", "value"), ("book", "value")},
}

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# ----------------------------------------------------------------------------- KG types


@dataclass
class Entity:
    id: str
    name: str
    aliases: list[str]
    type: str
    """One of :data:`ENTITY_TYPES`."""


@dataclass
class Relation:
    id: str
    name: str
    aliases: list[str]


def surface_forms(e: Entity) -> list[str]:
    return [e.name, *e.aliases]


def value_key(e: Entity) -> str:
    """Sortable form of a value entity: ISO date (``1872-03-14``) or the year."""
    return next((a for a in e.aliases if _ISO_RE.match(a)), e.name)


def year_of(e: Entity) -> int:
    return int(value_key(e)[:4])


def mentions(text: str, e: Entity) -> bool:
    """Whether ``text`` names ``e`` (canonical name or an alias, as whole words, any case)."""
    low = text.lower()
    for form in surface_forms(e):
        f = form.lower()
        if f in low and re.search(r"(?<![\w])" + re.escape(f) + r"(?![\w])", low):
            return True
    return False
