"""Pipeline baselines (vanilla RAG, Iter-RetGen, IRCoT) through the engine with scripted turns."""

from __future__ import annotations

import pytest

from workbench.core.trajectory import OBSERVATION, POLICY
from workbench.core.types import Hit
from workbench.data.example import Example
from workbench.methods import get_protocol
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox

EX = [Example("q1", "Who founded Tarnholm Mills?", ["Ada Quist"])]


class Recorder:
    def __init__(self):
        self.queries = []

    def __call__(self, query, k=5):
        self.queries.append((query, k))
        return [Hit(f"p{len(self.queries)}", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)]


@pytest.fixture
def run(tokenizer):
    def go(name, script, **kw):
        rec = Recorder()
        be = ScriptedBackend(tokenizer, script)
        trajs = rollout(EX, get_protocol(name, **kw), Toolbox({"search": rec}), be, RolloutConfig(max_turns=5), progress=False)
        return trajs[0], rec

    return go


def test_vanilla_rag_retrieves_once_with_the_question(run):
    traj, rec = run("vanilla_rag", ["<answer> Ada Quist </answer>"])
    assert rec.queries == [("Who founded Tarnholm Mills?", 5)]
    assert [t.kind for t in traj.turns] == [OBSERVATION, POLICY]
    assert traj.n_searches == 1 and traj.answer == "Ada Quist" and traj.flags["format_ok"]
    assert traj.loss_mask.count(1) == len(traj.turns[1].token_ids)


def test_iter_retgen_three_iterations_last_generation_answers(run):
    traj, rec = run("iter_retgen", ["<answer> Bo Lin </answer>", "<answer> Ada </answer>", "<answer> Ada Quist </answer>"])
    assert len(traj.policy_turns) == 3 and traj.n_searches == 3
    assert [q for q, _ in rec.queries] == [
        "Who founded Tarnholm Mills?",
        "Who founded Tarnholm Mills? Bo Lin",
        "Who founded Tarnholm Mills? Ada",
    ]
    assert traj.answer == "Ada Quist" and traj.finish_reason == "answer"


def test_ircot_sentence_by_sentence_then_answer(run):
    script = ["Tarnholm Mills is a mill.", "It was founded by Ada Quist.", "So the answer is: <answer> Ada Quist </answer>"]
    traj, rec = run("ircot", script)
    assert [q for q, _ in rec.queries] == ["Who founded Tarnholm Mills?", "Tarnholm Mills is a mill.", "It was founded by Ada Quist."]
    assert traj.answer == "Ada Quist" and traj.n_searches == 3


def test_ircot_answer_without_tags_and_bounded_turns(run):
    traj, _ = run("ircot", ["So the answer is: Ada Quist."])
    assert traj.answer == "Ada Quist"
    traj, rec = run("ircot", lambda text, turn: f"Step {turn} keeps going.")
    assert traj.finish_reason == "max_turns" and len(traj.policy_turns) == 5 and traj.answer is None


def test_bad_config():
    with pytest.raises(ValueError, match="iterations"):
        get_protocol("iter_retgen", iterations=0)
