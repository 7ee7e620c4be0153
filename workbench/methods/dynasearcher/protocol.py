r"""DynaSearcher protocol (seed 000): ``<think>``, JSON ``<search>``, ``<result>``, ``<answer>`` with ``\boxed{}``.

The agent writes a JSON request ``{"query": "...", "entity": ["..."], "relation": ["..."]}``
inside ``<search>``: ``query`` goes to document search (the ``"search"`` tool, top-k) and
``entity`` / ``relation`` to knowledge-graph search (the ``"kg"`` tool). Both results come
back in one ``<result>`` block, documents first, then triples. The final answer is the
content of ``\boxed{}`` inside ``<answer>`` (paper Table 1).

Model output is untrusted. Strict JSON is the format; a request that needs repair is still
executed when its meaning is clear, and recorded as not strict (``json_strict`` flag, which
``format_ok`` requires):

* curly quotes (the paper's own Table 5 prints them), trailing commas, Python-style single
  quotes, code fences or text around the object: repaired, ``strict=False``;
* a bare string (no JSON object): taken as the query, ``strict=False``;
* a number as query / items: turned into text; ``entity`` given as a single string: wrapped
  in a list; items that are not text or numbers are dropped (each noted, ``strict=False``);
* anything else (broken JSON, an object where text is expected, a list as the request, no
  query and no entity) is an invalid action whose reason names the problem, e.g.
  ``search JSON: Expecting ',' delimiter at char 12``.

Optional KG filter (paper §4.1, Table 6): ``DynaSearcher(kg_filter_llm=llm)`` passes the
triples through ``workbench.tools.kg.kg_filter`` (at most 5 kept); the outcome (``ok``,
``error``, ``raw`` answer, kept positions) is recorded in the KG ``ToolCall``'s
``meta["filter"]``. A filter failure falls back to the search ranking, recorded, never raised.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from typing import Any

from workbench.core.types import Hit, ToolCall, Triple
from workbench.protocols.base import (
    ANSWER,
    INVALID,
    SEARCH,
    Action,
    Block,
    Observation,
    extract_boxed,
    failure_text,
)
from workbench.protocols.tagged import TaggedProtocol
from workbench.tools.base import Toolbox, clean_text, render_passages, render_triples
from workbench.util.textsafe import MAX_JSON_DEPTH, json_depth, parse_json

# Paper Table 1, adapted: "the wikipedia search tool" -> the search tools; wikidata -> a knowledge graph.
SYSTEM_PROMPT = (
    "You are a helpful assistant that can solve the given question step by step with the help of the search "
    "tools. Given a question, you need to first think about the reasoning process in the mind and then provide "
    "the answer. During thinking, you can invoke the search tools to search for fact information about specific "
    "topics if needed. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags respectively, and the search input and result are enclosed within <search> </search> and "
    "<result> </result> tags respectively. Search input is json format like "
    '{"query": "xxx", "entity": ["yyy"], "relation": ["zzz"]} and applied to the search tools, where query is '
    "used to search documents, entity(s) and relation(s) are used to search a knowledge graph of entities and "
    "relations. For example, <think> This is the reasoning process. </think> <search> "
    '{"query": "Who is the director of Avatar", "entity": ["Avatar"], "relation": ["director"]} </search> '
    "<result> search result here </result> <think> This is the reasoning process. </think> <answer> The final "
    "answer is \\boxed{ answer here } </answer>. In the last part of the answer, the final exact answer is "
    "enclosed within \\boxed{} with latex format."
)

# The paper gives no message for an invalid action; this one follows Search-R1's wording. Its tags are
# empty pairs, so a policy that echoes it writes no action.
INVALID_MESSAGE = (
    "\nMy previous action is invalid{why}. If I want to search, I should put a JSON request like "
    '{{"query": "...", "entity": ["..."], "relation": ["..."]}} inside <search></search>. If I want to give '
    "the final answer, I should write it inside <answer></answer> as: The final answer is \\boxed{{answer}}. "
    "Let me try again.\n"
)

TAGS = ("think", "search", "result", "answer")
#: Valid order: ``(think search result)* think answer`` (Table 1's iterative think -> search workflow).
SHAPE = r"(think search result )*think answer"
MAX_REQUEST_CHARS = 4000
"""A search request longer than this is invalid (no real request is; it bounds the JSON repair work)."""
_CURLY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'"})
_TRAILING_COMMA = re.compile(r",\s*(?=[}\]])")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")

# A fictional demonstration (nothing in it exists); its <result> is rendered by the protocol itself.
DEMO_QUESTION = "Who founded the company that built the Varnholt Bridge?"
DEMO_STEPS: list[tuple[str, Any]] = [
    (
        "policy",
        "<think> I need the company that built the Varnholt Bridge, then its founder. </think>\n<search> "
        '{"query": "Varnholt Bridge builder company founder", "entity": ["Varnholt Bridge"], '
        '"relation": ["manufacturer", "founded by"]} </search>',
    ),
    (
        "observation",
        (
            [Hit("d1", "Varnholt Bridge", "The Varnholt Bridge was built in 1911 by Ostmark Ironworks.")],
            [
                Triple("Varnholt Bridge", "manufacturer", "Ostmark Ironworks"),
                Triple("Ostmark Ironworks", "founded by", "Elsa Brandvik"),
            ],
        ),
    ),
    (
        "policy",
        "<think> Ostmark Ironworks built the bridge, and it was founded by Elsa Brandvik. </think>\n"
        "<answer> The final answer is \\boxed{Elsa Brandvik} </answer>",
    ),
]


# --------------------------------------------------------------------------- the JSON request


def _text_field(value: Any, key: str, notes: list[str]) -> tuple[str | None, str | None]:
    """``query`` as text: numbers become text, a list of scalars is joined; an object is an error."""
    if value is None:
        return "", None
    if isinstance(value, str):
        return value.strip(), None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        notes.append(f"{key!r} was a number")
        return str(value), None
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        notes.append(f"{key!r} was a list, joined")
        return " ".join(str(v).strip() for v in value).strip(), None
    return None, f"search JSON: {key!r} must be a string, got {_json_type(value)}"


def _list_field(value: Any, key: str, notes: list[str]) -> tuple[list[str] | None, str | None]:
    """``entity`` / ``relation`` as a list of names; a single string or number is wrapped."""
    if value is None:
        return [], None
    if isinstance(value, str):
        if value.strip():
            notes.append(f"{key!r} was a string, not a list")
        return ([value.strip()] if value.strip() else []), None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        notes.append(f"{key!r} was a number")
        return [str(value)], None
    if not isinstance(value, list):
        return None, f"search JSON: {key!r} must be a list of strings, got {_json_type(value)}"
    out: list[str] = []
    for v in value:
        if isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(str(v))
            notes.append(f"{key!r} item {v!r} was a number")
        else:
            notes.append(f"{key!r} item of type {_json_type(v)} dropped")
    return out, None


def _json_type(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")


def _loads(text: str) -> tuple[Any, str | None]:
    obj, err = parse_json(text, max_chars=MAX_REQUEST_CHARS)
    return obj, None if err is None else f"search JSON: {err}"


def _repair(text: str) -> tuple[Any, str | None]:
    """Curly quotes and trailing commas, then a Python literal (single quotes); ``(None, note)`` on failure."""
    fixed = _TRAILING_COMMA.sub("", text.translate(_CURLY))
    obj, err = _loads(fixed)
    if err is None:
        return obj, "repaired JSON (curly quotes or trailing commas)"
    if "'" not in fixed or json_depth(fixed) > MAX_JSON_DEPTH:  # "a" "b" would otherwise concatenate
        return None, None
    try:
        obj = ast.literal_eval(fixed)
    except Exception:  # SyntaxError, ValueError, MemoryError, RecursionError: all just "not a literal"
        return None, None
    return obj, "Python-style literal (single quotes)"


def parse_search_request(content: str) -> tuple[dict[str, Any] | None, str]:
    """A DynaSearcher request from ``<search>`` content: ``(request, "")`` or ``(None, reason)``.

    The request is ``{"query": str, "entity": [str], "relation": [str], "strict": bool, "notes": [str]}``.

    >>> parse_search_request('{"query": "who", "entity": ["Avatar"], "relation": ["director"]}')[0]["strict"]
    True
    >>> parse_search_request('{"query": "who" "entity": []}')
    (None, "search JSON: Expecting ',' delimiter at char 16")
    >>> r, _ = parse_search_request("{'query': 'who', 'entity': 'Avatar',}")
    >>> r["entity"], r["strict"]
    (['Avatar'], False)
    """
    text = _FENCE.sub("", str(content).strip()).strip()
    if not text:
        return None, "empty <search> request"
    if len(text) > MAX_REQUEST_CHARS:
        return None, f"search request too long ({len(text)} characters, at most {MAX_REQUEST_CHARS})"
    notes: list[str] = []
    lo = text.find("{")
    if text.startswith("["):  # a list is never a request (and its objects are not guessed at)
        obj, err = _loads(text)
        if err is not None:
            return None, err
    elif lo < 0:
        obj, err = _loads(text)
        if err is None and isinstance(obj, str):
            notes.append("a JSON string, not an object: taken as the query")
        else:
            obj = text
            notes.append("not JSON: the text was taken as the query")
    else:
        hi = text.rfind("}")
        body = text[lo : hi + 1] if hi > lo else text[lo:]
        if body != text:
            notes.append("text around the JSON object ignored")
        obj, err = _loads(body)
        if err is not None:
            obj, note = _repair(body)
            if note is None:
                return None, err
            notes.append(note)
    if isinstance(obj, str):
        obj = {"query": obj}
    if not isinstance(obj, dict):
        return None, f"search JSON: expected an object with query/entity/relation, got {_json_type(obj)}"
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        k = str(key).strip().lower()
        k = {"entities": "entity", "relations": "relation"}.get(k, k)
        if k in ("query", "entity", "relation") and k not in fields:
            fields[k] = value
        else:
            notes.append(f"key {str(key)[:40]!r} ignored")
    query, err = _text_field(fields.get("query"), "query", notes)
    if err:
        return None, err
    entity, err = _list_field(fields.get("entity"), "entity", notes)
    if err:
        return None, err
    relation, err = _list_field(fields.get("relation"), "relation", notes)
    if err:
        return None, err
    if not query and not entity:
        return None, "search JSON: no query and no entity"
    return {"query": query, "entity": entity, "relation": relation, "strict": not notes, "notes": notes}, ""


# --------------------------------------------------------------------------- the protocol


class DynaSearcher(TaggedProtocol):
    r"""DynaSearcher's grammar with document + KG search.

    Args:
        kg_filter_llm: ``str -> str`` callable; when set, KG triples go through the KG filter.
        kg_filter_keep: triples the filter keeps at most (paper: 5).
        top_k: documents per search (paper: top-5 with e5).
        **kwargs: see ``Protocol``.
    """

    name = "dynasearcher"
    stop = ("</search>", "</answer>")
    tags = TAGS
    observation_tags = ("result",)
    shape = SHAPE
    required_tools = ("search", "kg")

    def __init__(
        self, kg_filter_llm: Callable[[str], str] | None = None, kg_filter_keep: int = 5, top_k: int = 5, **kwargs: Any
    ):
        super().__init__(top_k=top_k, **kwargs)
        if kg_filter_keep < 1:
            raise ValueError(f"dynasearcher: kg_filter_keep must be >= 1, got {kg_filter_keep}")
        if kg_filter_llm is not None and not callable(kg_filter_llm):
            raise TypeError("dynasearcher: kg_filter_llm must be a callable str -> str (e.g. backend.as_llm())")
        self.kg_filter_llm = kg_filter_llm
        self.kg_filter_keep = kg_filter_keep

    def config(self) -> dict[str, Any]:
        return {**super().config(), "kg_filter": self.kg_filter_llm is not None, "kg_filter_keep": self.kg_filter_keep}

    system_text = SYSTEM_PROMPT
    demo_question = DEMO_QUESTION
    demo_steps = DEMO_STEPS

    def demo_observation(self, content: Any) -> str:
        return self.render(*content)  # (documents, triples, notes)

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        action = super().parse(text)
        if action.kind != SEARCH:
            return action
        request, reason = parse_search_request(action.payload)
        if request is None:
            return Action(INVALID, reason=reason)
        return Action(SEARCH, request)

    def answer_text(self, action: Action) -> str:
        raw = str(action.payload or "").strip()
        boxed = extract_boxed(raw)
        return raw if boxed is None else boxed

    def act(self, action: Action, toolbox: Toolbox, example: Any) -> Observation:
        if action.kind != SEARCH or not isinstance(action.payload, dict):
            return self.invalid_observation(action)
        req = action.payload
        query = req.get("query") or " ".join(req.get("entity", []) + req.get("relation", []))
        calls: list[ToolCall] = []
        notes: list[str] = []
        hits: list[Hit] | str = "Document search is not available."
        if "search" in toolbox:
            call = toolbox.call("search", query=query, k=self.top_k)
            calls.append(call)
            hits = call.hits() if call.ok else failure_text(call, "Document search")
        triples: list[Triple] | str | None = None
        if req.get("entity"):
            if "kg" in toolbox:
                call = toolbox.call(
                    "kg", entities=req["entity"], relations=req.get("relation") or [], query=req["query"]
                )
                calls.append(call)
                triples = (
                    self._filtered(call, example, req) if call.ok else failure_text(call, "Knowledge-graph search")
                )
            else:
                notes.append("Knowledge-graph search is not available; document results only.")
        return Observation(self.render(hits, triples, notes), calls)

    def _filtered(self, call: ToolCall, example: Any, req: dict[str, Any]) -> list[Triple]:
        """The KG filter (when configured): kept triples, with the outcome in ``call.meta["filter"]``."""
        triples = call.triples()
        if self.kg_filter_llm is None or not triples:
            return triples
        try:
            from workbench.tools.kg import kg_filter

            res = kg_filter(
                triples, getattr(example, "question", ""), req["query"], llm=self.kg_filter_llm,
                max_keep=self.kg_filter_keep, entities=req["entity"], relations=req.get("relation") or [],
            )  # fmt: skip
            call.meta["filter"] = {
                "ok": res.ok,
                "error": res.error,
                "raw": res.raw,
                "kept": res.kept_indices,
                "n_in": len(triples),
            }
            return list(res.kept)
        except Exception as e:  # the filter is optional: record the failure, keep the search ranking
            call.meta["filter"] = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "raw": "",
                "kept": list(range(min(len(triples), self.kg_filter_keep))),
                "n_in": len(triples),
            }
            return triples[: self.kg_filter_keep]

    def render(
        self, hits: list[Hit] | str, triples: list[Triple] | str | None = None, notes: Sequence[str] = ()
    ) -> str:
        """The ``<result>`` observation: documents, then triples (a third of the budget at most), then notes."""
        budget = self.max_obs_chars
        parts: list[str] = []
        if triples is not None:
            kg = triples if isinstance(triples, str) else render_triples(triples) or "No knowledge-graph triples found."
            kg = "Knowledge graph:\n" + clean_text(kg, budget // 3)
            budget -= len(kg) + 1
            parts.append(kg)
        if isinstance(hits, str):
            docs = hits
        else:
            docs = render_passages(hits, style="doc", max_chars_per_hit=self.max_chars_per_hit) or "No documents found."
        parts.insert(0, "Documents:\n" + clean_text(docs, max(0, budget - 11)))
        parts += [clean_text(n, 200) for n in notes]
        return self.wrap("result", "\n" + "\n".join(parts) + "\n", self.max_obs_chars + 200)

    def invalid_observation(self, action: Action) -> Observation:
        """The fixed message; a broken JSON request also gets its reason (``search JSON: ...``)."""
        reason = action.reason or ""
        why = f" ({clean_text(reason, 200)})" if reason.startswith(("search JSON", "search request")) else ""
        return Observation(INVALID_MESSAGE.format(why=why))

    # ------------------------------------------------------------------ format
    def answer_box(self, block: Block) -> bool:
        return block.well_formed and bool(extract_boxed(block.content))

    def extra_checks(self, traj, blocks, flags, errors) -> dict[str, Any]:
        """``json_strict`` (every search request was strict JSON) and a boxed final answer."""
        searches = [a for a in traj.actions if a.get("kind") == SEARCH]
        strict = all(isinstance(a.get("payload"), dict) and a["payload"].get("strict") for a in searches)
        last = traj.actions[-1] if traj.actions else {}
        final_boxed = last.get("kind") == ANSWER and bool(extract_boxed(str(last.get("payload") or "")))
        if flags["answered"] and not final_boxed:
            errors.append("no non-empty \\boxed{} in the final answer")
        if not strict:
            errors.append("a search request was not strict JSON")
        return {"json_strict": strict}
