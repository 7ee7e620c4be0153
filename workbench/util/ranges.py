"""Numeric ranges a config field must lie in, written once as short rules (``">= 1"``, ``"> 0"``, ``"[0, 1]"``,
``"(0, 1]"``) and read both by the config's own validation and by the command line's flag types, so that a value out
of range is the same one-line error whether it comes from a flag (argparse's error, before any heavy import) or from
a config file. Knows nothing of the workbench."""

from __future__ import annotations

import math


def _bounds(rule: str) -> tuple[float, float, bool, bool]:
    """``(low, high, low_open, high_open)`` of a rule."""
    r = rule.replace(" ", "")
    if r.startswith(">="):
        return float(r[2:]), math.inf, False, True
    if r.startswith(">"):
        return float(r[1:]), math.inf, True, True
    if r[0] in "[(" and r[-1] in "])":
        low, high = r[1:-1].split(",")
        return float(low), float(high), r[0] == "(", r[-1] == ")"
    raise ValueError(f"not a range rule: {rule!r} (use '>= 1', '> 0', '[0, 1]' or '(0, 1]')")


def in_range(value: float, rule: str) -> bool:
    low, high, low_open, high_open = _bounds(rule)
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    return bool(above and below)


def range_error(value: float, rule: str) -> str | None:
    """``None`` if ``value`` keeps ``rule``, else the message: ``must be >= 1, got 0`` / ``must be in (0, 1], got 5``."""
    if in_range(value, rule):
        return None
    return f"must be {rule if rule[0] in '<>' else 'in ' + rule}, got {value}"


def value_error(value: object, rule: str, kind: type = float) -> str | None:
    """``None`` if ``value`` is a number of ``kind`` that keeps ``rule``, else the message, which names the rule: the one
    check of a number read from a file (JSON: ``2.5``, ``true``, ``Infinity`` and ``"4"`` all parse) as of one parsed
    from a flag. A bool is not a number, a whole-number field takes no fraction (nor ``4.0``), and NaN and the
    infinities keep no rule.

        >>> value_error(4, ">= 1", int) is None, value_error(2.5, ">= 1", int), value_error(True, ">= 1", int)
        (True, 'must be a whole number >= 1, got 2.5', 'must be a whole number >= 1, got True')
        >>> value_error(float("inf"), ">= 0"), value_error(0, ">= 1", int)
        ('must be a finite number >= 0, got inf', 'must be >= 1, got 0')
    """
    shown = rule if rule[0] in "<>" else "in " + rule
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a whole number {shown}, got {value!r}"
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"must be a finite number {shown}, got {value!r}"
    return range_error(value, rule)
