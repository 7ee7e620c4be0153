"""The user guide builds as a site offline with ``mkdocs build --strict`` (a broken link or a docstring mkdocstrings
cannot render fails it), its CLI reference lists every command and flag the parsers have, and its pages load nothing
from the network."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs")
pytest.importorskip("material")
pytest.importorskip("mkdocstrings")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_every_page_of_the_nav_is_built(site):
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(items):
        for item in items:
            for value in item.values():
                yield from pages(value) if isinstance(value, list) else [value]

    for page in pages(nav):
        built = site / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert built.is_file(), page


def test_the_methods_page_has_every_method_its_reward_and_paper(site):
    """Generated from the declarations: each published method's section names its paper (an arXiv link where it has
    an id) and every reward component; the baselines are listed; a new method needs no page edit."""
    from workbench.methods import METHODS

    page = (site / "methods" / "index.html").read_text(encoding="utf-8")
    for m in METHODS.values():
        assert f"<code>{m.name}</code>" in page, m.name
        if m.baseline:
            continue
        for fn in m.rubric().components:
            assert f"<code>{fn.__name__}</code>" in page, (m.name, fn.__name__)
        for arxiv in re.findall(r"arXiv:(\d{4}\.\d{4,5})", m.source):
            assert f'href="https://arxiv.org/abs/{arxiv}"' in page, (m.name, arxiv)


def test_the_cli_reference_has_every_command_and_flag(site):
    from workbench.apps.cli import build_parser

    page = (site / "cli-reference" / "index.html").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"workbench {name}</code>" in page, name
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help" and action.help != argparse.SUPPRESS:
                    assert f"<code>{flag}</code>" in page, (name, flag)


def test_the_pages_load_nothing_from_the_network(site):
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        remote = re.findall(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?:)?//[^"]+"', text)
        assert not remote, (page, remote[:3])


def test_the_results_are_pages_of_the_site(site):
    """bench/RESULTS.md as pages: its opening (the current figures) and one page per top-level section, headings
    without their issue numbers and dates, the figures it shows beside them; the README's current figures are there."""
    import html as html_lib

    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    from results_pages import RESULTS, split_results

    pages = split_results(RESULTS.read_text(encoding="utf-8"))
    assert [s for s, _, _ in pages][0] == "index" and len(pages) >= 7
    index = (site / "results" / "index.html").read_text(encoding="utf-8")
    assert "Current figures" in index and "make test" in index
    for s, title, _ in pages[1:]:
        page = (site / "results" / s / "index.html").read_text(encoding="utf-8")
        heads = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", page, re.S)]
        assert heads and html_lib.unescape(heads[0]).startswith(title), (s, heads[:1])
        assert not [h for h in heads if re.search(r"\(issue \d+|\(\d{4}-\d{2}-\d{2}\)", h)], s
    training = (site / "results" / "training" / "index.html").read_text(encoding="utf-8")
    assert "seed by seed" in training and 'src="../figures/' in training
    assert (site / "results" / "figures" / "sft_loss.svg").is_file()
