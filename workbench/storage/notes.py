"""A run's tags and note (``notes.json`` in the run): what a researcher writes about a run to find it again.

``{"tags": ["baseline", "lr-sweep"], "note": "free text", "updated": "2026-12-04T02:10:00"}``. Written atomically by
:func:`write_notes` (the dashboard's *Organise* part saves through it); read by :func:`read_notes`, which treats the
file as untrusted: a file that is too large, not JSON or not an object reads as no tags and no note with the reason in
``error``, never as a crash of the page. A tag is 1-40 characters of letters, digits and ``-_.:/+``; the note at most
:data:`MAX_NOTE` characters.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

NOTES_FILE = "notes.json"
MAX_NOTE = 10_000
MAX_TAGS = 32
_TAG = re.compile(r"^[\w.:/+-]{1,40}$")


@dataclass
class RunNotes:
    tags: list[str] = field(default_factory=list)
    note: str = ""
    updated: str | None = None
    error: str | None = None


def parse_tags(text: str | list[str]) -> list[str]:
    """Tags from a comma- or space-separated string (or a list), each checked; a ``ValueError`` names a bad one."""
    items = text if isinstance(text, list) else re.split(r"[,\s]+", text)
    out: list[str] = []
    for t in (str(x).strip() for x in items):
        if not t:
            continue
        if not _TAG.match(t):
            raise ValueError(f"tag {t[:60]!r}: 1-40 letters, digits or - _ . : / + (no spaces); fix it and save again")
        if t not in out:
            out.append(t)
    if len(out) > MAX_TAGS:
        raise ValueError(f"{len(out)} tags: at most {MAX_TAGS} a run")
    return out


def read_notes(run_dir: str | os.PathLike) -> RunNotes:
    """The run's tags and note (none when it has no ``notes.json``); an unreadable file is said in ``error``."""
    from workbench.util.io import read_json

    p = Path(run_dir) / NOTES_FILE
    if not p.exists():
        return RunNotes()
    try:
        data = read_json(p, max_bytes=4 * MAX_NOTE, what="run notes")
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        tags = parse_tags(list(data.get("tags") or []))
        note = data.get("note") or ""
        if not isinstance(note, str):
            raise ValueError("note is not text")
        return RunNotes(tags, note[:MAX_NOTE], str(data.get("updated") or "") or None)
    except (OSError, ValueError, TypeError) as e:
        return RunNotes(error=f"{p}: {e}")


def write_notes(run_dir: str | os.PathLike, tags: str | list[str], note: str) -> RunNotes:
    """Save the run's tags and note (checked first: nothing is written for a bad tag or an overlong note)."""
    from workbench.util.io import atomic_write_json

    d = Path(run_dir)
    if not (d / "config.json").is_file():
        raise ValueError(f"{d}: not a run (no config.json); notes go in a run directory")
    clean = parse_tags(tags)
    if len(note) > MAX_NOTE:
        raise ValueError(f"the note has {len(note):,} characters: at most {MAX_NOTE:,}")
    stamp = _dt.datetime.now().isoformat(timespec="seconds")
    atomic_write_json(d / NOTES_FILE, {"tags": clean, "note": note, "updated": stamp})
    return RunNotes(clean, note, stamp)
