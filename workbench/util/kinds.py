"""The kind of value a config field holds, read from its type hint (``int``, ``float | None``, ``list[str]``,
``dict[str, float]``...), so that a value of another kind from a config file or a JSON flag (``steps: [1, 2]``,
``{"kl_coef": "abc"}``, ``reward_weights: [1]``) is a one-line error naming the field, the value and what it must
be, not a ``TypeError`` from deep inside the code that first uses it. Knows nothing of the workbench.

    >>> kind_error(3, int), kind_error([1, 2], int), kind_error("abc", float)
    (None, 'must be a whole number, got [1, 2]', 'must be a number, got "abc"')
    >>> kind_error({"f1": 1}, dict[str, float]), kind_error([1], dict[str, float])
    (None, 'must be a mapping of names to numbers, got [1]')
    >>> kind_error(None, list[str] | None), kind_error(["a", 2], list[str] | None)
    (None, 'must be a list of strings or null, got ["a", 2]')
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import types
import typing
from collections.abc import Sequence
from typing import Any


def _alternatives(hint: Any) -> list[Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return list(typing.get_args(hint))
    return [hint]


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, (str, os.PathLike))  # a path where a file name goes
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, tuple, Sequence):
        return isinstance(value, (list, tuple)) and (not args or all(_fits(v, args[0]) for v in value))
    if origin is dict:  # keys asked as names may be numbers: YAML reads `3: 2` as one (hop counts)
        return isinstance(value, dict) and (not args or all(
            (_fits(k, args[0]) or (args[0] is str and _fits(k, int))) and _fits(v, args[1]) for k, v in value.items()))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this check does not read (a Literal, a callable): the field's own validation decides


def _say(hint: Any, plural: bool = False) -> str:
    """What ``hint`` asks for, in words: ``a whole number``, ``a list of strings or null``."""
    if hint is Any:
        return "values" if plural else "any value"
    names = {type(None): ("null", "nulls"), bool: ("true or false", "true or false"), int: ("a whole number",
             "whole numbers"), float: ("a number", "numbers"), str: ("a string", "strings")}
    if hint in names:
        return names[hint][plural]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_say(a, plural) for a in args)
    if origin in (list, tuple, Sequence):
        return ("lists" if plural else "a list") + (f" of {_say(args[0], True)}" if args else "")
    if origin is dict:
        what = f" of names to {_say(args[1], True)}" if args and args[1] is not Any else ""
        return ("mappings" if plural else "a mapping") + what
    return getattr(hint, "__name__", str(hint))


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def kind_error(value: Any, hint: Any) -> str | None:
    """``None`` if ``value`` is of the kind ``hint`` names, else ``must be <kind>, got <value>``. A bool is no number,
    a number no string; a tuple stands for a list and a path for a string (values from Python, not from a file)."""
    if any(_fits(value, h) for h in _alternatives(hint)):
        return None
    return f"must be {_say(hint)}, got {_show(value)}"


def kinds_error(cls: type, values: dict[str, Any]) -> str | None:
    """The first of ``values`` (field name -> value) that is not of the kind its field of the dataclass ``cls``
    declares, as ``<field> must be ..., got ...``; ``None`` when all are (names that are not fields are skipped: the
    caller names those)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for name, value in values.items():
        if name in fields:
            error = kind_error(value, hints[name])
            if error:
                return f"{name} {error}"
    return None
