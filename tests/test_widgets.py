"""The trajectory inspector, headless: its pure selection function, and the widget driven by setting
values (filters, full-text search, prev/next, the diff of two runs, the token view, the reward tab).

The runs are rolled out with scripted model turns on three world questions (1, 2 and 3 hops), so
every answer, search count and observation is known:

=========  ==============  ====  ======  ========  ==========================================
run        method          hops  right?  searches  notes
=========  ==============  ====  ======  ========  ==========================================
eval       direct          1     yes     0
eval       direct          2     no      0
eval       direct          3     no      0
eval       search_r1       1     yes     1         observation "Nothing to see."
eval       search_r1       2     yes     1         the only observation with ZEBRAFINCH
eval       search_r1       3     no      2
train      search_r1       1..3  no      1         stored reward / advantage columns
=========  ==============  ====  ======  ========  ==========================================
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from widgets.inspector import load_inspector_data, trajectory_inspector
from workbench.core.trajectory import OBSERVATION
from workbench.core.types import Hit
from workbench.eval.filters import correct_mask, filter_trajectories
from workbench.eval.runner import evaluate
from workbench.methods import get_preset
from workbench.rewards import compute_features, save_features
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig
from workbench.storage.runs import Run
from workbench.tools.base import Toolbox

SECRET = "ZEBRAFINCH"


@pytest.fixture(scope="module")
def questions(world):
    by_hops = {}
    for e in world.split("dev"):
        by_hops.setdefault(e.hops, e)
    return [by_hops[1], by_hops[2], by_hops[3]]


def _search(query: str, k: int = 3):
    if "clue" in query:
        return [Hit("p9", "Ledger", f"The {SECRET} ledger holds the clue.", 1.0)]
    return [Hit("p1", "Generic", "Nothing to see.", 1.0)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer, questions, one_thread):
    """An eval run (direct + search_r1, features.parquet written) and a training-like run with stored rewards."""
    q1, q2, q3 = questions

    def direct(prompt, turn):
        return f"<answer> {q1.answers[0]} </answer>" if q1.question in prompt else "<answer> Nobody </answer>"

    def agent(prompt, turn):
        if q3.question in prompt:
            return ["<search> first </search>", "<search> second </search>", "<answer> Nobody </answer>"][min(turn, 2)]
        if turn == 0:
            return "<search> clue </search>" if q2.question in prompt else "<search> plain </search>"
        return f"<answer> {(q1 if q1.question in prompt else q2).answers[0]} </answer>"

    root = tmp_path_factory.mktemp("inspector_runs")
    tools = Toolbox({"search": _search})
    res = [
        evaluate("direct", questions, ScriptedBackend(tokenizer, direct), tools, RolloutConfig(max_turns=1), progress=False),
        evaluate("search_r1", questions, ScriptedBackend(tokenizer, agent, logprob=-0.5), tools,
                 RolloutConfig(max_turns=4), progress=False),
    ]
    ev = Run.create(root, kind="eval", run_id="eval", config={"model": "scripted", "dataset": "world"})
    trajs = [t for r in res for t in r.trajectories]
    ev.write_trajectories(trajs, extra_columns={"method": [r.method for r in res for _ in r.trajectories]})
    ev.write_examples(questions)
    save_features(ev, compute_features(trajs, questions, encoder=False, cache=False))

    def wrong(prompt, turn):
        return "<search> plain </search>" if turn == 0 else "<answer> Nobody </answer>"

    tr_trajs = evaluate("search_r1", questions, ScriptedBackend(tokenizer, wrong, logprob=-0.25), tools,
                        RolloutConfig(max_turns=3), progress=False).trajectories
    tr = Run.create(root, kind="train", run_id="train", config={"model": "scripted", "reward": "dynasearcher"})
    tr.write_trajectories(tr_trajs, extra_columns={"reward": [0.2, 0.6, 0.9], "advantage": [-0.75, 0.0, 0.75]})
    tr.write_examples(questions)
    return ev, tr


def _ids(frame: pd.DataFrame, idx: list[int]) -> set[tuple[str, int]]:
    return {(frame.at[i, "method"], int(frame.at[i, "hops"])) for i in idx}


# --------------------------------------------------------------------------- the pure selection


def test_table_holds_the_known_scores(runs):
    frame = load_inspector_data(runs[0]).frame
    assert len(frame) == 6 and set(frame["run"]) == {"eval"} and set(frame["dataset"]) == {"world"}
    by = frame.set_index(["method", "hops"])
    assert by.loc[("direct", 1), "cem"] == 1.0 and by.loc[("direct", 2), "cem"] == 0.0
    assert by.loc[("search_r1", 2), "cem"] == 1.0 and by.loc[("search_r1", 3), "f1"] == 0.0
    assert list(by.loc["search_r1", "n_searches"]) == [1, 1, 2] and set(by.loc["direct", "n_searches"]) == {0}


def test_filters_select_the_right_trajectories(runs):
    f = load_inspector_data(runs[0]).frame
    assert _ids(f, filter_trajectories(f, correct=True)) == {("direct", 1), ("search_r1", 1), ("search_r1", 2)}
    assert _ids(f, filter_trajectories(f, correct=False, method="search_r1")) == {("search_r1", 3)}
    assert _ids(f, filter_trajectories(f, searches=(1, 1))) == {("search_r1", 1), ("search_r1", 2)}
    assert _ids(f, filter_trajectories(f, searches=(2, 9), correct=True)) == set()
    assert _ids(f, filter_trajectories(f, hops=[2, 3], method=["direct"])) == {("direct", 2), ("direct", 3)}
    assert _ids(f, filter_trajectories(f, protocol="direct", dataset="world")) == {("direct", h) for h in (1, 2, 3)}
    assert filter_trajectories(f, run="other") == [] and filter_trajectories(f) == list(range(6))


def test_correctness_by_f1_threshold_and_missing_values():
    f = pd.DataFrame({"cem": [1.0, 0.0, 0.0, np.nan], "f1": [1.0, 0.6, 0.2, np.nan], "reward": [1.0, np.nan, 0.0, 0.5],
                      "n_searches": [0, 1, 2, 3], "hops": [1, 2, np.nan, 2], "question": list("abcd"), "answer": list("wxyz")})
    assert correct_mask(f, "f1", 0.5).tolist()[:3] == [1.0, 1.0, 0.0] and np.isnan(correct_mask(f).iloc[3])
    assert filter_trajectories(f, correct=True, correct_metric="f1", f1_threshold=0.5) == [0, 1]
    assert filter_trajectories(f, correct=True, correct_metric="f1", f1_threshold=0.7) == [0]
    assert filter_trajectories(f, correct=False) == [1, 2]  # no gold answer: neither right nor wrong
    assert filter_trajectories(f, reward=(0.0, 1.0)) == [0, 2, 3]  # a NaN reward is in no range
    assert filter_trajectories(f, hops=2) == [1, 3]
    with pytest.raises(ValueError, match="valid: cem, f1"):
        filter_trajectories(f, correct=True, correct_metric="em")


# --------------------------------------------------------------------------- the widget


def test_widget_filters_count_and_navigation(runs):
    box = trajectory_inspector(str(runs[0].path))
    ins = box.inspector
    assert "<b>6</b> of 6" in ins.count_w.value and len(box.trajectories) == 6  # old attributes kept
    got = ins.set_filters(correct=True, method="search_r1")
    assert _ids(ins.frame, got) == {("search_r1", 1), ("search_r1", 2)} and "<b>2</b> of 6" in ins.count_w.value
    assert [v for _, v in ins.pick.options] == got and ins.pick.value == got[0]
    ins.correct_w.value = "wrong"  # a widget change re-filters by itself
    assert _ids(ins.frame, ins.matches) == {("search_r1", 3)}
    ins.set_filters(correct=None, method=None, searches=(1, 2))
    assert len(ins.matches) == 3
    start = ins.pick.value
    assert start == ins.matches[-1]  # the shown trajectory (hops 3) still matches, so it stays shown
    seen = [ins.step(+1) for _ in range(3)]
    assert seen == ins.matches[:2] + [start]  # next wraps around
    assert ins.step(-1) == ins.matches[1]
    ins.next_w.click()
    assert ins.pick.value == ins.matches[2]
    ins.prev_w.click()
    assert ins.pick.value == ins.matches[1]
    assert ins.frame.at[ins.pick.value, "id"] in ins.transcript.value


def test_full_text_search_finds_an_observation_string(runs):
    ins = trajectory_inspector(runs[0]).inspector
    got = ins.set_filters(text=SECRET.lower())
    assert len(got) == 1 and _ids(ins.frame, got) == {("search_r1", 2)}
    traj = ins.trajectories[got[0]]
    assert SECRET not in traj.question and any(SECRET in t.text for t in traj.turns if t.kind == OBSERVATION)
    assert f"<mark>{SECRET}</mark>" in ins.transcript.value
    assert ins.set_filters(text="no such words anywhere") == []
    assert "No trajectory matches" in ins.transcript.value and "<b>0</b> of 6" in ins.count_w.value


def test_diff_shows_both_methods_on_one_question(runs, questions):
    ins = trajectory_inspector(runs[0]).inspector
    (i,) = ins.set_filters(method="search_r1", hops=2)
    assert ins.diff.value == ""  # drawn when the tab opens: navigation does not pay for it
    ins.tabs.selected_index = 3
    assert (ins.left_w.value, ins.right_w.value) == ("search_r1", "direct")
    d = ins.diff.value
    summary, columns = d.split("</table>", 1)
    assert "search_r1" in summary and "direct" in summary
    assert "✔ yes" in summary and "✘ no" in summary and "Nobody" in summary  # the direct answer was wrong
    assert questions[1].answers[0] in summary and "background:#fff3b0" in summary  # gold; the differences marked
    assert "<span style='background:#c8f0c8'>Nobody</span>" in summary  # the words only the right answer has
    assert columns.count("turn 0 · policy") == 2 and SECRET in columns  # both transcripts; only the agent saw the clue


def test_comparison_over_every_shared_question(runs, questions):
    ins = trajectory_inspector(runs[0]).inspector
    ins.tabs.selected_index = 3
    ins.left_w.value, ins.right_w.value = "direct", "search_r1"
    pairs = ins.comparison()
    by_q = dict(zip(pairs["question"], pairs["category"]))
    assert by_q == {questions[0].question: "both right", questions[1].question: "fixed",
                    questions[2].question: "both wrong"}
    assert list(pairs["category"]) == ["fixed", "both wrong", "both right"]  # fixed first
    view = ins.pairs_view.value
    assert "1 fixed" in view and "0 broken" in view and questions[1].answers[0] in view  # counts; gold in the table
    ins.category_w.value = "fixed"
    (label, row), = [o for o in ins.pair_w.options if o[1] >= 0]
    assert label.startswith("fixed") and ins.frame.at[row, "question"] == questions[1].question
    ins.set_filters(method="direct", hops=1)  # a filter that hides the pair is cleared to open it
    ins.pair_w.value = row
    assert ins.pick.value == row and "filters cleared to show" in ins.count_w.value
    assert (ins.left_w.value, ins.right_w.value) == ("direct", "search_r1") and SECRET in ins.diff.value


def test_chosen_diff_sources_survive_filter_changes(runs):
    """Sources picked by hand (or by open_on_difference) stay when a filter changes or another trajectory shows;
    before any choice the left follows the trajectory shown."""
    ins = trajectory_inspector(runs[0]).inspector
    ins.tabs.selected_index = 3
    ins.set_filters(method="search_r1")
    assert ins.left_w.value == "search_r1" and not ins.diff_pinned  # follows the one shown
    ins.left_w.value, ins.right_w.value = "direct", "search_r1"
    assert ins.diff_pinned
    for change in ({"method": "search_r1", "hops": 2}, {"hops": None}, {"method": None}):
        ins.set_filters(**change)
        ins.step(+1)
        assert (ins.left_w.value, ins.right_w.value) == ("direct", "search_r1"), change
    fresh = trajectory_inspector(runs[0]).inspector
    fresh.open_on_difference("direct", "search_r1")
    fresh.set_filters(method="search_r1", hops=1)
    assert (fresh.left_w.value, fresh.right_w.value) == ("direct", "search_r1")


def test_open_on_difference_shows_the_question_the_second_method_gained(runs, questions):
    ins = trajectory_inspector(runs[0]).inspector
    ins.set_filters(method="direct", hops=1)  # filters that hide the question are reset
    i = ins.open_on_difference("direct", "search_r1")  # search_r1 answers q2, direct does not
    assert ins.frame.at[i, "question"] == questions[1].question and ins.frame.at[i, "source"] == "direct"
    assert ins.pick.value == i and ins.tabs.selected_index == 3 and "filtered by" not in ins.count_w.value
    assert (ins.left_w.value, ins.right_w.value) == ("direct", "search_r1")
    assert "✔ yes" in ins.diff.value and "✘ no" in ins.diff.value and "gained most cover-EM" in ins.diff.value
    # the same scores everywhere: the diff still opens, on the first shared question, and says why
    j = ins.open_on_difference("direct", "direct")
    assert j is not None and ins.tabs.selected_index == 3 and "score the same" in ins.diff.value
    assert ins.open_on_difference("direct", "nope") is None and "No trajectories of nope" in ins.diff.value
    assert ins.diff_reason == "no trajectories of nope here (sources: direct, search_r1)"


def test_gold_answer_beside_the_prediction_everywhere(runs, questions):
    ins = trajectory_inspector(runs[0]).inspector
    (i,) = ins.set_filters(method="direct", hops=2)
    gold = questions[1].answers[0]
    assert gold in ins.transcript.value and "prediction <code>Nobody</code>" in ins.transcript.value
    # the verdict names the answer's score and the criterion apart (not "wrong by cover-EM = 1", read as a score)
    assert "✘ wrong</b> <span style='color:#444'>(this answer's cover-EM 0; correct means cover-EM = 1" \
        in ins.transcript.value
    assert f"gold: {gold}"[:30] in ins.pick.options[0][0] and "✘" in ins.pick.options[0][0]
    assert gold in ins.table.value  # the matches table has a gold column
    assert ins.frame.at[i, "gold"] == questions[1].answers


def test_the_count_says_why_the_inspector_is_filtered(runs):
    ins = trajectory_inspector(runs[0]).inspector
    assert "filtered by" not in ins.count_w.value and ins.clear_w.layout.display == "none"
    ins.set_filters(correct=False, searches=(1, 2))
    assert "filtered by: answer wrong (cover-EM) · searches 1–2" in ins.count_w.value
    assert "set from code: set_filters(correct=False, searches=(1, 2))" in ins.count_w.value
    ins.method_w.value = "search_r1"  # a widget moved: the reader's own filters, no "from code"
    assert "method search_r1" in ins.count_w.value and "set from code" not in ins.count_w.value
    ins.clear_w.click()
    assert "<b>6</b> of 6" in ins.count_w.value and "filtered by" not in ins.count_w.value


def test_diff_of_two_runs_on_the_same_question(runs):
    ev, tr = runs
    ins = trajectory_inspector([ev, tr]).inspector
    ins.tabs.selected_index = 3
    assert set(ins.frame["source"]) == {"eval · direct", "eval · search_r1", "train · search_r1"}
    (i,) = ins.set_filters(run="train", hops=1)
    assert ins.left_w.value == "train · search_r1" and ins.right_w.value.startswith("eval · ")
    ins.right_w.value = "eval · search_r1"
    summary = ins.diff.value.split("</table>", 1)[0]
    assert "train · search_r1" in summary and "eval · search_r1" in summary and "✔ yes" in summary and "✘ no" in summary
    ins.set_filters(hops=2)  # the right-hand source is kept while it has the question
    assert ins.right_w.value == "eval · search_r1" and ins.left_w.value == ins.frame.at[ins.pick.value, "source"]
    assert sorted(ins.comparison()["category"]) == ["both wrong", "fixed", "fixed"]  # train got none right
    # a bare method name with two runs open: the first run's on the left, the last run's (the compared one) on the right
    assert (ins.source_of("direct"), ins.source_of("search_r1"), ins.source_of("search_r1", "right")) == (
        "eval · direct", "eval · search_r1", "train · search_r1")
    i = ins.open_on_difference("search_r1", "search_r1")  # eval's against train's: train gains nowhere
    assert i is not None and ins.diff_reason == "" and ins.frame.at[i, "source"] == "eval · search_r1"
    assert (ins.left_w.value, ins.right_w.value) == ("eval · search_r1", "train · search_r1")
    assert "over 3 shared questions" in ins.pairs_view.value
    assert ins.open_on_difference("direct", "nope") is None and ins.diff_reason.startswith("no trajectories of nope")


def test_token_view_marks_masked_tokens_and_shows_logprobs(runs, tokenizer):
    ins = trajectory_inspector(runs[0], tokenizer).inspector
    (i,) = ins.set_filters(method="search_r1", hops=2)
    traj, view = ins.trajectories[i], ins.tokens.value
    n_obs = sum(len(t.token_ids) for t in traj.turns if t.kind == OBSERVATION)
    assert n_obs > 0 and view.count("data-mask='0'") == n_obs and view.count("data-mask='1'") == traj.n_policy_tokens
    policy_titles = re.findall(r"data-mask='1' title='([^']*)'", view)
    assert all("logprob -0.500" in t for t in policy_titles)
    assert not any("logprob" in t for t in re.findall(r"data-mask='0' title='([^']*)'", view))
    assert "advantage" not in view  # an eval run has none
    assert "Pass a tokenizer" in trajectory_inspector(runs[0]).inspector.tokens.value


def test_training_run_advantage_on_hover_and_stored_rewards(runs, tokenizer):
    ins = trajectory_inspector(runs[1], tokenizer).inspector
    assert ins.data.reward_stored and ins.preset_w.value == "dynasearcher"  # the run's own preset
    assert ins.frame["reward"].tolist() == pytest.approx([0.2, 0.6, 0.9])
    got = ins.set_filters(reward=(0.5, 1.0))
    assert [int(ins.frame.at[i, "hops"]) for i in got] == [2, 3]
    ins.pick.value = got[-1]
    titles = re.findall(r"data-mask='1' title='([^']*)'", ins.tokens.value)
    assert titles and all("advantage 0.750" in t for t in titles)
    assert "computed here without embeddings" in ins.reward.value  # no features.parquet in this run


def test_reward_tab_follows_the_preset(runs):
    ins = trajectory_inspector(runs[0], preset="dspo").inspector
    feats = load_inspector_data(runs[0]).features
    assert ins.frame["reward"].tolist() == pytest.approx(get_preset("dspo")(feats).total.tolist())
    assert "r_subem" in ins.reward.value and "features.parquet" in ins.reward.value
    ins.preset_w.value = "dynasearcher"
    table = get_preset("dynasearcher")(feats)
    assert ins.frame["reward"].tolist() == pytest.approx(table.total.tolist())
    assert all(c in ins.reward.value for c in table.components)
    lo, hi = ins.reward_w.min, ins.reward_w.max
    assert lo == pytest.approx(table.total.min()) and hi == pytest.approx(table.total.max())
    top = ins.set_filters(reward=(table.total.max() - 1e-9, hi))
    assert top and all(ins.frame.at[i, "reward"] == pytest.approx(table.total.max()) for i in top)
    assert "over the matching trajectories" in ins.reward.value
