"""Expert traces from the world (workbench.rl.expert): every protocol's writer, the checks, the run."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.core.trajectory import OBSERVATION, POLICY
from workbench.eval.expert import write_expert_run
from workbench.methods import METHODS as ALL_METHODS
from workbench.methods import get_method
from workbench.rewards.metrics import cover_exact_match
from workbench.rl.expert import Dropped, Hop, check_trace, evidence_sentence, expert_traces, plan_expert, run_expert
from workbench.tools.toolbox import build_toolbox

# every method with an expert writer (from the methods listing: a new method's writer is tested without an edit here)
METHODS = [name for name, m in ALL_METHODS.items() if m.expert is not None]


def expert_protocol(method: str, **overrides):
    return get_method(method).training_protocol(**overrides)


def writer(method: str):
    return get_method(method).expert


def test_every_published_method_has_an_expert_writer():
    """A cold start needs expert traces: every method with a training recipe declares its writer; baselines none."""
    assert {"search_r1", "dspo", "when_to_search", "rsearch_evidence", "dynasearcher", "rsearch_dag",
            "r1_searcher"} <= set(METHODS)
    assert all(m.expert is not None for m in ALL_METHODS.values() if not m.baseline)
    assert all(m.expert is None for m in ALL_METHODS.values() if m.baseline)


@pytest.fixture(scope="module")
def questions(world):
    """One question of each hop count and of each type (train split)."""
    picked, seen = [], set()
    for e in world.split("train"):
        if (e.hops, e.qtype) not in seen:
            seen.add((e.hops, e.qtype))
            picked.append(e)
    assert {e.hops for e in picked} == {1, 2, 3, 4}
    return picked


@pytest.mark.parametrize("method", METHODS)
def test_traces_for_every_protocol(method, world, tokenizer, questions):
    protocol = expert_protocol(method)
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    res = expert_traces(questions, protocol, writer(method), toolbox, tokenizer, world, method=method)
    assert res.dropped == []
    assert len(res.trajectories) == len(questions)
    by_id = {e.id: e for e in questions}
    for t in res.trajectories:
        ex = by_id[t.example_id]
        assert t.flags["format_ok"], t.flags
        assert protocol.format_flags(t)["format_ok"]
        assert cover_exact_match(t.answer, ex.answers) == 1.0
        assert t.finish_reason == "answer" and t.meta["source"] == "expert"
        kinds = [a["kind"] for a in t.actions]
        assert kinds[-1] == "answer" and set(kinds[:-1]) == {"search"}
        # every hop's supporting passage came back from the real tool
        hits = {h.id for c in t.tool_calls for h in c.hits()}
        assert set(ex.supporting_ids) <= hits
        # masks: observation tokens 0, policy tokens 1, prompt 0; token ids are the turns' ids
        mask = t.loss_mask
        assert len(mask) == len(t.token_ids) and mask[: len(t.prompt_ids)] == [0] * len(t.prompt_ids)
        pos = len(t.prompt_ids)
        for turn in t.turns:
            assert mask[pos : pos + len(turn.token_ids)] == [int(turn.kind == POLICY)] * len(turn.token_ids)
            pos += len(turn.token_ids)
        assert any(turn.kind == OBSERVATION for turn in t.turns)
        # the observation text is the protocol's own rendering of the hits (not written by the expert)
        obs = [turn for turn in t.turns if turn.kind == OBSERVATION]
        assert all(turn.tool_calls for turn in obs)


def test_protocol_is_the_training_one():
    for m in METHODS:
        cfg = get_method(m).train_config()
        assert expert_protocol(m).observation_mode == cfg.protocol_kwargs["observation_mode"]
    assert expert_protocol("search_r1", observation_mode="inline").observation_mode == "inline"


def test_unretrievable_hop_is_dropped_with_reason(world, tokenizer, questions):
    protocol = expert_protocol("search_r1")
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    ex = next(e for e in questions if e.hops == 2)
    words = set(" ".join([ex.question, *ex.decomposition, *(h["head"] for h in ex.kg_path)]).lower().split())
    other = next(p.id for p in world.passages if not words & set(f"{p.title} {p.text}".lower().split()))
    bad = dataclasses.replace(ex, id=ex.id + "-moved", supporting_ids=[ex.supporting_ids[0], other])
    with pytest.raises(Dropped, match="hop 2: no query retrieves"):
        plan_expert(bad, protocol, writer("search_r1"), toolbox, world)
    res = expert_traces([bad, ex], protocol, writer("search_r1"), toolbox, tokenizer, world)
    assert [d["example_id"] for d in res.dropped] == [bad.id] and res.dropped[0]["stage"] == "plan"
    assert res.yield_by_hops()["2"] == {"n": 2, "valid": 1, "yield": 0.5}


def test_check_trace_catches_a_wrong_answer_and_a_missing_passage(world, tokenizer, questions):
    protocol = expert_protocol("search_r1")
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    ex = next(e for e in questions if e.hops == 1)
    plan = plan_expert(ex, protocol, writer("search_r1"), toolbox, world)
    assert check_trace(run_expert(plan, protocol, toolbox, tokenizer), plan, protocol) == []
    wrong = dataclasses.replace(plan, answer="Nobody Atall")
    assert any("does not cover" in p for p in check_trace(run_expert(wrong, protocol, toolbox, tokenizer), wrong, protocol))
    moved = dataclasses.replace(plan, hops=[dataclasses.replace(plan.hops[0], support_id="p-none")])
    assert any("not in the results" in p for p in check_trace(run_expert(moved, protocol, toolbox, tokenizer), moved, protocol))
    cut = run_expert(plan, protocol, toolbox, tokenizer, max_new_tokens=8)
    assert any("cut" in p for p in check_trace(cut, plan, protocol))


def test_evidence_sentence_prefers_the_tail_as_a_word():
    hop = Hop("K", "country of citizenship", "Commonwealth of Rardriovia", "", "p1", "",
              "K is a Rardriovian director. She is a citizen of Rardriovia.", tail_forms=["Rardriovia"])
    assert evidence_sentence(hop) == "She is a citizen of Rardriovia."
    assert evidence_sentence(dataclasses.replace(hop, tail="Nowhere", tail_forms=[])) == "She is a citizen of Rardriovia."


def test_expert_run_is_an_ordinary_run(world, tokenizer, questions, tmp_path):
    from workbench.storage.runs import open_run

    protocol = expert_protocol("search_r1")
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    res = expert_traces(questions[:3], protocol, writer("search_r1"), toolbox, tokenizer, world, method="search_r1")
    run = open_run(write_expert_run(res, "search_r1", protocol, out=tmp_path).path)
    assert run.config["kind"] == "expert" and run.config["protocol_config"] == protocol.config()
    trajs = run.trajectories()
    assert [t.id for t in trajs] == [t.id for t in res.trajectories]
    assert trajs[0].loss_mask == res.trajectories[0].loss_mask
    m = run.metrics()
    assert m["methods"]["search_r1"]["cem"] == 1.0 and m["expert"]["yield"]["all"]["yield"] == 1.0
    assert run.exists("features.parquet") and len(run.examples()) == 3
    assert run.complete and run.status.note == ""  # marked after its last metrics.json


def test_cli_expert(tmp_path, capsys):
    from workbench.apps.cli import main

    assert main(["expert", "--method", "search_r1,r1_searcher", "--limit", "4", "--hops", "1,2", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "yield" in out and "r1_searcher" in out
    assert len(list(tmp_path.iterdir())) == 2


def test_outline_writes_the_plan_and_counts_the_steps(world, tokenizer, questions):
    """``outline``: the first think names how many searches and which relations, each search says which step of
    how many it is, the conclusion that the last is done; the traces stay valid. Without it: none of that."""
    protocol = expert_protocol("search_r1")
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    plain = expert_traces(questions, protocol, writer("search_r1"), toolbox, tokenizer, world)
    counted = expert_traces(questions, protocol, writer("search_r1"), toolbox, tokenizer, world, outline=True)
    assert counted.dropped == [] and len(counted.trajectories) == len(questions)
    by_id = {e.id: e for e in questions}
    for t in counted.trajectories:
        n = by_id[t.example_id].hops
        policy = [turn.text for turn in t.turns if turn.kind == POLICY]
        assert len(policy) == n + 1
        assert f"This question takes {n} search" in policy[0] and f"Step 1 of {n}:" in policy[0]
        assert all(f"Step {k + 1} of {n}: Next" not in p for k, p in enumerate(policy))  # "I need", not "Next I need"
        assert all(f"Step {k + 1} of {n}:" in policy[k] for k in range(n))
        last = "That was the only step" if n == 1 else f"That was step {n} of {n}"
        assert f"{last}, so the answer is" in policy[-1]
    deep = next(t for t in counted.trajectories if by_id[t.example_id].hops >= 3)
    rels = [h["relation"] for h in by_id[deep.example_id].kg_path]
    assert ", then ".join(rels) in deep.turns[[k.kind for k in deep.turns].index(POLICY)].text
    assert all("Step" not in turn.text and "This question takes" not in turn.text
               for t in plain.trajectories for turn in t.turns if turn.kind == POLICY)


def test_residual_writes_the_question_that_is_left(world, tokenizer, questions):
    """``residual``: after each hop of a chain the think names the question left, the entity found in place of what
    that hop answered, down to the last hop's own sub-question; a comparison's parallel hops keep the plain steps; the
    traces stay valid. With ``outline`` too it is an error."""
    protocol = expert_protocol("search_r1")
    toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
    res = expert_traces(questions, protocol, writer("search_r1"), toolbox, tokenizer, world, residual=True)
    assert res.dropped == [] and len(res.trajectories) == len(questions)
    by_id = {e.id: e for e in questions}
    chains = 0
    for t in res.trajectories:
        ex = by_id[t.example_id]
        policy = [turn.text for turn in t.turns if turn.kind == POLICY]
        left = [p.split("Now the question is: ")[1].split(" </think>")[0] for p in policy if "Now the question is" in p]
        if ex.qtype == "comparison" or ex.hops == 1:
            assert left == [] and all("Next I need to find" in p for p in policy[1:-1])
            continue
        chains += 1
        subqs = ex.meta["decomposition_resolved"]
        assert len(left) == ex.hops - 1 and left[-1] == subqs[-1], (ex.question, left)
        for k, q in enumerate(left):  # each names what hop k + 1 found, and is shorter than the one before
            assert ex.kg_path[k]["tail"] in q and len(q) < len(left[k - 1] if k else ex.question), (ex.question, left)
        assert "Now the question is" not in policy[0] and "Now the question is" not in policy[-1]
    assert chains >= 4 and {by_id[t.example_id].hops for t in res.trajectories} >= {2, 3, 4}
    with pytest.raises(ValueError, match="give one of them"):
        expert_traces(questions[:1], protocol, writer("search_r1"), toolbox, tokenizer, world, outline=True, residual=True)


def test_every_chain_template_has_its_left_questions():
    """Each world template of three or more hops has the questions left after its hops but the last, each about the
    entity found; where a two-hop template has the same path, the left question is its wording."""
    from workbench.data.world.templates import RESIDUALS, TEMPLATES

    deep = {t.name: t for t in TEMPLATES if len(t.path) >= 3}
    assert set(RESIDUALS) == set(deep)
    two_hop = {t.path: t.text for t in TEMPLATES if len(t.path) == 2 and t.qtype != "comparison"}
    for name, t in deep.items():
        assert len(RESIDUALS[name]) == len(t.path) - 2, name
        for k, text in enumerate(RESIDUALS[name]):
            assert text.count("{a}") == 1 and text.endswith("?"), (name, text)
            if t.path[k + 1:] in two_hop:
                assert text == two_hop[t.path[k + 1:]], (name, text)
