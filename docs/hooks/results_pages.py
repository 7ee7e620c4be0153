"""MkDocs hook: ``bench/RESULTS.md`` as pages of the site, so the measurements have navigation and search.

The file's opening (what the machines are, the current-figures table) becomes ``results/index.md``; each top-level
section (``# Retrieval``, ``# Training``, ...) becomes ``results/<slug>.md``, its ``#`` heading the page title. In the
pages, a heading's parentheses that hold a tracker number or a date are dropped:
each section says its date and machine in its first lines. The figures the file shows (``figures/*.svg`` beside it) go
along. ``bench/RESULTS.md`` stays the one source: nothing here is written to the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"
FIGURES = ROOT / "bench" / "figures"
_DATED = re.compile(r"\s*\((?=[^()]*(?:issue \d+|\d{4}-\d{2}-\d{2}))[^()]*\)")


def slug(title: str) -> str:
    """``The workbench: views, notebooks, tests`` -> ``the-workbench``: the words before a colon, lower case."""
    head = title.split(":")[0]
    return re.sub(r"[^a-z0-9]+", "-", head.lower()).strip("-")


def clean_heading(line: str) -> str:
    """A heading without the parentheses that hold a tracker number or a date."""
    return _DATED.sub("", line).rstrip() if line.startswith("#") else line


def split_results(text: str) -> list[tuple[str, str, str]]:
    """``(slug, title, markdown)`` for the opening (slug ``index``) and each top-level section, in file order."""
    pages: list[tuple[str, str, list[str]]] = [("index", "Results", [])]
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("# "):
            title = clean_heading(line)[2:].strip()
            if pages[0][2] or len(pages) > 1:  # the file's own title opens the index page
                pages.append((slug(title), title, []))
            pages[-1][2].append(f"# {title}")
            continue
        pages[-1][2].append(clean_heading(line) if not fence else line)
    return [(s, t, "\n".join(body) + "\n") for s, t, body in pages]


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    from mkdocs.structure.files import File

    for s, _, body in split_results(RESULTS.read_text(encoding="utf-8")):
        files.append(File.generated(config, f"results/{s}.md", content=body))
    for svg in sorted(FIGURES.glob("*.svg")):
        files.append(File.generated(config, f"results/figures/{svg.name}", abs_src_path=str(svg)))
    return files
