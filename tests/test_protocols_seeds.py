"""The four seed protocols (DynaSearcher, R-Search evidence, R-Search NL-DAG, When-to-Search):
parsers, observations, format flags on engine-built trajectories, and property tests (never raise)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import Hit, ToolCall, Triple
from workbench.data.example import Example
from workbench.methods import PROTOCOLS, get_protocol
from workbench.methods.dynasearcher.protocol import parse_search_request
from workbench.methods.rsearch_dag.protocol import make_plan_tool
from workbench.methods.rsearch_evidence.protocol import EVIDENCE_TEMPLATE, rstool_answer
from workbench.protocols.base import extract_boxed, scan_blocks
from workbench.rollout.backends.base import encode_chat
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox
from workbench.tools.sources import SourceRegistry

SEEDS = ("dynasearcher", "rsearch_evidence", "rsearch_dag", "when_to_search")
EX = Example("q1", "Who founded Ostmark Ironworks?", ["Elsa Brandvik"])


# --------------------------------------------------------------------------- fakes


class Calls:
    """Fake search / KG tools that record their arguments."""

    def __init__(self) -> None:
        self.search: list[dict] = []
        self.kg: list[dict] = []

    def search_tool(self, query: str, k: int = 3) -> list[Hit]:
        self.search.append({"query": query, "k": k})
        return [
            Hit(f"p{i}", f"Doc title {i}", f"Ostmark Ironworks text {i} ({query})", 1.0 / (i + 1)) for i in range(k)
        ]

    def kg_tool(self, entities, relations=None, query="") -> list[Triple]:
        self.kg.append({"entities": entities, "relations": relations, "query": query})
        return [
            Triple("Varnholt Bridge", "manufacturer", "Ostmark Ironworks"),
            Triple("Ostmark Ironworks", "founded by", "Elsa Brandvik"),
        ]

    def toolbox(self, kg: bool = True) -> Toolbox:
        tools = {"search": self.search_tool}
        if kg:
            tools["kg"] = self.kg_tool
        return Toolbox(tools, timeout_s=None)


def registry(log: list[tuple[str, str]] | None = None) -> SourceRegistry:
    def source(name):
        def fn(query, k):
            if log is not None:
                log.append((name, query))
            return [Hit(f"{name}{i}", f"{name} title {i}", f"{query} result {i}", source=name) for i in range(k)]

        return fn

    reg = SourceRegistry()
    reg.register("general", source("general"), aliases=["web"])
    reg.register("news", source("news"))
    return reg


def run(tokenizer, name, turns, toolbox, append_eos=True, max_turns=4, **kwargs) -> Trajectory:
    proto = kwargs.pop("protocol", None) or get_protocol(name, **kwargs)
    backend = ScriptedBackend(tokenizer, list(turns), append_eos=append_eos)
    return rollout([EX], proto, toolbox, backend, RolloutConfig(max_turns=max_turns), progress=False)[0]


# --------------------------------------------------------------------------- all four


def test_seed_protocols_are_registered_with_short_prompts(tokenizer):
    assert set(SEEDS) <= set(PROTOCOLS)
    for name in SEEDS:
        p = get_protocol(name)
        assert set(p.stop) == {"</search>", "</answer>"}
        ids = encode_chat(tokenizer, p.messages(EX))
        assert len(ids) < 900, (name, len(ids))  # prompt + demo stays cheap to prefill on a CPU
        without_demo = encode_chat(tokenizer, get_protocol(name, few_shot=False).messages(EX))
        assert len(without_demo) < len(ids)


@pytest.mark.parametrize("name", SEEDS)
def test_demo_follows_its_own_grammar(name):
    """The demonstration, replayed as a trajectory, passes the protocol's own format check."""
    p = get_protocol(name, registry=registry()) if name == "rsearch_dag" else get_protocol(name)
    demo = p.demonstrations()[0]
    turns = []
    for kind, text in demo["steps"]:
        action = p.parse(text).to_dict() if kind == "policy" else None
        turns.append(Turn(POLICY if kind == "policy" else OBSERVATION, text, [], None, None, action))
    if name == "rsearch_dag":  # the plan's validation record the act() would have added
        turns[1].tool_calls = [ToolCall("plan", {}, meta={"dag": True, "valid": True, "problems": []})]
    else:  # each replayed search ran (only executed searches count)
        for prev, t in zip(turns, turns[1:]):
            if t.kind == OBSERVATION and (prev.action or {}).get("kind") == "search":
                t.tool_calls = [ToolCall("search", {"query": prev.action.get("payload")})]
    traj = Trajectory("d", "d", demo["question"], name, [], turns=turns)
    traj.answer = p.answer_text(p.parse(demo["steps"][-1][1]))
    flags = p.format_flags(traj)
    assert flags["format_ok"], flags["format_errors"]
    assert all(a["kind"] in ("search", "answer") for a in traj.actions)


def test_shared_helpers():
    blocks, problems = scan_blocks(
        "<think>a</think><SEARCH>b</search> </answer> <answer>c", ("think", "search", "answer")
    )
    assert [b.tag for b in blocks] == ["think", "search"] and blocks[1].content == "b"
    assert problems == ["stray </answer>", "unclosed <answer>"]
    assert extract_boxed(r"so \boxed{\text{Elsa Brandvik}}") == "Elsa Brandvik"
    assert extract_boxed("no box") is None and extract_boxed(r"\boxed{open") is None


# --------------------------------------------------------------------------- DynaSearcher


@pytest.mark.parametrize(
    "content, query, entity, relation, strict",
    [
        (
            '{"query": "who founded it", "entity": ["Ostmark"], "relation": ["founded by"]}',
            "who founded it",
            ["Ostmark"],
            ["founded by"],
            True,
        ),
        ('{"query": "q only"}', "q only", [], [], True),
        ("{'query': 'single', 'entity': ['E']}", "single", ["E"], [], False),
        ('{"query": "trailing", "entity": ["E"],}', "trailing", ["E"], [], False),
        (
            "{\u201cquery\u201d: \u201cwho wrote \u2018The Book\u2019?\u201d, \u201centity\u201d: [\u201cThe Book\u201d]}",
            "who wrote 'The Book'?",
            ["The Book"],
            [],
            False,
        ),
        ("who founded Ostmark Ironworks", "who founded Ostmark Ironworks", [], [], False),
        ('"a json string"', "a json string", [], [], False),
        ('{"query": "q", "entity": "Ostmark"}', "q", ["Ostmark"], [], False),
        ('{"query": 1987, "entity": [42, null, "X", {"a": 1}]}', "1987", ["42", "X"], [], False),
        ('{"entities": ["E"], "relations": ["r"]}', "", ["E"], ["r"], True),
        ('```json\n{"query": "fenced"}\n```', "fenced", [], [], True),
        ('Here: {"query": "wrapped"} done', "wrapped", [], [], False),
    ],
)
def test_dynasearcher_parses_requests(content, query, entity, relation, strict):
    a = get_protocol("dynasearcher").parse(f"<think> t </think>\n<search> {content} </search>")
    assert a.kind == "search", a.reason
    assert (a.payload["query"], a.payload["entity"], a.payload["relation"]) == (query, entity, relation)
    assert a.payload["strict"] is strict and bool(a.payload["notes"]) is (not strict)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<search> {"query": "who" "entity": []} </search>', "search JSON: Expecting ',' delimiter at char 16"),
        ('<search> {"query": "who", </search>', "search JSON:"),
        ('<search> {"query": {"text": "x"}} </search>', "search JSON: 'query' must be a string, got object"),
        (
            '<search> {"query": "x", "entity": {"a": 1}} </search>',
            "search JSON: 'entity' must be a list of strings, got object",
        ),
        ('<search> [{"query": "x"}] </search>', "expected an object"),
        ('<search> {"relation": ["r"]} </search>', "search JSON: no query and no entity"),
        ("<search>   </search>", "empty <search>"),
        ('<search> {"query": "never closed"', "unclosed <search> tag"),
        ("<answer>  </answer>", "empty <answer>"),
        ("<think> only thinking </think>", "no <search> or <answer> action"),
        ("<search> " + "[" * 3000 + " </search>", "search JSON"),
        ('<search> {"query": "' + "x" * 5000 + '"} </search>', "too long"),
    ],
)
def test_dynasearcher_invalid_actions_have_reasons(text, reason):
    a = get_protocol("dynasearcher").parse(text)
    assert a.kind == "invalid" and reason in a.reason, a.reason


def test_dynasearcher_answer_box():
    p = get_protocol("dynasearcher")
    a = p.parse(r"<think> t </think><answer> The final answer is \boxed{ Elsa Brandvik } </answer>")
    assert a.kind == "answer" and p.answer_text(a) == "Elsa Brandvik"
    raw = p.parse("<answer> Elsa Brandvik, I think </answer>")
    assert p.answer_text(raw) == "Elsa Brandvik, I think"
    bad = p.invalid_observation(p.parse('<search> {"query": "a" "entity": []} </search>')).text
    assert "Expecting ',' delimiter" in bad and "\\boxed{answer}" in bad
    assert "unclosed" not in p.invalid_observation(p.parse("<search> x")).text  # only JSON problems are explained


def test_dynasearcher_observation_holds_documents_then_triples():
    calls = Calls()
    p = get_protocol("dynasearcher", top_k=2)
    a = p.parse(
        '<search> {"query": "Ostmark founder", "entity": ["Ostmark Ironworks"], "relation": ["founded by"]} </search>'
    )
    obs = p.act(a, calls.toolbox(), EX)
    assert [c.name for c in obs.tool_calls] == ["search", "kg"]
    assert calls.search == [{"query": "Ostmark founder", "k": 2}]
    assert calls.kg == [{"entities": ["Ostmark Ironworks"], "relations": ["founded by"], "query": "Ostmark founder"}]
    text = obs.text
    assert text.strip().startswith("<result>") and text.strip().endswith("</result>")
    assert "Doc 1(Title: Doc title 0)" in text and "Doc 2(Title: Doc title 1)" in text and "Doc 3" not in text
    assert (
        text.index("Documents:")
        < text.index("Knowledge graph:")
        < text.index("(Ostmark Ironworks, founded by, Elsa Brandvik)")
    )
    # KG only searched when entities are given; a missing KG tool is said in the observation
    p.act(p.parse('<search> {"query": "docs only"} </search>'), calls.toolbox(), EX)
    assert len(calls.kg) == 1
    obs = p.act(a, calls.toolbox(kg=False), EX)
    assert [c.name for c in obs.tool_calls] == ["search"] and "Knowledge-graph search is not available" in obs.text
    # a tool that fails is recorded, not raised
    broken = Toolbox({"search": lambda query, k: 1 / 0, "kg": calls.kg_tool}, timeout_s=None)
    obs = p.act(a, broken, EX)
    assert "Document search failed" in obs.text and obs.tool_calls[0].error


@pytest.mark.parametrize(
    "llm, ok, shown, hidden",
    [
        (
            lambda prompt: "<evidence> Ostmark Ironworks; founded by; Elsa Brandvik </evidence>",
            True,
            ["(Ostmark Ironworks, founded by, Elsa Brandvik)"],
            ["manufacturer"],
        ),
        (
            lambda prompt: "I think these are all quite relevant to the question.",
            False,
            ["founded by", "manufacturer"],
            [],
        ),
        (lambda prompt: 1 / 0, False, ["founded by", "manufacturer"], []),
    ],
)
def test_dynasearcher_kg_filter(llm, ok, shown, hidden):
    calls = Calls()
    p = get_protocol("dynasearcher", kg_filter_llm=llm)
    a = p.parse(
        '<search> {"query": "Ostmark founder", "entity": ["Ostmark Ironworks"], "relation": ["founded by"]} </search>'
    )
    obs = p.act(a, calls.toolbox(), EX)
    meta = obs.tool_calls[1].meta["filter"]
    assert meta["ok"] is ok and meta["n_in"] == 2
    assert (meta["error"] is None) is ok
    if ok:
        assert meta["kept"] == [1] and "founded by" in meta["raw"]
    assert all(s in obs.text for s in shown) and not any(h in obs.text for h in hidden)
    assert len(obs.tool_calls[1].results) == 2  # the tool's own results are kept unfiltered


DS_SEARCH = '<think> Find the founder. </think>\n<search> {"query": "Ostmark Ironworks founder", "entity": ["Ostmark Ironworks"], "relation": ["founded by"]} </search>'
DS_ANSWER = "<think> It was Elsa Brandvik. </think>\n<answer> The final answer is \\boxed{Elsa Brandvik} </answer>"


@pytest.mark.parametrize(
    "turns, format_ok, order_ok, strict, boxes",
    [
        ([DS_SEARCH, DS_ANSWER], True, True, True, 1),
        ([DS_ANSWER], True, True, True, 1),  # answering without a search is a valid shape
        (
            [DS_SEARCH, "<answer> The final answer is \\boxed{Elsa Brandvik} </answer>"],
            False,
            False,
            True,
            1,
        ),  # no think
        ([DS_SEARCH, "<think> t </think><answer> Elsa Brandvik </answer>"], False, True, True, 0),  # no box
        ([DS_SEARCH, "<think> t </think><answer> \\boxed{ } </answer>"], False, True, True, 0),  # empty box
        (
            ["<think> t </think><search> Ostmark Ironworks founder </search>", DS_ANSWER],
            False,
            True,
            False,
            1,
        ),  # bare string
        (["<think> t </think><search> {'query': 'x'} </search>", DS_ANSWER], False, True, False, 1),  # single quotes
        (['<think> t </think><search> {"query": "x" "y"} </search>', DS_ANSWER], False, False, True, 1),  # invalid JSON
        (
            [DS_SEARCH, "<think> t </think><result> fake </result><think> t </think>" + DS_ANSWER[30:]],
            False,
            False,
            True,
            1,
        ),
        ([DS_SEARCH, DS_SEARCH], False, False, True, 0),  # never answers
    ],
)
def test_dynasearcher_format_flags(tokenizer, turns, format_ok, order_ok, strict, boxes):
    calls = Calls()
    traj = run(tokenizer, "dynasearcher", turns, calls.toolbox(), max_turns=len(turns))
    f = traj.flags
    assert (f["format_ok"], f["order_ok"], f["json_strict"], f["answer_boxes"]) == (
        format_ok,
        order_ok,
        strict,
        boxes,
    ), f
    assert f["format_ok"] is (not f["format_errors"])
    if f["answered"] and boxes:
        assert traj.answer == "Elsa Brandvik"
    # every counted search was executed (one cut off by the turn limit is not counted)
    assert len(calls.search) == sum("<result>" in t.text for t in traj.turns if t.kind == OBSERVATION)
    assert len(calls.search) == traj.n_searches


def test_dynasearcher_answer_without_box_keeps_raw_text(tokenizer):
    traj = run(tokenizer, "dynasearcher", ["<think> t </think><answer> Elsa Brandvik </answer>"], Calls().toolbox())
    assert traj.answer == "Elsa Brandvik" and not traj.flags["format_ok"]
    assert any("boxed" in e for e in traj.flags["format_errors"])


# --------------------------------------------------------------------------- R-Search (evidence)

EVIDENCE = "- Ostmark Ironworks was founded by Elsa Brandvik."
RS_SEARCH = "I need the founder.\n<search> Ostmark Ironworks founder </search>"
RS_ANSWER = f"It is Elsa Brandvik.\n<original_evidence>{EVIDENCE}</original_evidence>\n<answer> Elsa Brandvik </answer>"


@pytest.mark.parametrize(
    "text, kind, payload_or_reason",
    [
        (RS_SEARCH, "search", "Ostmark Ironworks founder"),
        (RS_ANSWER, "answer", "Elsa Brandvik"),
        ("No search needed. <answer>Paris</answer>", "answer", "Paris"),
        (
            f"<original_evidence>{EVIDENCE}</original_evidence> so it is her",
            "invalid",
            "evidence given but no <answer>",
        ),
        ("<search> unclosed", "invalid", "unclosed <search>"),
        ("<answer>\n</answer>", "invalid", "empty <answer>"),
        ("Let me think about it.", "invalid", "no <search> or <answer>"),
    ],
)
def test_rsearch_evidence_parse(text, kind, payload_or_reason):
    a = get_protocol("rsearch_evidence").parse(text)
    assert a.kind == kind
    assert (a.payload if kind != "invalid" else a.reason).startswith(payload_or_reason), a


def test_rsearch_evidence_observation_and_top_k():
    calls = Calls()
    for top_k in (3, 5):  # training / evaluation defaults of the paper
        p = get_protocol("rsearch_evidence", top_k=top_k)
        obs = p.act(p.parse(RS_SEARCH), calls.toolbox(), EX)
        assert calls.search[-1] == {"query": "Ostmark Ironworks founder", "k": top_k}
        body = obs.text.strip()
        assert body.startswith("<observation>(Title: Doc title 0) Ostmark Ironworks text 0") and body.endswith(
            "</observation>"
        )
        assert body.count("(Title: ") == top_k and "Doc 1" not in body
    assert get_protocol("rsearch_evidence").top_k == 3
    assert "Let me try again" in get_protocol("rsearch_evidence").invalid_observation(None).text


@pytest.mark.parametrize(
    "turns, format_ok, answer_boxes, evidence_boxes, evidence",
    [
        ([RS_SEARCH, RS_ANSWER], True, 1, 1, EVIDENCE),
        (["I know this. <answer> Elsa Brandvik </answer>"], True, 1, 0, ""),  # no search: no evidence needed
        ([RS_SEARCH, "So: <answer> Elsa Brandvik </answer>"], False, 1, 0, ""),  # searched, no evidence
        (
            [
                RS_SEARCH,
                f"<original_evidence>a</original_evidence><original_evidence>{EVIDENCE}</original_evidence>"
                "<answer> Elsa Brandvik </answer>",
            ],
            False,
            1,
            2,
            EVIDENCE,
        ),
        # the stop string cuts at the nested </answer>: neither box is well-formed
        (
            [RS_SEARCH, "<original_evidence> x <answer> y </answer></original_evidence><answer> Elsa </answer>"],
            False,
            0,
            0,
            "",
        ),
        (
            [RS_SEARCH, "<answer> Elsa </answer>" + f"<original_evidence>{EVIDENCE}</original_evidence>"],
            False,
            1,
            0,
            "",
        ),
        ([f"<original_evidence>{EVIDENCE}</original_evidence><answer> Elsa Brandvik </answer>"], False, 1, 1, EVIDENCE),
        ([RS_SEARCH, RS_SEARCH], False, 0, 0, ""),
    ],
)
def test_rsearch_evidence_format_flags(tokenizer, turns, format_ok, answer_boxes, evidence_boxes, evidence):
    traj = run(tokenizer, "rsearch_evidence", turns, Calls().toolbox(), max_turns=len(turns))
    f = traj.flags
    assert (f["format_ok"], f["answer_boxes"], f["evidence_boxes"], f["evidence"]) == (
        format_ok,
        answer_boxes,
        evidence_boxes,
        evidence,
    ), f
    assert f["format_ok"] is (not f["format_errors"])


def test_rsearch_evidence_tokens_have_loss_mask_one(tokenizer):
    """Invariant 2: the evidence is sampled by the policy, so its tokens carry gradient (mask 1)."""
    traj = run(tokenizer, "rsearch_evidence", [RS_SEARCH, RS_ANSWER], Calls().toolbox())
    assert [t.kind for t in traj.turns] == [POLICY, OBSERVATION, POLICY]
    (i,) = [i for i, t in enumerate(traj.turns) if "<original_evidence>" in t.text]
    turn = traj.turns[i]
    assert turn.kind == POLICY
    # token -> character spans of the turn, from the decoded prefixes (ids are never re-encoded)
    ends = [
        len(tokenizer.decode(turn.token_ids[: j + 1], skip_special_tokens=False)) for j in range(len(turn.token_ids))
    ]
    lo = turn.text.index("<original_evidence>")
    hi = turn.text.index("</original_evidence>") + len("</original_evidence>")
    span = [j for j, end in enumerate(ends) if end > lo and (j == 0 or ends[j - 1] < hi)]
    assert len(span) >= 10
    offset = len(traj.prompt_ids) + sum(len(t.token_ids) for t in traj.turns[:i])
    assert all(traj.loss_mask[offset + j] == 1 for j in span)
    # and the mask is not trivially 1: the observation's tokens are 0, the evidence is not among them
    ids, mask = traj.response_ids, traj.response_loss_mask
    masked = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m == 1])
    assert "<observation>" in masked and EVIDENCE not in masked and EVIDENCE in trained


def test_rstool_answer_with_scripted_backend(tokenizer):
    traj = run(tokenizer, "rsearch_evidence", [RS_SEARCH, RS_ANSWER], Calls().toolbox())
    backend = ScriptedBackend(tokenizer, ["<answer> Elsa Brandvik </answer>"])
    out = rstool_answer(traj, EX.question, backend)
    assert out["answer"] == "Elsa Brandvik" and out["error"] is None and out["evidence"] == EVIDENCE
    assert out["prompt"] == EVIDENCE_TEMPLATE.replace("{evidence}", EVIDENCE).replace("{query}", EX.question)
    assert out["prompt"].startswith("Answer the question based on the given passages.") and out["raw"].strip().endswith(
        "</answer>"
    )
    # the evidence alone reaches the other model: the question's answer is not leaked by anything else
    sent = tokenizer.decode(backend.calls[0][0])
    assert EVIDENCE in sent and "Ostmark Ironworks text" not in sent
    plain = rstool_answer(
        "Kettleby lies on the Dunmere.", "Which river?", ScriptedBackend(tokenizer, ["Answer: Dunmere"])
    )
    assert plain["answer"] == "Dunmere" and plain["raw"] == "Answer: Dunmere"
    assert rstool_answer("ev", "q?", lambda prompt: " Dunmere\n")["answer"] == "Dunmere"
    none = rstool_answer("", "q?", lambda prompt: pytest.fail("must not be called without evidence"))
    assert none["answer"] == "" and none["error"] == "no evidence"
    failed = rstool_answer("ev", "q?", lambda prompt: 1 / 0)
    assert failed["answer"] is None and "ZeroDivisionError" in failed["error"]


# --------------------------------------------------------------------------- R-Search (NL-DAG)

PLAN = "Nodes:\nA: Ostmark Ironworks founder (News)\nB: Elsa Brandvik biography (Web)\nEdges: A -> B"
BAD_PLAN = "Nodes:\nA: Ostmark founder (Fax)\nB: founder news (News)\nC: founder web (General)\nEdges: B -> C; C -> B"
DAG_THINK = "<think> Two searches; B needs A. </think>\n"


def test_plan_tool_executes_per_node():
    log: list[tuple[str, str]] = []
    tool = make_plan_tool(registry(log), k=2)
    rows = tool(PLAN)
    assert [r["node"] for r in rows] == ["A", "B"] and [r["tool"] for r in rows] == ["news", "general"]
    assert [r["level"] for r in rows] == [0, 1] and rows[1]["parents"] == ["A"]
    assert [len(r["hits"]) for r in rows] == [2, 2] and rows[0]["hits"][0]["text"].startswith(
        "Ostmark Ironworks founder"
    )
    assert log == [("news", "Ostmark Ironworks founder"), ("general", "Elsa Brandvik biography")]
    rows = tool(BAD_PLAN)
    assert [(r["node"], bool(r["skipped"])) for r in rows] == [("A", True), ("B", True), ("C", True)]
    with pytest.raises(TypeError, match="SourceRegistry"):
        make_plan_tool(["news"])


def test_rsearch_dag_parse_and_prompt():
    p = get_protocol("rsearch_dag", registry=registry())
    a = p.parse(DAG_THINK + f"<search>\n{PLAN}\n</search>")
    assert a.kind == "search" and a.payload["queries"] == ["Ostmark Ironworks founder", "Elsa Brandvik biography"]
    assert a.payload["plan"] == PLAN and a.payload["query"] == "Ostmark Ironworks founder; Elsa Brandvik biography"
    assert p.parse("<answer> Elsa </answer>").payload == "Elsa"
    assert p.parse("<search>  </search>").kind == "invalid"
    prompt = p.system_prompt()
    assert "- general (also: web)" in prompt and "- news" in prompt and "academic" not in prompt
    assert "- academic" in get_protocol("rsearch_dag").system_prompt()  # no registry: the default source names


def test_rsearch_dag_valid_plan_trajectory(tokenizer):
    log: list[tuple[str, str]] = []
    reg = registry(log)
    tb = Toolbox({"plan": make_plan_tool(reg, k=2)}, timeout_s=None)
    traj = run(
        tokenizer,
        "rsearch_dag",
        [DAG_THINK + f"<search>\n{PLAN}\n</search>", "<answer> Elsa Brandvik </answer>"],
        tb,
        registry=reg,
    )
    assert [t.kind for t in traj.turns] == [POLICY, OBSERVATION, POLICY] and traj.answer == "Elsa Brandvik"
    obs = traj.turns[1].text
    assert obs.strip().startswith("<result>") and obs.strip().endswith("</result>")
    assert obs.index("Node A (news) Search results:") < obs.index("Node B (general) Search results:")
    assert "Result 1: Title: news title 0 Abstract: Ostmark Ironworks founder result 0" in obs
    assert [c.name for c in traj.tool_calls] == ["plan", "news", "general"]
    assert [c.args["node"] for c in traj.tool_calls[1:]] == ["A", "B"] and len(traj.tool_calls[2].hits()) == 2
    f = traj.flags
    assert f["dag_valid"] is True and f["dag_problems"] == [] and f["format_ok"] and f["order_ok"], f
    assert len(log) == 2


def test_rsearch_dag_invalid_plan_still_runs(tokenizer):
    reg = registry()
    tb = Toolbox({"plan": make_plan_tool(reg)}, timeout_s=None)
    partial = BAD_PLAN.replace("Edges: B -> C; C -> B", "D: fine node (News)\nEdges: B -> C; C -> B")
    traj = run(tokenizer, "rsearch_dag", [DAG_THINK + f"<search>{partial}</search>", "<answer> Elsa </answer>"], tb)
    f = traj.flags
    assert traj.answer == "Elsa" and f["dag_valid"] is False
    assert f["dag_problems"].count("unknown_tool") == 1 and "cycle" in f["dag_problems"]
    assert f["format_ok"] is True  # F_fmt and F_dag are separate reward components
    obs = traj.turns[1].text
    assert "Node D (news) Search results:" in obs and "Node A (Fax) skipped" in obs and "Plan problems:" in obs
    assert [c.args["node"] for c in traj.tool_calls[1:] if not c.meta["skipped"]] == ["D"]
    # no executable node at all: the result says why, the trajectory goes on
    traj = run(tokenizer, "rsearch_dag", [DAG_THINK + "<search>A: x (Fax)</search>", "<answer> ? </answer>"], tb)
    assert "No search was run" in traj.turns[1].text and traj.flags["dag_problems"] == ["unknown_tool"]
    traj = run(tokenizer, "rsearch_dag", [DAG_THINK + "<search>just some words</search>", "<answer> ? </answer>"], tb)
    assert "No search was run" in traj.turns[1].text and "empty_plan" in traj.flags["dag_problems"]


@pytest.mark.parametrize(
    "turns, format_ok, order_ok, dag_valid, problems",
    [
        ([DAG_THINK + "<answer> Elsa </answer>"], False, True, False, ["no_plan"]),
        (["<search>A: x (News)</search>", "<answer> Elsa </answer>"], False, True, True, []),  # no think
        (
            [DAG_THINK + "<search>A: x (News)</search>", "<think> more </think><answer> Elsa </answer>"],
            False,
            True,
            True,
            [],
        ),
        (
            [DAG_THINK + "<search>A: x (News)</search>", "<search>A: y (News)</search>", "<answer> E </answer>"],
            False,
            True,
            True,
            [],
        ),
        (
            [DAG_THINK + "<search>A: x (News)</search>", "<result> forged </result><answer> E </answer>"],
            False,
            False,
            True,
            [],
        ),
        (
            [DAG_THINK + "<search>A: x (News)\nA -> A</search>", "<answer> E </answer>"],
            True,
            True,
            False,
            ["self_loop"],
        ),
        ([DAG_THINK + "<search>A: x (News)</search>", "<answer> E"], False, False, True, []),  # never answers
    ],
)
def test_rsearch_dag_format_flags(tokenizer, turns, format_ok, order_ok, dag_valid, problems):
    tb = Toolbox({"plan": make_plan_tool(registry())}, timeout_s=None)
    traj = run(tokenizer, "rsearch_dag", turns, tb, max_turns=len(turns))
    f = traj.flags
    assert (f["format_ok"], f["order_ok"], f["dag_valid"], f["dag_problems"]) == (
        format_ok,
        order_ok,
        dag_valid,
        problems,
    ), f


def test_rsearch_dag_without_plan_tool_is_recorded(tokenizer):
    traj = run(tokenizer, "rsearch_dag", [DAG_THINK + f"<search>{PLAN}</search>", "<answer> E </answer>"], Toolbox({}))
    assert "Search failed: unknown tool 'plan'" in traj.turns[1].text and traj.tool_calls[0].error
    assert traj.flags["dag_valid"] is True  # the plan itself is fine (validated against the default sources)


# --------------------------------------------------------------------------- When to Search

T, R, A = "<think> t </think>", "<reflect> r </reflect>", "<answer> Elsa Brandvik </answer>"
S = "<search> Ostmark Ironworks founder </search>"


@pytest.mark.parametrize(
    "turns, format_ok, reflects",
    [
        ([T + R + A], True, 1),
        ([T + S, R + A], True, 1),
        ([T + S, R + S, R + A], True, 2),
        ([T + "\n" + S, "\n" + R + "\n" + A], True, 1),
        (["<THINK> t </Think><Reflect> r </REFLECT>< answer > E </ answer >"], True, 1),  # tag case/spacing ignored
        ([R + A], False, 1),  # no think
        ([T + A], False, 0),  # no reflect
        ([T + S, A], False, 0),  # information not reflected on
        ([T + S, T + R + A], False, 1),  # think again after information
        ([T + S, S, R + A], False, 1),  # two searches without reflecting in between
        ([T + R + S, R + A], False, 2),  # reflect before the first search
        ([T + R + R + A], False, 2),
        (["<think> t <reflect> r </reflect></think>" + R + A], False, 1),  # nested (the inner one is no box)
        ([T + "<information> forged </information>" + R + A], False, 1),  # the policy wrote its own information
        ([T + R + A + A], True, 1),  # the stop string ends the turn at the first </answer>
        ([T + S, R + S], False, 1),  # ran out of turns
        ([T + "<reflect> r " + A], False, 0),  # unclosed reflect
    ],
)
def test_when_to_search_shapes(tokenizer, turns, format_ok, reflects):
    traj = run(tokenizer, "when_to_search", turns, Calls().toolbox(), max_turns=len(turns))
    f = traj.flags
    assert f["format_ok"] is format_ok and f["reflect_count"] == reflects, f
    assert f["format_ok"] is (not f["format_errors"])
    assert f["order_ok"] or not f["format_ok"]


def test_when_to_search_invalid_action_breaks_format(tokenizer):
    # without EOS the unparseable first turn is answered with the invalid-action message and the rollout goes on
    traj = run(tokenizer, "when_to_search", [T + " hmm", T + R + A], Calls().toolbox(), append_eos=False)
    assert traj.n_invalid == 1 and traj.answer == "Elsa Brandvik"
    assert "Let me try again" in traj.turns[1].text
    f = traj.flags
    assert f["format_ok"] is False and f["n_invalid"] == 1 and "1 invalid action(s)" in f["format_errors"]


def test_when_to_search_chat_mode_and_observation(tokenizer):
    calls = Calls()
    traj = run(tokenizer, "when_to_search", [T + S, R + A], calls.toolbox(), observation_mode="chat")
    assert traj.flags["format_ok"], traj.flags["format_errors"]
    assert "<information>Doc 1(Title: Doc title 0)" in traj.turns[1].text and calls.search[0]["k"] == 3


# --------------------------------------------------------------------------- properties: never raise

ALL_TAGS = [
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<result>",
    "</result>",
    "<answer>",
    "</answer>",
    "<observation>",
    "</observation>",
    "<original_evidence>",
    "</original_evidence>",
    "<information>",
    "</information>",
    "<reflect>",
    "</reflect>",
    "<SEARCH>",
    "< /Answer >",
    "<Think >",
    "\\boxed{",
    "}",
    "{",
    '"query"',
    '"entity"',
    ":",
    "[",
    "]",
    ",",
    "'",
    '"',
    "null",
    "1e999",
    "\n",
    " ",
    "Nodes:",
    "A:",
    "(News)",
    "->",
    "Edges:",
    "(Fax)",
    "\u201c",
    "<|im_end|>",
]
fragments = st.lists(st.one_of(st.sampled_from(ALL_TAGS), st.text(max_size=12)), max_size=40).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
requests = st.dictionaries(
    st.sampled_from(["query", "entity", "relation", "entities", "Query", "x"]), json_values, max_size=4
).map(lambda d: "<search> " + json.dumps(d) + " </search>")

HUGE = [
    "<search> " + "word " * 10_000,
    "<think>" * 5000 + "<answer> x </answer>",
    "<search> " + "{" * 10_000 + " </search>",
    "<search> " + "[" * 900 + "]" * 900 + " </search>",
    "<answer> " + "\\boxed{" * 5000 + " </answer>",
    "<answer> " + "\\boxed{a}" * 3000 + " </answer>",
    "<search>" + "A: q (News)\n" * 2000 + "</search>",
    "<search>" + "A -> B; " * 5000 + "</search>",
    "   \n\t  ",
    "",
    "<original_evidence>" + "fact. " * 10_000,
    "</search>" * 3000 + "<search>q</search>",
]


def _traj(protocol, texts: list[str]) -> Trajectory:
    """A trajectory from raw texts (policy turns alternating with observations), with parsed actions."""
    turns = []
    for i, text in enumerate(texts):
        if i % 2 == 0:
            a = protocol.parse(text)
            turns.append(Turn(POLICY, text, [], None, None, a.to_dict()))
        else:
            calls = [ToolCall("plan", {}, meta={"dag": True, "valid": False, "problems": ["cycle"]})] if i == 1 else []
            turns.append(Turn(OBSERVATION, text, [], tool_calls=calls))
    traj = Trajectory("t", "t", "q", protocol.name, [], turns=turns)
    final = protocol.parse(turns[-1].text) if turns[-1].kind == POLICY else None
    if final is not None and final.kind == "answer":
        traj.answer = protocol.answer_text(final)
    return traj


def _check(name: str, texts: list[str]) -> None:
    p = get_protocol(name)
    for text in texts:
        a = p.parse(text)
        assert a.kind in ("search", "answer", "invalid")
        assert a.reason if a.kind == "invalid" else a.payload not in (None, "")
        if a.kind == "answer":
            assert isinstance(p.answer_text(a), str)
    flags = p.format_flags(_traj(p, texts))
    for key in ("answered", "n_invalid", "format_ok", "order_ok", "answer_boxes", "format_errors"):
        assert key in flags
    assert isinstance(flags["format_ok"], bool) and flags["format_ok"] is (not flags["format_errors"])


@pytest.mark.parametrize("name", SEEDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.one_of(st.text(max_size=200), fragments, requests), min_size=1, max_size=5))
def test_parse_and_flags_never_raise(name, texts):
    _check(name, texts)


@pytest.mark.parametrize("name", SEEDS)
def test_adversarial_and_huge_outputs(name):
    for text in HUGE:
        _check(name, [text])
    _check(name, HUGE[:5])


@settings(max_examples=50, deadline=None)
@given(text=st.one_of(requests, fragments))
def test_act_never_raises_on_parsed_searches(text):
    calls = Calls()
    for name in ("dynasearcher", "rsearch_dag"):
        p = get_protocol(name)
        a = p.parse(text)
        tb = (
            calls.toolbox() if name == "dynasearcher" else Toolbox({"plan": make_plan_tool(registry())}, timeout_s=None)
        )
        obs = p.act(a, tb, EX) if a.kind == "search" else p.invalid_observation(a)
        assert isinstance(obs.text, str) and obs.text.strip()


@settings(max_examples=100, deadline=None)
@given(content=st.one_of(st.text(max_size=80), json_values.map(json.dumps)))
def test_search_request_parser_total(content):
    req, reason = parse_search_request(content)
    assert (req is None) == bool(reason)
    if req is not None:
        assert isinstance(req["query"], str) and all(isinstance(e, str) for e in req["entity"] + req["relation"])
        assert req["query"] or req["entity"]
