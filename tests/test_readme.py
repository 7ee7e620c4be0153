"""Numbers the README and the user guide (docs/) quote are checked against the code that produces them; the README
stays a front door (short, and every page it links exists)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
GUIDE = README + "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))
"""The README and every page of the user guide."""


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def test_world_numbers(world):
    m = re.search(r"seed (\d+), ([\d,]+) entities \(([\d,]+) named ones plus ([\d,]+) values[^)]*\), ([\d,]+) passages, "
                  r"([\d,]+) questions", " ".join(README.split()))
    assert m, "README's world line changed: update this test with it"
    seed, n_ent, named, values, n_pass, n_q = (_int(g) for g in m.groups())
    assert seed == world.config.seed
    assert n_ent == len(world.entities) == named + values
    assert values == sum(1 for e in world.entities.values() if e.type == "value")
    assert n_pass == len(world.passages)
    assert n_q == len(world.examples)


def test_methods_the_readme_lists_exist():
    """The README's and the command reference's method lists name only methods that exist, and every seed paper,
    Search-R1 and baseline. A method added since (`workbench methods new`) need not be listed: the registry is the
    list, and adding a method touches no other file."""
    from tests.test_methods import SEEDS
    from workbench.methods import get_method, method_names

    commands = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text(encoding="utf-8")
    for where, text in (("README.md", README), ("docs/commands.md", commands)):
        row = next(line for line in text.splitlines() if line.startswith("| `workbench methods"))
        listed = set(re.findall(r"`([a-z_0-9]+)`", row.split("|")[2]))
        assert listed <= set(method_names()), f"{where} lists methods that do not exist: {listed - set(method_names())}"
        core = set(SEEDS) | {"search_r1"} | {n for n in method_names() if get_method(n).baseline}
        assert core <= listed, f"{where} leaves out {sorted(core - listed)}"


def test_results_sections_the_readme_names_exist():
    """Every ``§ "Heading"`` the README or the guide cites is a heading of bench/RESULTS.md, and every ``§ Current figures, "row"``
    a row of its current-figures table, so a figure's source can be found."""
    results = (Path(__file__).resolve().parents[1] / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in results.splitlines() if line.startswith("#")]
    summary = results.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in summary.splitlines() if line.startswith("| ")]
    flat = " ".join(GUIDE.split())  # a citation may wrap across lines
    cited = re.findall(r'§ "([^"]+)"', flat)
    cited_rows = re.findall(r'§ Current figures, "([^"]+)"', flat)
    assert cited and cited_rows, "the README cites no RESULTS section: update this test with it"
    for name in cited:
        assert any(h.startswith(name) for h in headings), f"README cites § {name!r}, which bench/RESULTS.md lacks"
    for name in cited_rows:
        assert any(r.startswith(name) for r in rows), f"README cites the summary row {name!r}, which is not there"


def test_the_readme_is_a_front_door():
    """Short, and every guide page it links to exists (the guide holds the detail)."""
    assert len(README.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert links, "the README links no page of the guide"
    for link in links:
        assert (ROOT / link).is_file(), link


@pytest.mark.slow
def test_the_readme_ask_example_is_answered_right(tmp_path):
    """The README's `workbench ask` example is a question the shipped adapter answers (greedy, the fp32 engine: the
    path every CPU takes alike), and the verdict says so."""
    import subprocess
    import sys

    line = next(line for line in README.splitlines() if "**`workbench ask " in line)
    question, gold = re.search(r'workbench ask "([^"]+)" --answer (\w+)', line).groups()
    done = subprocess.run([sys.executable, "-m", "workbench.apps.cli", "ask", question, "--answer", gold,
                           "--rollout-engine", "fp32", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: correct") and f"gold: {gold}" in verdict, done.stdout[-2000:]
