"""R-Search, multi-source NL-DAG variant (seed 003, Shi & Shen): ``<think>``, ``<search>`` plan, ``<result>``, ``<answer>``.

The model writes its reasoning in ``<think>``, then a search plan as a natural-language DAG
in ``<search>``::

    Nodes:
    A: Brisk Lantern Labs founder (General)
    B: Brisk Lantern Labs founder university (General)
    Edges: A -> B

Generation pauses at ``</search>``; the environment executes the plan (nodes in topological
levels, a level's nodes in parallel) and appends ``<result>`` with the results grouped per
node (``Node A (general) Search results: Result 1: Title: ... Abstract: ...``); generation
resumes until ``</answer>`` (paper §3.2-3.3, Fig. 4).

Design of the ``"plan"`` tool and of the validation flags:

* :func:`make_plan_tool` returns a :class:`PlanTool`, a ``Toolbox`` tool
  ``tool(plan: str) -> list[dict]`` with one record per node (``node``, ``tool``, ``query``,
  ``hits``, ``error``, ``skipped``, ``level``, ``parents``, ``latency_s``). It carries its
  ``registry``, ``k`` and ``max_nodes``.
* The protocol validates the plan itself (``parse_plan`` + ``validate`` against the plan tool's
  registry, or the one given to the protocol) and then executes it through the toolbox, so a
  tool that hangs or raises is a recorded error. The validation is stored in a ``ToolCall``
  named ``"plan"`` (``meta``: ``dag``, ``valid``, ``problems`` codes, ``messages``, ``n_nodes``,
  ``n_executed``; no results); each node follows as its own ``ToolCall`` named after its source,
  with its hits (``PlanResult.to_tool_calls()``), so retrieval features see every node's hits.
* Nodes with unknown tools, on a cycle or past ``max_nodes`` are skipped with the reason, the
  rest run; a plan with no executable node gets a ``<result>`` that says why.
* Flags: ``dag_valid`` (every executed plan passed every check; False with no plan) and
  ``dag_problems`` (the problem codes of ``workbench.tools.dag.PROBLEM_CODES``, plus ``no_plan`` when no plan
  was executed, e.g. none written or the one written was cut off by the turn limit).

The paper prints no system prompt; ours is the authors' published training prompt
(github.com/wentao0429/Reasoning-search, ``RL/train_trl.py``, ``SYSTEM_PROMPT_CN``), translated,
with the available sources listed from the registry (``SourceRegistry.describe()``).
"""

from __future__ import annotations

from typing import Any

from workbench.core.types import Hit, ToolCall
from workbench.protocols.base import SEARCH, Action, Observation, failure_text, shape_ok
from workbench.protocols.tagged import TaggedProtocol
from workbench.tools.base import Toolbox, clean_text
from workbench.tools.dag import DEFAULT_MAX_NODES, NodeResult, PlanResult, parse_plan, validate
from workbench.tools.plan import PlanTool, make_plan_tool  # noqa: F401  (re-exported)
from workbench.tools.sources import DEFAULT_SOURCES, SourceRegistry

SYSTEM_PROMPT = (
    "You are a search planning agent. For any question, output exactly four tagged parts, in this order, none "
    "missing and none repeated: <think> ... </think> <search> ... </search> <result> ... </result> <answer> ... "
    "</answer>.\n"
    "1. In <think>: split the question into key concepts, choose the best search tool for each, and decide the "
    "order of the searches and how they depend on each other.\n"
    '2. <search> holds the search plan in two sections, "Nodes:" and "Edges:". Nodes: one per line, '
    "`Label: query (Tool)`. Edges: `Source -> Target`, several separated by semicolons. At most {max_nodes} nodes; "
    "each query at most 10 words; one tool per node; no self-loops or cycles; edges only between declared nodes.\n"
    "3. <result> is filled in by the system after </search>. Never write it yourself.\n"
    "4. <answer> gives the final answer based on the results, complete and accurate.\n"
    "{sources}"
)

# The paper gives no message for an invalid action; these words are ours (tags as empty pairs, so
# that a policy echoing the message writes no action).
INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put a plan (Nodes: `A: query (Tool)` lines, "
    "then Edges: `A -> B`) inside <search></search>. If I want to give the final answer, I should put it "
    "inside <answer></answer>. Let me try again.\n"
)

TAGS = ("think", "search", "result", "answer")
SHAPE = r"think search result answer"  # F_fmt: the four components exactly once, in order
ORDER = r"(think )*(search result (think )*)*answer"  # the same order, repeats allowed
NO_PLAN = "no_plan"

# A fictional demonstration (nothing in it exists); the tool name is the registry's, the result is rendered.
DEMO_QUESTION = "Which university did the founder of Brisk Lantern Labs attend?"
DEMO_THINK = (
    "<think> I need the founder of Brisk Lantern Labs, then the university that person attended. A {tool} "
    "search covers both; the second search depends on the first. </think>\n"
)
DEMO_PLAN = (
    "Nodes:\nA: Brisk Lantern Labs founder ({tool})\nB: Brisk Lantern Labs founder university ({tool})\nEdges: A -> B"
)
DEMO_HITS = {
    "A": Hit("d1", "Brisk Lantern Labs", "Brisk Lantern Labs was founded in 2016 by Tomas Reyvik."),
    "B": Hit("d2", "Tomas Reyvik", "Tomas Reyvik studied physics at Callower University."),
}
DEMO_ANSWER = "<answer> Callower University </answer>"


def _unregistered(query: str, k: int) -> list[Hit]:
    raise RuntimeError("no search source is registered under this name (pass a SourceRegistry)")


def default_registry() -> SourceRegistry:
    """The default source names (general / news / academic) without searchers: for prompts and validation."""
    reg = SourceRegistry()
    for name, (aliases, what) in DEFAULT_SOURCES.items():
        reg.register(name, _unregistered, aliases, what)
    return reg


_HIT_KEYS = ("id", "title", "text", "score", "source")


def _records(rows: list[dict[str, Any]]) -> list[NodeResult]:
    """``NodeResult``s back from the plan tool's records (a foreign tool's odd fields are tolerated)."""
    out = []
    for r in rows:
        hits = [
            Hit(**{k: h[k] for k in _HIT_KEYS if k in h})
            for h in r.get("hits") or []
            if isinstance(h, dict) and {"id", "title", "text"} <= set(h)
        ]
        level = r.get("level")
        out.append(NodeResult(
            str(r.get("node", "?")), str(r.get("tool", "")), str(r.get("query", "")), hits, r.get("error"),
            r.get("skipped"), float(r.get("latency_s") or 0.0), level if isinstance(level, int) else None,
            [str(p) for p in r.get("parents") or []],
        ))  # fmt: skip
    return out


class RSearchDAG(TaggedProtocol):
    """Shi & Shen's R-Search: one NL-DAG plan over several sources.

    Args:
        registry: the sources the prompt lists and plans are validated against (default: the
            ``"plan"`` tool's registry at run time; the prompt then lists general/news/academic).
        max_nodes: nodes per plan (the published prompt says 8; ``workbench.tools.dag`` defaults to 10).
        **kwargs: see ``Protocol``.
    """

    name = "rsearch_dag"
    stop = ("</search>", "</answer>")
    tags = TAGS
    observation_tags = ("result",)
    shape = ORDER  # order_ok; F_fmt (SHAPE, each part exactly once) is checked in extra_checks
    required_tools = ("plan",)

    def __init__(self, registry: SourceRegistry | None = None, max_nodes: int = DEFAULT_MAX_NODES, **kwargs: Any):
        super().__init__(**kwargs)
        if registry is not None and not isinstance(registry, SourceRegistry):
            raise TypeError(f"rsearch_dag: registry must be a SourceRegistry, got {type(registry).__name__}")
        if max_nodes < 1:
            raise ValueError(f"rsearch_dag: max_nodes must be >= 1, got {max_nodes}")
        self.registry = registry
        self.max_nodes = max_nodes

    def config(self) -> dict[str, Any]:
        reg = self.registry or default_registry()
        return {**super().config(), "sources": reg.names(), "max_nodes": self.max_nodes}

    def system_prompt(self) -> str:
        reg = self.registry or default_registry()
        return SYSTEM_PROMPT.format(max_nodes=self.max_nodes, sources=reg.describe())

    def demonstrations(self) -> list[dict[str, Any]]:
        names = (self.registry or default_registry()).names()
        tool = "general" if "general" in names or not names else names[0]
        plan = DEMO_PLAN.format(tool=tool.title())
        parsed = validate(parse_plan(plan), [tool])
        records = [
            NodeResult(n, tool, parsed.nodes[n].query, [h], level=i, parents=parsed.parents(n))
            for i, (n, h) in enumerate(DEMO_HITS.items())
        ]
        steps = [
            ("policy", DEMO_THINK.format(tool=tool) + f"<search>\n{plan}\n</search>"),
            ("observation", self.render(PlanResult(parsed, records, k=1))),
            ("policy", DEMO_ANSWER),
        ]
        return [{"question": DEMO_QUESTION, "steps": steps}]

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        action = super().parse(text)
        if action.kind != SEARCH:
            return action
        plan = parse_plan(action.payload)
        queries = [n.query for n in plan.nodes.values()]
        return Action(SEARCH, {"plan": action.payload, "queries": queries, "query": "; ".join(queries)})

    def act(self, action: Action, toolbox: Toolbox, example: Any) -> Observation:
        if action.kind != SEARCH or not isinstance(action.payload, dict):
            return self.invalid_observation(action)
        text = str(action.payload.get("plan", ""))
        tool = toolbox.tools.get("plan")
        registry = getattr(tool, "registry", None)
        registry = registry if isinstance(registry, SourceRegistry) else self.registry
        registry = registry if registry is not None else default_registry()
        plan = validate(parse_plan(text), registry, max_nodes=getattr(tool, "max_nodes", self.max_nodes))
        call = toolbox.call("plan", plan=text)
        result = PlanResult(plan, _records(call.results) if call.ok else [], k=getattr(tool, "k", self.top_k))
        meta = {
            "dag": True, "valid": plan.valid, "problems": plan.codes, "messages": [p.message for p in plan.problems],
            "n_nodes": len(plan.nodes), "n_executed": result.n_executed,
        }  # fmt: skip
        plan_call = ToolCall("plan", {"plan": text}, error=call.error, latency_s=call.latency_s, meta=meta)
        if not call.ok:
            return Observation(self.render(failure_text(call)), [plan_call])
        return Observation(self.render(result), [plan_call, *result.to_tool_calls()])

    def render(self, result: PlanResult | str) -> str:
        """``<result>``: per-node results; a plan that ran nothing says why, an invalid plan lists its problems."""
        if isinstance(result, str):
            body = result
        else:
            head = []
            if result.records and not result.n_executed:
                head.append("No search was run: no node of the plan could be executed.")
            if result.plan.problems and result.records:
                msgs = "; ".join(p.message for p in result.plan.problems)
                head.append("Plan problems: " + clean_text(msgs, 300))
            budget = max(200, self.max_obs_chars - sum(len(h) + 1 for h in head))
            body = "\n".join([*head, result.render(self.max_chars_per_hit, budget)])
        return self.wrap("result", "\n" + body + "\n", self.max_obs_chars + 400, pad="\n")

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(INVALID_MESSAGE)

    # ------------------------------------------------------------------ format
    def extra_checks(self, traj, blocks, flags, errors) -> dict[str, Any]:
        """``dag_valid`` / ``dag_problems`` (F_dag); F_fmt needs each of the four parts exactly once."""
        plans = [c.meta for c in traj.tool_calls if c.name == "plan" and c.meta.get("dag")]
        if flags["order_ok"] and not shape_ok(blocks, SHAPE):
            errors.append("think, search, result and answer must each appear exactly once")
        dag_problems = [code for m in plans for code in m.get("problems", [])] if plans else [NO_PLAN]
        return {"dag_valid": bool(plans) and all(m.get("valid") for m in plans), "dag_problems": dag_problems}
