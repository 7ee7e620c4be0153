"""Rewards: answer metrics, per-trajectory features, rubrics, the five published presets, judges."""

from workbench.rewards.metrics import (
    answer_metrics,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
    sub_exact_match,
)

__all__ = ["answer_metrics", "cover_exact_match", "exact_match", "f1_score", "normalize_answer", "sub_exact_match"]
