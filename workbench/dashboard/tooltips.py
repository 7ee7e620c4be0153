"""Header tooltips of the dashboard's tables: what each column means.

A column read from a run file shows its meaning from the one schema (``workbench.storage.schema``, what
``workbench schema`` prints); the dashboard's own aggregates (``failed``, ``tokens``...) are described here.
"""

from __future__ import annotations

#: Header tooltips of the dashboard's own (aggregated) columns; a run file's column shows its schema meaning.
COLUMN_TIPS = {
    "run_id": "run directory name under the runs root",
    "kind": "eval, train, expert or sft (config.json)",
    "status": "whether the run finished (status.json): complete; killed (its process on this host is gone, no "
              "completion marker); running (its process is alive); incomplete (unfinished, and whether its process "
              "lives cannot be told, e.g. it ran on another host)",
    "error": "files of the run that are missing or unreadable",
    "created": "when the run was created (config.json)",
    "model": "the policy model (config.json)",
    "corpus_setting": "the retrieval corpus setting of an eval run (config.json)",
    "methods": "methods evaluated in the run",
    "n_trajectories": "trajectories in trajectories.parquet",
    "failed": "trajectories whose tool, backend, judge or evidence call failed (their reward is NaN); "
              "empty: no features.parquet with failure columns",
    "best_method": "the method with the best mean F1 (metrics.json); em, cem, f1, n_searches are its means",
    "steps": "training steps logged in metrics.jsonl",
    "reward_mean": "mean reward of the last training step",
    "n": "trajectories in the group",
    "runs": "runs with trajectories of this protocol",
    "tokens": "mean n_policy_tokens: tokens the policy sampled per trajectory",
    "invalid": "mean n_invalid: invalid actions per trajectory",
    "finished_by_answer": "share of trajectories that ended with an answer (finish_reason = answer)",
    "row": "position of the trajectory in trajectories.parquet",
    "latency_s": "mean seconds of an answer, from its first generation call to its end; answers generated together "
                 "in a batch overlap, so this is not what an answer costs (see wall_s_per_answer)",
    "wall_s_per_answer": "the method's wall time divided by its answers: what an answer costs (the CLI's s/answer)",
}
MEAN_COLUMNS = ("em", "cem", "f1", "format_ok", "answered", "n_searches")


def column_tooltips(columns: list[str], means: bool = False) -> dict[str, str]:
    """Header tooltips: the dashboard's own columns from ``COLUMN_TIPS``, a run file's column its meaning from
    ``workbench.storage.schema`` (``means``: the table holds means over trajectories, so em says "mean of: ...").

    >>> column_tooltips(["failed", "em", "answered"], means=True)["em"][:20]
    'mean of: exact match'
    """
    from workbench.methods import PRESETS
    from workbench.storage.schema import describe

    out = {}
    for c in map(str, columns):
        if c in COLUMN_TIPS:
            tip = COLUMN_TIPS[c]
        elif means and c == "answered":
            tip = "share of trajectories with an answer"
        else:
            meaning = describe(c, PRESETS.values())
            tip = f"mean of: {meaning}" if meaning and means and c in MEAN_COLUMNS else meaning
        if tip:
            out[c] = tip
    return out
