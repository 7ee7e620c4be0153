"""The demo's defaults exercise every view (groups at temperature > 0, a KG method); its table stays narrow."""

from __future__ import annotations

import inspect

import pytest

from workbench.apps.demo import DEMO_METHODS, DEMO_NOTEBOOKS, run_demo, summary_table


def test_defaults_sample_groups_with_a_kg_method():
    d = {k: v.default for k, v in inspect.signature(run_demo).parameters.items()}
    assert d["group_size"] > 1 and d["temperature"] > 0  # the playground needs advantages
    assert "dynasearcher" in DEMO_METHODS  # the KG explorer needs the agent's KG searches
    assert DEMO_NOTEBOOKS["02_reward_playground"]["weights"]  # the executed copy shows rank changes


def test_greedy_groups_are_refused():
    with pytest.raises(ValueError, match="temperature"):
        run_demo(group_size=4, temperature=0.0)


def test_summary_table_is_narrow():
    row = {"n": 8, "em": 0.125, "cem": 0.25, "cem_strict": 0.25, "f1": 0.3, "n_searches": 1.5, "tokens": 80.0,
           "seconds": 2.0, "valid_actions": 1.0, "answered": 0.75, "format_ok": 0.5, "tool_seconds": 0.1}
    metrics = {"methods": {m: {**row, "by_hops": {"1": row, "2": row}} for m in DEMO_METHODS}}
    table = summary_table(metrics)
    assert max(map(len, table.splitlines())) <= 100 and "dynasearcher" in table and "cover-EM" in table
    hops = summary_table(metrics, by_hops=True).splitlines()
    assert len(hops) == 2 + 2 * len(DEMO_METHODS) and max(map(len, hops)) <= 80
