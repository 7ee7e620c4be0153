"""The regression suite: YAML schema (:func:`load_suite`), tolerances, cases and fixtures."""

from __future__ import annotations

import keyword
import math
import os
import re
import string
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.util.io import loads_yaml, read_text_bounded

# --------------------------------------------------------------------------- suite

#: The most a suite YAML may hold (``notebooks/regress.yaml`` is a few KB).
SUITE_BYTES = 4 << 20


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move from its baseline: ``abs`` (|new - old| <= value),
    ``rel`` (|new - old| <= value * |old|) or ``exact`` (equal)."""

    kind: str
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("abs", "rel", "exact"):
            raise ValueError(f"tolerance kind must be abs, rel or exact, got {self.kind!r}")
        if not (self.value >= 0):
            raise ValueError(f"tolerance must be >= 0, got {self.value!r}")

    @classmethod
    def parse(cls, spec: Any, where: str = "") -> Tolerance:
        """``{abs: 0.2}``, ``{rel: 0.05}``, ``{exact: true}`` or a bare number (= abs); each may also be
        written under a ``tolerance:`` key (``{tolerance: {rel: 0.05}}``)."""
        if isinstance(spec, dict) and set(spec) == {"tolerance"}:
            spec = spec["tolerance"]
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            return cls("abs", float(spec))
        if isinstance(spec, dict) and len(spec) == 1:
            (kind, value), = spec.items()
            if kind == "exact" and value is True:
                return cls("exact")
            if kind in ("abs", "rel") and isinstance(value, (int, float)) and not isinstance(value, bool):
                return cls(kind, float(value))
        raise ValueError(f"{where}: tolerance must be {{abs: X}}, {{rel: X}}, {{exact: true}} or a number, got {spec!r}")

    def allows(self, old: Any, new: Any) -> bool:
        if not (_is_number(old) and _is_number(new)):
            return old == new
        old, new = float(old), float(new)
        if math.isnan(old) or math.isnan(new):
            return math.isnan(old) and math.isnan(new)
        if self.kind == "exact":
            return old == new
        limit = self.value if self.kind == "abs" else self.value * abs(old)
        return abs(new - old) <= limit + 1e-12

    def __str__(self) -> str:
        return "exact" if self.kind == "exact" else f"{self.kind} {self.value:g}"


@dataclass
class Fixture:
    """A run made (``demo``: ``workbench demo`` options) or named (``run``: a path) before the cases."""

    name: str
    demo: dict[str, Any] | None = None
    run: str | None = None
    timeout: int = 1800


#: The placeholders a case's parameters may hold, by root.
PLACEHOLDERS = {"run_dir": "{run_dir}", "out_dir": "{out_dir}", "fixtures": "{fixtures[NAME]}", "cases": "{cases[NAME]}"}


@dataclass
class Case:
    name: str
    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Tolerance] = field(default_factory=dict)

    def placeholders(self) -> list[tuple[str, str | None]]:
        """``(root, key)`` of every ``{...}`` in the parameters: ``("run_dir", None)``, ``("cases", "x")``. Only
        :data:`PLACEHOLDERS` are taken, as they are: a format spec or a conversion (``{out_dir:>99999999999}`` asks
        for a string of 100 GB) is an error, as is a brace that opens no placeholder."""
        out = []
        for s in _strings(self.parameters):
            try:
                fields = list(string.Formatter().parse(s))
            except ValueError as e:  # "Single '}' encountered": write {{ and }} for literal braces
                raise ValueError(f"case {self.name!r}: parameter {s[:60]!r}: {e} (write {{{{ and }}}} for a brace)") from None
            for _, fld, spec, conversion in fields:
                if fld is None:
                    continue
                m = re.fullmatch(r"(\w+)(?:\[([^\]]+)\])?", fld)
                keyed = m is not None and m.group(1) in ("fixtures", "cases")
                if (not m or m.group(1) not in PLACEHOLDERS or spec or conversion
                        or keyed != (m.group(2) is not None)):
                    shown = fld + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
                    raise ValueError(f"case {self.name!r}: unsupported placeholder {{{shown}}} in its parameters; "
                                     f"use {', '.join(PLACEHOLDERS.values())}, as they are")
                out.append((m.group(1), m.group(2)))
        return out

    def needs_cases(self) -> list[str]:
        return [k for root, k in self.placeholders() if root == "cases" and k]

    def needs_fixtures(self, default: str | None) -> list[str]:
        out = []
        for root, key in self.placeholders():
            if root == "run_dir":
                if default is None:
                    raise ValueError(f"case {self.name!r} uses {{run_dir}} but the suite has no setup entry")
                out.append(default)
            elif root == "fixtures" and key:
                out.append(key)
        return out


@dataclass
class Suite:
    path: Path
    fixtures: list[Fixture]
    cases: list[Case]
    notebooks_dir: Path
    baselines_dir: Path

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise ValueError(f"no case {name!r} in {self.path}; cases: {', '.join(c.name for c in self.cases)}")

    def select(self, names: list[str] | None) -> list[Case]:
        """The named cases plus the earlier cases they reference, in suite order (all when ``names`` is None)."""
        if not names:
            return list(self.cases)
        wanted: set[str] = set()
        todo = list(names)
        while todo:
            c = self.case(todo.pop())
            if c.name not in wanted:
                wanted.add(c.name)
                todo.extend(c.needs_cases())
        return [c for c in self.cases if c.name in wanted]


def load_suite(path: str | os.PathLike, notebooks_dir: str | os.PathLike | None = None,
               baselines_dir: str | os.PathLike | None = None) -> Suite:
    """Read and validate a suite YAML::

        setup:                     # optional: fixture runs, made first
          - name: tiny_demo
            demo: {limit: 2, max_new_tokens: 32, max_turns: 2}   # `workbench demo` options
          - name: mine
            run: ../runs/some-run  # an existing run directory (relative to the YAML)
        cases:
          - name: inspector_tiny   # baseline: <baselines_dir>/inspector_tiny.json
            notebook: 01_trajectory_inspector
            parameters: {run_dir: "{run_dir}", max_items: 20}
            metrics: {n_trajectories: {exact: true}, search_r1.f1: {abs: 0.2}}

    Placeholders in parameter strings: ``{run_dir}`` (the first setup entry's run),
    ``{fixtures[NAME]}``, ``{cases[NAME]}`` (the ``out_dir`` of an earlier case, which then
    runs first) and ``{out_dir}``. ``notebooks_dir`` defaults to the YAML's folder and
    ``baselines_dir`` to ``<that folder>/baselines``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no regression suite at {path}")
    doc = loads_yaml(read_text_bounded(path, SUITE_BYTES, "regression suite"), path,
                     "fix the suite file (a mapping with setup and cases)")
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with 'setup' and 'cases'")
    unknown = set(doc) - {"setup", "cases"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)} (expected setup, cases)")
    for key in ("setup", "cases"):
        if not isinstance(doc.get(key) or [], list):
            raise ValueError(f"{path}: {key} must be a list of entries, got {doc[key]!r:.60}")

    fixtures = []
    for i, f in enumerate(doc.get("setup") or []):
        where = f"{path}: setup[{i}]"
        if not isinstance(f, dict) or "name" not in f:
            raise ValueError(f"{where}: each setup entry needs a name")
        if ("demo" in f) == ("run" in f):
            raise ValueError(f"{where} ({f['name']!r}): give exactly one of 'demo' (options) or 'run' (a path)")
        extra = set(f) - {"name", "demo", "run", "timeout"}
        if extra:
            raise ValueError(f"{where}: unknown keys {sorted(extra)}")
        if "demo" in f and not isinstance(f["demo"] or {}, dict):
            raise ValueError(f"{where}: demo must be a mapping of `workbench demo` options, got {f['demo']!r:.60}")
        if "run" in f and not isinstance(f["run"], str):
            raise ValueError(f"{where}: run must be a run directory's path, got {f['run']!r:.60}")
        timeout = f.get("timeout", 1800)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
            raise ValueError(f"{where}: timeout must be a whole number of seconds >= 1, got {timeout!r:.60}")
        run = str((path.parent / f["run"]).resolve()) if "run" in f else None
        fixtures.append(Fixture(str(f["name"]), dict(f.get("demo") or {}) if "demo" in f else None, run, timeout))

    cases: list[Case] = []
    for i, c in enumerate(doc.get("cases") or []):
        where = f"{path}: cases[{i}]"
        if not isinstance(c, dict) or "name" not in c or "notebook" not in c:
            raise ValueError(f"{where}: each case needs a name and a notebook")
        extra = set(c) - {"name", "notebook", "parameters", "metrics"}
        if extra:
            raise ValueError(f"{where}: unknown keys {sorted(extra)} (expected name, notebook, parameters, metrics)")
        name = str(c["name"])
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"{where}: case name {name!r} may only use letters, digits, _ . -")
        if not isinstance(c.get("metrics") or {}, dict):
            raise ValueError(f"{where}: metrics must be a mapping of metric: tolerance, got {c['metrics']!r:.60}")
        metrics = {str(m): Tolerance.parse(spec, f"{where} metric {m!r}") for m, spec in (c.get("metrics") or {}).items()}
        notebook = str(c["notebook"]).removesuffix(".ipynb")
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", notebook) or ".." in notebook:
            raise ValueError(f"{where}: notebook {c['notebook']!r} must be a notebook's name in the notebooks folder "
                             "(letters, digits, _ . -; no path), e.g. 01_trajectory_inspector")
        params = c.get("parameters") or {}
        if not isinstance(params, dict):
            raise ValueError(f"{where}: parameters must be a mapping of name: value, got {type(params).__name__}")
        for key in params:
            # papermill writes each name as is into the injected cell (the values are quoted): only a Python name
            # may pass, or a key would be code
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
                raise ValueError(f"{where}: parameter name {key!r} is not a Python name (letters, digits and _, not "
                                 "starting with a digit): it must be one of the notebook's parameters")
        case = Case(name, notebook, dict(params), metrics)
        try:
            case.placeholders()
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        earlier = {x.name for x in cases}
        if name in earlier:
            raise ValueError(f"{where}: duplicate case name {name!r}")
        for dep in case.needs_cases():
            if dep not in earlier:
                raise ValueError(f"{where}: {{cases[{dep}]}} must name an earlier case")
        cases.append(case)

    names = {f.name for f in fixtures}
    default = fixtures[0].name if fixtures else None
    for c in cases:
        for f in c.needs_fixtures(default):
            if f not in names:
                raise ValueError(f"{path}: case {c.name!r} uses fixture {f!r}, which is not in setup")
    nb_dir = Path(notebooks_dir) if notebooks_dir else path.parent
    bl_dir = Path(baselines_dir) if baselines_dir else path.parent / "baselines"
    return Suite(path, fixtures, cases, nb_dir, bl_dir)


def _strings(obj: Any):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def _fill(obj: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(obj, str):
        return obj.format_map(ctx)
    if isinstance(obj, dict):
        return {k: _fill(v, ctx) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, ctx) for v in obj]
    return obj


# --------------------------------------------------------------------------- fixtures


def demo_flags(options: dict[str, Any]) -> list[str]:
    """A setup entry's ``demo`` options as ``workbench demo`` flags (``max_turns: 3`` -> ``--max-turns 3``; ``true``:
    the bare flag; ``false`` or null: left out).

    >>> demo_flags({"limit": 2, "max_new_tokens": 64, "no_kg": True, "seed": 0, "model": None, "device": False})
    ['--limit', '2', '--max-new-tokens', '64', '--no-kg', '--seed', '0']
    """
    flags: list[str] = []
    for k, v in options.items():
        flag = "--" + str(k).replace("_", "-")
        if v is True:
            flags.append(flag)
        elif v is not False and v is not None:  # by identity: 0 == False, and `seed: 0` is a value
            flags += [flag, str(v)]
    return flags


def make_fixture(fx: Fixture, root: Path) -> Path:
    """The run directory of fixture ``fx`` (made under ``root/<name>/`` for ``demo``)."""
    from workbench.storage.runs import list_runs

    if fx.run is not None:
        if not (Path(fx.run) / "config.json").exists():
            raise FileNotFoundError(f"setup {fx.name!r}: {fx.run} is not a run directory (no config.json)")
        return Path(fx.run)
    out = root / fx.name
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "workbench.apps.cli", "demo", "--no-notebooks", "--out", str(out),
           *demo_flags(fx.demo or {})]
    log = root / f"{fx.name}.log"
    with open(log, "w", encoding="utf-8") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=fx.timeout).returncode
    runs = list_runs(out)
    if rc != 0 or not runs:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"setup {fx.name!r}: `{' '.join(cmd[2:])}` failed (exit {rc}); log {log}:\n{tail}")
    return runs[0].path


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
