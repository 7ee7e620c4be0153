"""Protocol parsers and format checkers: hand cases and property tests (never raise)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.data.example import Example
from workbench.methods import PROTOCOLS, get_protocol


def test_registry_and_unknown_name():
    assert {"search_r1", "direct"} <= set(PROTOCOLS)
    with pytest.raises(ValueError, match="valid names: .*search_r1"):
        get_protocol("nope")


@pytest.mark.parametrize(
    "text, kind, payload",
    [
        ("<think> hmm </think>\n<search> who founded X </search>", "search", "who founded X"),
        ("<SEARCH>Case Query</Search>", "search", "Case Query"),
        ("<answer> Paris </answer>", "answer", "Paris"),
        ("<search> a </search> then <answer> b </answer>", "answer", "b"),  # the last complete action wins
        ("<answer> b </answer> <search> a </search>", "search", "a"),
        ("<search>   </search>", "invalid", None),
        ("<answer></answer>", "invalid", None),
        ("<search> never closed", "invalid", None),
        ("just prose", "invalid", None),
        ("", "invalid", None),
    ],
)
def test_search_r1_parse(text, kind, payload):
    a = get_protocol("search_r1").parse(text)
    assert a.kind == kind
    if payload is not None:
        assert a.payload == payload
    else:
        assert a.reason


def test_search_r1_tool_call_variant():
    p = get_protocol("search_r1", variant="tool_call")
    assert p.stop == ("</tool_call>", "</answer>")
    assert p.parse("<tool_call> plain query </tool_call>").payload == "plain query"
    js = '<tool_call>{"name": "search", "arguments": {"query": "json query"}}</tool_call>'
    assert p.parse(js).payload == "json query"
    assert p.parse('<tool_call>{"name": "search", "arguments": {"query": 5}}</tool_call>').payload == "5"
    assert p.parse('<tool_call>{"name": "search", "arguments": {}}</tool_call>').kind == "invalid"
    assert "<tool_call>" in p.system_prompt() and "<search>" not in p.system_prompt()


def test_direct_takes_untagged_text_as_answer():
    p = get_protocol("direct")
    assert p.parse("<answer> Ostrevia </answer>").payload == "Ostrevia"
    a = p.parse("Ostrevia, I believe")
    assert a.kind == "answer" and a.payload == "Ostrevia, I believe" and a.reason


@pytest.mark.parametrize("mode", ["inline", "chat"])
def test_messages_include_demo_and_question(mode):
    p = get_protocol("search_r1", observation_mode=mode)
    msgs = p.messages(Example("q", "Where is Ulmbridge?", ["x"]))
    assert msgs[0]["role"] == "system" and msgs[-1] == {"role": "user", "content": "Question: Where is Ulmbridge?"}
    roles = [m["role"] for m in msgs]
    if mode == "chat":  # demo observations are user turns
        assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    else:
        assert roles == ["system", "user", "assistant", "user"]
    assert len(get_protocol("search_r1", few_shot=False).messages(Example("q", "Q?", []))) == 2


def test_bad_protocol_config_fails_fast():
    with pytest.raises(ValueError, match="observation_mode"):
        get_protocol("search_r1", observation_mode="telepathy")
    with pytest.raises(ValueError, match="variant"):
        get_protocol("search_r1", variant="xml")
    with pytest.raises(ValueError, match="top_k"):
        get_protocol("search_r1", top_k=0)


TAGS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<tool_call>", "</tool_call>",
        "<SEARCH>", "< /answer >", "{", "}", '"query"', ":", "\n", " ", "\\boxed{", "<information>"]
fragments = st.lists(st.one_of(st.sampled_from(TAGS), st.text(max_size=20)), max_size=30).map("".join)


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=300), fragments))
def test_parse_never_raises(name, text):
    p = get_protocol(name)
    a = p.parse(text)
    assert a.kind in ("search", "answer", "invalid")
    if a.kind == "invalid":
        assert a.reason


def test_parse_handles_huge_output():
    p = get_protocol("search_r1")
    assert p.parse("<search> " + "word " * 10_000).kind == "invalid"
    assert p.parse("x" * 50_000 + "<answer> y </answer>").payload == "y"
