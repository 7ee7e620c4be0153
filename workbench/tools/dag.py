"""NL-DAG search plans: parse, validate, execute, render (Shi & Shen, R-Search §3.3).

A plan is what the model writes inside ``<search>``::

    Nodes:
    A: Price fluctuation of coke in early October 2024 (News)
    B: Impact of global energy market on coke prices (News)
    C: International coke market dynamics in early October 2024 (News)
    Edges: A -> C; B -> C

Model output is untrusted input: :func:`parse_plan` never raises, it records each line it
cannot read as a :class:`Problem`; :func:`validate` adds every structural and tool problem
(``Plan.valid`` is the ``dag_valid`` flag behind ``F_dag``: 1 iff every check passes);
:func:`execute` runs the valid nodes level by level, the nodes of a level in parallel, and
turns a source that raises or hangs into a recorded error.

>>> from workbench.core.types import Hit
>>> reg = SourceRegistry()
>>> _ = reg.register("news", lambda q, k: [Hit("n1", "Coke prices", f"about {q}")], aliases=["gnews"])
>>> plan, res = run_plan("Nodes:\\nA: coke price (News)\\nB: coke demand (GNews)\\nEdges: A -> B", reg)
>>> plan.valid, [r.level for r in res.records]
(True, [0, 1])
>>> print(res.render())
Node A (news) Search results:
Result 1: Title: Coke prices Abstract: about coke price
<BLANKLINE>
Node B (news) Search results:
Result 1: Title: Coke prices Abstract: about coke demand
>>> parse_plan("A: coke (News)\\nA -> A").problems == []
True
>>> [p.code for p in validate(parse_plan("A: coke (Fax)\\nA -> A\\nhello"), reg).problems]
['malformed_line', 'unknown_tool', 'self_loop']
"""

from __future__ import annotations

import functools
import re
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import networkx as nx

from workbench.core.types import Hit, ToolCall
from workbench.tools.base import clean_text, render_passages, run_parallel
from workbench.tools.sources import SourceRegistry, normalize_tool_name

#: Every code a :class:`Problem` can carry.
PROBLEM_CODES = (
    "empty_plan",  # no node could be read
    "malformed_line",  # a line that is neither a node, an edge nor a header
    "malformed_node",  # a node without a sub-query or without a (Tool)
    "duplicate_node",  # the same id declared twice (the first declaration is kept)
    "unknown_tool",  # a (Tool) that is not one of the available sources
    "undeclared_node",  # an edge endpoint that no node line declares
    "self_loop",  # A -> A
    "cycle",  # A -> B -> A (problem.nodes lists the nodes on it)
    "too_many_nodes",  # more than max_nodes nodes (the extra ones are not executed)
    "too_long",  # a plan text longer than MAX_PLAN_CHARS (the rest is not read)
)
#: Problems found while reading the text; ``validate`` keeps them and recomputes the rest.
_PARSE_CODES = ("empty_plan", "malformed_line", "duplicate_node", "too_long")
DEFAULT_MAX_NODES = 10  # "maximum node limits" (R-Search §3.3 gives no number)
MAX_PLAN_CHARS = 20_000  # bounds the work on hostile output; a 10-node plan is under 2,000


@dataclass
class Problem:
    """One thing wrong with a plan; ``node`` names the node it concerns, ``nodes`` a cycle's nodes."""

    code: str
    message: str
    node: str | None = None
    nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.code not in PROBLEM_CODES:
            raise ValueError(f"Problem: unknown code {self.code!r} (use one of {', '.join(PROBLEM_CODES)})")


@dataclass
class Node:
    """``A: sub-query (Tool)``; ``tool_resolved`` is the canonical source name after ``validate``."""

    id: str
    query: str
    tool: str
    tool_resolved: str | None = None
    valid: bool = True
    problems: list[str] = field(default_factory=list)
    line: int = 0
    """1-based line of the declaration in the plan text."""


@dataclass
class Plan:
    """Nodes in declaration order, edges ``(parent, child)`` as written, and every problem found."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    validated: bool = False
    """Set by :func:`validate`; tool availability and structure are only checked there."""
    max_nodes: int | None = None

    @property
    def valid(self) -> bool:
        """``dag_valid``: validated and no problem at all (R-Search's F_dag is 1 iff this holds)."""
        return self.validated and not self.problems

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def parent_map(self) -> dict[str, list[str]]:
        """Declared parents of every node (edges ``P -> node``), without duplicates or self-loops."""
        out: dict[str, list[str]] = {nid: [] for nid in self.nodes}
        for a, b in self.edges:
            if a != b and a in self.nodes and b in out and a not in out[b]:
                out[b].append(a)
        return out

    def parents(self, node_id: str) -> list[str]:
        return self.parent_map().get(node_id, [])

    def to_text(self) -> str:
        """The plan in the canonical NL-DAG format (``parse_plan(plan.to_text())`` reads it back)."""
        lines = ["Nodes:"] + [f"{n.id}: {n.query} ({n.tool})" for n in self.nodes.values()]
        lines.append("Edges: " + ("; ".join(f"{a} -> {b}" for a, b in self.edges) or "none"))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": [asdict(n) for n in self.nodes.values()],
            "edges": [list(e) for e in self.edges],
            "problems": [asdict(p) for p in self.problems],
            "validated": self.validated,
            "valid": self.valid,
        }


# ----------------------------------------------------------------------------- parsing

# Patterns are written to stay linear on adversarial text (no two adjacent unbounded repeats).
_ARROW_RE = re.compile(r"(?<![-—–−=~])[-—–−=~]+>|[→⟶⟹⇒➔➜➝➞⇨]")
_EXTRA_PUNCT = str.maketrans({"、": ",", "【": "[", "】": "]", "“": '"', "”": '"', "‘": "'", "’": "'", "。": "."})
_SEARCH_TAG_RE = re.compile(r"<[\s/]*search\s*>", re.IGNORECASE)
_INLINE_EDGES_RE = re.compile(r"(?<=\))[ \t]+(?=(?i:edges?)\s*:)")
_BULLET_RE = re.compile(r"^(?:[-*+•·▪►]|[0-9]{1,3}[.)]|\([0-9]{1,3}\))\s+")
_FENCE_RE = re.compile(r"^`{3,}\w*$")
_HEADER_RE = re.compile(
    r"^(?P<head>(?i:nodes?|edges?|dependenc(?:y|ies))|节点|边)\s*(?:(?::|=)\s*(?P<rest>.*))?$", re.DOTALL
)
_ID = r"[A-Za-z][A-Za-z0-9_]{0,11}|[0-9]{1,3}"
_ID_RE = re.compile(rf"(?:{_ID})")
_NODE_RE = re.compile(rf"^(?:(?i:node)\s+)?\[?(?P<id>{_ID})\]?\s*(?:\((?P<tool>[^()]*)\)\s*)?:(?P<rest>.*)$", re.DOTALL)
_LIST_SPLIT_RE = re.compile(r"[,&+]|\band\b")
_NONE_WORDS = {"", "none", "no edges", "n/a", "na", "nil", "null", "empty", "-", "无", "[]", "{}"}


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_EXTRA_PUNCT)
    text = _SEARCH_TAG_RE.sub("\n", text)
    text = _INLINE_EDGES_RE.sub("\n", text)
    return _ARROW_RE.sub("->", text)


def _clean_line(line: str) -> str:
    line = line.strip()
    if _FENCE_RE.match(line):
        return ""
    return _BULLET_RE.sub("", line.replace("**", "").replace("`", "")).strip()


def _split_tool(body: str) -> tuple[str, str | None]:
    """``"q (News)" -> ("q", "News")``; the tool is the last balanced ``(...)`` or ``[...]`` group."""
    s = body.strip().rstrip(".;,").rstrip()
    if not s or s[-1] not in ")]":
        return s, None
    close = s[-1]
    open_ = "(" if close == ")" else "["
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == close:
            depth += 1
        elif s[i] == open_:
            depth -= 1
            if depth == 0:
                return s[:i].strip(), s[i + 1 : -1].strip()
    return s, None


def _clean_query(q: str) -> str:
    return " ".join(q.split()).strip("\"'").strip()


def _is_none(s: str) -> bool:
    return s.strip().strip("()[]{}.").strip().lower() in _NONE_WORDS


def _ids(group: str) -> list[str] | None:
    out = []
    for piece in _LIST_SPLIT_RE.split(group.strip()):
        piece = piece.strip().strip("\"'[]{}()").strip()
        if piece[:5].lower() == "node ":
            piece = piece[5:].strip()
        if not _ID_RE.fullmatch(piece):
            return None
        out.append(piece)
    return out


def _parse_edges(s: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Edges from ``A -> B; C -> B``, chains ``A -> B -> C`` and fans ``A, B -> C``; plus unreadable segments."""
    edges: list[tuple[str, str]] = []
    bad: list[str] = []
    for seg in s.split(";"):
        seg = seg.strip().strip(".").strip()
        if not seg:
            continue
        parts = seg.split(",")
        subsegs = parts if len(parts) > 1 and all("->" in p for p in parts) else [seg]
        for sub in subsegs:
            groups = [_ids(g) for g in sub.split("->")]
            if len(groups) < 2 or any(g is None for g in groups):
                bad.append(sub.strip())
                continue
            for left, right in zip(groups, groups[1:]):
                edges += [(a, b) for a in left for b in right]  # type: ignore[union-attr]
    return edges, bad


def _node_decls(line: str) -> list[tuple[str, str, str | None]]:
    """``(id, body, tool written before the colon)`` for each node on the line (usually one)."""
    m = _NODE_RE.match(line)
    if m is None:
        return []
    if ";" in line:  # several nodes on one line: "A: q1 (News); B: q2 (Web)"
        parts = [_NODE_RE.match(p.strip()) for p in line.split(";")]
        if all(p is not None and ((p["tool"] or "").strip() or _split_tool(p["rest"])[1]) for p in parts):
            return [(p["id"], p["rest"], (p["tool"] or "").strip() or None) for p in parts]  # type: ignore[index]
    return [(m["id"], m["rest"], (m["tool"] or "").strip() or None)]


def parse_plan(text: str | None) -> Plan:
    """Read an NL-DAG; never raises. Problems found here: ``empty_plan``, ``malformed_line``,
    ``malformed_node``, ``duplicate_node`` (call :func:`validate` for the rest).

    Tolerates full-width punctuation, arrows ``-> → => —>``, chains, edges separated by ``;``
    ``,`` or newlines, bullets and numbering, a missing ``Nodes:`` header, and a node line
    wrapped before its ``(Tool)`` (the continuation lines are joined, as in the paper's Fig. 4).

    >>> p = parse_plan("节点：\\n- A：苹果 2024 财报（News）\\n1. B: Apple revenue (Web)\\nEdges: A → B")
    >>> [(n.id, n.query, n.tool) for n in p.nodes.values()], p.edges
    ([('A', '苹果 2024 财报', 'News'), ('B', 'Apple revenue', 'Web')], [('A', 'B')])
    """
    plan = Plan()
    text = "" if text is None else str(text)
    if len(text) > MAX_PLAN_CHARS:
        msg = f"the plan has {len(text)} characters; only the first {MAX_PLAN_CHARS} were read"
        plan.problems.append(Problem("too_long", msg))
        text = text[:MAX_PLAN_CHARS]
    decls: list[list[Any]] = []  # [id, body, tool, line]
    open_decl = False  # the previous line declared a node that still lacks its (Tool)
    section = ""
    for lineno, raw in enumerate(_normalize(text).splitlines(), 1):
        line = _clean_line(raw)
        if not line:
            open_decl = False
            continue
        head = _HEADER_RE.match(line)
        if head is not None:
            section = "edges" if head["head"].lower()[:1] in ("e", "d", "边") else "nodes"
            open_decl = False
            line = _clean_line(head["rest"] or "")
            if not line or (section == "edges" and _is_none(line)):
                continue
        found = _node_decls(line)
        if found:
            decls += [[i, body, tool, lineno] for i, body, tool in found]
            open_decl = not found[-1][2] and _split_tool(found[-1][1])[1] is None
            continue
        if "->" in line:
            edges, bad = _parse_edges(line)
            plan.edges += edges
            for seg in bad:
                msg = f"line {lineno}: cannot read edge {seg[:80]!r} (write `A -> B; C -> B`)"
                plan.problems.append(Problem("malformed_line", msg))
            open_decl = False
            continue
        if open_decl:  # a node line wrapped before its "(Tool)"
            decls[-1][1] += " " + line
            open_decl = _split_tool(decls[-1][1])[1] is None
            continue
        if section == "edges" and _is_none(line):
            continue
        msg = f"line {lineno}: not a node (`A: sub-query (Tool)`), edge or header: {line[:80]!r}"
        plan.problems.append(Problem("malformed_line", msg))

    by_fold: dict[str, str] = {}
    for nid, body, tool, lineno in decls:
        if nid.casefold() in by_fold:
            first = plan.nodes[by_fold[nid.casefold()]]
            msg = f"line {lineno}: node {nid} is declared again (first on line {first.line}); the first is kept"
            plan.problems.append(Problem("duplicate_node", msg, node=first.id))
            continue
        query, tail_tool = (body, None) if tool else _split_tool(body)
        node = Node(nid, _clean_query(query), (tool or tail_tool or "").strip(), line=lineno)
        by_fold[nid.casefold()] = nid
        plan.nodes[nid] = node
        problem = _malformed(node)
        if problem:
            node.valid = False
            node.problems.append(problem)
            plan.problems.append(Problem("malformed_node", problem, node=nid))
    edges = [(by_fold.get(a.casefold(), a), by_fold.get(b.casefold(), b)) for a, b in plan.edges]
    plan.edges = list(dict.fromkeys(edges))
    if not plan.nodes:
        why = "the plan is empty" if not text.strip() else "no line of the form `A: sub-query (Tool)`"
        plan.problems.insert(0, Problem("empty_plan", f"no nodes found ({why})"))
    return plan


def _malformed(node: Node) -> str | None:
    missing = [w for w, v in (("sub-query", node.query), ("(Tool)", node.tool)) if not v]
    if not missing:
        return None
    return f"node {node.id}: missing {' and '.join(missing)} (write `{node.id}: sub-query (Tool)`)"


# ----------------------------------------------------------------------------- validation


def _as_registry(tools: Iterable[str] | SourceRegistry) -> SourceRegistry:
    if isinstance(tools, SourceRegistry):
        return tools
    reg = SourceRegistry()
    for name in [tools] if isinstance(tools, str) else tools:
        if normalize_tool_name(name) and reg.resolve(name) is None:
            reg.register(name, _not_a_source)
    return reg


def _not_a_source(query: str, k: int) -> list[Hit]:
    raise RuntimeError("validate() was given tool names only; execute the plan with a SourceRegistry")


def validate(plan: Plan, tools: Iterable[str] | SourceRegistry, max_nodes: int = DEFAULT_MAX_NODES) -> Plan:
    """A copy of ``plan`` with every problem reported and invalid nodes flagged; never raises on a plan.

    Checks (R-Search §3.3/§3.4): each node has a sub-query and a tool, the tool is available
    (names resolve case-insensitively, through a registry's aliases), at most ``max_nodes``
    nodes (the extra ones are not executed), every edge endpoint is declared, no self-loop,
    no cycle. A node with an unknown tool, on a cycle, or past ``max_nodes`` is marked invalid
    (and not executed); nodes that depend on it stay valid. Idempotent.
    """
    if max_nodes < 1:
        raise ValueError(f"validate: max_nodes must be >= 1, got {max_nodes}")
    reg = _as_registry(tools)
    nodes = {nid: replace(n, tool_resolved=None, valid=True, problems=[]) for nid, n in plan.nodes.items()}
    problems = [p for p in plan.problems if p.code in _PARSE_CODES]

    def flag(node: Node, code: str, msg: str, **kw: Any) -> None:
        node.valid = False
        node.problems.append(msg)
        problems.append(Problem(code, msg, node=node.id, **kw))

    available = ", ".join(reg.names()) or "none"
    for n in nodes.values():
        msg = _malformed(n)
        if msg:
            flag(n, "malformed_node", msg)
            continue
        n.tool_resolved = reg.resolve(n.tool)
        if n.tool_resolved is None:
            flag(n, "unknown_tool", f"node {n.id}: unknown tool {n.tool!r} (available: {available})")

    if len(nodes) > max_nodes:
        extra = tuple(list(nodes)[max_nodes:])
        msg = f"{len(nodes)} nodes, more than max_nodes={max_nodes}; not executed: {', '.join(extra)}"
        problems.append(Problem("too_many_nodes", msg, nodes=extra))
        for nid in extra:
            nodes[nid].valid = False
            nodes[nid].problems.append(f"beyond max_nodes={max_nodes}")

    undeclared: dict[str, list[str]] = {}
    for a, b in plan.edges:
        for x in dict.fromkeys((a, b)):
            if x not in nodes:
                undeclared.setdefault(x, []).append(f"{a} -> {b}")
    for x, where in undeclared.items():
        problems.append(Problem("undeclared_node", f"edge {'; '.join(where)} uses undeclared node {x}", node=x))
    for a in dict.fromkeys(a for a, b in plan.edges if a == b and a in nodes):
        flag(nodes[a], "self_loop", f"node {a} depends on itself ({a} -> {a})")

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from((a, b) for a, b in plan.edges if a != b and a in nodes and b in nodes)
    order = {nid: i for i, nid in enumerate(nodes)}
    cycles = [sorted(c, key=order.__getitem__) for c in nx.strongly_connected_components(g) if len(c) > 1]
    for on_cycle in sorted(cycles, key=lambda c: order[c[0]]):
        path = _cycle_from(g, on_cycle)
        msg = f"cycle {_few(path + path[:1], ' -> ')} (nodes on it: {_few(on_cycle, ', ')})"
        problems.append(Problem("cycle", msg, node=on_cycle[0], nodes=tuple(on_cycle)))
        for nid in on_cycle:
            nodes[nid].valid = False
            nodes[nid].problems.append(msg)
    return Plan(nodes, list(plan.edges), problems, validated=True, max_nodes=max_nodes)


def _cycle_from(g: nx.DiGraph, component: list[str]) -> list[str]:
    """A cycle inside a strongly connected ``component``: from its first node, follow the first
    successor inside it until a node repeats (what a DFS finds first, in linear time)."""
    inside, seen, path, u = set(component), {}, [], component[0]
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = next(v for v in g.successors(u) if v in inside)
    return path[seen[u] :]


# ----------------------------------------------------------------------------- execution


@dataclass
class NodeResult:
    """What happened to one node: hits, or an ``error`` (the source failed), or a ``skipped_reason``."""

    node_id: str
    tool: str
    query: str
    hits: list[Hit] = field(default_factory=list)
    error: str | None = None
    skipped_reason: str | None = None
    latency_s: float = 0.0
    level: int | None = None
    """Topological level (0 = no parents); ``None`` for a skipped node."""
    parents: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped_reason is None

    def render(self, max_chars_per_hit: int = 400) -> str:
        head = f"Node {clean_text(self.node_id, 40)} ({clean_text(self.tool, 60)})"
        if self.skipped_reason is not None:
            return f"{head} skipped: {clean_text(self.skipped_reason, 300)}"
        if self.error is not None:
            return f"{head} search failed: {clean_text(self.error, 300)}"
        body = render_passages(self.hits, style="abstract", max_chars_per_hit=max_chars_per_hit)
        return f"{head} Search results:\n{body or 'No results.'}"


def _few(ids: list[str], sep: str, n: int = 8) -> str:
    """At most ``n`` ids joined (a 40k-node cycle must not make a 40k-id message per node)."""
    more = f"{sep}... ({len(ids) - n + 1} more){sep}{ids[-1]}" if len(ids) > n else ""
    return sep.join(ids[: n - 1] if more else ids) + more


def _cap(s: str, n: int) -> str:
    if len(s) <= n:
        return s
    return "" if n <= 0 else s[: n - 1].rstrip() + "…"


@dataclass
class PlanResult:
    """Per-node records in execution order (by level, then declaration), skipped nodes last."""

    plan: Plan
    records: list[NodeResult] = field(default_factory=list)
    k: int = 3
    wall_s: float = 0.0

    def __getitem__(self, node_id: str) -> NodeResult:
        for r in self.records:
            if r.node_id == node_id:
                return r
        raise KeyError(f"no node {node_id!r} in this plan result (nodes: {', '.join(self.plan.nodes) or 'none'})")

    @property
    def levels(self) -> list[list[str]]:
        out: list[list[str]] = []
        for r in self.records:
            if r.level is not None:
                while len(out) <= r.level:
                    out.append([])
                out[r.level].append(r.node_id)
        return out

    @property
    def n_executed(self) -> int:
        return sum(r.skipped_reason is None for r in self.records)

    def render(self, max_chars_per_hit: int = 400, max_chars: int = 4000) -> str:
        """The ``<result>`` text: one block per node, ``Node A (news) Search results:`` then
        ``Result i: Title: ... Abstract: ...`` lines; at most ``max_chars`` characters, shared so
        that every node keeps its header line when the whole does not fit."""
        if not self.records:
            why = "; ".join(p.message for p in self.plan.problems) or "the plan has no nodes"
            return _cap(f"No search was run: {clean_text(why)}", max_chars)
        blocks = [r.render(max_chars_per_hit) for r in self.records]
        sep = "\n\n"
        if len(sep.join(blocks)) <= max_chars:
            return sep.join(blocks)
        budget = max_chars - len(sep) * (len(blocks) - 1)
        share = {}
        for left, i in enumerate(sorted(range(len(blocks)), key=lambda i: len(blocks[i])), 0):
            share[i] = min(len(blocks[i]), max(0, budget) // (len(blocks) - left))
            budget -= share[i]
        return _cap(sep.join(_cap(b, share[i]) for i, b in enumerate(blocks)), max_chars)

    def to_tool_calls(self) -> list[ToolCall]:
        """One ``ToolCall`` per node, for a trajectory's log (skips are errors with ``meta.skipped``)."""
        return [
            ToolCall(
                name=r.tool,
                args={"query": r.query, "k": self.k, "node": r.node_id},
                results=[h.to_dict() for h in r.hits],
                error=r.error if r.skipped_reason is None else f"skipped: {r.skipped_reason}",
                latency_s=r.latency_s,
                meta={"level": r.level, "parents": list(r.parents), "skipped": r.skipped_reason is not None},
            )
            for r in self.records
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "records": [asdict(r) for r in self.records],
            "k": self.k,
            "wall_s": self.wall_s,
        }


def _run_level(
    nodes: list[Node], registry: SourceRegistry, k: int, max_workers: int, timeout_s: float
) -> dict[str, tuple[list[Hit], str | None, float]]:
    """Run one level's nodes in parallel (``run_parallel``: a source that raises, hangs or never
    starts is an error naming it)."""
    calls = {n.id: functools.partial(registry.search, n.tool_resolved or n.tool, n.query, k) for n in nodes}
    out = run_parallel(calls, max_workers, timeout_s)
    tool = {n.id: n.tool_resolved for n in nodes}
    sep = {True: ": ", False: " "}
    return {
        nid: (hits or [], None if err is None else f"source {tool[nid]!r}{sep[err.startswith('never')]}{err}", lat)
        for nid, (hits, err, lat) in out.items()
    }


def execute(
    plan: Plan, registry: SourceRegistry, k: int = 3, max_workers: int = 4, timeout_s: float = 30.0
) -> PlanResult:
    """Run a plan's valid nodes in topological levels; the nodes of one level run in parallel.

    The plan is (re-)validated against ``registry`` first (with its own ``max_nodes``). Queries
    run as written (R-Search's sub-queries are self-contained); each record keeps its parents.
    Invalid nodes are recorded as skipped with the reason; a node whose parent was skipped or
    failed still runs.
    """
    if max_workers < 1 or timeout_s <= 0:
        raise ValueError(f"execute: need max_workers >= 1 and timeout_s > 0, got {max_workers} and {timeout_s}")
    t0 = time.perf_counter()
    plan = validate(plan, registry, max_nodes=plan.max_nodes or DEFAULT_MAX_NODES)
    runnable = [nid for nid, n in plan.nodes.items() if n.valid]
    order = {nid: i for i, nid in enumerate(plan.nodes)}
    parents = plan.parent_map()
    g = nx.DiGraph()
    g.add_nodes_from(runnable)
    g.add_edges_from((p, c) for c in runnable for p in parents[c] if p in g)
    levels = [sorted(gen, key=order.__getitem__) for gen in nx.topological_generations(g)]

    records: list[NodeResult] = []
    for level, ids in enumerate(levels):
        outcome = _run_level([plan.nodes[i] for i in ids], registry, k, max_workers, timeout_s)
        for nid in ids:
            n, (hits, error, latency) = plan.nodes[nid], outcome[nid]
            records.append(NodeResult(nid, n.tool_resolved or n.tool, n.query, hits, error, None, latency, level,
                                      parents[nid]))  # fmt: skip
    for nid, n in plan.nodes.items():
        if not n.valid:
            reason = "; ".join(n.problems) or "invalid node"
            records.append(NodeResult(nid, n.tool_resolved or n.tool, n.query, skipped_reason=reason,
                                      parents=parents[nid]))  # fmt: skip
    return PlanResult(plan, records, k=k, wall_s=time.perf_counter() - t0)


def run_plan(
    text: str | None,
    registry: SourceRegistry,
    k: int = 3,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_workers: int = 4,
    timeout_s: float = 30.0,
) -> tuple[Plan, PlanResult]:
    """Parse, validate and execute a plan: ``(validated plan, result)``."""
    plan = validate(parse_plan(text), registry, max_nodes=max_nodes)
    return plan, execute(plan, registry, k=k, max_workers=max_workers, timeout_s=timeout_s)
