"""The package's shape: imports point one way, nothing imports in a circle, and private names stay in their package.

Every import statement of a module counts, wherever it is: at the top, inside a function or a class, under
``if TYPE_CHECKING:`` (an import moved into a function still ties the two modules together). Imports are read
with ``ast``; nothing is imported. ``from workbench.x import y`` is an edge to ``workbench.x.y`` when that is a
module, else to ``workbench.x``; relative imports are resolved. Importing a submodule also runs its package's
``__init__``, but that is not an edge here: a package ``__init__`` re-exporting its own submodules is the
normal form, and a real cycle through it needs an explicit import of the package.

The rules are functions of a directory (or of the graph read from it), so each is also checked against a small
package written to ``tmp_path`` that breaks it on purpose.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The top-level packages read (``widgets`` is an application of ``workbench``).
PACKAGES = ("workbench", "widgets")

#: The engine: rolls out, scores, trains and stores runs. It must work without knowing which applications or
#: published methods exist (they pass it objects), so it imports neither.
ENGINE = (
    "workbench.core",
    "workbench.storage",
    "workbench.util",
    "workbench.data",
    "workbench.tools",
    "workbench.protocols",
    "workbench.rewards",
    "workbench.rollout",
    "workbench.rl",
)
#: The package's own ``__init__`` (it sets the hub-offline default and imports nothing of the package): engine.
PACKAGE_INIT = "workbench"
#: The applications: commands, notebooks, views and integrations built on the engine; only they import methods.
APPLICATIONS = (
    "workbench.apps",
    "workbench.__main__",
    "workbench.eval",
    "workbench.dashboard",
    "workbench.regress",
    "workbench.integrations",
    "widgets",
)
#: The published methods, one package each: they use the engine; the engine never imports them.
METHODS = ("workbench.methods",)
#: The engine's foundation, lowest first: each package may import only the ones before it (and itself). ``util``
#: (files, paths, threads, text hygiene, the HTTP stack) knows nothing of the workbench; ``core`` (the value types,
#: the trajectory record, the policy loader) knows only ``util``. Everything else builds on both.
FOUNDATION = ("workbench.util", "workbench.core")

#: Known exceptions to the rules below (an edge listed here is allowed; one that no longer exists fails
#: ``test_known_edges_still_exist`` until it is taken off): none. The methods-as-packages change removed the engine's
#: imports of ``workbench.methods`` and of the eval runner.
KNOWN_METHOD_EDGES: frozenset[tuple[str, str]] = frozenset()
KNOWN_APPLICATION_EDGES: frozenset[tuple[str, str]] = frozenset()
KNOWN_EDGES = KNOWN_METHOD_EDGES | KNOWN_APPLICATION_EDGES


# ----------------------------------------------------------------------------- reading imports


@dataclass(frozen=True)
class Import:
    """One import (or attribute read of an imported module) of ``importer``: ``module``, or ``name`` from it."""

    importer: str
    module: str
    name: str | None
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str, modules: dict[str, Path]) -> str:
    """The package a module belongs to: itself for a package ``__init__``, else its parent."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def is_private(name: str) -> bool:
    """``_name`` (not a dunder such as ``__version__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def read_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    return {module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


@functools.cache
def read_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> tuple[Import, ...]:
    """Every import of one of the modules by another, anywhere in the importing module, resolved.

    Also records ``alias._name`` reads where ``alias`` names an imported module (``from pkg import mod as m;
    m._helper``): a private name reached through the module rather than imported by name."""
    modules = read_modules(root, packages)
    out: list[Import] = []
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        out.append(Import(name, a.name, None, node.lineno))
                        if a.asname:
                            aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importer's package, one level up per extra dot
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    if sub in modules:  # from package import submodule
                        out.append(Import(name, sub, None, node.lineno))
                        aliases[a.asname or a.name] = sub
                        if is_private(a.name):
                            out.append(Import(name, base, a.name, node.lineno))
                    elif base in modules:
                        out.append(Import(name, base, a.name, node.lineno))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if is_private(node.attr):
                    out.append(Import(name, aliases[node.value.id], node.attr, node.lineno))
    return tuple(i for i in out if i.module != i.importer)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules it imports (any depth, ``TYPE_CHECKING`` included)."""
    graph: dict[str, set[str]] = {m: set() for m in read_modules(root, packages)}
    for i in read_imports(root, packages):
        graph[i.importer].add(i.module)
    return graph


# ----------------------------------------------------------------------------- the rules


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def private_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """Imports of a ``_private`` name, or of anything in a ``_private`` module, by a module of another package.

    Modules of one package may share private names; a package's ``__init__`` belongs to that package."""
    modules = read_modules(root, packages)
    bad = []
    for i in read_imports(root, packages):
        parts = i.module.split(".")
        first = next((k for k, p in enumerate(parts) if is_private(p)), None)
        if first is not None:  # pkg._impl or pkg._impl.x: private to pkg (and to what is inside pkg._impl)
            owner, inside = ".".join(parts[:first]), ".".join(parts[: first + 1])
        elif i.name is not None and is_private(i.name):
            owner = i.module if f"{i.module}.{i.name}" in modules else package_of(i.module, modules)
            inside = f"{owner}.{i.name}"
        else:
            continue
        if package_of(i.importer, modules) != owner and not _within(i.importer, [inside]):
            bad.append(i)
    return bad


def _within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def wrong_way(graph: dict[str, set[str]], lower: Sequence[str], upper: Sequence[str]) -> list[tuple[str, str]]:
    """Edges from a module under one of ``lower`` to a module under one of ``upper`` (the layer above it)."""
    return sorted((a, b) for a, deps in graph.items() if _within(a, lower) for b in deps if _within(b, upper))


def layer(module: str) -> str | None:
    """``engine``, ``application`` or ``methods``; None for a module no list names."""
    found = [n for n, prefixes in (("engine", ENGINE), ("application", APPLICATIONS), ("methods", METHODS))
             if _within(module, prefixes)]
    if module == PACKAGE_INIT:
        found.append("engine")
    return found[0] if len(found) == 1 else None


# ----------------------------------------------------------------------------- the package


def test_every_module_has_one_layer():
    unplaced = [m for m in read_modules(ROOT) if layer(m) is None]
    assert not unplaced, (f"modules in no layer (or in two): {unplaced}; add each to ENGINE, APPLICATIONS or "
                          "METHODS in tests/test_structure.py")


def test_the_engine_imports_no_application_and_no_method():
    graph = import_graph(ROOT)
    bad = wrong_way(graph, ENGINE, [*APPLICATIONS, *METHODS]) + wrong_way(
        {PACKAGE_INIT: graph[PACKAGE_INIT]}, [PACKAGE_INIT], [*APPLICATIONS, *METHODS])
    bad = [e for e in bad if e not in KNOWN_EDGES]
    assert not bad, "engine modules importing applications or methods (pass objects in instead):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in bad)


def test_known_edges_still_exist():
    graph = import_graph(ROOT)
    gone = sorted(e for e in KNOWN_EDGES if e[1] not in graph.get(e[0], ()))
    assert not gone, f"take these edges off KNOWN_METHOD_EDGES / KNOWN_APPLICATION_EDGES, they are gone: {gone}"


def test_no_import_cycle():
    graph = import_graph(ROOT)
    for a, b in KNOWN_EDGES:
        graph.get(a, set()).discard(b)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (function-level and TYPE_CHECKING imports included):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles)


def outside_foundation(graph: dict[str, set[str]], foundation: Sequence[str] = FOUNDATION) -> list[tuple[str, str]]:
    """Edges from a foundation package to a module of the same top-level package that is not in it or below it."""
    bad = []
    for k, pkg in enumerate(foundation):
        allowed = foundation[: k + 1]
        top = pkg.split(".")[0] + "."
        bad += [(a, b) for a, deps in graph.items() if _within(a, [pkg])
                for b in sorted(deps) if b.startswith(top) and not _within(b, allowed)]
    return sorted(bad)


def test_the_foundation_imports_only_what_is_below_it():
    bad = outside_foundation(import_graph(ROOT))
    assert not bad, (f"the foundation ({' < '.join(FOUNDATION)}) imports from above itself; move the shared piece "
                     "down or the importing one up:\n" + "\n".join(f"  {a} -> {b}" for a, b in bad))


def test_no_private_name_is_imported_from_another_package():
    bad = private_imports(ROOT)
    assert not bad, "private names used outside their package (make them public or move them):\n" + "\n".join(
        f"  {i.importer}:{i.line} uses {i.module}.{i.name}" for i in bad)


# ----------------------------------------------------------------------------- each rule catches a planted break


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_cycle_through_a_function_and_type_checking_import_is_found(tmp_path):
    root = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg.b import g\n    return g\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n",
        "pkg/c.py": "class C:\n    def m(self):\n        import pkg.a\n",
        "pkg/d.py": "from pkg import a\n",
    })
    assert find_cycles(import_graph(root, ("pkg",))) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_a_private_name_from_another_package_is_found(tmp_path):
    root = _package(tmp_path, {
        "pkg/__init__.py": "from pkg.sub.x import _shared\n",  # the parent package is not the same package
        "pkg/store.py": "def _quote(s):\n    return s\n",
        "pkg/views.py": "from pkg.store import _quote\n",  # same package: fine
        "pkg/sub/__init__.py": "from ._impl import thing\n",  # a package's __init__ is that package: fine
        "pkg/sub/_impl.py": "thing = 1\n",
        "pkg/sub/x.py": "from pkg.store import _quote\n_shared = 1\n",
        "pkg/sub/y.py": "from pkg import store as s\n\ndef f():\n    return s._quote('a')\n",
        "pkg/other/__init__.py": "",
        "pkg/other/z.py": "from pkg.sub import _impl\nfrom pkg.views import __doc__\nimport pkg.sub._impl\n",
    })
    got = {(i.importer, i.module, i.name) for i in private_imports(root, ("pkg",))}
    assert got == {("pkg", "pkg.sub.x", "_shared"), ("pkg.sub.x", "pkg.store", "_quote"),
                   ("pkg.sub.y", "pkg.store", "_quote"), ("pkg.other.z", "pkg.sub", "_impl"),
                   ("pkg.other.z", "pkg.sub._impl", None)}


def test_an_engine_module_importing_an_application_or_method_is_found(tmp_path):
    root = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/engine/__init__.py": "",
        "pkg/engine/core.py": "def run():\n    from pkg.app import main\n",
        "pkg/engine/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.methods.m import M\n",
        "pkg/engine/fine.py": "from pkg.engine import core\n",
        "pkg/app.py": "from pkg.engine.core import run\nfrom pkg.methods import m\n\ndef main():\n    pass\n",
        "pkg/methods/__init__.py": "",
        "pkg/methods/m.py": "from pkg.engine import core\nclass M:\n    pass\n",
    })
    graph = import_graph(root, ("pkg",))
    assert wrong_way(graph, ["pkg.engine"], ["pkg.app", "pkg.methods"]) == [
        ("pkg.engine.core", "pkg.app"), ("pkg.engine.typed", "pkg.methods.m")]
    assert wrong_way(graph, ["pkg.methods"], ["pkg.app"]) == []


def test_a_foundation_module_importing_from_above_is_found(tmp_path):
    root = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/util/__init__.py": "",
        "pkg/util/io.py": "def read():\n    from pkg.core.types import T\n",
        "pkg/core/__init__.py": "",
        "pkg/core/types.py": "from pkg.util import io\nclass T:\n    pass\n",
        "pkg/core/record.py": "from pkg.tools import search\n",
        "pkg/tools/__init__.py": "",
        "pkg/tools/search.py": "from pkg.core.types import T\n",
    })
    assert outside_foundation(import_graph(root, ("pkg",)), ("pkg.util", "pkg.core")) == [
        ("pkg.core.record", "pkg.tools.search"), ("pkg.util.io", "pkg.core.types")]


@pytest.mark.parametrize("module, want", [("workbench", "engine"), ("workbench.rl.trainer", "engine"),
                                          ("workbench.eval.runner", "application"), ("widgets.inspector", "application"),
                                          ("workbench.methods.dspo", "methods"), ("workbench.rlx", None)])
def test_layers(module, want):
    assert layer(module) == want


# ----------------------------------------------------------------------------- history stays out of the code

HISTORY = re.compile(r"\bissues? [0-9]+\b|\b20[2-9][0-9]-[01][0-9]-[0-3][0-9]\b")
"""An issue number or a date in a comment or docstring: history, which belongs in bench/RESULTS.md and the git log."""


def history_mentions(paths: list[Path]) -> list[str]:
    """``file:line: text`` of each comment or string line naming an issue or a date."""
    out = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{n}: {line.strip()}")
    return out


def test_no_issue_numbers_or_dates_in_the_code():
    paths = [p for top in ("workbench", "widgets", "tests") for p in sorted((ROOT / top).rglob("*.py"))]
    # a date that is data, not history (a test's example plan text), is allowed where it is data
    found = [m for m in history_mentions(paths) if "test_dag.py" not in m]
    assert not found, "history in code (move it to bench/RESULTS.md or the commit message):\n" + "\n".join(found)


def test_history_mentions_are_found(tmp_path):
    f = tmp_path / "m.py"
    issue, date = "issue" + " 12", "-".join(("2026", "11", "24"))  # not written out: this file is checked too
    f.write_text(f'"""Fixed in {issue}."""\nx = 1  # measured {date}\ny = 2  # fine\n')
    assert [m.split(":")[1] for m in history_mentions([f])] == ["1", "2"]


# ----------------------------------------------------------------------------- names outside the package

IMPORT_LINE = re.compile(r"^\s*(?:>>> |\.\.\. )?from ((?:workbench|widgets)(?:\.\w+)*) import \(?([\w, ]+)")


def unresolved_imports(texts: dict[str, str]) -> list[str]:
    """``where: module.name`` for each ``from workbench... import name`` line (also in a doctest or a markdown code
    span) whose module or name does not exist; modules that need verl (its own environment) are passed over."""
    import importlib
    import importlib.util

    bad = []
    for where, text in texts.items():
        for line in text.splitlines():
            m = IMPORT_LINE.match(line.replace("`", " "))
            if not m:
                continue
            try:
                module = importlib.import_module(m[1])
            except ModuleNotFoundError as e:
                if e.name and e.name.split(".")[0] == "verl":
                    continue
                bad.append(f"{where}: {m[1]} ({e})")
                continue
            for name in (n.split(" as ")[0].strip() for n in m[2].split(",") if n.strip()):
                submodule = hasattr(module, "__path__") and importlib.util.find_spec(f"{m[1]}.{name}") is not None
                if not hasattr(module, name) and not submodule:
                    bad.append(f"{where}: {m[1]}.{name}")
    return bad


def test_scripts_docs_and_notebooks_import_names_that_exist():
    """The package's own imports are checked by running it; the benchmarks, the guide, the notebooks and the
    docstring examples are not always run, so a moved or renamed name is found here."""
    import json

    paths = [*sorted((ROOT / "bench").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md",
             *sorted((ROOT / "workbench").rglob("*.py")), *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    texts = {}
    for p in paths:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
        texts[str(p.relative_to(ROOT))] = text
    bad = unresolved_imports(texts)
    assert not bad, "imports of names that do not exist (moved or renamed?):\n" + "\n".join(f"  {b}" for b in bad)


def test_an_import_of_a_moved_name_is_found():
    texts = {"a.md": "`from workbench.core.types import Passage, Nope`\n>>> from workbench.gone import x\n",
             "b.py": "from workbench.util import io, nothing_here\n"}
    assert unresolved_imports(texts) == ["a.md: workbench.core.types.Nope",
                                         "a.md: workbench.gone (No module named 'workbench.gone')",
                                         "b.py: workbench.util.nothing_here"]
