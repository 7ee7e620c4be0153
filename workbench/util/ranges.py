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
