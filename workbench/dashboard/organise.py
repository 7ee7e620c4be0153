"""The served Runs section's *Organise* part: a run's tags and note (``workbench.storage.notes``), the runs table
narrowed to runs with chosen tags or grouped by them, and the settings two runs differ in (their ``config.json``, flattened).

Everything a user types is checked (:func:`~workbench.storage.notes.parse_tags`) and shown escaped; a bad tag is one
line under the form and nothing is written.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

#: config.json keys that say when or where, not how: left out of the difference of two runs.
NOT_SETTINGS = ("created",)


def flatten(obj: dict[str, Any]) -> dict[str, str]:
    """A nested JSON object as ``{"a.b.c": value as JSON}`` (lists kept whole; an empty object is no setting)."""
    from workbench.rl.trackers import flatten as flat

    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in flat(obj, sep=".").items()}


def config_diff(runs_dir: str | os.PathLike, run_a: str, run_b: str) -> pd.DataFrame:
    """The settings (``config.json``, dotted keys) two runs differ in: setting, value in A, value in B (``–`` where
    one run has no such setting); a run whose config does not read is a ``ValueError`` naming it."""
    from workbench.util.io import read_json

    flat = []
    for r in (run_a, run_b):
        try:
            cfg = read_json(Path(runs_dir) / r / "config.json", what="run config")
        except (OSError, ValueError) as e:
            raise ValueError(f"{r}: its config.json does not read ({e})") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{r}: its config.json is not a JSON object")
        flat.append({k: v for k, v in flatten(cfg).items() if k.split(".")[0] not in NOT_SETTINGS})
    a, b = flat
    keys = sorted(set(a) | set(b))
    rows = [(k, a.get(k, "–"), b.get(k, "–")) for k in keys if a.get(k) != b.get(k)]
    return pd.DataFrame(rows, columns=["setting", run_a, run_b])


def _diff_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<i>The two runs' settings are the same.</i>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td><code>{html.escape(str(v))[:300]}</code></td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    return (f"<div class='wb-config-diff'>{len(df)} setting(s) differ<table><tr>{head}</tr>{body}</table></div>")


def organise_part(runs_dir: str | os.PathLike, runs: pd.DataFrame, table: Any) -> Any:
    """Tags and a note for a run (saved in the run), a tag filter over ``table`` (the runs table) and a switch that
    groups it by tags, and two runs' settings side by side where they differ."""
    import panel as pn

    from workbench.storage.notes import read_notes, write_notes

    root = Path(runs_dir)
    ids = runs["run_id"].tolist()
    pick = pn.widgets.Select(label="run", options=ids, value=ids[0] if ids else None, width=420)
    tags = pn.widgets.TextInput(label="tags (comma-separated)", placeholder="e.g. baseline, lr-sweep", width=300)
    note = pn.widgets.TextAreaInput(label="note", placeholder="what this run is for, what it showed", height=80,
                                    width=520)
    save = pn.widgets.Button(name="save tags and note", width=170)
    said = pn.pane.HTML("", css_classes=["wb-notes-status"])
    all_tags = sorted({t for v in runs.get("tags", pd.Series(dtype=object)).fillna("") for t in str(v).split(", ") if t})
    only = pn.widgets.MultiChoice(label="show runs tagged", options=all_tags, placeholder="all runs", width=420)

    def show(_: Any = None) -> None:
        n = read_notes(root / pick.value) if pick.value else None
        tags.value, note.value = (", ".join(n.tags), n.note) if n else ("", "")
        said.object = f"<small style='color:#8a5a00'>{html.escape(n.error)}</small>" if n and n.error else ""

    def store(_: Any) -> None:
        try:
            saved = write_notes(root / pick.value, tags.value, note.value)
        except (OSError, ValueError) as e:
            said.object = f"<small style='color:#b00020'>not saved: {html.escape(str(e))}</small>"
            return
        text = ", ".join(saved.tags)
        row = ids.index(pick.value)
        table.patch({"tags": [(row, text)]})
        only.options = sorted(set(only.options) | set(saved.tags))
        said.object = f"<small>saved {html.escape(saved.updated or '')}: {html.escape(text) or 'no tags'}</small>"

    def tagged(df: pd.DataFrame, chosen: list[str]) -> pd.DataFrame:
        if not chosen or "tags" not in df:
            return df
        want = set(chosen)
        return df[[bool(want & set(str(v).split(", "))) for v in df["tags"].fillna("")]]

    table.add_filter(pn.bind(tagged, chosen=only))
    group = pn.widgets.Checkbox(name="group the runs table by tags", value=False)

    def regroup(event: Any) -> None:
        table.groupby = ["tags"] if event.new else []

    group.param.watch(regroup, "value")
    pick.param.watch(show, "value")
    save.on_click(store)
    show()
    first, second = (ids[0], ids[1]) if len(ids) > 1 else (ids[0], ids[0]) if ids else (None, None)
    diff_a = pn.widgets.Select(label="settings of", options=ids, value=first, width=420)
    diff_b = pn.widgets.Select(label="against", options=ids, value=second, width=420)

    def diff(a: str | None, b: str | None) -> Any:
        if not a or not b:
            return pn.pane.HTML("")
        try:
            return pn.pane.HTML(_diff_html(config_diff(root, a, b)), sizing_mode="stretch_width")
        except ValueError as e:
            return pn.pane.HTML(f"<small style='color:#b00020'>{html.escape(str(e))}</small>")

    return pn.Card(
        pn.Row(pick, tags, save), note, said, pn.Row(only, group),
        pn.pane.Markdown("**Two runs' settings** (`config.json`, where they differ)"), pn.Row(diff_a, diff_b),
        pn.panel(pn.bind(diff, diff_a, diff_b)),
        title="Organise: tags, notes, and two runs' settings", collapsed=False, sizing_mode="stretch_width")
