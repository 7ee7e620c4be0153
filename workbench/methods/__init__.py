"""The published methods, one package each, and the one place names become objects.

Every package in this folder declares ``METHODS`` (``workbench/methods/<paper>/__init__.py``: its protocol, reward,
expert writer, optimizer settings and the paper's values); ``listing.py`` imports each package once and lists them,
so a new paper is one new package, and this module re-exports the listing. The applications (eval, train and sft commands, demo, cli, dashboard, widgets,
integrations, notebooks) import this module; the engine never does, and takes the objects instead.

Names a user types resolve here, once: ``get_method("dynasearcher")``, a protocol by its name
(``get_protocol("search_r1", top_k=5)``), a reward preset by its name (``get_preset("dspo")``), and a training
configuration's parts (:func:`run_parts`: protocol, reward preset, feature needs) for a
:class:`~workbench.rl.trainer.Trainer`. A training configuration is assembled in one pass by
:func:`~workbench.methods.assemble.assemble` (method defaults, config file, reward file, flags, adapter settings,
checks).

    >>> get_method("dspo").protocol is get_method("search_r1").protocol
    True
    >>> sorted(PRESETS)[:3]
    ['dspo', 'dynasearcher', 'r1_searcher']
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from workbench.methods.assemble import (
    REWARD_FIELDS,
    assemble,
    checked,
    reward_config_fields,
    train_config,
    train_config_file,
    with_init_adapter,
)
from workbench.methods.base import Method
from workbench.methods.listing import (
    METHODS,
    PRESETS,
    PROTOCOLS,
    get_method,
    get_preset,
    get_protocol,
    method_names,
    preset_names,
    preset_needs,
    preset_protocol,
    protocol_class,
    protocol_names,
    reward_preset,
    run_parts,
)

if TYPE_CHECKING:
    from workbench.rl.train_config import TrainConfig
    from workbench.rl.trainer import Trainer


# ============================================================================= training runs


def trainer(config: TrainConfig, **kwargs: Any) -> Trainer:
    """A :class:`~workbench.rl.trainer.Trainer` (or an SFT trainer for an ``SFTConfig``) for ``config``, its parts
    resolved by :func:`run_parts`; ``kwargs`` go to the trainer (``run``, ``policy``, ``examples``...)."""
    from workbench.rl.sft import SFTConfig, SFTTrainer
    from workbench.rl.trainer import Trainer

    cls = SFTTrainer if isinstance(config, SFTConfig) else Trainer
    return cls(config, run_parts(config), **kwargs)


def resume(run_dir: str | os.PathLike, **kwargs: Any) -> Trainer:
    """Continue a training or SFT run from its newest checkpoint (:meth:`Trainer.resume`)."""
    from workbench.rl.sft import SFTTrainer
    from workbench.rl.trainer import Trainer
    from workbench.storage.runs import open_run

    cls = SFTTrainer if open_run(run_dir).config.get("kind") == "sft" else Trainer
    return cls.resume(run_dir, run_parts, **kwargs)


__all__ = ["METHODS", "PRESETS", "PROTOCOLS", "REWARD_FIELDS", "Method", "assemble", "checked", "get_method",
           "get_preset", "get_protocol", "method_names", "preset_names", "preset_needs", "preset_protocol", "protocol_class", "protocol_names", "resume",
           "reward_config_fields", "reward_preset", "run_parts", "train_config", "train_config_file", "trainer",
           "with_init_adapter"]
