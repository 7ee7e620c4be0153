"""Question templates of the synthetic world: KG path shapes per question type and the wording of
each hop's sub-question."""

from __future__ import annotations

from dataclasses import dataclass

# ----------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class Template:
    name: str
    qtype: str
    anchor: str
    """Entity type of the anchor (the only entity the question names)."""
    path: tuple[tuple[str, str | None], ...]
    """(relation id, required tail type or None) per hop, head -> tail."""
    text: str
    inferred: str = ""
    """For ``inference`` questions: the relation the path composes to."""
    compare: str = ""
    """For ``comparison`` questions: ``earlier`` (smaller value wins) or ``same`` (yes/no)."""


def _t(name, qtype, anchor, path, text, **kw) -> Template:
    return Template(name, qtype, anchor, tuple((r, t) for r, t in path), text, **kw)


_N = None
TEMPLATES: tuple[Template, ...] = (
    # 1hop
    _t("birthplace", "1hop", "person", [("P19", _N)], "Where was {a} born?"),
    _t("birthdate", "1hop", "person", [("P569", _N)], "When was {a} born?"),
    _t("citizenship", "1hop", "person", [("P27", _N)], "Which country is {a} a citizen of?"),
    _t("father", "1hop", "person", [("P22", _N)], "Who is the father of {a}?"),
    _t("mother", "1hop", "person", [("P25", _N)], "Who is the mother of {a}?"),
    _t("spouse", "1hop", "person", [("P26", _N)], "Who is the spouse of {a}?"),
    _t("university", "1hop", "person", [("P69", _N)], "Which university did {a} attend?"),
    _t("employer", "1hop", "person", [("P108", _N)], "Which organization employs {a}?"),
    _t("director", "1hop", "film", [("P57", _N)], "Who directed the film {a}?"),
    _t("author", "1hop", "book", [("P50", _N)], "Who wrote {a}?"),
    _t("founder", "1hop", "company", [("P112", _N)], "Who founded {a}?"),
    _t("capital", "1hop", "country", [("P36", _N)], "What is the capital of {a}?"),
    _t("city_country", "1hop", "city", [("P131", "country")], "In which country is {a} located?"),
    _t("university_city", "1hop", "university", [("P131", "city")], "In which city is {a} located?"),
    _t("company_inception", "1hop", "company", [("P571", _N)], "In what year was {a} founded?"),
    _t("film_year", "1hop", "film", [("P577", _N)], "In what year was the film {a} released?"),
    _t("award_year", "1hop", "person", [("P166", _N)], "In what year did {a} receive the {b}?"),
    # compositional (2 hops)
    _t("birthplace_country", "compositional", "person", [("P19", _N), ("P131", "country")],
       "In which country is the birthplace of {a} located?"),
    _t("employer_founder", "compositional", "person", [("P108", "company"), ("P112", _N)],
       "Who founded the company that employs {a}?"),
    _t("director_birthdate", "compositional", "film", [("P57", _N), ("P569", _N)], "When was the director of {a} born?"),
    _t("author_birthplace", "compositional", "book", [("P50", _N), ("P19", _N)], "Where was the author of {a} born?"),
    _t("father_university", "compositional", "person", [("P22", _N), ("P69", _N)],
       "Which university did the father of {a} attend?"),
    _t("citizenship_capital", "compositional", "person", [("P27", _N), ("P36", _N)],
       "What is the capital of the country of citizenship of {a}?"),
    _t("university_city", "compositional", "person", [("P69", _N), ("P131", "city")],
       "In which city is the university attended by {a} located?"),
    _t("spouse_birthplace", "compositional", "person", [("P26", _N), ("P19", _N)], "Where was the spouse of {a} born?"),
    _t("founder_birthdate", "compositional", "company", [("P112", _N), ("P569", _N)], "When was the founder of {a} born?"),
    _t("mother_birthplace", "compositional", "person", [("P25", _N), ("P19", _N)], "Where was the mother of {a} born?"),
    _t("employer_headquarters", "compositional", "person", [("P108", "company"), ("P159", _N)],
       "In which city is the company that employs {a} headquartered?"),
    _t("director_citizenship", "compositional", "film", [("P57", _N), ("P27", _N)],
       "Which country is the director of {a} a citizen of?"),
    _t("author_university", "compositional", "book", [("P50", _N), ("P69", _N)],
       "Which university did the author of {a} attend?"),
    # inference (2 hops composed into a relation the KG does not have)
    _t("paternal_grandfather", "inference", "person", [("P22", _N), ("P22", _N)],
       "Who is the paternal grandfather of {a}?", inferred="paternal grandfather"),
    _t("paternal_grandmother", "inference", "person", [("P22", _N), ("P25", _N)],
       "Who is the paternal grandmother of {a}?", inferred="paternal grandmother"),
    _t("maternal_grandfather", "inference", "person", [("P25", _N), ("P22", _N)],
       "Who is the maternal grandfather of {a}?", inferred="maternal grandfather"),
    _t("maternal_grandmother", "inference", "person", [("P25", _N), ("P25", _N)],
       "Who is the maternal grandmother of {a}?", inferred="maternal grandmother"),
    _t("mother_in_law", "inference", "person", [("P26", _N), ("P25", _N)],
       "Who is the mother-in-law of {a}?", inferred="mother-in-law"),
    _t("father_in_law", "inference", "person", [("P26", _N), ("P22", _N)],
       "Who is the father-in-law of {a}?", inferred="father-in-law"),
    # chain (3-4 hops)
    _t("director_university_country_capital", "chain", "film", [("P57", _N), ("P69", _N), ("P17", _N), ("P36", _N)],
       "What is the capital of the country where the university attended by the director of {a} is located?"),
    _t("author_birthplace_country", "chain", "book", [("P50", _N), ("P19", _N), ("P131", "country")],
       "In which country is the birthplace of the author of {a} located?"),
    _t("father_employer_founder", "chain", "person", [("P22", _N), ("P108", "company"), ("P112", _N)],
       "Who founded the company that employs the father of {a}?"),
    _t("grandfather_birthplace", "chain", "person", [("P22", _N), ("P22", _N), ("P19", _N)],
       "Where was the paternal grandfather of {a} born?"),
    _t("director_citizenship_capital", "chain", "film", [("P57", _N), ("P27", _N), ("P36", _N)],
       "What is the capital of the country of citizenship of the director of {a}?"),
    _t("director_spouse_university", "chain", "film", [("P57", _N), ("P26", _N), ("P69", _N)],
       "Which university did the spouse of the director of {a} attend?"),
    _t("author_mother_birthplace_country", "chain", "book", [("P50", _N), ("P25", _N), ("P19", _N), ("P131", "country")],
       "In which country is the birthplace of the mother of the author of {a} located?"),
    _t("founder_university_city", "chain", "company", [("P112", _N), ("P69", _N), ("P131", "city")],
       "In which city is the university attended by the founder of {a} located?"),
    _t("spouse_father_birthdate", "chain", "person", [("P26", _N), ("P22", _N), ("P569", _N)],
       "When was the father of the spouse of {a} born?"),
    _t("employer_founder_birthplace_country", "chain", "person",
       [("P108", "company"), ("P112", _N), ("P19", _N), ("P131", "country")],
       "In which country is the birthplace of the founder of the company that employs {a} located?"),
    # comparison (two anchors, one hop each)
    _t("born_first", "comparison", "person", [("P569", _N)], "Who was born first, {a} or {b}?", compare="earlier"),
    _t("film_first", "comparison", "film", [("P577", _N)], "Which film was released first, {a} or {b}?", compare="earlier"),
    _t("book_first", "comparison", "book", [("P577", _N)], "Which book was published first, {a} or {b}?", compare="earlier"),
    _t("company_first", "comparison", "company", [("P571", _N)], "Which company was founded first, {a} or {b}?",
       compare="earlier"),
    _t("same_university", "comparison", "person", [("P69", _N)], "Were {a} and {b} educated at the same university?",
       compare="same"),
    _t("same_birthplace", "comparison", "person", [("P19", _N)], "Were {a} and {b} born in the same city?", compare="same"),
    _t("same_citizenship", "comparison", "person", [("P27", _N)],
       "Are {a} and {b} citizens of the same country?", compare="same"),
)  # fmt: skip

# What a chain question asks once its first hops are answered: for each template of three or more hops, the question
# left after hop 1, 2, ... (``{a}`` the entity that hop found), up to the one before the last hop; after that the
# last hop's own sub-question is left. Where a two-hop template has the same path, its wording is used.
RESIDUALS: dict[str, tuple[str, ...]] = {
    "director_university_country_capital": (
        "What is the capital of the country where the university attended by {a} is located?",
        "What is the capital of the country where {a} is located?"),
    "author_birthplace_country": ("In which country is the birthplace of {a} located?",),
    "father_employer_founder": ("Who founded the company that employs {a}?",),
    "grandfather_birthplace": ("Where was the father of {a} born?",),
    "director_citizenship_capital": ("What is the capital of the country of citizenship of {a}?",),
    "director_spouse_university": ("Which university did the spouse of {a} attend?",),
    "author_mother_birthplace_country": ("In which country is the birthplace of the mother of {a} located?",
                                         "In which country is the birthplace of {a} located?"),
    "founder_university_city": ("In which city is the university attended by {a} located?",),
    "spouse_father_birthdate": ("When was the father of {a} born?",),
    "employer_founder_birthplace_country": ("In which country is the birthplace of the founder of {a} located?",
                                            "In which country is the birthplace of {a} located?"),
}


def sub_question(rel: str, head: str, head_type: str, tail_type: str, award: str = "") -> str:
    """One hop as a question about ``head``."""
    if rel == "P166":
        return f"In what year did {head} receive the {award}?"
    if rel == "P131":
        return f"In which {tail_type} is {head} located?"
    if rel == "P577":
        return f"When was {head} {'released' if head_type == 'film' else 'published'}?"
    return {
        "P19": "Where was {} born?",
        "P569": "When was {} born?",
        "P27": "Which country is {} a citizen of?",
        "P22": "Who is the father of {}?",
        "P25": "Who is the mother of {}?",
        "P26": "Who is the spouse of {}?",
        "P69": "Which university did {} attend?",
        "P108": "Which organization employs {}?",
        "P57": "Who directed {}?",
        "P50": "Who wrote {}?",
        "P112": "Who founded {}?",
        "P1376": "Which country is {} the capital of?",
        "P36": "What is the capital of {}?",
        "P17": "In which country is {} located?",
        "P159": "Where is {} headquartered?",
        "P571": "When was {} founded?",
    }[rel].format(head)
