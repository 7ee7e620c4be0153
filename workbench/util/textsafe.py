"""Untrusted text at the boundaries: valid UTF-8 and bounded JSON (invariant 5).

Model output, corpus lines and tool results are untrusted. Two helpers make them safe to
carry through a batch:

* :func:`clean_text` makes a string valid UTF-8 (lone surrogates become U+FFFD) and replaces
  NUL bytes with U+FFFD (not deleted: ``<ans\\x00wer>`` must not become a tag). It is applied
  once where text enters: backend outputs, tool results (``Toolbox``), observations before
  they are tokenized, and trajectories when saved.
* :func:`parse_json` is the one JSON parser for JSON a model writes (tool calls, DynaSearcher
  requests, judge replies): it refuses text longer than ``max_chars`` or nested deeper than
  ``max_depth`` before ``json.loads`` sees it, and returns ``(value, error)``; it never raises.

Neutralizing protocol tags in tool text is a different job: ``workbench.tools.base.neutralize_tags``.
"""

from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
_BAD_RE = re.compile("[\ud800-\udfff\x00]")

MAX_JSON_CHARS = 100_000
"""Longest JSON text :func:`parse_json` reads (a tool call or a judge reply is far shorter)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of ``[`` / ``{`` it accepts (real requests nest 2 or 3 levels)."""

# a string literal (possibly unterminated) or one bracket; strings are skipped when counting depth
_JSON_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.DOTALL)


def clean_text(s: Any) -> str:
    """``s`` as a string that encodes to UTF-8: lone surrogates and NUL bytes become U+FFFD.

    >>> clean_text("ok \\ud800 \\x00 é")
    'ok \\ufffd \\ufffd é'
    >>> clean_text(b"caf\\xc3\\xa9 \\xff")
    'café \\ufffd'
    """
    if isinstance(s, bytes):
        s = s.decode("utf-8", errors="replace")
    elif not isinstance(s, str):
        s = "" if s is None else str(s)
    if s.isascii() and "\x00" not in s:
        return s
    return _BAD_RE.sub(REPLACEMENT, s)


def clean_obj(obj: Any) -> Any:
    """:func:`clean_text` applied to every string inside nested dicts / lists / tuples (keys too)."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {clean_obj(k): clean_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clean_obj(v) for v in obj)
    return obj


def json_depth(text: str) -> int:
    """The deepest ``[`` / ``{`` nesting of ``text`` outside string literals (linear, never raises).

    >>> json_depth('{"a": [1, {"b": "[[[["}]}'), json_depth("plain")
    (3, 0)
    """
    depth = deepest = 0
    for m in _JSON_TOKEN_RE.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
    return deepest


def over_limit(error: str | None) -> bool:
    """Whether a :func:`parse_json` error is a size/depth refusal (not ordinary broken JSON)."""
    return bool(error) and error.startswith(("too long (", "nested deeper than "))


def parse_json(text: str, max_chars: int = MAX_JSON_CHARS, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, str | None]:
    """``(value, None)`` for JSON text, else ``(None, reason)``; never raises.

    >>> parse_json('{"query": "who"}')
    ({'query': 'who'}, None)
    >>> parse_json('{"q": ' + '[' * 995)
    (None, 'nested deeper than 32 levels')
    >>> parse_json('{"q" 1}')
    (None, "Expecting ':' delimiter at char 5")
    """
    text = clean_text(text)
    if len(text) > max_chars:
        return None, f"too long ({len(text)} characters, at most {max_chars})"
    if json_depth(text) > max_depth:
        return None, f"nested deeper than {max_depth} levels"
    try:
        return clean_obj(json.loads(text)), None  # "\\ud800" escapes decode to lone surrogates
    except json.JSONDecodeError as e:
        return None, f"{e.msg} at char {e.pos}"
    except (RecursionError, MemoryError, ValueError) as e:  # e.g. an integer longer than Python's digit limit
        return None, f"{type(e).__name__}"
