"""The listing: every method package's declaration, imported once, and the names a user types made objects.

``workbench.methods`` re-exports all of it; see that package's docstring.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.methods.base import Method
from workbench.protocols.base import Protocol
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import Rubric

if TYPE_CHECKING:
    from workbench.rl.train_config import RunParts, TrainConfig


def _list_methods() -> dict[str, Method]:
    """Every package's ``METHODS``, by name, sorted; a name declared twice is an error."""
    found: dict[str, Method] = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if not info.ispkg:
            continue
        for m in importlib.import_module(f"workbench.methods.{info.name}").METHODS:
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
