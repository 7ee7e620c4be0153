"""A training configuration assembled in one pass: :func:`assemble` reads top to bottom as its layers, in order.

(1) the method's declared defaults (or the plain config class), (2) the config file's fields, (3) the reward
file's reward, (4) the fields given (flags), (5) the settings the init adapter was trained with, (6) the checks.
Each later layer wins over the earlier ones, except the adapter's: it fills only the fields not given. ``workbench
train`` and ``workbench sft`` call :func:`assemble`; :func:`train_config` and :func:`train_config_file` are its
short forms for notebooks, recipes and tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.methods.base import Method
from workbench.methods.listing import get_method, protocol_class, run_parts

if TYPE_CHECKING:
    from workbench.rl.train_config import TrainConfig

REWARD_FIELDS = ("reward", "reward_params", "reward_weights")
"""What ``--reward-config FILE`` may set: the reward and nothing else."""


def assemble(*, method: str | Method | None = None, config_file: str | os.PathLike | None = None,
             reward_file: str | os.PathLike | None = None, flags: Mapping[str, Any] | None = None,
             config_class: type[TrainConfig] | None = None, override_adapter: bool = False,
             log: Callable[[str], None] | None = print) -> TrainConfig:
    """The :class:`~workbench.rl.train_config.TrainConfig` (or ``config_class``, e.g. ``SFTConfig``) of a run, layer
    by layer: ``method``'s declaration, ``config_file``, ``reward_file``'s reward, ``flags``, ``init_adapter``'s
    settings, then the checks. A ``method`` in ``flags`` wins over ``method``, which wins over the file's
    ``method:`` key.

    An empty value in ``flags`` or the reward file (``""``, ``None``, ``[]``, ``{}``) is "not given", unless it
    clears a field the config file set. What the init adapter was trained with fills the fields not given
    (``log`` hears the one-line note); a given field that contradicts it is an error unless ``override_adapter``."""
    from workbench.rl.train_config import TrainConfig, read_config_file

    cls = config_class or TrainConfig
    file = read_config_file(config_file, cls) if config_file is not None else {}
    flags = dict(flags or {})
    picked = [flags.pop("method", None), method, file.pop("method", None)]

    # (1) the method's declared defaults, or the plain config class: what the fields given go on top of
    #     (Method.train_config: a field that picks another part drops the method's refinements of that part)
    build = _builder(next((m for m in picked if m is not None), None), cls)

    # (2) the config file's fields (at the top or grouped by section)
    given = dict(file)
    # (3) the reward file's reward (--reward-config), over the config file
    if reward_file is not None:
        given = _on_top(given, reward_config_fields(reward_file), file)
    # (4) the flags given, over both
    given = _on_top(given, flags, file)
    config = build(given)
    # (5) the settings the init adapter was trained with: they fill the fields not given
    config = _adapter_settings(config, given, build, override_adapter, log)
    # (6) the checks: names and the reward's parameters against what they stand for, before any model loads
    return checked(config)


def _builder(method: str | Method | None, cls: type[TrainConfig]) -> Callable[[dict[str, Any]], TrainConfig]:
    """Fields -> a config: over ``method``'s declaration (:meth:`Method.train_config`), or ``cls`` alone."""
    declared = get_method(method) if method else None
    return (lambda fields: declared.train_config(cls, **fields)) if declared else cls.from_dict


def _empty(value: Any) -> bool:
    return value in ("", None) or (isinstance(value, (list, dict)) and not value)


def _on_top(below: dict[str, Any], fields: Mapping[str, Any], file: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` over ``below``; an empty value is "not given" unless it clears a field of the config ``file``."""
    return {**below, **{k: v for k, v in fields.items() if not _empty(v) or k in file}}


def _adapter_settings(config: TrainConfig, given: dict[str, Any], build: Callable[[dict[str, Any]], TrainConfig],
                      override: bool, log: Callable[[str], None] | None) -> TrainConfig:
    """``config`` built again by ``build`` where ``config.init_adapter`` brings the settings it was trained with
    (:mod:`workbench.rl.adapter_settings`): its protocol arguments and turn budget fill the fields not ``given``,
    and a given field, the protocol or the model that contradicts them is a one-line error naming both values,
    unless ``override``."""
    if not config.init_adapter or not Path(config.init_adapter).expanduser().exists():
        return config  # nothing to read yet (a recipe's dry run names adapters later stages make); loading names it
    from workbench.protocols.base import protocol_takes
    from workbench.rl.adapter_settings import adapter_settings

    settings = adapter_settings(config.init_adapter, label="--init-adapter")
    out, note = settings.apply({**given, "protocol": config.protocol},
                               ("model", "protocol", "protocol_kwargs", "max_turns", "max_new_tokens",
                                "max_total_tokens"),
                               override=override, takes=lambda kw: protocol_takes(protocol_class(config.protocol), kw),
                               check_only=("protocol",))
    if "protocol" not in given:
        out.pop("protocol")
    if note and log is not None:
        log(note)
    return build(out)


def reward_config_fields(path: str | os.PathLike) -> dict[str, Any]:
    """The reward fields of a TrainConfig file (``rewards:`` section or top level), refusing any other field in one
    line that names it and where it goes."""
    from workbench.rl.train_config import read_config_file

    data = read_config_file(path)
    other = sorted(k for k in data if k not in REWARD_FIELDS)
    if other:
        raise ValueError(f"--reward-config {path} sets {', '.join(other)}: it carries the reward only "
                         f"({', '.join(REWARD_FIELDS)}); give the rest in --config FILE or as flags")
    if not data:
        raise ValueError(f"--reward-config {path} sets no reward field: give {', '.join(REWARD_FIELDS)} "
                         "(the reward playground's 'save reward config' writes such a file)")
    return data


# ----------------------------------------------------------------------------- short forms


def train_config(method: str | None = None, config_class: type[TrainConfig] | None = None, *,
                 override_adapter: bool = False, log: Callable[[str], None] | None = print,
                 **fields: Any) -> TrainConfig:
    """:func:`assemble` of method ``method``'s declaration (or ``config_class`` alone) with ``fields`` on top. Empty
    values (``""``, ``None``, ``[]``, ``{}``) mean "the default", so a notebook's parameters cell can pass every
    field. With ``init_adapter``, what that adapter was trained with fills the fields not given (``log`` hears the
    one-line note), and a given field that contradicts it is an error unless ``override_adapter``."""
    return assemble(method=method, flags=fields, config_class=config_class, override_adapter=override_adapter,
                    log=log)


def train_config_file(path: str | os.PathLike, config_class: type[TrainConfig] | None = None,
                      **overrides: Any) -> TrainConfig:
    """:func:`assemble` of a JSON or YAML file (keys = field names) with ``overrides`` on top; a ``method:`` key
    starts from that method's declaration (``override_adapter=`` and ``log=`` as in :func:`train_config`)."""
    override = overrides.pop("override_adapter", False)
    log = overrides.pop("log", print)
    return assemble(config_file=path, flags=overrides, config_class=config_class, override_adapter=override, log=log)


def with_init_adapter(method: str | None, config_class: type[TrainConfig] | None, given: dict[str, Any],
                      override: bool = False, log: Callable[[str], None] | None = print) -> TrainConfig:
    """Layers (1), (4) and (5) of :func:`assemble`, unchecked: the config ``given`` builds over ``method``'s
    declaration, where a ``given["init_adapter"]`` fills the fields not given with what it was trained with."""
    from workbench.rl.train_config import TrainConfig

    build = _builder(method, config_class or TrainConfig)
    return _adapter_settings(build(given), given, build, override, log)


def checked(config: TrainConfig) -> TrainConfig:
    """``config`` after its names and the reward's parameters were checked against what they stand for (one-line
    errors naming the field and the valid values), before any model loads."""
    from workbench.rl.train_config import check_parts

    check_parts(config, run_parts(config))
    return config
