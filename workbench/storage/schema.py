"""One schema for a run's files: every column of ``trajectories.parquet`` and ``features.parquet`` with its
Parquet (Arrow) dtype and what it means. ``workbench schema`` prints it; the dashboard shows the meanings as
tooltips on its column headers.

The features' columns come from their registry (:mod:`workbench.rewards.columns`, where a method adds its
own), the reward columns from the reward presets passed in (``workbench.methods.PRESETS``: one
``reward_<component>`` per component, documented by the component's docstring), the trajectories' from :func:`workbench.core.trajectory.save_trajectories`' Arrow
schema plus the columns the eval and training writers add.

>>> s = schema("features").set_index("name")
>>> s.loc["n_searches", "dtype"], s.loc["format_ok", "dtype"], s.loc["evidence", "dtype"]
('int64', 'bool', 'string')
>>> schema("trajectories").set_index("name").loc["n_turns", "dtype"]
'int32'
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from workbench.rewards.preset import RewardPreset

FILES = {"trajectories": "trajectories.parquet", "features": "features.parquet"}
SCHEMA_COLUMNS = ["file", "name", "dtype", "meaning"]

#: The built-in columns of ``trajectories.parquet`` (``Trajectory.to_row``); dtypes come from its Arrow schema.
TRAJECTORY_MEANINGS = {
    "id": "trajectory id (an eval run prefixes the method: <method>:<example>#<sample>)",
    "example_id": "id of the question (the example) it answers",
    "group_id": "the group: one question's G rollouts (GRPO normalizes rewards within it)",
    "sample_idx": "the member index within its group",
    "protocol": "the agent grammar it was rolled out with (workbench.protocols)",
    "question": "the question text",
    "answer": "the final answer the protocol extracted (NULL if the agent never answered)",
    "finish_reason": "why the rollout ended: answer, no_action, eos, max_turns, length, budget or backend_error",
    "n_turns": "turns: policy turns and the observations between them",
    "n_searches": "search actions executed (a search cut off by a turn or token limit ran no tool and is not counted)",
    "n_invalid": "invalid actions (unparseable or unknown tags; recorded, never raised)",
    "n_policy_tokens": "tokens the policy sampled (loss mask 1)",
    "n_tokens": "prompt plus response tokens: the sequence length the trainer sees",
    "latency_s": "seconds of the trajectory: its generation calls plus its observations and tools",
    "tool_latency_s": "seconds spent inside tool calls (search, KG, plan)",
    "prompt_text": "the rendered prompt (system prompt, demonstrations, question)",
    "response_text": "every turn's text after the prompt, policy and observation alike",
    "prompt_ids": "prompt token ids, exactly as fed to the model",
    "response_ids": "response token ids (policy and observation turns), exactly as sampled and appended",
    "response_loss_mask": "1 on policy tokens, 0 on observation tokens (aligned with response_ids)",
    "response_logprobs": "sampling logprob of each response token (0 on observation tokens)",
    "turns_json": "the turns as JSON: kind, text, token ids, logprobs, parsed action, tool calls with their errors",
    "flags_json": "the protocol's format flags as JSON (format_ok, answer_boxes, dag_problems, evidence...)",
    "dataset": "dataset of the question (world, hotpotqa, 2wiki...; NULL if unknown)",
    "method": "the method label: an eval run's --method name, a training run's protocol",
    "qtype": "question type from the dataset (comparison, bridge, ...; NULL if unknown)",
    "hops": "gold hop count of the question (NULL if not annotated)",
    "meta_json": "the trajectory's whole meta as JSON (dataset, method, hops, errors, step, reward...)",
}
#: Columns the run writers add: ``(dtype, meaning, written by)``.
TRAJECTORY_EXTRA = {
    "em": ("double", "exact match against the gold aliases (NaN: no gold, or a failed trajectory)", "eval, train"),
    "cem": ("double", "cover-EM: a gold alias occurs in the answer (NaN: no gold, or failed)", "eval, train"),
    "cem_strict": ("double", "cover-EM, 0 when the answer names several options of a choice question", "eval"),
    "f1": ("double", "token F1 against the gold aliases, max over aliases (NaN: no gold, or failed)", "eval, train"),
    "format_ok": ("bool", "the protocol's format verdict (NULL for a failed trajectory)", "eval, train"),
    "demo_leak": ("bool", "the answer copies an answer shown in the prompt that no gold contains", "eval"),
    "step": ("int64", "training step that generated the trajectory", "train"),
    "reward": ("double", "the reward preset's total (NaN when a component failed)", "train"),
    "advantage": ("double", "the advantage the loss used (0 for dropped groups and failed rewards)", "train"),
    "kept": ("bool", "the dynamic filter kept the trajectory's group for the update", "train"),
    "source": ("string", "where an SFT pool trajectory came from (expert trace or rejection sample)", "sft"),
}


def dtype_name(t) -> str:
    """An Arrow type as the schema writes it: ``int32``, ``double``, ``string``, ``list<int32>`` (a list's item
    name, ``item`` or Parquet's ``element``, left out)."""
    import pyarrow as pa

    return f"list<{dtype_name(t.value_type)}>" if pa.types.is_list(t) or pa.types.is_large_list(t) else str(t)


def trajectories_schema() -> pd.DataFrame:
    """``file, name, dtype, meaning`` of every column ``trajectories.parquet`` can hold."""
    from workbench.core.trajectory import arrow_schema

    rows = [("trajectories", f.name, dtype_name(f.type), TRAJECTORY_MEANINGS[f.name]) for f in arrow_schema()]
    rows += [("trajectories", n, t, f"{m} (written by: {who})") for n, (t, m, who) in TRAJECTORY_EXTRA.items()]
    return pd.DataFrame(rows, columns=SCHEMA_COLUMNS)


def reward_components(presets: Iterable[RewardPreset] = ()) -> dict[str, str]:
    """``reward_<component>`` → what it is, for every component of each preset (``workbench.methods.PRESETS``; a name
    two presets share lists both)."""
    out: dict[str, list[str]] = {}
    for preset in sorted(presets, key=lambda p: p.name):
        rubric = preset()
        for fn in rubric.components:
            doc = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split()) or "(undocumented)"
            w = rubric.weights[fn.__name__]
            out.setdefault(f"reward_{fn.__name__}", []).append(f"{preset.name} (weight {w:g}): {doc}")
    return {k: "; ".join(v) for k, v in sorted(out.items())}


def features_schema(presets: Iterable[RewardPreset] = ()) -> pd.DataFrame:
    """``file, name, dtype, meaning`` of every column ``features.parquet`` can hold: the registered features, the
    per-judge ones, the rewards beside them (with each of ``presets``' components) and training's."""
    from workbench.rewards.columns import ARROW_TYPES, describe_columns

    cols = describe_columns()
    rows = [("features", r.name, ARROW_TYPES[r.dtype], r.meaning) for r in cols.itertuples()]
    at = next(i for i, r in enumerate(rows) if r[1] == "reward_<component>") + 1
    rows[at:at] = [("features", n, "double", m) for n, m in reward_components(presets).items()]
    return pd.DataFrame(rows, columns=SCHEMA_COLUMNS)


def schema(file: str | None = None, presets: Iterable[RewardPreset] = ()) -> pd.DataFrame:
    """The schema of one file (``trajectories`` or ``features``) or of both (``None``), with the reward components
    of ``presets``."""
    if file is not None and file not in FILES:
        raise ValueError(f"--file {file!r}: no such run file; choose one of {', '.join(FILES)}")
    parts = {"trajectories": trajectories_schema, "features": lambda: features_schema(presets)}
    return pd.concat([parts[f]() for f in FILES if file in (None, f)], ignore_index=True)


def meanings() -> dict[str, str]:
    """Column name → meaning over both files (a features column wins over a trajectory column of the same
    name: it is the one a reward reads); pattern names (``judge_<name>``) are kept as patterns."""
    df = schema()
    return dict(zip(df["name"][::-1], df["meaning"][::-1]))


def describe(name: str, presets: Iterable[RewardPreset] = ()) -> str | None:
    """What column ``name`` means (``judge_lasj_raw`` and ``reward_r_acc`` resolve to their patterns; a component of
    one of ``presets`` to its own docstring); None if no run file has such a column."""
    from workbench.rewards.columns import column_info

    info = column_info(name)
    if info is not None and name.startswith("reward_") and info.name == "reward_<component>":
        return reward_components(presets).get(name, info.meaning)
    return info.meaning if info is not None else meanings().get(name)


def format_schema(df: pd.DataFrame, width: int = 110) -> str:
    """The schema as plain text: one block per file, ``name  dtype  meaning`` with the meaning wrapped."""
    out = []
    for file, g in df.groupby("file", sort=False):
        nw, tw = int(g["name"].str.len().max()), int(g["dtype"].str.len().max())
        out.append(f"{FILES[file]} ({len(g)} columns)")
        for r in g.itertuples():
            lines = textwrap.wrap(r.meaning, max(40, width - nw - tw - 6)) or [""]
            out.append(f"  {r.name:<{nw}}  {r.dtype:<{tw}}  {lines[0]}")
            out += [f"  {'':<{nw}}  {'':<{tw}}  {line}" for line in lines[1:]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"
