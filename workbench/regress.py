"""``workbench regress``: notebook regressions.

Executes every case of a suite (``notebooks/regress.yaml``: a notebook plus papermill
parameters) headlessly, in parallel, collects the ``metrics.json`` each notebook writes to
its ``out_dir``, compares the listed metrics with the committed baseline
(``notebooks/baselines/<case>.json``) within each metric's tolerance, and writes a report
(``report.md``, ``report.html``, ``results.json``) into the output folder.

A case ends as ``pass``, ``regressed`` (a metric outside its tolerance, or missing),
``error`` (a cell raised or timed out: the report shows the cell's source and the error;
the executed notebook is kept) or ``new`` (no baseline yet). The YAML schema is documented
at the top of ``notebooks/regress.yaml`` and in :func:`load_suite`.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import html
import json
import math
import multiprocessing
import os
import re
import string
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.io import atomic_write_json, atomic_write_text

PASS, REGRESSED, ERROR, NEW = "pass", "regressed", "error", "new"
OK, MISSING = "ok", "missing"


# --------------------------------------------------------------------------- suite


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


@dataclass
class Case:
    name: str
    notebook: str
    parameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Tolerance] = field(default_factory=dict)

    def placeholders(self) -> list[tuple[str, str | None]]:
        """``(root, key)`` of every ``{...}`` in the parameters: ``("run_dir", None)``, ``("cases", "x")``."""
        out = []
        for s in _strings(self.parameters):
            for _, fld, _, _ in string.Formatter().parse(s):
                if fld is None:
                    continue
                m = re.fullmatch(r"(\w+)(?:\[([^\]]+)\])?", fld)
                if not m:
                    raise ValueError(f"case {self.name!r}: unsupported placeholder {{{fld}}} in its parameters")
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
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no regression suite at {path}")
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with 'setup' and 'cases'")
    unknown = set(doc) - {"setup", "cases"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)} (expected setup, cases)")

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
        run = str((path.parent / f["run"]).resolve()) if "run" in f else None
        fixtures.append(Fixture(str(f["name"]), dict(f.get("demo") or {}) if "demo" in f else None, run,
                                int(f.get("timeout", 1800))))

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
        metrics = {str(m): Tolerance.parse(spec, f"{where} metric {m!r}") for m, spec in (c.get("metrics") or {}).items()}
        case = Case(name, str(c["notebook"]).removesuffix(".ipynb"), dict(c.get("parameters") or {}), metrics)
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


def make_fixture(fx: Fixture, root: Path) -> Path:
    """The run directory of fixture ``fx`` (made under ``root/<name>/`` for ``demo``)."""
    from workbench.runs import list_runs

    if fx.run is not None:
        if not (Path(fx.run) / "config.json").exists():
            raise FileNotFoundError(f"setup {fx.name!r}: {fx.run} is not a run directory (no config.json)")
        return Path(fx.run)
    out = root / fx.name
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "workbench.cli", "demo", "--no-notebooks", "--out", str(out)]
    for k, v in (fx.demo or {}).items():
        flag = "--" + str(k).replace("_", "-")
        if v is True:
            cmd.append(flag)
        elif v not in (False, None):
            cmd += [flag, str(v)]
    log = root / f"{fx.name}.log"
    with open(log, "w", encoding="utf-8") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=fx.timeout).returncode
    runs = list_runs(out)
    if rc != 0 or not runs:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"setup {fx.name!r}: `{' '.join(cmd[2:])}` failed (exit {rc}); log {log}:\n{tail}")
    return runs[0].path


# --------------------------------------------------------------------------- one case


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def execute_case(notebook: str, output: str, parameters: dict[str, Any], kernel: str, cell_timeout: int,
                 cwd: str) -> dict[str, Any]:
    """Execute one notebook (a worker process runs this); returns seconds, metrics, and an error record.

    The error record has ``cell_index`` (in the saved executed notebook, whose injected-parameters
    and error-banner cells count), ``exec_count``, ``source``, ``ename``, ``evalue`` and ``traceback``.
    """
    from papermill.exceptions import PapermillExecutionError

    from workbench.notebooks import execute_notebook

    t0 = time.perf_counter()
    out = Path(output)
    error = None
    try:
        # an absolute path as the name: notebook_path() joins it onto the notebooks folder, which keeps it
        execute_notebook(str(Path(notebook).resolve()), out, parameters, kernel=kernel, cell_timeout=cell_timeout,
                         cwd=cwd)
    except PapermillExecutionError as e:
        error = {"cell_index": e.cell_index, "exec_count": e.exec_count, "source": e.source, "ename": e.ename,
                 "evalue": e.evalue, "traceback": _ANSI.sub("", "\n".join(e.traceback or []))}
        # papermill counts cells before it inserts its error banners; point at the cell in the saved copy
        saved = _failed_cell(out)
        if saved.get("source") == e.source:
            error["cell_index"] = saved["cell_index"]
    except Exception as e:  # noqa: BLE001 - a timeout, a dead kernel, a missing notebook: all are case errors
        error = {"cell_index": None, "exec_count": None, "source": "", "ename": type(e).__name__, "evalue": str(e),
                 "traceback": ""}
        error.update(_failed_cell(out))
    seconds = time.perf_counter() - t0
    metrics, metrics_path = None, Path(parameters["out_dir"]) / "metrics.json"
    if error is None:
        try:
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            error = {"cell_index": None, "exec_count": None, "source": "", "ename": type(e).__name__,
                     "evalue": f"the notebook ran but {metrics_path} is missing or unreadable ({e}); notebooks write "
                               "metrics.json to their out_dir parameter", "traceback": ""}
    return {"seconds": seconds, "metrics": metrics, "error": error, "executed": str(out) if out.exists() else None}


def _failed_cell(executed: Path) -> dict[str, Any]:
    """The cell a saved notebook stopped at: the one papermill marked failed, else (after a timeout,
    which papermill records as ``completed``) the last cell that started."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    cells = nb.get("cells", [])
    meta = [c.get("metadata", {}).get("papermill", {}) for c in cells]
    hit = next((i for i, m in enumerate(meta) if m.get("status") == "failed" or m.get("exception")), None)
    if hit is None:
        started = [i for i, m in enumerate(meta) if m.get("start_time") or m.get("status") == "running"]
        hit = started[-1] if started else None
    if hit is None:
        return {}
    src = cells[hit].get("source", "")
    return {"cell_index": hit, "exec_count": cells[hit].get("execution_count"),
            "source": "".join(src) if isinstance(src, list) else src}


# --------------------------------------------------------------------------- comparison


@dataclass
class MetricResult:
    name: str
    baseline: Any
    value: Any
    tolerance: str
    status: str  # ok | regressed | missing | new

    @property
    def delta(self) -> float | None:
        if _is_number(self.baseline) and _is_number(self.value):
            return float(self.value) - float(self.baseline)
        return None


def lookup(metrics: dict[str, Any], name: str) -> Any:
    """``metrics[name]``, else ``name`` as a dotted path into nested objects; KeyError when absent."""
    if name in metrics:
        return metrics[name]
    node: Any = metrics
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(name)
        node = node[part]
    return node


def compare(values: dict[str, Any], baseline: dict[str, Any] | None, tolerances: dict[str, Tolerance]) -> list[MetricResult]:
    """One result per listed metric: ``ok``/``regressed`` against the baseline, ``missing`` (not in the
    notebook's metrics: a regression) or ``new`` (not in the baseline)."""
    out = []
    for name, tol in tolerances.items():
        new, old = _get(values, name), _get(baseline or {}, name)
        if new is _ABSENT:
            status = MISSING
        elif old is _ABSENT:
            status = NEW
        else:
            status = OK if tol.allows(old, new) else REGRESSED
        out.append(MetricResult(name, None if old is _ABSENT else old, None if new is _ABSENT else new, str(tol), status))
    return out


_ABSENT = object()


def _get(metrics: dict[str, Any], name: str) -> Any:
    try:
        return lookup(metrics, name)
    except KeyError:
        return _ABSENT


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --------------------------------------------------------------------------- the run


@dataclass
class CaseResult:
    name: str
    notebook: str
    status: str
    seconds: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    executed: str | None = None
    metrics: list[MetricResult] = field(default_factory=list)
    values: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    baseline_file: str = ""
    note: str = ""


@dataclass
class RegressReport:
    suite: str
    out_dir: str
    started: str
    wall_seconds: float
    jobs: int
    kernel: str
    cell_timeout: int
    updated_baselines: bool
    cases: list[CaseResult]
    fixtures: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Setup entries made for this run: ``{name: {"run", "seconds", "error"}}``."""

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in (PASS, REGRESSED, ERROR, NEW)}
        for c in self.cases:
            out[c.status] += 1
        return out

    @property
    def failed(self) -> bool:
        """Errors always fail; regressions fail unless the baselines were just updated."""
        n = self.counts
        return bool(n[ERROR] or (n[REGRESSED] and not self.updated_baselines))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"] = self.counts
        d["failed"] = self.failed
        return d


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def run_regress(
    config: str | os.PathLike,
    out: str | os.PathLike | None = None,
    cases: list[str] | None = None,
    jobs: int | None = None,
    cell_timeout: int = 600,
    kernel: str = "workbench",
    update_baselines: bool = False,
    notebooks_dir: str | os.PathLike | None = None,
    baselines_dir: str | os.PathLike | None = None,
    say: Any = print,
) -> RegressReport:
    """Run a suite (see :func:`load_suite`) and write ``report.md``, ``report.html`` and ``results.json``
    into ``out`` (default ``runs/regress-<timestamp>/``)."""
    from workbench.paths import runs_dir

    t_start = time.perf_counter()
    started = _dt.datetime.now()
    suite = load_suite(config, notebooks_dir, baselines_dir)
    selected = suite.select(cases)
    if not selected:
        raise ValueError(f"{suite.path} has no cases")
    jobs = jobs or default_jobs()
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if cell_timeout < 1:
        raise ValueError(f"--cell-timeout must be >= 1 second, got {cell_timeout}")
    out_dir = Path(out) if out else runs_dir() / f"regress-{started.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"regress: {len(selected)} case(s) from {suite.path}, {jobs} job(s) -> {out_dir}")

    # fixtures, in order (each is a whole model run: not worth running side by side on a small machine)
    default = suite.fixtures[0].name if suite.fixtures else None
    needed = {f for c in selected for f in c.needs_fixtures(default)}
    fixture_runs: dict[str, str] = {}
    fixture_errors: dict[str, str] = {}
    fixture_info: dict[str, dict[str, Any]] = {}
    for fx in suite.fixtures:
        if fx.name not in needed:
            continue
        t0 = time.perf_counter()
        try:
            fixture_runs[fx.name] = str(make_fixture(fx, out_dir / "fixtures").resolve())
            say(f"  setup {fx.name}: {fixture_runs[fx.name]} ({time.perf_counter() - t0:.0f}s)")
        except Exception as e:  # noqa: BLE001 - reported on every case that needs it
            fixture_errors[fx.name] = f"{type(e).__name__}: {e}"
            say(f"  setup {fx.name}: FAILED ({e})")
        fixture_info[fx.name] = {"run": fixture_runs.get(fx.name), "seconds": time.perf_counter() - t0,
                                 "error": fixture_errors.get(fx.name)}

    results: dict[str, CaseResult] = {}
    case_dirs = {c.name: str((out_dir / "cases" / c.name).resolve()) for c in selected}

    def prepare(c: Case) -> tuple[CaseResult, dict[str, Any] | None]:
        res = CaseResult(c.name, c.notebook, ERROR, baseline_file=str(suite.baselines_dir / f"{c.name}.json"))
        broken = [f for f in c.needs_fixtures(default) if f in fixture_errors]
        failed_deps = [d for d in c.needs_cases() if results[d].status == ERROR]
        if broken:
            res.error = _plain_error("SetupError", f"setup {broken[0]!r} failed: {fixture_errors[broken[0]]}")
            return res, None
        if failed_deps:
            res.error = _plain_error("DependencyError", f"case {failed_deps[0]!r}, which this case uses, failed")
            return res, None
        ctx = {"run_dir": fixture_runs.get(default or "", ""), "fixtures": fixture_runs, "cases": case_dirs,
               "out_dir": case_dirs[c.name]}
        try:
            params = {"out_dir": case_dirs[c.name], **_fill(c.parameters, ctx)}
        except (KeyError, IndexError, ValueError) as e:
            res.error = _plain_error("ParameterError", f"cannot fill the parameters: {e!r}")
            return res, None
        res.parameters = params
        Path(case_dirs[c.name]).mkdir(parents=True, exist_ok=True)
        nb = suite.notebooks_dir / f"{c.notebook}.ipynb"
        if not nb.is_file():
            valid = ", ".join(sorted(p.stem for p in suite.notebooks_dir.glob("*.ipynb")))
            res.error = _plain_error("FileNotFoundError", f"no notebook {nb} (notebooks there: {valid})")
            return res, None
        job = dict(notebook=str(nb), output=str(Path(case_dirs[c.name]) / f"{c.notebook}.ipynb"), parameters=params,
                   kernel=kernel, cell_timeout=cell_timeout, cwd=str(suite.notebooks_dir.resolve()))
        return res, job

    def finish(c: Case, res: CaseResult, outcome: dict[str, Any]) -> None:
        res.seconds, res.executed, res.error, res.values = (outcome["seconds"], outcome["executed"], outcome["error"],
                                                            outcome["metrics"])
        if res.error is None:
            _judge(res, c, suite.baselines_dir)
        results[c.name] = res
        say(f"  {c.name}: {res.status.upper()} ({res.seconds:.0f}s)" + (f" - {res.note}" if res.note else ""))

    pending = list(selected)
    pool = (cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
            if jobs > 1 and len(selected) > 1 else None)
    try:
        running: dict[cf.Future, tuple[Case, CaseResult]] = {}
        while pending or running:
            for c in [c for c in pending if all(d in results for d in c.needs_cases())]:
                pending.remove(c)
                res, job = prepare(c)
                if job is None:
                    results[c.name] = res
                    say(f"  {c.name}: ERROR - {res.error['evalue']}")
                elif pool is None:
                    finish(c, res, execute_case(**job))
                else:
                    running[pool.submit(execute_case, **job)] = (c, res)
            if running:
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    c, res = running.pop(fut)
                    try:
                        outcome = fut.result()
                    except Exception as e:  # noqa: BLE001 - e.g. a worker process that died
                        outcome = {"seconds": 0.0, "metrics": None, "executed": None,
                                   "error": _plain_error(type(e).__name__, str(e))}
                    finish(c, res, outcome)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    if update_baselines:
        for c in selected:
            res = results[c.name]
            if res.error is None and res.values is not None:
                path = write_baseline(suite.baselines_dir / f"{c.name}.json", res.values, c.metrics)
                res.note = f"baseline written: {path}" if res.status == NEW else f"{res.note}; baseline updated: {path}".lstrip("; ")
    report = RegressReport(str(suite.path), str(out_dir), started.isoformat(timespec="seconds"),
                           time.perf_counter() - t_start, jobs, kernel, cell_timeout, update_baselines,
                           [results[c.name] for c in selected], fixture_info)
    write_report(report, out_dir)
    return report


def _plain_error(ename: str, evalue: str) -> dict[str, Any]:
    return {"cell_index": None, "exec_count": None, "source": "", "ename": ename, "evalue": evalue, "traceback": ""}


def _judge(res: CaseResult, case: Case, baselines_dir: Path) -> None:
    bfile = baselines_dir / f"{case.name}.json"
    baseline = json.loads(bfile.read_text(encoding="utf-8")) if bfile.exists() else None
    res.metrics = compare(res.values or {}, baseline, case.metrics)
    bad = [m.name for m in res.metrics if m.status in (REGRESSED, MISSING)]
    if bad:
        res.status, res.note = REGRESSED, "outside tolerance or missing: " + ", ".join(bad)
    elif baseline is None and case.metrics:
        res.status, res.note = NEW, f"no baseline ({bfile.name}); run with --update-baselines to record one"
    else:
        res.status = PASS
        new = [m.name for m in res.metrics if m.status == NEW]
        if new:
            res.note = "not in the baseline yet: " + ", ".join(new)


def write_baseline(path: Path, values: dict[str, Any], tolerances: dict[str, Tolerance]) -> Path:
    """The listed metrics' current values (all numbers and strings of metrics.json when none are listed)."""
    if tolerances:
        kept = {}
        for name in tolerances:
            try:
                kept[name] = lookup(values, name)
            except KeyError:
                pass
    else:
        kept = {k: v for k, v in values.items() if isinstance(v, (int, float, str))}
    return atomic_write_json(path, kept)


# --------------------------------------------------------------------------- report


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


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
        lines += ["", f"## {c.name}: {c.status}", "", f"Notebook `{c.notebook}`; executed copy: `{c.executed or '—'}`"]
        if c.parameters:
            lines += ["", "Parameters: " + ", ".join(f"`{k}={v!r}`" for k, v in c.parameters.items())]
        if c.metrics:
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
        parts.append(f"<tr><td><a href='#{e_(c.name)}'>{e_(c.name)}</a></td><td>{e_(c.notebook)}</td>"
                     f"<td class='{c.status}'>{c.status}</td><td class='num'>{c.seconds:.1f}</td><td>{e_(c.note)}</td></tr>")
    parts.append("</table>")
    if r.fixtures:
        parts.append("<p>Setup: " + "; ".join(
            f"<code>{e_(name)}</code> {f['seconds']:.1f} s &rarr; "
            + (f"<code>{e_(f['run'])}</code>" if f["run"] else f"<b class='error'>failed</b>: {e_(str(f['error']))}")
            for name, f in r.fixtures.items()) + "</p>")
    for c in r.cases:
        parts.append(f"<h2 id='{e_(c.name)}'>{e_(c.name)}: <span class='{c.status}'>{c.status}</span></h2>")
        parts.append(f"<p>Notebook <code>{e_(c.notebook)}</code>; executed copy: <code>{e_(c.executed or '—')}</code></p>")
        if c.parameters:
            parts.append("<p>Parameters: " + ", ".join(f"<code>{e_(k)}={e_(repr(v))}</code>" for k, v in c.parameters.items())
                         + "</p>")
        if c.metrics:
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
