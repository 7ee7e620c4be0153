"""Evaluation runs and baselines."""

from workbench.eval.runner import EvalResult, evaluate, format_table, score, summarize, write_eval_run

__all__ = ["EvalResult", "evaluate", "format_table", "score", "summarize", "write_eval_run"]
