"""Rewards: answer metrics, per-trajectory features, rubrics and reward presets, judges.

Two steps (docs/architecture.md): ``compute_features(trajs, examples)`` computes the
parameter-free facts of each trajectory once (a table, ``run/features.parquet``); a
``Rubric`` (e.g. ``workbench.methods.get_preset("dynasearcher", gamma=0.8)``: each paper's
:class:`RewardPreset` lives in its method package) turns the table into rewards
with a per-component breakdown, instantly. ``from_text`` scores completion text with the same
arithmetic (the TRL and verl reward functions in ``workbench.integrations`` wrap it); ``counterfactual``
compares parameter settings.
"""

from workbench.rewards.counterfactual import Counterfactual, counterfactual, group_stats, rescore
from workbench.rewards.evidence import EVIDENCE_TEMPLATE, EvidenceScorer
from workbench.rewards.features import (
    FEATURE_COLUMNS,
    FeatureCache,
    check_concise,
    compute_features,
    featurize_run,
    load_features,
    save_features,
)
from workbench.rewards.from_text import features_from_text, features_from_texts, trajectory_from_text
from workbench.rewards.judges import JUDGES, AccuracyJudge, Judge, SimilarityJudge, YesNoJudge, get_judge
from workbench.rewards.metrics import (
    answer_metrics,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
    sub_exact_match,
)
from workbench.rewards.preset import FeatureNeeds, RewardPreset
from workbench.rewards.rubric import RewardTable, Rubric

__all__ = [
    "EVIDENCE_TEMPLATE", "FEATURE_COLUMNS", "JUDGES",
    "AccuracyJudge", "Counterfactual", "EvidenceScorer", "FeatureCache", "FeatureNeeds", "Judge", "RewardPreset",
    "RewardTable", "Rubric",
    "SimilarityJudge", "YesNoJudge",
    "answer_metrics", "check_concise", "compute_features", "counterfactual", "cover_exact_match", "exact_match",
    "f1_score", "features_from_text", "features_from_texts", "featurize_run", "get_judge",
    "group_stats", "load_features", "normalize_answer", "rescore", "save_features", "sub_exact_match",
    "trajectory_from_text",
]
