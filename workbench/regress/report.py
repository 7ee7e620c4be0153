"""The regression report: ``report.md``, ``report.html``."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from workbench.regress.results import ERROR, MISSING, NEW, PASS, REGRESSED, RegressReport
from workbench.util.io import atomic_write_json, atomic_write_text

# --------------------------------------------------------------------------- report


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _rel(path: str, out_dir: str) -> str:
    """``path`` relative to the report's folder (the report moves with it), as a URL path."""
    try:
        return Path(os.path.relpath(path, out_dir)).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(path).as_uri()


def _taken(taken: dict | None) -> str:
    """Where a baseline was taken, in words."""
    if not taken:
        return "taken at an unrecorded commit and date"
    commit = taken.get("commit") or "no git commit"
    dirty = " (with uncommitted changes)" if taken.get("dirty") else ""
    return f"taken at {commit}{dirty} on {taken.get('date', '?')}, {taken.get('machine', '?')}"


def report_markdown(r: RegressReport) -> str:
    n = r.counts
    verdict = "FAILED" if r.failed else "OK"
    lines = [
        f"# workbench regress: {verdict}",
        "",
        f"Suite `{r.suite}` · started {r.started} · wall {r.wall_seconds:.1f} s · {r.jobs} job(s) · kernel "
        f"`{r.kernel}` · cell timeout {r.cell_timeout} s" + (" · **baselines updated**" if r.updated_baselines else ""),
        "",
        f"**{n[PASS]} pass, {n[REGRESSED]} regressed, {n[ERROR]} error, {n[NEW]} new**",
        "",
        "| case | notebook | status | seconds | note |",
        "|---|---|---|---:|---|",
    ]
    for c in r.cases:
        lines.append(f"| {c.name} | {c.notebook} | **{c.status}** | {c.seconds:.1f} | {c.note.replace('|', '/')} |")
    if r.fixtures:
        lines += ["", "Setup: " + "; ".join(
            f"`{name}` {f['seconds']:.1f} s -> " + (f"`{f['run']}`" if f["run"] else f"**failed**: {f['error']}")
            for name, f in r.fixtures.items())]
    for c in r.cases:
        lines += ["", f"## {c.name}: {c.status}", "", f"Notebook `{c.notebook}`; executed copy: `{c.executed or '—'}`"
                  + (f" ([HTML]({_rel(c.executed_html, r.out_dir)}))" if c.executed_html else "")]
        if c.parameters:
            lines += ["", "Parameters: " + ", ".join(f"`{k}={v!r}`" for k, v in c.parameters.items())]
        if c.metrics:
            lines += ["", f"Baseline `{c.baseline_file}`: {_taken(c.baseline_taken)}"]
            lines += ["", "| metric | baseline | current | delta | tolerance | status |", "|---|---:|---:|---:|---|---|"]
            for m in c.metrics:
                lines.append(f"| {m.name} | {_fmt(m.baseline)} | {_fmt(m.value)} | {_fmt(m.delta)} | {m.tolerance} | "
                             f"{'**' + m.status + '**' if m.status in (REGRESSED, MISSING) else m.status} |")
        if c.error:
            e = c.error
            where = f"cell {e['cell_index']} of the executed notebook" if e.get("cell_index") is not None else "the case"
            if e.get("exec_count") is not None:
                where += f" (execution count {e['exec_count']})"
            lines += ["", f"**Error in {where}:** `{e['ename']}: {e['evalue']}`"]
            if e.get("source"):
                lines += ["", "Failing cell:", "", "```python", e["source"].rstrip(), "```"]
            if e.get("traceback"):
                lines += ["", "Traceback:", "", "```", e["traceback"].rstrip()[-6000:], "```"]
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
td.num{text-align:right;font-family:monospace}pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}
.pass,.ok{color:#1b7f3b}.regressed,.missing,.error{color:#b00020;font-weight:bold}.new{color:#8a6d00}
"""


def report_html(r: RegressReport) -> str:
    e_ = html.escape
    n = r.counts
    verdict = "FAILED" if r.failed else "OK"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>workbench regress: {verdict}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>workbench regress: <span class='{'error' if r.failed else 'pass'}'>{verdict}</span></h1>",
        f"<p>Suite <code>{e_(r.suite)}</code> · started {e_(r.started)} · wall {r.wall_seconds:.1f} s · {r.jobs} "
        f"job(s) · kernel <code>{e_(r.kernel)}</code> · cell timeout {r.cell_timeout} s"
        + (" · <b>baselines updated</b>" if r.updated_baselines else "") + "</p>",
        f"<p><b>{n[PASS]} pass, {n[REGRESSED]} regressed, {n[ERROR]} error, {n[NEW]} new</b></p>",
        "<table><tr><th>case</th><th>notebook</th><th>status</th><th>seconds</th><th>note</th></tr>",
    ]
    for c in r.cases:
        nb_cell = (f"<a href='{e_(_rel(c.executed_html, r.out_dir))}'>{e_(c.notebook)}</a>" if c.executed_html
                   else e_(c.notebook))
        parts.append(f"<tr><td><a href='#{e_(c.name)}'>{e_(c.name)}</a></td><td>{nb_cell}</td>"
                     f"<td class='{c.status}'>{c.status}</td><td class='num'>{c.seconds:.1f}</td><td>{e_(c.note)}</td></tr>")
    parts.append("</table>")
    if r.fixtures:
        parts.append("<p>Setup: " + "; ".join(
            f"<code>{e_(name)}</code> {f['seconds']:.1f} s &rarr; "
            + (f"<code>{e_(f['run'])}</code>" if f["run"] else f"<b class='error'>failed</b>: {e_(str(f['error']))}")
            for name, f in r.fixtures.items()) + "</p>")
    for c in r.cases:
        parts.append(f"<h2 id='{e_(c.name)}'>{e_(c.name)}: <span class='{c.status}'>{c.status}</span></h2>")
        parts.append(f"<p>Notebook <code>{e_(c.notebook)}</code>; executed copy: <code>{e_(c.executed or '—')}</code>"
                     + (f" (<a href='{e_(_rel(c.executed_html, r.out_dir))}'>rendered to HTML</a>)" if c.executed_html
                        else "") + "</p>")
        if c.parameters:
            parts.append("<p>Parameters: " + ", ".join(f"<code>{e_(k)}={e_(repr(v))}</code>" for k, v in c.parameters.items())
                         + "</p>")
        if c.metrics:
            parts.append(f"<p>Baseline <code>{e_(c.baseline_file)}</code>: {e_(_taken(c.baseline_taken))}</p>")
            parts.append("<table><tr><th>metric</th><th>baseline</th><th>current</th><th>delta</th><th>tolerance</th>"
                         "<th>status</th></tr>")
            for m in c.metrics:
                parts.append(f"<tr><td>{e_(m.name)}</td><td class='num'>{e_(_fmt(m.baseline))}</td>"
                             f"<td class='num'>{e_(_fmt(m.value))}</td><td class='num'>{e_(_fmt(m.delta))}</td>"
                             f"<td>{e_(m.tolerance)}</td><td class='{m.status}'>{m.status}</td></tr>")
            parts.append("</table>")
        if c.error:
            err = c.error
            where = f"cell {err['cell_index']} of the executed notebook" if err.get("cell_index") is not None else "the case"
            if err.get("exec_count") is not None:
                where += f" (execution count {err['exec_count']})"
            parts.append(f"<p class='error'>Error in {e_(where)}: <code>{e_(err['ename'])}: {e_(str(err['evalue']))}</code></p>")
            if err.get("source"):
                parts.append(f"<p>Failing cell:</p><pre>{e_(err['source'])}</pre>")
            if err.get("traceback"):
                parts.append(f"<details><summary>Traceback</summary><pre>{e_(err['traceback'][-6000:])}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(r: RegressReport, out_dir: str | os.PathLike) -> dict[str, Path]:
    out_dir = Path(out_dir)
    return {
        "md": atomic_write_text(out_dir / "report.md", report_markdown(r)),
        "html": atomic_write_text(out_dir / "report.html", report_html(r)),
        "json": atomic_write_json(out_dir / "results.json", r.to_dict()),
    }
