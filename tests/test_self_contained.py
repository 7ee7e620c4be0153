"""A clone stands on its own: no path to a folder beside the checkout (``../shared``) and no word about how the project
was built (the plan it started from, issue numbers, the hour a figure was taken in: :data:`PROCESS`) in the README, the
guide, the code, the notebooks, the methods' declarations or the shipped data. The lab log (``bench/RESULTS.md``, ``bench/HISTORY.md``) is where such words
belong and is not read here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what a user reads or runs: the guide, the package, the notebooks, the benchmarks' scripts, the shipped data
READ = ["README.md", "Makefile", "environment.yml", "mkdocs.yml", "docs", "workbench", "widgets", "notebooks",
        "bench/*.py", "bench/gpu", "data", "requirements/*.py"]
SUFFIXES = {".md", ".py", ".ipynb", ".yaml", ".yml", ".json", ".sh", ".c", ".txt", ""}
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(?:seeds|SEEDS|fixtures|ENVIRONMENT|STYLE)")
PROCESS = re.compile(r"design card|house plan|\(issue \d+\)|\bissue \d+\b|slow hour|sessions? that built",
                     re.IGNORECASE)


def _files() -> list[Path]:
    out: list[Path] = []
    for pattern in READ:
        for p in sorted(ROOT.glob(pattern)):
            if p.is_dir():
                out += [q for q in sorted(p.rglob("*")) if q.is_file() and q.suffix in SUFFIXES
                        and "__pycache__" not in q.parts]
            elif p.is_file():
                out.append(p)
    return out


def _hits(pattern: re.Pattern) -> list[str]:
    hits = []
    for p in _files():
        if p.stat().st_size > 5_000_000:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"{p.relative_to(ROOT)}:{line}: {m.group(0)!r}")
    return hits


def test_the_scan_reads_what_a_user_reads():
    names = {str(p.relative_to(ROOT)) for p in _files()}
    assert {"README.md", "docs/howto/own-data.md", "workbench/methods/dynasearcher/__init__.py",
            "data/samples/README.md", "bench/compare_methods.py"} <= names
    assert not any(n.startswith("bench/RESULTS") for n in names)


def test_no_path_outside_the_repository():
    hits = _hits(OUTSIDE)
    assert not hits, "paths to a folder a clone does not have (copy what is needed into data/samples or tests/fixtures):\n" + "\n".join(hits)


def test_no_word_about_how_the_project_was_built():
    hits = _hits(PROCESS)
    assert not hits, "words for the lab log (bench/RESULTS.md), not the guide or the code:\n" + "\n".join(hits)


def test_each_paper_is_cited_by_title_and_an_id_a_reader_can_look_up():
    from workbench.methods import get_method, method_names

    for name in method_names():
        m = get_method(name)
        if m.citation in ("", "-"):
            continue  # a method of the workbench's own (direct), not a paper's
        assert m.title, name
        assert re.fullmatch(r"arXiv:\d{4}\.\d{4,5}(; .*)?", m.source) or "no arXiv id" in m.source, (name, m.source)
