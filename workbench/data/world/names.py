"""Invented, pronounceable names for the synthetic world (people, places, organisations, works)."""

from __future__ import annotations

import random
import re

# ----------------------------------------------------------------------------- names

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t",
           "th", "tr", "v", "vr", "z", "sh", "j", "w", "", "", "")  # fmt: skip
_VOWELS = ("a", "a", "e", "e", "i", "o", "o", "u", "ae", "ei", "y")
_CODAS = ("n", "r", "l", "s", "th", "nd", "rn", "st", "m", "x", "ll", "sk", "v", "rd", "lm", "nt")
_LINKS = ("a", "e", "i", "o", "re", "ve", "la", "no", "ri", "so", "ta", "mi", "do", "ke")
_FEMALE = ("mora", "ina", "essa", "ia", "wyn", "ara", "ethe", "ise", "anne", "ora", "ela", "ith")
_MALE = ("dor", "ran", "mar", "vik", "ton", "bert", "ric", "las", "tan", "win", "mund", "ek", "o")
_SURNAME = ("quist", "holt", "ner", "wick", "sen", "ard", "ley", "mont", "ridge", "by", "ach", "ow", "ing", "er")
#: Endings of invented place names, then the forms of organisation and work names (``{r}``: an invented word).
CITY_ENDINGS = ("hollow", "mere", "ford", "wick", "haven", "stead", "burg", "dale", "port", "moor", "gate", "fell",
                "brook", "ton", "mouth", "crest")  # fmt: skip
COUNTRY_ENDINGS = ("via", "nia", "ria", "land", "mark", "stan", "lia", "ovia", "esse", "ara")
STATE_FORMS = ("Republic of", "Kingdom of", "Federation of", "Grand Duchy of", "Commonwealth of")
UNIVERSITY_FORMS = ("{r} University", "University of {r}", "{r} Institute of Technology", "{r} College",
                    "Royal Academy of {r}")  # fmt: skip
COMPANY_KINDS = ("Industries", "Holdings", "Works", "Systems", "Shipping", "Textiles", "Motors", "Foods", "Instruments",
                 "Press", "Mining", "Optics")  # fmt: skip
AWARD_FORMS = ("{r} Prize", "{r} Medal", "Order of {r}", "{r} Award for Literature", "{r} Award for Physics",
               "{r} Award for Cinema", "{r} Cross of Merit", "{r} Architecture Prize")  # fmt: skip
FILM_FORMS = ("The {r} Affair", "Return to {r}", "{r} Nights", "The Last Days of {r}", "Shadows over {r}",
              "The {r} Crossing", "A Winter in {r}", "The Ballad of {r}")  # fmt: skip
BOOK_FORMS = ("The {r} Letters", "Songs of {r}", "A History of {r}", "{r}: A Chronicle", "The House at {r}",
              "Notes from {r}", "The {r} Inheritance", "Letters to {r}")  # fmt: skip


_UNSAYABLE = re.compile(r"[^aeiouy]{4,}|(.)\1\1|^[^aeiouy]{3}|ii|uu|yy|aa|ae[aeiou]|[aeiou]ae")


def _cap(w: str) -> str:
    return w[:1].upper() + w[1:]


class Namer:
    """Invents words and names; every surface form (name or alias) is claimed once, case-insensitively."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.taken: set[str] = set()  # membership only; never iterated
        self.words: set[str] = set()
        self.first_pool: dict[str, list[str]] = {"m": [], "f": []}

    def _syllable(self) -> str:
        return self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)

    def _fresh(self, make) -> str:
        """A capitalised word from ``make()`` that is pronounceable and not used before."""
        for _ in range(1000):
            w = _cap(make())
            if len(w) >= 4 and w.lower() not in self.words and not _UNSAYABLE.search(w.lower()):
                self.words.add(w.lower())
                return w
        raise RuntimeError("name generator exhausted")  # pragma: no cover

    def root(self, links: int = 1, suffixes: tuple[str, ...] = ("",)) -> str:
        """A fresh invented word (never returned twice): a syllable, ``links`` linking syllables, a suffix."""

        def make():
            w = self._syllable() + "".join(self.rng.choice(_LINKS) for _ in range(links))
            if links and self.rng.random() < 0.3:
                w += self.rng.choice(_CODAS)
            return w + self.rng.choice(suffixes)

        return self._fresh(make)

    def free(self, forms: list[str]) -> bool:
        low = [f.lower() for f in forms]
        return len(set(low)) == len(low) and not any(f in self.taken for f in low)

    def claim(self, forms: list[str]) -> None:
        self.taken.update(f.lower() for f in forms)

    def named(self, make) -> tuple[str, list[str]]:
        """Call ``make()`` until its (name, aliases) are all unclaimed, then claim them."""
        for _ in range(1000):
            name, aliases = make()
            if self.free([name, *aliases]):
                self.claim([name, *aliases])
                return name, aliases
        raise RuntimeError("could not find a free name")  # pragma: no cover

    def first_name(self, gender: str) -> str:
        pool = self.first_pool[gender]
        if pool and self.rng.random() < 0.5:
            return self.rng.choice(pool)
        w = self.root(0, _FEMALE if gender == "f" else _MALE)
        pool.append(w)
        return w

    def surname(self) -> str:
        return self.root(0, _SURNAME)

    def mutate(self, word: str) -> str:
        """A similar-looking word: one vowel changed (for distractor names)."""
        idx = [i for i, ch in enumerate(word) if ch.lower() in "aeiou"]
        if not idx:
            return word + "e"
        i = self.rng.choice(idx)
        repl = self.rng.choice([v for v in "aeiou" if v != word[i].lower()])
        return word[:i] + (repl.upper() if word[i].isupper() else repl) + word[i + 1 :]
