"""Every registered optimizer variant is documented, accepted by LossConfig and reachable from the CLI.

A variant is one registered function (surrogate, KL estimator, aggregation, advantage estimator,
filter criterion); LossConfig's valid names are read from the registries, so a new one needs no list
edited — and this file checks it is documented and usable from ``workbench train --loss-overrides``.
"""

from __future__ import annotations

import json

import pytest

from workbench import methods as wm
from workbench.eval.config import field_docs
from workbench.rl import advantages as A
from workbench.rl import losses as L
from workbench.rl.config import PRESETS, LossConfig, get_loss_config, valid_names

#: LossConfig field -> the registry its names come from.
REGISTRIES = {
    "surrogate": L.SURROGATES,
    "kl_estimator": L.KL_ESTIMATORS,
    "agg": L.AGGREGATIONS,
    "adv_norm": A.ADVANTAGES,
    "filter_criterion": A.FILTER_CRITERIA,
}
ALL = [(field, name) for field, reg in REGISTRIES.items() for name in reg]
DOCS = field_docs(LossConfig)


def test_valid_names_are_the_registries():
    names = valid_names()
    for field, reg in REGISTRIES.items():
        assert set(reg) <= set(names[field]), field
    assert set(names["adv_norm"]) == set(A.ADVANTAGES) | set(A.ADV_ALIASES)
    for gone in ("IMPORTANCE_LEVELS", "AGG_MODES", "ADV_NORMS"):  # no hand-copied name lists left
        import workbench.rl.config as C

        assert not hasattr(C, gone), gone


@pytest.mark.parametrize(("field", "name"), ALL)
def test_every_registered_name_is_documented(field, name):
    fn = REGISTRIES[field][name]
    assert (fn.__doc__ or "").strip(), f"{field}={name!r}: {fn.__name__} has no docstring"
    assert f"``{name}``" in DOCS[field], f"LossConfig.{field}'s docstring does not mention ``{name}``"


def _train_config(argv: list[str]):
    """What `workbench train ARGV` builds, without training (the same path as cli.train_command)."""
    import dataclasses

    from workbench.apps.cli import build_parser
    from workbench.rl.trainer import TrainConfig

    args = build_parser().parse_args(["train", *argv])
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if getattr(args, f.name) is not None}
    if given.get("method"):
        return wm.get_method(given.pop("method")).train_config(**given)
    return TrainConfig(**given)


@pytest.mark.parametrize(("field", "name"), ALL + [("adv_norm", "mean_only")])
def test_every_registered_name_is_reachable_from_the_cli(field, name):
    over = {field: name}
    if field == "filter_criterion":
        over["dynamic_filter"] = True
    cfg = _train_config(["--loss-overrides", json.dumps(over), "--reward", "dspo"])
    lc = cfg.loss_config()
    assert isinstance(lc, LossConfig)
    assert getattr(lc, field) == A.canonical_adv_norm(name) if field == "adv_norm" else getattr(lc, field) == name


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_reachable_from_the_cli(preset):
    cfg = _train_config(["--preset", preset, "--reward", "dspo"])
    assert cfg.loss_config().name == preset == get_loss_config(preset).name


def test_cli_options_of_the_peer_conventions():
    lc = _train_config(["--loss-overrides", json.dumps({
        "surrogate": "dual_clip", "clip_ratio_c": 5.0, "kl_estimator": "k3", "kl_clamp": 10.0, "adv_std": "sample",
        "empty_seqs": "count", "dynamic_filter": True, "filter_criterion": "std_gt_0",
        "filter_keep_singletons": True}), "--reward", "dspo"]).loss_config()
    assert (lc.surrogate, lc.clip_ratio_c, lc.kl_clamp, lc.adv_std, lc.empty_seqs, lc.filter_keep_singletons) == (
        "dual_clip", 5.0, 10.0, "sample", "count", True)


def test_method_from_the_cli_mixes_with_a_preset():
    cfg = _train_config(["--method", "dynasearcher", "--preset", "dspo"])
    assert (cfg.method, cfg.protocol, cfg.reward, cfg.preset) == ("dynasearcher", "dynasearcher", "dynasearcher", "dspo")
    assert cfg.protocol_kwargs["observation_mode"] == "chat"
    dag = _train_config(["--method", "rsearch_dag", "--loss-overrides", '{"num_mini_batches": 2}'])
    lc = dag.loss_config()  # the method's own overrides (Eq. 4, annealed β) stay, the user's go on top
    assert (lc.adv_norm, lc.kl_coef, lc.kl_coef_end, lc.num_mini_batches) == ("group_mean", 0.1, 0.01, 2)
    other = _train_config(["--method", "rsearch_dag", "--preset", "dspo"]).loss_config()
    assert (other.name, other.adv_norm, other.kl_coef) == ("dspo", "group_std", 0.0)  # DSPO as published
