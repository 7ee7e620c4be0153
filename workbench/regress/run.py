"""Running a suite: one notebook per case (papermill, in parallel), judged against its baseline."""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import json
import multiprocessing
import os
import re
import time
from pathlib import Path
from typing import Any

from workbench.regress.report import write_report
from workbench.regress.results import (
    ERROR,
    MISSING,
    NEW,
    PASS,
    REGRESSED,
    TAKEN,
    CaseResult,
    RegressReport,
    compare,
    lookup,
)
from workbench.regress.suite import Case, Tolerance, _fill, load_suite, make_fixture
from workbench.util.io import atomic_write_json

# --------------------------------------------------------------------------- one case


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def execute_case(notebook: str, output: str, parameters: dict[str, Any], kernel: str, cell_timeout: int,
                 cwd: str) -> dict[str, Any]:
    """Execute one notebook (a worker process runs this); returns seconds, metrics, and an error record.

    The error record has ``cell_index`` (in the saved executed notebook, whose injected-parameters
    and error-banner cells count), ``exec_count``, ``source``, ``ename``, ``evalue`` and ``traceback``.
    """
    from papermill.exceptions import PapermillExecutionError

    from workbench.apps.notebooks import execute_notebook

    # the notebook's kernel inherits this worker's environment: one torch thread per case, as the cases run side
    # by side (--jobs) and the baselines were taken so (sampling gives the same tokens only at the same threads)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
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
    return {"seconds": seconds, "metrics": metrics, "error": error, "executed": str(out) if out.exists() else None,
            "executed_html": _render(out)}


def _render(executed: Path) -> str | None:
    """The executed notebook as HTML beside it (also a failed one: it shows the failing cell); None if
    there is no executed copy or it cannot be rendered (the report then links the notebook only)."""
    from workbench.apps.notebooks import render_html

    if not executed.exists():
        return None
    try:
        return str(render_html(executed))
    except Exception:  # noqa: BLE001 - a report without the HTML copy is still a report
        import logging

        logging.getLogger(__name__).warning("could not render %s to HTML", executed, exc_info=True)
        return None


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
    from workbench.util.paths import runs_dir

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
        res.executed_html = outcome.get("executed_html")
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
        taken = provenance(suite.path.parent)
        for c in selected:
            res = results[c.name]
            if res.error is None and res.values is not None:
                path = write_baseline(suite.baselines_dir / f"{c.name}.json", res.values, c.metrics, taken)
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
    res.baseline_taken = (baseline or {}).get(TAKEN)
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


def write_baseline(path: Path, values: dict[str, Any], tolerances: dict[str, Tolerance],
                   taken: dict[str, Any] | None = None) -> Path:
    """The listed metrics' current values (all numbers and strings of metrics.json when none are listed), and
    under ``_taken`` where they were taken (:func:`provenance`: commit, date, machine)."""
    if tolerances:
        kept = {}
        for name in tolerances:
            try:
                kept[name] = lookup(values, name)
            except KeyError:
                pass
    else:
        kept = {k: v for k, v in values.items() if isinstance(v, (int, float, str))}
    return atomic_write_json(path, {TAKEN: taken if taken is not None else provenance(), **kept})


def provenance(repo: str | os.PathLike | None = None) -> dict[str, Any]:
    """Where a baseline is taken: the git commit of ``repo`` (default: this package's checkout; None outside a
    git checkout), whether the tree had uncommitted changes, the date and the machine."""
    import platform

    from workbench.util.gitinfo import code_version
    from workbench.util.threads import available_cores

    return {**code_version(repo), "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {available_cores()} cores, Python {platform.python_version()}"}
