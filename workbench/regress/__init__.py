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

from workbench.regress.report import report_html, report_markdown, write_report
from workbench.regress.results import (
    ERROR,
    MISSING,
    NEW,
    OK,
    PASS,
    REGRESSED,
    TAKEN,
    CaseResult,
    MetricResult,
    RegressReport,
    compare,
    lookup,
)
from workbench.regress.run import default_jobs, execute_case, provenance, run_regress, write_baseline
from workbench.regress.suite import Case, Fixture, Suite, Tolerance, demo_flags, load_suite, make_fixture

__all__ = [
    "ERROR",
    "MISSING",
    "NEW",
    "OK",
    "PASS",
    "REGRESSED",
    "TAKEN",
    "Case",
    "CaseResult",
    "Fixture",
    "MetricResult",
    "RegressReport",
    "Suite",
    "Tolerance",
    "compare",
    "default_jobs",
    "demo_flags",
    "execute_case",
    "load_suite",
    "lookup",
    "make_fixture",
    "provenance",
    "report_html",
    "report_markdown",
    "run_regress",
    "write_baseline",
    "write_report",
]
