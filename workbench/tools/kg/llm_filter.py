"""DynaSearcher's KG filter (Table 6): an LLM keeps at most 5 of the searched triples."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rapidfuzz import fuzz, process

from workbench.core.types import Triple
from workbench.tools.base import clean_text
from workbench.tools.kg.strings import name_words, normalize_name

# ----------------------------------------------------------------------------- KG filter (Table 6)

#: DynaSearcher Table 6, the KG filtering prompt, verbatim. The PDF text flattens the example
#: answer onto one line; we lay it out as a header row and a data row inside ``<evidence>``.
FILTER_PROMPT = """You are an information extraction expert. Given an input of query, entities and relations, your task is to extract the most relevant evidence(s). If there is no relevant one, return "None". The names of entities or relations can be multiple alias, retain the exact one.

For example,

<input> {"query": "Who is the director of Avatar", "entity": ["Avatar"], "relation": ["director"]} </input>
<result>
  {"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y1", "relation": "distinct element of; has class", "entity2_id": "x2", "entity2": "character code; codeset"}
  {"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y2", "relation": "director; directed", "entity2_id": "x3", "entity2": "James Cameron; james cameron; James Cameron"}
</result>
start extracting:
<evidence>
entity1; relation; entity2
Avatar; director; James Cameron
</evidence>
Now, start!

<input> {input} </input>
<result>
{result}
</result>
start extracting:
"""


@dataclass
class FilterResult:
    """The KG filter's outcome. On an unusable answer ``ok`` is False and ``kept`` holds the unfiltered top triples."""

    kept: list[Triple]
    ok: bool
    error: str | None
    raw: str
    prompt: str
    kept_indices: list[int] = field(default_factory=list)
    """0-based positions in the input list of the kept triples."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_filter_prompt(
    triples: Sequence[Triple],
    question: str,
    query: str,
    sub_query: str | None = None,
    entities: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
) -> str:
    """Table 6 prompt with the request (question, query, sub-query, entities, relations) and numbered triples.

    ``query`` is the search request's query; ``sub_query`` the current sub-question when the
    caller tracks one separately. The paper's example input holds query / entity / relation;
    the question and sub-query are added as the paper's text says the filter sees them.
    """
    inp: dict[str, Any] = {"question": str(question), "query": str(query)}
    if sub_query:
        inp["sub_query"] = str(sub_query)
    inp["entity"] = [str(e) for e in (entities or [])]
    inp["relation"] = [str(r) for r in (relations or [])]
    rows = []
    for i, t in enumerate(triples, 1):
        row = {
            "entity1_id": t.head_id, "entity1": t.head, "relation_id": t.relation_id,
            "relation": t.relation, "entity2_id": t.tail_id, "entity2": t.tail,
        }  # fmt: skip
        rows.append(f"  [{i}] " + json.dumps({k: clean_text(v, 300) for k, v in row.items()}, ensure_ascii=False))
    return FILTER_PROMPT.replace("{input}", json.dumps(inp, ensure_ascii=False)).replace("{result}", "\n".join(rows))


_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_EVIDENCE_RE = re.compile(r"<evidence>(.*?)(?:</evidence>|$)", re.S | re.I)
_HEADER_RE = re.compile(r"^\s*entity\s*1\s*;\s*relation\s*;\s*entity\s*2\s*", re.I)
_INDEX_LINE_RE = re.compile(r"^[\s\[\]().,;#]*\d+(?:[\s\[\]().,;#]+\d+)*[\s\[\]().,;#]*$")
_INDEX_PREFIX_RE = re.compile(r"^\s*(?:\[(\d+)\]|(\d+)[.):])\s*")


def parse_filter_answer(raw: str, triples: Sequence[Triple]) -> tuple[list[int] | None, str | None]:
    """Positions of the triples an answer keeps, or ``(None, why)`` when it is unusable.

    Accepts the paper's ``<evidence> head; relation; tail </evidence>`` (one per line, header row
    optional), numbered indices (``[2]``, ``2.``, ``1, 3``), and echoed triples (``(h, r, t)`` or
    the JSON rows of the prompt). ``None`` (no relevant evidence) gives ``([], None)``.
    """
    text = _THINK_RE.sub(" ", str(raw or "")).strip()
    if not text:
        return None, "empty answer"
    blocks = _EVIDENCE_RE.findall(text)
    body = "\n".join(blocks) if blocks else text
    body = _HEADER_RE.sub("", body.strip())
    if normalize_name(body) in ("none", "") and (blocks or normalize_name(text) == "none"):
        return [], None
    keys = [tuple(normalize_name(x) for x in (t.head, t.relation, t.tail)) for t in triples]
    joined = [" ".join(k) for k in keys]
    found: list[int] = []
    for line in re.split(r"\n|</?evidence>", body):
        line = _HEADER_RE.sub("", line).strip()
        if not line:
            continue
        for i in _parse_line(line, triples, keys, joined):
            if i not in found:
                found.append(i)
    if not found:
        why = "answer names no given triple" if blocks or ";" in body else "answer is prose without evidence or indices"
        return None, why
    return found, None


def _parse_line(line: str, triples: Sequence[Triple], keys: list[tuple[str, ...]], joined: list[str]) -> list[int]:
    n = len(triples)
    if _INDEX_LINE_RE.match(line):
        return [int(d) - 1 for d in re.findall(r"\d+", line) if 1 <= int(d) <= n]
    m = _INDEX_PREFIX_RE.match(line)
    if m and 1 <= int(m.group(1) or m.group(2)) <= n:
        rest = line[m.end() :].strip()  # "[2] (h, r, t)": trust the echoed triple over the number
        by_content = _parse_line(rest, triples, keys, joined) if rest else []
        return by_content or [int(m.group(1) or m.group(2)) - 1]
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            ids = (obj.get("entity1_id"), obj.get("relation_id"), obj.get("entity2_id"))
            for i, t in enumerate(triples):
                if all(ids) and ids == (t.head_id, t.relation_id, t.tail_id):
                    return [i]
            line = "; ".join(str(obj.get(k, "")) for k in ("entity1", "relation", "entity2"))
    if line.startswith("(") and line.endswith(")"):
        line = line[1:-1]
    parts = [normalize_name(p) for p in (line.split(";") if ";" in line else line.split(","))]
    if len(parts) == 3 and tuple(parts) in keys:
        return [keys.index(tuple(parts))]
    # names with ';' or ',' inside, or small slips: closest whole triple, if close enough
    flat = " ".join(name_words(normalize_name(line)))
    if not flat:
        return []
    best = process.extractOne(flat, [" ".join(name_words(j)) for j in joined], scorer=fuzz.ratio, score_cutoff=90)
    return [best[2]] if best else []


def kg_filter(
    triples: Sequence[Triple],
    question: str,
    query: str,
    sub_query: str | None = None,
    *,
    llm: Callable[[str], str],
    max_keep: int = 5,  # DynaSearcher: "up to five"
    entities: Sequence[str] | None = None,
    relations: Sequence[str] | None = None,
) -> FilterResult:
    """DynaSearcher's KG filter: an LLM keeps at most ``max_keep`` of the matched triples (Table 6).

    An unusable answer (the call raised, empty, prose, names nothing given) is recorded as
    ``ok=False`` with ``error`` saying why, and ``kept`` falls back to the first ``max_keep``
    triples (the search ranking). An explicit "None" answer is usable: nothing is kept.
    """
    triples = list(triples)
    prompt = build_filter_prompt(triples, question, query, sub_query, entities, relations)
    if not triples:
        return FilterResult([], True, None, "", prompt)
    fallback = triples[:max_keep]
    try:
        raw = llm(prompt)
    except Exception as e:  # the failure is recorded, the rollout goes on
        return FilterResult(
            fallback, False, f"llm raised {type(e).__name__}: {e}", "", prompt, list(range(len(fallback)))
        )
    raw = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    idx, why = parse_filter_answer(raw, triples)
    if idx is None:
        return FilterResult(fallback, False, why, raw, prompt, list(range(len(fallback))))
    idx = idx[:max_keep]
    return FilterResult([triples[i] for i in idx], True, None, raw, prompt, idx)
