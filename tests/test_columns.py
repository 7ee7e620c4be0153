"""The feature-column registry: the derived column tuples are exactly the historical ones, every
column is documented, and a registered feature function adds its columns to every row."""

from __future__ import annotations

import math

import pytest

from workbench.core.trajectory import POLICY, Trajectory, Turn
from workbench.data.example import Example
from workbench.rewards import columns
from workbench.rewards.features import (
    FEATURE_COLUMNS,
    NUMERIC_COLUMNS,
    NUMERIC_FLAGS,
    TEXT_COLUMNS,
    compute_features,
)

# the tuples as they were written out by hand in features.py before the registry
OLD_NUMERIC = (
    "sample_idx", "has_gold", "em", "cem", "f1", "L_pred", "L_gt", "n_searches", "hops", "n_invalid",
    "answered", "format_ok", "answer_boxes", "evidence_boxes", "dag_valid", "n_dag_problems", "order_ok",
    "reflect_count", "n_gold_passages", "n_retrieved", "recall_title", "recall_id", "recall_embed", "recall",
    "n_queries", "query_concise", "query_sim_mean", "query_sim_paper", "evidence_f1",
)  # fmt: skip
OLD_TEXT = ("id", "example_id", "group_id", "protocol", "answer", "concise_rule", "evidence", "evidence_answer")
OLD_FEATURE = ("id", "example_id", "group_id", "sample_idx", "protocol", "answer",
               *[c for c in OLD_NUMERIC if c != "sample_idx"], "concise_rule", "evidence", "evidence_answer")  # fmt: skip
OLD_FLAGS = ("format_ok", "answer_boxes", "evidence_boxes", "dag_valid", "order_ok", "reflect_count")
# added since: failures are recorded as columns, after the historical ones
FAILURE_NUMERIC = ("failed_tool", "backend_error", "failed_judge", "failed_evidence")
FAILURE_TEXT = ("failure",)
# added since: which matching recall used, answers naming several options, demonstration leaks
PROTOCOL_NUMERIC = ("multi_option", "option_f1", "demo_leak")  # option_f1: NL-DAG multiple choice
PROTOCOL_TEXT = ("recall_by",)


def test_derived_tuples_equal_the_historical_ones_plus_failure_columns():
    assert NUMERIC_COLUMNS == OLD_NUMERIC + FAILURE_NUMERIC + PROTOCOL_NUMERIC
    assert TEXT_COLUMNS == OLD_TEXT + FAILURE_TEXT + PROTOCOL_TEXT
    assert FEATURE_COLUMNS == OLD_FEATURE + FAILURE_NUMERIC + FAILURE_TEXT + PROTOCOL_TEXT + PROTOCOL_NUMERIC
    assert NUMERIC_FLAGS == OLD_FLAGS


def test_every_column_is_documented():
    df = columns.describe_columns()
    assert list(df.columns) == ["name", "dtype", "meaning"]
    assert set(FEATURE_COLUMNS) <= set(df["name"])
    assert df["meaning"].str.len().min() > 5
    assert set(df["dtype"]) <= set(columns.DTYPES)
    assert df.set_index("name").loc["sample_idx", "dtype"] == "int"


def test_register_column_rejects_a_conflicting_redefinition():
    columns.register_column("answer", "str", "the extracted final answer (None if the agent never answered)")
    with pytest.raises(ValueError, match="already registered"):
        columns.register_column("answer", "float", "something else")
    with pytest.raises(ValueError, match="dtype"):
        columns.register_column("x_new", "bytes", "no such dtype")


def test_registered_feature_adds_columns(monkeypatch):
    monkeypatch.setattr(columns, "_COLUMNS", dict(columns._COLUMNS))
    monkeypatch.setattr(columns, "_FEATURES", [])
    ex = Example("q1", "Who?", ["Ada"])
    trajs = [Trajectory(id=f"q1#{i}", example_id="q1", question="Who?", protocol="p", prompt_ids=[],
                        turns=[Turn(POLICY, "<answer>Ada</answer>", [])], answer="Ada" if i == 0 else None)
             for i in range(2)]  # fmt: skip
    before = compute_features(trajs, [ex], encoder=False, cache=False)

    def answer_len(traj, example):
        return {"answer_chars": float(len(traj.answer))} if traj.answer else {}

    columns.register_feature(answer_len, {"answer_chars": "characters in the answer (test)"})
    after = compute_features(trajs, [ex], encoder=False, cache=False)
    assert list(after.columns) == [*before.columns, "answer_chars"]
    assert after["answer_chars"].iloc[0] == 3.0 and math.isnan(after["answer_chars"].iloc[1])
    assert after.drop(columns="answer_chars").equals(before)

    columns.register_feature(lambda t, e: {"undeclared": 1.0}, {"declared": "a column (test)"})
    with pytest.raises(ValueError, match="undeclared"):
        compute_features(trajs, [ex], encoder=False, cache=False)
