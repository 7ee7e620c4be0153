"""`workbench schema`: every column a run writes is in the one schema, with the dtype the file has.

Two real runs are checked: `workbench eval` with the default model (a baseline without a reward preset and
DynaSearcher's five-component preset), and a scripted eval whose search tool raises, so failed rows (NULL
counts, NaN rewards) are written too. For both files of both runs: every column is documented, its Parquet
type is the declared one (counts integers, flags bool, no `null`-typed column), and the rewards of each row's
preset sit beside the features and equal the preset recomputed from them.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.apps import cli
from workbench.core.types import Hit
from workbench.data.example import Example
from workbench.eval.runner import evaluate, write_eval_run
from workbench.methods import METHODS, PRESETS, get_preset
from workbench.rewards import columns
from workbench.rewards.features import compute_features, load_features, save_features
from workbench.rewards.run_rewards import add_rewards
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig
from workbench.storage.runs import Run, list_runs
from workbench.storage.schema import describe, dtype_name, reward_components, schema
from workbench.tools.base import Toolbox

pytestmark = pytest.mark.usefixtures("one_thread")  # the machine's cores are shared

EXAMPLES = [Example("a1", "Who founded Tarnholm Mills?", ["Ada Quist"], dataset="world", hops=1),
            Example("a2", "Where is Ulmbridge?", ["Ostrevia"], dataset="world", hops=2)]
#: Columns that are counts (integers) and flags (bool) in features.parquet: the issue's examples.
COUNTS = ("n_searches", "n_invalid", "n_retrieved", "n_queries", "L_pred", "L_gt", "hops", "failed_tool", "failed_judge")
FLAGS = ("format_ok", "answered", "has_gold", "backend_error", "failed_evidence", "query_concise")


def _search(query: str, k: int = 3):
    return [Hit("p1", "Tarnholm Mills", "Tarnholm Mills was founded by Ada Quist.", 1.0)]


def _broken(query: str, k: int = 3):
    raise RuntimeError("index offline")


@pytest.fixture(scope="module")
def model_run(tmp_path_factory) -> Run:
    """`workbench eval` with the default model on two world questions: direct (no preset) and dynasearcher."""
    out = tmp_path_factory.mktemp("schema-model")
    assert cli.main(["eval", "--method", "direct,dynasearcher", "--limit", "2", "--max-new-tokens", "16",
                     "--max-turns", "2", "--out", str(out), "--no-progress"]) == 0
    (run,) = list_runs(out)
    return run


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory, tokenizer) -> Run:
    """search_r1 with a working tool, dspo with one that raises (both rows fail), direct (no preset)."""
    scripts = {"search_r1": ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"],
               "dspo": ["<search> Tarnholm Mills </search>", "<answer> Ada Quist </answer>"],
               "direct": ["<answer> Ada Quist </answer>"]}
    results = [evaluate(m, EXAMPLES, ScriptedBackend(tokenizer, s), Toolbox({"search": _broken if m == "dspo" else _search}),
                        RolloutConfig(max_turns=3), progress=False) for m, s in scripts.items()]  # fmt: skip
    run = Run.create(tmp_path_factory.mktemp("schema-scripted"), kind="eval", config={"model": "scripted"})
    return write_eval_run(run, results, EXAMPLES)


def _declared(file: str) -> dict[str, str]:
    return dict(zip(*schema(file)[["name", "dtype"]].T.values))


def _check_file(run: Run, file: str) -> pa.Schema:
    """Every column of the file is in the schema (pattern columns through their pattern), with its dtype."""
    s = pq.read_schema(run.path / f"{file}.parquet")
    declared = _declared(file)
    for name, typ in zip(s.names, s.types):
        assert not pa.types.is_null(typ), f"{file}.{name} is typed null"
        key = name if name in declared or file == "trajectories" else columns.column_info(name).name
        assert key in declared, f"{file}.{name} is not in the schema"
        assert dtype_name(typ) == declared[key], f"{file}.{name}: file has {typ}, schema says {declared[key]}"
        assert describe(name), name
    return s


@pytest.mark.parametrize("which", ["model_run", "scripted_run"])
def test_every_written_column_is_in_the_schema_with_its_dtype(which, request):
    run = request.getfixturevalue(which)
    feats = _check_file(run, "features")
    _check_file(run, "trajectories")
    types = dict(zip(feats.names, map(str, feats.types)))
    assert all(types[c] == "int64" for c in COUNTS) and all(types[c] == "bool" for c in FLAGS)
    assert types["evidence"] == types["evidence_answer"] == types["failure"] == "string"  # were `null`
    assert types["sample_idx"] == "int64" and types["reward"] == "double" and types["reward_preset"] == "string"


@pytest.mark.parametrize("which", ["model_run", "scripted_run"])
def test_the_presets_rewards_sit_beside_the_features(which, request):
    run = request.getfixturevalue(which)
    f = load_features(run)
    methods = METHODS
    by_method = {m: f[f["id"].str.startswith(f"{m}:")] for m in run.metrics()["methods"]}
    for method, rows in by_method.items():
        assert len(rows) == 2, method
        preset = methods[method].reward
        if preset is None:  # a baseline: no reward, and no column of its own
            assert rows["reward_preset"].isna().all() and rows["reward"].isna().all()
            continue
        assert (rows["reward_preset"] == preset.name).all()
        table = methods[method].rubric()(rows.reset_index(drop=True))  # the preset, recomputed from the features
        np.testing.assert_array_equal(rows["reward"].to_numpy(), table.total)
        for comp in table.components:
            np.testing.assert_array_equal(rows[f"reward_{comp}"].to_numpy(), table.values[comp])
            assert f"reward_{comp}" in reward_components(PRESETS.values())


def test_failed_rows_are_null_counts_and_nan_rewards(scripted_run):
    import duckdb

    path = str(scripted_run.path / "features.parquet")
    row = duckdb.connect().execute(f"""SELECT count(*) FILTER (WHERE n_searches IS NULL), count(*) FILTER (WHERE failed_tool > 0),
                                count(*) FILTER (WHERE reward_preset = 'dspo' AND reward IS NULL),
                                max(failed_tool), min(format_ok::INT) FROM read_parquet('{path}')""").fetchone()
    assert row[:3] == (2, 2, 2)  # dspo's two rows: the tool failed, so the outcome is unknown, not 0
    assert row[3] == 1 and isinstance(row[3], int)
    f = load_features(scripted_run)
    assert f["n_searches"].dtype == np.float64 and f["format_ok"].dtype == np.float64  # in memory as computed
    ok = f[f["reward_preset"] == "search_r1"]
    assert ok["reward"].tolist() == [1.0, 0.0] and (ok["n_searches"] == 1.0).all()  # a1 right, a2 wrong (EM)


def test_save_and_load_round_trip_and_a_value_that_does_not_fit_is_an_error(scripted_run, tmp_path):
    trajs = scripted_run.trajectories()
    df = compute_features(trajs, EXAMPLES, encoder=False, cache=False)
    df = add_rewards(df, [get_preset("dspo")] * len(df))
    save_features(tmp_path, df)
    back = load_features(tmp_path)
    assert list(back.columns) == list(df.columns)
    for c in df.columns:
        if df[c].dtype == object:
            assert back[c].dtype == object and list(back[c]) == list(df[c]), c  # None stays None
        else:
            assert back[c].dtype == df[c].dtype, c
            np.testing.assert_array_equal(back[c].to_numpy(), df[c].to_numpy(), err_msg=c)
    with pytest.raises(ValueError, match="'format_ok' is declared bool"):
        save_features(tmp_path, df.assign(format_ok=0.5))
    with pytest.raises(ValueError, match="'n_searches' is declared count"):
        save_features(tmp_path, df.assign(n_searches=1.5))


def test_old_double_typed_files_still_load(scripted_run, tmp_path):
    f = load_features(scripted_run)
    f.to_parquet(tmp_path / "features.parquet")  # pandas' own types: counts and flags as DOUBLE
    old = load_features(tmp_path)
    assert pq.read_schema(tmp_path / "features.parquet").field("n_searches").type == pa.float64()
    pd.testing.assert_series_equal(old["n_searches"], f["n_searches"])


def test_schema_documents_both_files_and_every_preset_component():
    df = schema(presets=PRESETS.values())
    assert set(df["file"]) == {"trajectories", "features"} and df["meaning"].str.len().min() >= 10
    assert not df.duplicated(["file", "name"]).any()
    feats = df[df["file"] == "features"].set_index("name")
    assert {"reward", "reward_preset", "reward_r_acc", "reward_r_em", "step", "kept", "judge_<name>"} <= set(feats.index)
    assert "dynasearcher" in feats.loc["reward_r_ans", "meaning"] and "rsearch_evidence" in feats.loc["reward_r_ans", "meaning"]
    assert set(feats["dtype"]) <= set(columns.ARROW_TYPES.values())
    assert describe("judge_lasj_raw") == columns.column_info("judge_lasj_raw").meaning and describe("nope") is None
    assert "cover-EM" in describe("cem") and "When-to-Search Eq. 8" in describe("query_sim_paper")


def test_schema_cli(capsys):
    assert cli.main(["schema"]) == 0
    text = capsys.readouterr().out
    assert "trajectories.parquet (" in text and "features.parquet (" in text
    for name in ("n_turns", "response_loss_mask", "L_pred", "query_sim_paper", "reward_preset", "failure"):
        assert f"  {name} " in text, name
    assert cli.main(["schema", "--file", "features", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["file"] for r in rows} == {"features"} and set(rows[0]) == {"file", "name", "dtype", "meaning"}
    n_searches = next(r for r in rows if r["name"] == "n_searches")
    assert n_searches["dtype"] == "int64" and "search actions executed" in n_searches["meaning"]
    with pytest.raises(SystemExit) as e:
        cli.main(["schema", "--file", "metrics"])
    assert e.value.code == 2 and "invalid choice: 'metrics'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["schema", "--help"])
    assert e.value.code == 0 and "--json" in capsys.readouterr().out
