"""MkDocs hook: the CLI reference page is generated from the argparse parsers (``workbench.apps.cli.build_parser``), so
it lists every command and flag the installed version has and cannot drift from ``--help``."""

from __future__ import annotations

import argparse
import html
from typing import Any

MARKER = "<!-- cli-reference -->"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, ``|`` escaped, HTML characters as entities."""
    return html.escape(" ".join(str(text).split())).replace("|", "\\|")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command(name: str, parser: argparse.ArgumentParser, level: int = 2) -> list[str]:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
    out = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        out += [" ".join(parser.description.split()), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
        default = "" if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings \
            else f"`{action.default}`"
        helptext = (action.help or "").replace("%(default)s", str(action.default))
        rows.append(f"| {flags} | {_cell(helptext)} | {default} |")
    if rows:
        out += ["| flag | what | default |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        out += [" ".join(parser.epilog.split()), ""]
    for sub, sp in _subparsers(parser).items():
        out += _command(f"{name} {sub}", sp, min(level + 1, 4))
    return out


def reference() -> str:
    """Markdown for every ``workbench`` command: its description, usage and a table of its flags."""
    from workbench.apps.cli import build_parser

    lines: list[str] = []
    for name, parser in _subparsers(build_parser()).items():
        lines += _command(f"workbench {name}", parser)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
