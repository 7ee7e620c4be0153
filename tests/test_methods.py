"""Methods: one package per published system, each declaring the objects it is made of; listed by
``workbench.methods``, read by eval/train/toolbox."""

from __future__ import annotations

import json
import pkgutil

import pytest

import workbench.methods as methods_pkg
from workbench import methods as wm
from workbench.apps.cli import main
from workbench.methods import Method, get_method, get_preset, method_names, preset_needs, preset_protocol
from workbench.rewards.preset import FeatureNeeds

NAMES = method_names()
SEEDS = ("dynasearcher", "rsearch_evidence", "dspo", "rsearch_dag", "when_to_search")


def test_every_package_is_listed_with_the_objects_it_declares():
    import sys

    packages = {i.name for i in pkgutil.iter_modules(methods_pkg.__path__) if i.ispkg}
    modules = {i.name for i in pkgutil.iter_modules(methods_pkg.__path__) if not i.ispkg}
    # the folder's own modules: the declaration type, the listing, the training configuration's assembly
    assert modules == {"assemble", "base", "listing"}, "a method is a package (workbench/methods/<paper>/), not a module"
    listed = {m.name for pkg in packages for m in sys.modules[f"workbench.methods.{pkg}"].METHODS}
    assert listed == set(wm.METHODS) == set(NAMES)
    for m in wm.METHODS.values():
        assert isinstance(m, Method) and isinstance(m.protocol, type)  # objects, not names to look up
        assert m.reward is None or m.reward is wm.PRESETS[m.reward.name]
        assert wm.PROTOCOLS[m.protocol.name] is m.protocol


def test_the_seed_papers_search_r1_and_baselines_are_methods():
    assert set(SEEDS) | {"search_r1", "direct", "vanilla_rag", "iter_retgen", "ircot"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_declaration_resolves(name):
    m = get_method(name)
    proto = m.get_protocol()
    assert isinstance(proto, m.protocol)
    assert m.tools == tuple(proto.required_tools)
    assert m.title and m.citation
    if m.reward:
        rubric = m.rubric()
        assert rubric.components
    if m.optimizer:
        from workbench.rl.config import get_loss_config

        over = dict(m.optimizer_overrides)
        if "kl_coef_end" in over:  # the schedule's length is the run's (TrainConfig sets it)
            over["kl_anneal_steps"] = 10
        get_loss_config(m.optimizer, **over)
    if not m.baseline:
        assert m.reward and m.optimizer, f"{name}: a published method declares its reward and optimizer"
        assert m.source and m.notes, f"{name}: say where the values come from"


def test_tools_come_from_the_declaration_and_build_on_the_world():
    from workbench.data.world import load_world
    from workbench.tools.toolbox import build_toolbox

    world = load_world()
    for name in NAMES:
        m = get_method(name)
        tb = build_toolbox(m.get_protocol(), world)
        assert sorted(tb.names()) == sorted(m.tools)


def test_feature_needs_come_from_declarations_not_names():
    # Eq. 3 of DynaSearcher: recall by title OR embedding, so its reward needs embeddings
    assert preset_needs("dynasearcher").encoder
    assert get_method("dynasearcher").feature_needs().encoder
    assert get_method("rsearch_evidence").feature_needs().evidence_model
    assert get_method("dspo").feature_needs() == FeatureNeeds()
    with pytest.raises(ValueError, match="unknown reward preset 'nope'"):
        preset_needs("nope")


def test_preset_protocol_comes_from_the_method_that_declares_it():
    assert preset_protocol("dspo").name == "search_r1"
    assert preset_protocol("dynasearcher").name == "dynasearcher"
    with pytest.raises(ValueError, match="no method declares"):
        preset_protocol("nope")


def test_search_r1_preset_is_exact_match():
    import pandas as pd

    table = get_preset("search_r1")(pd.DataFrame({"em": [1.0, 0.0, float("nan")]}))
    assert table.total[:2].tolist() == [1.0, 0.0]


def test_unknown_method_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown method 'nope'; valid methods: .*dynasearcher"):
        get_method("nope")


def test_cli_lists_methods_with_their_papers(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
    assert "Hao et al., 2025" in out
    assert main(["methods", "rsearch_dag", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["train_defaults"]["loss_overrides"]["adv_norm"] == "mean_only"
    assert d["paper_values"]["lr"] == 5e-6
    assert main(["methods", "nope"]) == 2


def test_eval_accepts_a_method_whose_protocol_has_another_name(tokenizer):
    """``dspo`` rolls out Search-R1's protocol, and its trajectories are labelled ``dspo``."""
    from workbench.data.world import load_world
    from workbench.eval.runner import evaluate
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig
    from workbench.tools.toolbox import build_toolbox

    world = load_world()
    ex = world.split("dev")[:2]
    proto = get_method("dspo").get_protocol()
    be = ScriptedBackend(tokenizer, ["<search> x </search>", "<answer> y </answer>"])
    res = evaluate("dspo", ex, be, build_toolbox(proto, world), RolloutConfig(max_turns=3), progress=False)
    assert res.method == "dspo"
    assert {t.protocol for t in res.trajectories} == {"search_r1"}
    assert {t.meta["method"] for t in res.trajectories} == {"dspo"}
    assert all(t.id.startswith("dspo:") for t in res.trajectories)


@pytest.mark.parametrize("name", [n for n in NAMES if not get_method(n).baseline])
def test_train_config_from_method(name):

    m = get_method(name)
    cfg = wm.get_method(name).train_config(steps=3)
    assert (cfg.method, cfg.protocol, cfg.reward, cfg.preset) == (name, m.protocol.name, m.reward.name, m.optimizer)
    assert cfg.steps == 3
    for k, v in m.train.items():
        assert getattr(cfg, k) == v
    # every part still mixes: the user's optimizer wins over the method's
    assert wm.get_method(name).train_config(preset="dr_grpo").preset == "dr_grpo"


def test_rewards_on_the_demo_run_are_identical_before_and_after_the_restructure():
    """A real ``make demo`` run (default model, 24 questions, direct + search_r1) was scored with every preset by the
    code before the methods restructuring (commit 1176ed5); today's code must give the same numbers."""
    from pathlib import Path

    import numpy as np

    from workbench.rewards.features import compute_features
    from workbench.storage.runs import open_run

    here = Path(__file__).parent / "data" / "demo_run"
    before = json.loads((here / "rewards_before.json").read_text())
    run = open_run(here)
    trajs = run.trajectories()
    feats = compute_features(trajs, run.examples(), encoder=False, cache=False)
    assert feats["id"].tolist() == before["ids"]
    # the one named change since: a search cut off by the turn limit never ran and is no longer counted
    #, which moves the search-count terms of exactly the trajectories that wrote one
    cut = np.array([sum(a.get("kind") == "search" for a in t.actions) > t.n_searches for t in trajs])
    assert 0 < cut.sum() <= 2
    # and DynaSearcher Eq. 2 takes L_gt from the alias the answer matches best, not the first alias:
    # only the rows where that alias is not the first one may change
    from workbench.rewards.metrics import matching_gold

    golds = {e.id: e.answers for e in run.examples()}
    alias = np.array([bool(golds[t.example_id]) and matching_gold(t.answer, golds[t.example_id]) != golds[t.example_id][0]
                      for t in trajs])
    assert alias.sum() <= 3
    keep = ~cut & ~alias
    for key, want in before["presets"].items():
        name, _, stage = key.partition(":")
        table = get_preset(name, **({"stage": 2} if stage else {}))(feats)
        got = {"total": table.total, **{c: table.values[c] for c in table.components}}
        # components added since, reported with weight 0 (the totals above must not move)
        added = {"dynasearcher": {"r_short"}}.get(name, set())
        assert set(got) - added == set(want), key
        for comp, values in want.items():
            np.testing.assert_array_equal(np.asarray(got[comp], float)[keep], np.array(values, dtype=float)[keep],
                                          err_msg=f"{key}.{comp}")
