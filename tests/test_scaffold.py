"""`workbench methods new NAME`: a new method is one package and one test file, listed and tested with no other file
touched; bad names and existing files are one-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.apps.scaffold import check_name, new_method

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("name", "needle"), [
    ("9lives", "is not a method name"), ("My_Method", "is not a method name"), ("a", "is not a method name"),
    ("with-dash", "is not a method name"), ("class", "is not a method name"), ("new", "the command's own word"),
    ("dspo", "is taken"), ("search_r1", "is taken"),
])
def test_names_that_cannot_be_a_method_are_refused(name, needle):
    assert needle in (check_name(name) or "")


def test_bad_values_and_existing_files_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="is not an arXiv id"):
        new_method("fresh_method", tmp_path, arxiv="12")
    with pytest.raises(ValueError, match="leave out double quotes"):
        new_method("fresh_method", tmp_path, title='a "quoted" title')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fresh_method.py").write_text("mine\n")
    with pytest.raises(ValueError, match="exists already"):
        new_method("fresh_method", tmp_path)
    assert not (tmp_path / "workbench").exists()
    assert (tmp_path / "tests" / "test_fresh_method.py").read_text() == "mine\n"


@pytest.mark.slow
def test_a_new_method_is_listed_and_tested_with_no_other_file_touched(tmp_path):
    """In a copy of the checkout (the package and the tests copied, the rest linked): `methods new` writes three
    files, `workbench methods` lists the method, and its own test and the tests over every method pass."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for entry in ROOT.iterdir():
        if entry.name in ("workbench", "tests"):
            shutil.copytree(entry, tree / entry.name, ignore=skip)
        elif entry.name not in (".git", "runs"):
            (tree / entry.name).symlink_to(entry)
    before = {p.relative_to(tree) for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cli = [sys.executable, "-m", "workbench.apps.cli", "methods"]
    made = subprocess.run([*cli, "new", "demo_method", "--title", "Demo: a method from the scaffold",
                           "--citation", "Doe et al., 2026", "--arxiv", "2601.01234"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    after = {p.relative_to(tree) for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert after - before == {Path("workbench/methods/demo_method/__init__.py"),
                              Path("workbench/methods/demo_method/reward.py"), Path("tests/test_demo_method.py")}
    listed = subprocess.run(cli, cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and any(line.startswith("demo_method ") for line in listed.stdout.splitlines())
    # its own test, and the tests over every method (not the README's slow Ask example, which no method changes),
    # in one pytest process: one start and one set of session fixtures
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                             "tests/test_demo_method.py", "tests/test_methods.py", "tests/test_readme.py",
                             "tests/test_self_contained.py",
                             "--deselect", "tests/test_readme.py::test_the_readme_ask_example_is_answered_right"],
                            cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    assert tested.returncode == 0, tested.stdout[-3000:]
    own = [line for line in tested.stdout.splitlines() if line.startswith("PASSED tests/test_demo_method.py::")]
    assert len(own) == 5, tested.stdout[-3000:]
