"""``workbench compare RUN_A RUN_B``: one method of each eval run, paired by question, after checking the two runs'
eval cards agree on every setting that changes a score (:mod:`workbench.eval.card`).

Cards that differ (another corpus, top-k, turn budget, prompt, model weights...) make the comparison refuse, naming
each setting and both values; ``--allow-different`` compares anyway, with those settings printed above the table."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from workbench.eval import card as cards
from workbench.eval.paired import CompareError, align, markdown, paired_rows, run_scores


@dataclass
class RunComparison:
    table: str
    rows: Any
    differences: list[tuple[str, Any, Any]]
    code: tuple[Any, Any]


def compare_runs(run_a: str | os.PathLike, run_b: str | os.PathLike, method_a: str, method_b: str | None = None,
                 metric: str = "cem", allow_different: bool = False) -> RunComparison:
    """``method_b`` of ``run_b`` against ``method_a`` of ``run_a`` (default: the same method) on the questions both
    answered; a :class:`CompareError` when the cards differ in a score-changing setting and not ``allow_different``."""
    method_b = method_b or method_a
    a, b = cards.read_card(run_a), cards.read_card(run_b)
    diffs = cards.differences(a, b, [(method_a, method_b)])
    if diffs and not allow_different:
        raise CompareError(f"{run_a} and {run_b} were not measured alike: {cards.describe(diffs)}; evaluate them with "
                           "the same settings, or pass --allow-different to compare anyway")
    sa, sb, _ = align(run_scores(run_a, method_a, metric), run_scores(run_b, method_b, metric))
    rows = paired_rows(sa, sb)  # Wilson's intervals where every value is 0 or 1, else the bootstrap's
    label_a, label_b = f"A ({method_a})", f"B ({method_b})"
    return RunComparison(markdown(rows, label_a, label_b, metric), rows, diffs,
                         ((a.get("code") or {}).get("commit"), (b.get("code") or {}).get("commit")))
