"""Evaluation runs and baselines: ``run_eval`` (what ``workbench eval`` runs) and its parts.

Names are imported on first use, so that ``workbench --help`` (which reads ``EvalConfig``'s
field docs) does not pay for pandas and torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EvalConfig": "config", "EvalEntry": "config", "field_docs": "config", "parse_methods": "config",
    "EvalData": "runner", "EvalResult": "runner", "evaluate": "runner", "flat_metrics": "runner",
    "format_table": "runner", "load_eval_data": "runner", "metrics_table": "runner", "missing_tools": "runner",
    "run_eval": "runner", "score": "runner", "summarize": "runner", "tool_share": "runner",
    "write_eval_run": "runner",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"workbench.eval.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'workbench.eval' has no attribute {name!r}")
