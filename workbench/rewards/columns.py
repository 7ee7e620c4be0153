"""The feature columns: one registry, with what each column means.

This is the contract the Rubric presets, the trainer and the reward playground read, and the
one place a column is documented. :func:`~workbench.rewards.features.compute_features` writes
every registered column, in registration order; a new method adds its columns here by
calling, from its own module:

- :func:`register_flag` for a number its protocol writes into ``traj.flags`` (bools → 0/1,
  NaN when the protocol did not write it; ``dtype="bool"`` or ``"count"`` says which it is);
- :func:`register_feature` for a per-trajectory function ``fn(traj, example) -> {column: value}``
  whose columns are registered with their meanings.

``judge_<name>`` columns are added per judge (:data:`JUDGE_COLUMNS` documents them); the rewards of the
run's preset sit beside the features (:data:`REWARD_COLUMNS`), and a training run adds
:data:`TRAIN_COLUMNS`.

Each column has a dtype: its type in ``features.parquet`` (``ARROW_TYPES``: counts are ``int64``,
flags ``bool``, text ``string``; NULL = missing) and, in memory, float64 with NaN = missing for
every numeric column but an ``int`` one, so the Rubric's arithmetic needs no conversion.
:func:`arrow_table` and :func:`frame_from_arrow` convert between the two (``feature_io`` uses them).

>>> describe_columns().set_index("name").loc["recall_title", "dtype"]
'float'
>>> numeric_flags()[:2]
('format_ok', 'answer_boxes')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

DTYPES = ("int", "count", "bool", "float", "str")
#: The Parquet (Arrow) type of each dtype in ``features.parquet``.
ARROW_TYPES = {"int": "int64", "count": "int64", "bool": "bool", "float": "double", "str": "string"}


@dataclass(frozen=True)
class FeatureColumn:
    """One column of the features table."""

    name: str
    dtype: str
    """``int`` (int64, never missing), ``count`` (an integer; NaN in memory, int64 NULL in the file when missing),
    ``bool`` (0/1; NaN in memory, bool NULL in the file when missing), ``float`` (float64, NaN = missing) or
    ``str`` (object; None = missing)."""
    meaning: str


_COLUMNS: dict[str, FeatureColumn] = {}
_FLAGS: list[str] = []
FeatureFn = Callable[[Any, Any], Mapping[str, float]]
_FEATURES: list[tuple[FeatureFn, tuple[str, ...]]] = []


def register_column(name: str, dtype: str, meaning: str) -> FeatureColumn:
    """Add a column to the table (after those registered before). Registering the same column
    again is a no-op; the same name with another dtype or meaning is an error."""
    if dtype not in DTYPES:
        raise ValueError(f"column {name!r}: dtype must be one of {DTYPES}, got {dtype!r}")
    if not meaning.strip():
        raise ValueError(f"column {name!r}: say what it means (meaning is empty)")
    col = FeatureColumn(name, dtype, " ".join(meaning.split()))
    old = _COLUMNS.get(name)
    if old is not None and old != col:
        raise ValueError(f"column {name!r} is already registered as {old}")
    _COLUMNS[name] = col
    return col


def register_flag(name: str, meaning: str, dtype: str = "bool") -> FeatureColumn:
    """A numeric protocol flag read from ``traj.flags[name]`` (NaN when absent): a ``bool`` verdict, or a
    ``count`` / ``float`` number."""
    if dtype not in ("bool", "count", "float"):
        raise ValueError(f"flag {name!r}: dtype must be 'bool', 'count' or 'float', got {dtype!r}")
    col = register_column(name, dtype, meaning)
    if name not in _FLAGS:
        _FLAGS.append(name)
    return col


def register_feature(fn: FeatureFn, columns: Mapping[str, str]) -> FeatureFn:
    """Add ``fn(traj, example) -> {column: float}`` to every row of ``compute_features``.

    ``columns``: name -> meaning of every column ``fn`` returns (registered as ``float``); a
    row where ``fn`` leaves one out gets NaN, a name not declared here is an error.
    """
    if not columns:
        raise ValueError(f"register_feature({getattr(fn, '__name__', fn)!r}) needs the columns it returns")
    for name, meaning in columns.items():
        register_column(name, "float", meaning)
    if all(f is not fn for f, _ in _FEATURES):
        _FEATURES.append((fn, tuple(columns)))
    return fn


def feature_columns() -> tuple[str, ...]:
    """Every registered column, in table order."""
    return tuple(_COLUMNS)


def numeric_columns() -> tuple[str, ...]:
    return tuple(c.name for c in _COLUMNS.values() if c.dtype != "str")


def text_columns() -> tuple[str, ...]:
    return tuple(c.name for c in _COLUMNS.values() if c.dtype == "str")


def numeric_flags() -> tuple[str, ...]:
    return tuple(_FLAGS)


def column_dtype(name: str) -> str | None:
    c = _COLUMNS.get(name)
    return c.dtype if c is not None else None


def extra_features() -> tuple[tuple[FeatureFn, tuple[str, ...]], ...]:
    """Registered per-trajectory feature functions with their columns."""
    return tuple(_FEATURES)


#: Columns added per judge (``<name>`` is the judge's name: ``lasj``, ``yesno``, ``similarity``).
JUDGE_COLUMNS = (
    FeatureColumn("judge_<name>", "float", "a judge's score normalized to [0, 1] (NaN if the judgment failed)"),
    FeatureColumn(
        "judge_<name>_score",
        "float",
        "the judge's score on its own scale (only judges whose scale is not [0, 1]: lasj 0–5)",
    ),
    FeatureColumn("judge_<name>_raw", "str", "the judge's raw reply (or the error) for inspection"),
)


#: The rewards beside the features (``workbench.rewards.run_rewards.add_rewards``; a training step's table too):
#: ``<component>`` is a component of the row's preset (``workbench schema`` lists every preset's).
REWARD_COLUMNS = (
    FeatureColumn("reward_preset", "str", "the reward preset scoring this row (the method's; None: a baseline without one)"),
    FeatureColumn("reward", "float", "the preset's total reward Σ weight·component (NaN when a weighted input is missing "
                  "or failed)"),
    FeatureColumn("reward_<component>", "float", "one component of the row's preset, before its weight (NaN for rows "
                  "of another preset)"),
)
#: Columns a training run adds to its features table (``workbench.rl.trainer``).
TRAIN_COLUMNS = (
    FeatureColumn("step", "int", "training step that generated the trajectory"),
    FeatureColumn("round", "int", "sampling round within the step (the dynamic filter may sample again)"),
    FeatureColumn("kept", "bool", "1 if the dynamic filter kept the trajectory's group for the update"),
    FeatureColumn("advantage", "float", "the advantage the loss used (0 for dropped groups and failed rewards)"),
)


def describe_columns() -> pd.DataFrame:
    """``name, dtype, meaning`` of every column (the registered ones, the per-judge ones, the rewards, training's)."""
    rows = [*_COLUMNS.values(), *JUDGE_COLUMNS, *REWARD_COLUMNS, *TRAIN_COLUMNS]
    return pd.DataFrame([(c.name, c.dtype, c.meaning) for c in rows], columns=["name", "dtype", "meaning"])


def column_info(name: str) -> FeatureColumn | None:
    """The declaration a column of a features table falls under: a registered column, a judge's, a reward's or a
    training run's (``judge_lasj_raw`` → ``judge_<name>_raw``); None for an undeclared one.

    >>> column_info("judge_lasj_raw").dtype, column_info("reward_r_acc").name, column_info("nope")
    ('str', 'reward_<component>', None)
    """
    if name in _COLUMNS:
        return _COLUMNS[name]
    exact = {c.name: c for c in (*REWARD_COLUMNS, *TRAIN_COLUMNS)}
    if name in exact:
        return exact[name]
    if name.startswith("judge_"):
        suffix = "_raw" if name.endswith("_raw") else "_score" if name.endswith("_score") else ""
        return next(c for c in JUDGE_COLUMNS if c.name == f"judge_<name>{suffix}")
    if name.startswith("reward_"):
        return REWARD_COLUMNS[-1]
    return None


# ----------------------------------------------------------------------------- the file's types


def _floats(name: str, values: pd.Series) -> np.ndarray:
    """float64 with NaN for missing, from a numeric, boolean or object column (None/NA → NaN)."""
    if values.dtype != object:
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        return np.array([np.nan if v is None or v is pd.NA else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"features column {name!r} is numeric ({column_info(name).dtype}) but holds {e}") from None


def _typed_array(name: str, values: pd.Series, dtype: str) -> Any:
    import pyarrow as pa

    if dtype == "str":
        text = [None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else str(v) for v in values]
        return pa.array(text, type=pa.string())
    x = _floats(name, values)
    missing = np.isnan(x)
    known = x[~missing]
    if dtype == "float":
        return pa.array(np.where(missing, 0.0, x), type=pa.float64(), mask=missing)
    if dtype == "bool":
        bad = known[(known != 0) & (known != 1)]
        if bad.size:
            raise ValueError(f"features column {name!r} is declared bool (0/1) but holds {bad[0]!r}; declare it "
                             "'float' or 'count' in workbench.rewards.columns")
        return pa.array(x == 1, type=pa.bool_(), mask=missing)
    bad = known[known != np.round(known)]
    if bad.size:
        raise ValueError(f"features column {name!r} is declared {dtype} (an integer) but holds {bad[0]!r}; declare it "
                         "'float' in workbench.rewards.columns")
    return pa.array(np.where(missing, 0, x).astype(np.int64), type=pa.int64(), mask=missing)


def arrow_table(df: pd.DataFrame) -> pa.Table:
    """The features table as Arrow with every declared column in its ``ARROW_TYPES`` type (missing = NULL).

    A value that does not fit its declared type (0.5 in a ``bool`` column) is an error naming the column; an
    undeclared column keeps pyarrow's inferred type (text when it is all None, never the ``null`` type).
    """
    import pyarrow as pa

    arrays = []
    for name in df.columns:
        info = column_info(str(name))
        if info is not None:
            arrays.append(_typed_array(str(name), df[name], info.dtype))
            continue
        arr = pa.array(df[name], from_pandas=True)
        arrays.append(arr.cast(pa.string()) if pa.types.is_null(arr.type) else arr)
    return pa.Table.from_arrays(arrays, names=[str(c) for c in df.columns])


def frame_from_arrow(table: pa.Table) -> pd.DataFrame:
    """The in-memory features table from its Arrow form: ``count``, ``bool`` and ``float`` columns as float64
    (NULL → NaN), declared text as object (NULL → None), as ``compute_features`` returns them; the inverse of
    :func:`arrow_table`."""
    import pyarrow as pa

    text = []
    for i, name in enumerate(table.column_names):
        info = column_info(name)
        if info is not None and info.dtype in ("count", "bool", "float") and table.schema.field(i).type != pa.float64():
            table = table.set_column(i, pa.field(name, pa.float64()), table.column(i).cast(pa.float64()))
        elif info is not None and info.dtype == "str":
            text.append(name)
    df = table.to_pandas()
    for name in text:
        df[name] = pd.Series(table.column(name).to_pylist(), index=df.index, dtype=object)
    return df


# ----------------------------------------------------------------------------- the built-in columns, in table order

register_column("id", "str", "trajectory id")
register_column("example_id", "str", "example id")
register_column("group_id", "str", "the group (one question's G rollouts)")
register_column("sample_idx", "int", "the member index within its group")
register_column("protocol", "str", "protocol name")
register_column("answer", "str", "the extracted final answer (None if the agent never answered)")
register_column("has_gold", "bool", "1 if the example has at least one gold answer")
register_column("em", "float", "exact match; max over gold aliases (NaN without gold)")
register_column(
    "cem", "float", "cover-EM (= subEM = acc): a gold alias occurs in the answer; max over aliases (NaN without gold)"
)
register_column("f1", "float", "token F1 with the yes/no rule; max over gold aliases (NaN without gold)")
register_column("L_pred", "count", "word count (normalized) of the answer")
register_column(
    "L_gt",
    "count",
    "word count (normalized) of the gold alias the answer matches best (metrics.matching_gold; the first alias "
    "when nothing matches; DynaSearcher Eq. 2); NaN without gold",
)
register_column(
    "n_searches",
    "count",
    "search actions executed (t of DynaSearcher, RC of When-to-Search): a search cut off by the turn or token "
    "limit ran no tool and is not counted",
)
register_column("hops", "count", "gold hops i (NaN if not annotated)")
register_column("n_invalid", "count", "invalid actions")
register_column("answered", "bool", "1 if the agent gave an answer")
register_flag("format_ok", "the protocol's overall format verdict (flag; NaN if not written)")
register_flag("answer_boxes", "number of well-formed answer boxes (flag; R-Search I_A = answer_boxes == 1)", dtype="count")
register_flag("evidence_boxes", "number of evidence boxes (flag; R-Search I_E = evidence_boxes == 1)", dtype="count")
register_flag("dag_valid", "NL-DAG passes all validations (flag; Shi & Shen F_dag)")
register_column("n_dag_problems", "count", 'len(flags["dag_problems"]) (NaN if not written)')
register_flag("order_ok", "tags in the protocol's order (flag)")
register_flag("reflect_count", "number of <reflect> blocks (flag)", dtype="count")
register_column("n_gold_passages", "count", "gold supporting passages of the example")
register_column("n_retrieved", "count", "passages retrieved over all searches of the trajectory (with repeats)")
register_column("recall_title", "float", "TP/(TP+FN): gold supporting titles found among retrieved titles (normalized)")
register_column("recall_id", "float", "same by passage id (NaN when hits carry no ids, e.g. parsed from text)")
register_column(
    "recall_embed",
    "float",
    "same by embedding cosine ≥ recall_threshold (default 0.8): gold passage text vs hit text when the gold "
    'text is known (passages= or example.meta["supporting_texts"]), else gold title vs hit title',
)
register_column(
    "recall",
    "float",
    "DynaSearcher Eq. 3, TP/(TP+FN) over the gold passages, matched as recall_by says: by passage id when the "
    "example has supporting_ids and every hit an id (= recall_id); else a gold passage counts if matched by title "
    "OR embedding (= recall_title when embeddings are off, encoder=False)",
)
register_column("n_queries", "count", "search queries executed (the queries of the counted searches)")
register_column("query_concise", "bool", "1 if every query passes the conciseness rules (1 with no queries)")
register_column("query_sim_mean", "float", "mean pairwise cosine of the query embeddings over N(N−1)/2 pairs (N ≥ 2)")
register_column("query_sim_paper", "float", "the same pair sum divided by N(N−1), as printed in When-to-Search Eq. 8")
register_column(
    "evidence_f1",
    "float",
    "F1(evidence_answer, gold) (R-Search Eq. 4); NaN without an evidence model or an evidence flag; "
    "0 for an empty evidence (no box: nothing to reward, no call)",
)
register_column("concise_rule", "str", 'the first conciseness rule that fired ("" if none), see check_concise')
register_column("evidence", "str", 'the evidence text (R-Search flags["evidence"]; None if not written)')
register_column("evidence_answer", "str", "the cross-family model's answer from the evidence alone")
# failures (workbench.rewards.features.FAILURE_COLUMNS): a trajectory with backend_error or failed_tool has NaN in
# every column that measures what the policy did, so every reward over it is NaN (the trainer excludes it)
register_column(
    "failed_tool",
    "count",
    "tool calls of the trajectory that raised or timed out (ToolCall.error; a DAG node skipped as invalid is the "
    "model's doing, not counted). > 0: the outcome columns are NaN",
)
register_column(
    "backend_error",
    "bool",
    '1 if a policy turn failed in the generation backend (finish_reason "backend_error"); 1: the outcome columns '
    "are NaN",
)
register_column(
    "failed_judge",
    "count",
    "judge columns of this row that are NaN because the judgment failed (model call failed or reply unparseable; "
    "not: no gold answers)",
)
register_column("failed_evidence", "bool", "1 if the evidence model's call failed (evidence_f1 NaN)")
register_column("failure", "str", 'what failed: one line "<component> failed: <error>" per failure; None if nothing')
# how recall was matched, and answers that game cover-EM or copy the prompt (after the columns above)
register_column(
    "recall_by",
    "str",
    'how recall matched gold passages: "id" (supporting_ids vs hit ids), "title" (normalized titles; over-counts '
    'when gold paragraphs share a title) or "embedding" (title OR embedding cosine); None without gold passages',
)
register_column(
    "multi_option",
    "bool",
    'the answer names more than one option of a choice question ("Which came first, X or Y?" answered "X or Y"), '
    "which cover-EM credits; 0 for questions without options (metrics.multi_option)",
)
register_column(
    "option_f1",
    "float",
    "F1 between the predicted and the correct option sets of a multiple-choice question with lettered options "
    "(R-Search NL-DAG's F_ans for multiple choice, paper 003; metrics.option_set_f1); NaN for other questions",
)
register_column(
    "demo_leak",
    "bool",
    "the answer equals or contains an answer shown in the prompt (a demonstration's or the instruction's example, "
    '"Ira Velt", "Beijing") that no gold alias contains: copied, not answered (metrics.demo_leak)',
)
