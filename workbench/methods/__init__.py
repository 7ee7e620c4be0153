"""The published methods, one package each, and the one place names become objects.

Every package in this folder declares ``METHODS`` (``workbench/methods/<paper>/__init__.py``: its protocol, reward,
expert writer, optimizer settings and the paper's values); this module imports each package once and lists them, so
a new paper is one new package. The applications (eval, train and sft commands, demo, cli, dashboard, widgets,
integrations, notebooks) import this module; the engine never does, and takes the objects instead.

Names a user types resolve here, once: ``get_method("dynasearcher")``, a protocol by its name
(``get_protocol("search_r1", top_k=5)``), a reward preset by its name (``get_preset("dspo")``), and a training
configuration's parts (:func:`run_parts`: protocol, reward preset, feature needs) for a
:class:`~workbench.rl.trainer.Trainer`.

    >>> get_method("dspo").protocol is get_method("search_r1").protocol
    True
    >>> sorted(PRESETS)[:3]
    ['dspo', 'dynasearcher', 'r1_searcher']
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.methods.base import Method
from workbench.protocols.base import Protocol
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Rubric

if TYPE_CHECKING:
    from workbench.rl.train_config import RunParts, TrainConfig
    from workbench.rl.trainer import Trainer


def _list_methods() -> dict[str, Method]:
    """Every package's ``METHODS``, by name, sorted; a name declared twice is an error."""
    found: dict[str, Method] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        for m in importlib.import_module(f"{__name__}.{info.name}").METHODS:
            if m.name in found:
                raise ValueError(f"method {m.name!r} is declared twice (workbench/methods/{info.name}/)")
            found[m.name] = m
    return dict(sorted(found.items()))


def _by_name(kind: str, items: list[tuple[str, Any]]) -> dict[str, Any]:
    """``{name: object}``; two different objects under one name is an error (two methods may share one)."""
    out: dict[str, Any] = {}
    for name, obj in items:
        if out.setdefault(name, obj) is not obj:
            raise ValueError(f"two different {kind}s are named {name!r}")
    return dict(sorted(out.items()))


METHODS: dict[str, Method] = _list_methods()
"""Every published method and baseline, by name."""
PROTOCOLS: dict[str, type[Protocol]] = _by_name("protocol", [(m.protocol.name, m.protocol) for m in METHODS.values()])
"""The methods' protocol classes, by protocol name."""
PRESETS: dict[str, RewardPreset] = _by_name("reward preset", [(m.reward.name, m.reward) for m in METHODS.values()
                                                              if m.reward is not None])
"""The methods' reward presets, by name."""


def method_names() -> list[str]:
    """Every method name, sorted."""
    return list(METHODS)


def get_method(name: str | Method) -> Method:
    """A method by name (a clear error listing the valid names)."""
    if isinstance(name, Method):
        return name
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)} "
                         "(`workbench methods` lists them with their papers)")
    return METHODS[name]


def protocol_names() -> list[str]:
    """Every protocol name, sorted.

    >>> {"direct", "search_r1"} <= set(protocol_names())
    True
    """
    return list(PROTOCOLS)


def protocol_class(name: str) -> type[Protocol]:
    """A protocol class by its name (a clear error listing the valid names)."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; valid names: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def get_protocol(name: str | Protocol, **kwargs: Any) -> Protocol:
    """A protocol instance by name with ``kwargs`` (an instance passes through)."""
    if isinstance(name, Protocol):
        return name
    return protocol_class(name)(**kwargs)


def preset_names() -> list[str]:
    """Every reward preset name, sorted."""
    return list(PRESETS)


def reward_preset(name: str | RewardPreset) -> RewardPreset:
    """A reward preset by name (a clear error listing the valid names)."""
    if isinstance(name, RewardPreset):
        return name
    if name not in PRESETS:
        raise ValueError(f"unknown reward preset {name!r}; valid names: {', '.join(PRESETS)}")
    return PRESETS[name]


def get_preset(name: str | RewardPreset | Rubric, weights: dict[str, float] | None = None, **params: Any) -> Rubric:
    """A preset's rubric by name with parameters (validated) and optional weight overrides; a Rubric given is
    re-parameterized."""
    if isinstance(name, Rubric):
        rubric = name.with_params(**params) if params else name
        return rubric.with_weights(**weights) if weights else rubric
    return reward_preset(name)(weights=weights, **params)


def preset_needs(name: str) -> FeatureNeeds:
    """The expensive features preset ``name`` reads."""
    return reward_preset(name).needs


def preset_protocol(name: str) -> type[Protocol]:
    """The protocol of the paper that defines reward preset ``name`` (what exports parse completion text with):
    the method of that name if there is one, else the first method whose reward it is."""
    own = METHODS.get(name)
    if own is not None and own.reward is not None and own.reward.name == name:
        return own.protocol
    for m in sorted(METHODS.values(), key=lambda m: (m.baseline, m.name)):
        if m.reward is not None and m.reward.name == name:
            return m.protocol
    raise ValueError(f"no method declares reward preset {name!r}; pass protocol= explicitly")


# ============================================================================= training runs


def train_config(method: str | None = None, config_class: type[TrainConfig] | None = None, *,
                 override_adapter: bool = False, log: Callable[[str], None] | None = print,
                 **fields: Any) -> TrainConfig:
    """A :class:`~workbench.rl.train_config.TrainConfig` (or ``config_class``, e.g. ``SFTConfig``): method
    ``method``'s declaration with ``fields`` on top (:meth:`Method.train_config`), or ``fields`` alone. Empty values
    (``""``, ``None``, ``[]``, ``{}``) mean "the default", so a notebook's parameters cell can pass every field.

    With ``init_adapter``, what that adapter was trained with fills the fields not given (:func:`with_init_adapter`;
    ``log`` hears the one-line note), and a given field that contradicts it is an error unless ``override_adapter``."""
    given = {k: v for k, v in fields.items() if v not in ("", None) and not (isinstance(v, (list, dict)) and not v)}
    return checked(with_init_adapter(method, config_class, given, override_adapter, log))


def _build(method: str | None, config_class: type[TrainConfig] | None, given: dict[str, Any]) -> TrainConfig:
    from workbench.rl.train_config import TrainConfig

    return get_method(method).train_config(config_class, **given) if method else (config_class or TrainConfig).from_dict(given)


def with_init_adapter(method: str | None, config_class: type[TrainConfig] | None, given: dict[str, Any],
                      override: bool = False, log: Callable[[str], None] | None = print) -> TrainConfig:
    """The config ``given`` builds (over ``method``'s declaration), where a ``given["init_adapter"]`` brings the
    settings it was trained with (:mod:`workbench.rl.adapter_settings`): its protocol arguments and turn budget
    fill the fields not given, and a given field, the protocol or the model that contradicts them is a one-line
    error naming both values, unless ``override``."""
    cfg = _build(method, config_class, given)
    if not cfg.init_adapter or not Path(cfg.init_adapter).expanduser().exists():
        return cfg  # nothing to read yet (a recipe's dry run names adapters later stages make); loading names it
    from workbench.protocols.base import protocol_takes
    from workbench.rl.adapter_settings import adapter_settings

    settings = adapter_settings(cfg.init_adapter, label="--init-adapter")
    out, note = settings.apply({**given, "protocol": cfg.protocol}, ("model", "protocol", "protocol_kwargs",
                                                                     "max_turns", "max_new_tokens", "max_total_tokens"),
                               override=override, takes=lambda kw: protocol_takes(protocol_class(cfg.protocol), kw),
                               check_only=("protocol",))
    if "protocol" not in given:
        out.pop("protocol")
    if note and log is not None:
        log(note)
    return _build(method, config_class, out)


def checked(config: TrainConfig) -> TrainConfig:
    """``config`` after its names and the reward's parameters were checked against what they stand for (one-line
    errors naming the field and the valid values), before any model loads."""
    from workbench.rl.train_config import check_parts

    check_parts(config, run_parts(config))
    return config


def train_config_file(path: str | os.PathLike, config_class: type[TrainConfig] | None = None,
                      **overrides: Any) -> TrainConfig:
    """A TrainConfig (or ``config_class``) from a JSON or YAML file (keys = field names) with ``overrides`` on top;
    a ``method:`` key starts from that method's declaration."""
    from workbench.rl.train_config import TrainConfig, read_config_file

    override = overrides.pop("override_adapter", False)
    log = overrides.pop("log", print)
    data = {**read_config_file(path, config_class or TrainConfig), **overrides}
    method = data.pop("method", None)
    return checked(with_init_adapter(method, config_class, data, override, log))


def run_parts(config: TrainConfig) -> RunParts:
    """What ``config``'s names stand for, resolved once: the protocol (with its arguments), the reward preset, and
    what the feature step computes (the method's declaration if ``config.method`` is set, else the preset's)."""
    from workbench.rl.train_config import RunParts

    def named(field: str, fn: Any, value: str) -> Any:
        try:
            return fn(value)
        except ValueError as e:
            raise ValueError(f"TrainConfig.{field}: {e}") from None

    from workbench.rl.adapter_settings import protocol_kwargs_error

    error = protocol_kwargs_error(config.protocol_kwargs)  # the rules --protocol-kwargs keeps in eval, here too
    if error:
        raise ValueError(f"TrainConfig.protocol_kwargs.{error}")
    protocol = named("protocol", protocol_class, config.protocol)(**config.protocol_kwargs)
    preset = named("reward", reward_preset, config.reward)
    needs = named("method", get_method, config.method).feature_needs() if config.method else preset.needs
    return RunParts(protocol, preset, needs)


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


__all__ = ["METHODS", "PRESETS", "PROTOCOLS", "Method", "checked", "get_method", "get_preset", "get_protocol", "method_names",
           "preset_names", "preset_needs", "preset_protocol", "protocol_class", "protocol_names", "resume",
           "reward_preset", "run_parts", "train_config", "train_config_file", "trainer"]
