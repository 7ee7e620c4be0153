"""Which run a notebook opens when none is named (``workbench.apps.notebooks.pick_run``): the newest complete run,
or the newest that has what the notebook shows. After notebook 00 the newest run is its quickstart (4 questions, one
sample each, no KG method); the reward playground then showed group size 1 and keep rate 0 and the KG explorer "No KG
searches", although the demo's run beside it has both."""

from __future__ import annotations

import pytest

from workbench.apps.notebooks import pick_run
from workbench.storage.runs import Run


def _eval_run(root, run_id, methods, group_size=1, complete=True):
    run = Run.create(root, kind="eval", run_id=run_id,
                     config={"eval": {"methods": methods, "group_size": group_size}, "rollout": {"group_size": group_size}})
    if complete:
        run.mark_complete()
    return run


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    demo = _eval_run(tmp_path, "20261201-100000-eval-demo", ["direct", "search_r1", "search_r1+lora", "dynasearcher"], 3)
    quick = _eval_run(tmp_path, "20261201-110000-eval-world-direct-search_r1", ["direct", "search_r1"])
    _eval_run(tmp_path, "20261201-120000-eval-killed", ["dynasearcher"], 4, complete=False)
    return demo, quick


def test_without_needs_the_newest_complete_run(runs):
    demo, quick = runs
    assert pick_run().path == quick.path


def test_the_playground_and_kg_explorer_skip_a_run_they_cannot_show(runs, capsys):
    demo, quick = runs
    assert pick_run(needs="groups").path == demo.path
    out = capsys.readouterr().out
    assert f"run_dir: {demo.path.name}, the newest run with groups of samples" in out and quick.path.name in out
    assert pick_run(required=False, needs="kg").path == demo.path  # dynasearcher searches the KG
    assert pick_run(str(quick.path), needs="groups").path == quick.path  # a named run is taken as named


def test_a_training_run_has_groups_and_its_method_decides_kg(runs, tmp_path, capsys):
    train = Run.create(tmp_path, kind="train", run_id="20261201-130000-train-x",
                       config={"method": "search_r1", "group_size": 8})
    train.mark_complete()
    assert pick_run(needs="groups").path == train.path
    assert capsys.readouterr().out == ""  # the newest run has what is needed: nothing to say
    assert pick_run(needs="kg").path == runs[0].path


def test_with_no_run_that_has_it_the_newest_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path))
    only = _eval_run(tmp_path, "20261201-110000-eval-quick", ["direct"])
    assert pick_run(needs="kg").path == only.path
    assert "no run under" in capsys.readouterr().out
    with pytest.raises(ValueError, match="one of groups, kg"):
        pick_run(needs="nonsense")


def test_the_playground_and_kg_explorer_notebooks_ask_for_what_they_show():
    """Notebooks 02 and 03 pick their default run by what they draw (groups, KG searches), not merely the newest:
    the call in each notebook's code names its ``needs``."""
    import json
    import re

    from workbench.apps.notebooks import NEEDS, notebooks_dir

    for name, need in (("02_reward_playground", "groups"), ("03_kg_explorer", "kg")):
        nb = json.loads((notebooks_dir() / f"{name}.ipynb").read_text(encoding="utf-8"))
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        calls = re.findall(r"pick_run\(([^)]*)\)", code)
        assert calls and all(f'needs="{need}"' in c for c in calls), (name, calls)
        assert need in NEEDS
