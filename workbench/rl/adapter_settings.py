"""What a trained adapter was trained with, applied wherever it is used again.

An adapter learns one layout: Search-R1's protocol with observations as user turns (``observation_mode: chat``), 4
turns of at most 64 tokens. Rolled out in another layout it fails quietly (with inline observations the shipped adapter
mostly runs out of turns instead of answering). So ``eval``, ``ask``, ``sft``/``train --init-adapter`` and the
notebooks read what the adapter records and apply it by default:

- ``provenance.json`` beside the adapter (``bench/ship_adapter.py`` writes it: the run's whole config), or
- the run's ``config.json`` when the adapter is a run's checkpoint (``<run>/checkpoints/step_N``) or a run directory.

What is read (:data:`SETTINGS`): the base model, the protocol and its arguments, and the turn budget. Each value keeps
the rule the same setting keeps as a flag (:data:`RULES`, :data:`PROTOCOL_RULES`); one that does not (``2.5`` turns,
``true``, ``Infinity``, ``top_k`` 100000) is a one-line error naming the file, the key, the value and the rule. A value
the caller did not give is taken from the adapter, and one line says so; a value that contradicts the adapter is a
one-line error naming both values and ``--override-adapter``, which keeps the caller's values (and says so).

    >>> s = AdapterSettings(path=Path("a"), source=None, values={"protocol": "search_r1", "max_turns": 4,
    ...                     "protocol_kwargs": {"observation_mode": "chat"}})
    >>> given, note = s.apply({"max_turns": 4}, fields=("max_turns", "max_new_tokens", "protocol_kwargs"))
    >>> given["protocol_kwargs"], note
    ({'observation_mode': 'chat'}, 'adapter a: observation_mode=chat from its training config')
    >>> s.apply({"max_turns": 3}, fields=("max_turns",))
    Traceback (most recent call last):
    ...
    ValueError: --max-turns 3 contradicts the adapter a, trained with 4: drop --max-turns to use the adapter's value, or pass --override-adapter to keep 3
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.models import same_model
from workbench.rl.train_config import TrainConfig
from workbench.util.io import read_json
from workbench.util.ranges import value_error

#: The settings an adapter carries, in the order they are reported.
SETTINGS = ("model", "protocol", "protocol_kwargs", "max_turns", "max_new_tokens", "max_total_tokens")
#: Settings compared but never filled in (a caller always names its model and method; only a mismatch matters).
CHECKED_ONLY = ("model", "protocol")
#: The flag that keeps the caller's values where they contradict the adapter's.
OVERRIDE_FLAG = "--override-adapter"
#: The kind and range of each numeric setting: the training config's (``TrainConfig.RANGES``, which ``train``'s flags
#: keep), checked as a flag's value is (:func:`workbench.util.ranges.value_error`).
RULES: dict[str, tuple[type, str]] = {k: (int, TrainConfig.RANGES[k])
                                      for k in ("max_turns", "max_new_tokens", "max_total_tokens")}
#: The protocol arguments with a rule, the same for an adapter's ``protocol_kwargs`` and for ``--protocol-kwargs``
#: (:func:`protocol_kwargs_error`). Passages per search: at most 100, Search-R1's largest (``serve-retrieval
#: --max-topk``'s default).
PROTOCOL_RULES: dict[str, tuple[type, str]] = {"top_k": (int, "[1, 100]"), "max_obs_chars": (int, ">= 1"),
                                               "max_chars_per_hit": (int, ">= 1")}
#: Protocol arguments that are switches (JSON true or false).
PROTOCOL_SWITCHES = ("few_shot",)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def protocol_kwargs_error(kwargs: dict[str, Any]) -> str | None:
    """``None`` if each of ``kwargs`` (protocol arguments) that has a rule keeps it, else the first one's message.

    >>> protocol_kwargs_error({"top_k": 3, "observation_mode": "chat"}) is None
    True
    >>> protocol_kwargs_error({"top_k": 100000}), protocol_kwargs_error({"few_shot": "yes"})
    ('top_k must be in [1, 100], got 100000', "few_shot must be true or false, got 'yes'")
    """
    for key, value in kwargs.items():
        if key in PROTOCOL_RULES:
            error = value_error(value, PROTOCOL_RULES[key][1], PROTOCOL_RULES[key][0])
        elif key in PROTOCOL_SWITCHES and not isinstance(value, bool):
            error = f"must be true or false, got {value!r}"
        else:
            continue
        if error:
            return f"{key} {error}"
    return None


def _setting_error(name: str, value: Any) -> str | None:
    """Why ``value`` is not a setting ``name`` can hold (None: it is)."""
    if name in RULES:
        error = value_error(value, RULES[name][1], RULES[name][0])
        return f"{name} {error}" if error else None
    if name == "protocol_kwargs":
        if not isinstance(value, dict):
            return f"protocol_kwargs must be a JSON object, got {_show(value)}"
        error = protocol_kwargs_error(value)
        return f"protocol_kwargs.{error}" if error else None
    if not isinstance(value, str) or not value.strip():  # model, protocol: names
        return f"{name} must be a non-empty name, got {json.dumps(value)}"
    return None


@dataclass(frozen=True)
class AdapterSettings:
    """The settings adapter ``path`` was trained with (``values``: a subset of :data:`SETTINGS`), read from
    ``source`` (None: nothing recorded)."""

    path: Path
    source: Path | None
    values: dict[str, Any] = field(default_factory=dict)

    def apply(self, given: dict[str, Any], fields: tuple[str, ...] | list[str], *, override: bool = False,
              takes: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
              check_only: tuple[str, ...] = CHECKED_ONLY, by: str | None = None) -> tuple[dict[str, Any], str | None]:
        """``given`` (the values the caller set; absent or None = not set) with the adapter's settings among ``fields``
        filled in, and a one-line note of what was applied or overridden (None: nothing to say).

        ``takes(kwargs) -> kwargs``: the protocol arguments the caller's protocol accepts (the adapter's others are
        left out). ``check_only``: settings compared where given but never filled in. ``by``: who kept the values
        (the note's "kept by ..."; default the flag a user passes, :data:`OVERRIDE_FLAG`). A value in ``given`` that differs from the adapter's raises a ``ValueError`` naming both and
        :data:`OVERRIDE_FLAG`, unless ``override``."""
        out = dict(given)
        applied: list[str] = []
        kept: list[str] = []

        def clash(name: str, mine: Any, theirs: Any, shown: str | None = None) -> None:
            if override:
                kept.append(f"{shown or name}={_show(mine)} (adapter: {_show(theirs)})")
                return
            flag = shown or _flag(name)
            raise ValueError(f"{flag} {_show(mine)} contradicts the adapter {self.path}, trained with {_show(theirs)}: "
                             f"drop {flag} to use the adapter's value, or pass {OVERRIDE_FLAG} to keep {_show(mine)}")

        for name in SETTINGS:
            if name not in fields or name not in self.values or self.values[name] is None:
                continue
            theirs, mine = self.values[name], out.get(name)
            if name == "protocol_kwargs":
                theirs = dict(takes(theirs) if takes is not None else theirs)
                merged = dict(mine or {})
                for k, v in theirs.items():
                    if k not in merged:
                        merged[k] = v
                        applied.append(f"{k}={_show(v)}")
                    elif merged[k] != v:
                        clash(k, merged[k], v, shown=f"--protocol-kwargs {k}")
                out[name] = merged
            elif mine is None:
                if name not in check_only:
                    out[name] = theirs
                    applied.append(f"{name}={_show(theirs)}")
            elif mine != theirs and not (name == "model" and same_model(mine, theirs)):
                clash(name, mine, theirs)
        parts = []
        if applied:
            parts.append(", ".join(applied) + " from its training config")
        if kept:
            parts.append(f"kept by {by or OVERRIDE_FLAG}: " + ", ".join(kept))
        return out, (f"adapter {self.path}: " + "; ".join(parts)) if parts else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path, max_bytes=16 << 20, what="adapter settings file")
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({type(e).__name__}: {e}); restore it from the adapter's "
                         f"source, or delete it to use the adapter without its settings") from None
    return data if isinstance(data, dict) else None


def settings_source(adapter: Path) -> tuple[Path | None, dict[str, Any]]:
    """Where ``adapter`` (an adapter directory) records its training config, and that config: its
    ``provenance.json`` (key ``config``), else the config of the run it is a checkpoint of."""
    prov = adapter / "provenance.json"
    if prov.is_file():
        data = _read_json(prov) or {}
        config = data.get("config")
        return prov, config if isinstance(config, dict) else {}
    run = adapter.parent.parent  # <run>/checkpoints/step_N
    if adapter.parent.name == "checkpoints" and (run / "config.json").is_file():
        return run / "config.json", _read_json(run / "config.json") or {}
    return None, {}


def adapter_settings(path: str | os.PathLike, label: str = "--adapter") -> AdapterSettings:
    """The settings of the adapter ``path`` names (an adapter directory or an sft/train run: its newest checkpoint);
    empty when it records none (an adapter from elsewhere). ``label``: the flag a bad path is named by."""
    from workbench.rl.policy import adapter_dir

    try:
        d = adapter_dir(Path(path).expanduser())
    except FileNotFoundError as e:
        raise ValueError(f"{label} {path}: {e}") from None
    source, config = settings_source(d)
    values = {k: config[k] for k in SETTINGS if config.get(k) is not None}
    for name, value in values.items():
        error = _setting_error(name, value)
        if error:
            raise ValueError(f"{source}: {error} (a setting the adapter {path} records): correct it in that file, or "
                             f"remove {name} from it to leave the setting to the command's flags")
    return AdapterSettings(path=Path(path), source=source, values=values)
