"""Comparing a case's metrics with its baseline, and the result records of a run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.regress.suite import Tolerance, _is_number

PASS, REGRESSED, ERROR, NEW = "pass", "regressed", "error", "new"
OK, MISSING = "ok", "missing"
#: The key of a baseline file that says where its values were taken (commit, date, machine); not a metric.
TAKEN = "_taken"

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



# --------------------------------------------------------------------------- results


@dataclass
class CaseResult:
    name: str
    notebook: str
    status: str
    seconds: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    executed: str | None = None
    executed_html: str | None = None
    """The executed notebook rendered to HTML (figures drawn offline), beside it."""
    metrics: list[MetricResult] = field(default_factory=list)
    values: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    baseline_file: str = ""
    baseline_taken: dict[str, Any] | None = None
    """Where the baseline was taken (its ``_taken``: commit, date, machine); None for a baseline without it."""
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
