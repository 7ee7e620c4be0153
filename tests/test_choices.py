"""String choices are typed as ``Literal``s (workbench.core.choices): the configs' checks, the engines' own checks
and the CLI's choices all read the one type, so a name one accepts the others accept too."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from workbench.core import choices
from workbench.rl.train_config import TrainConfig


def _literal_fields(cls):
    hints = typing.get_type_hints(cls)
    return {f.name: typing.get_args(hints[f.name]) for f in dataclasses.fields(cls)
            if typing.get_origin(hints[f.name]) is typing.Literal}


def test_train_config_types_its_choices_and_checks_them():
    fields = _literal_fields(TrainConfig)
    assert fields == {"micro_batching": choices.MICRO_BATCHING, "amp": choices.AMP_MODES,
                      "rollout_backend": choices.ROLLOUT_BACKENDS, "rollout_engine": choices.ROLLOUT_ENGINES}
    for name in fields:
        with pytest.raises(ValueError, match=f"TrainConfig.{name}: 'nope' is not one of"):
            TrainConfig(**{name: "nope"})


def test_the_engines_check_the_same_names():
    from workbench.rl.policy import AMP_MODES
    from workbench.rl.rollout_sync import ROLLOUT_BACKENDS
    from workbench.rl.update import MICRO_BATCHING
    from workbench.rollout.backends import ENGINES

    assert (AMP_MODES, ROLLOUT_BACKENDS, MICRO_BATCHING, ENGINES) == (
        choices.AMP_MODES, choices.ROLLOUT_BACKENDS, choices.MICRO_BATCHING, choices.ROLLOUT_ENGINES)


def test_the_cli_offers_the_choices_and_refuses_others(capsys):
    from workbench.apps.cli import main

    for flag, values in (("--amp", choices.AMP_MODES), ("--rollout-backend", choices.ROLLOUT_BACKENDS)):
        with pytest.raises(SystemExit) as e:
            main(["train", flag, "nope"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"argument {flag}: invalid choice: 'nope'" in err
        assert all(repr(v) in err for v in values)
