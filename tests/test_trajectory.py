"""trajectories.parquet: hops, question type, dataset and method are typed columns; old files still load."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from workbench.core.trajectory import META_COLUMNS, POLICY, Trajectory, Turn, load_trajectories, save_trajectories


def _traj(i: int, **meta) -> Trajectory:
    return Trajectory(id=f"q{i}#0", example_id=f"q{i}", question="Who?", protocol="search_r1", prompt_ids=[1, 2],
                      prompt_text="p", turns=[Turn(POLICY, "<answer> A </answer>", [5, 6], [-0.5, -0.25])],
                      answer="A", finish_reason="answer", group_id=f"q{i}", meta=meta)


def test_meta_keys_are_typed_columns_and_round_trip(tmp_path):
    trajs = [_traj(0, dataset="world", hops=2, qtype="bridge", method="search_r1", split="dev"),
             _traj(1, dataset="hotpotqa", hops="3", qtype=None)]  # hops as text, missing keys: typed or null
    path = save_trajectories(trajs, tmp_path / "t.parquet")
    schema = pq.read_schema(path)
    assert schema.field("hops").type == pa.int32()
    assert all(schema.field(k).type == pa.string() for k in ("dataset", "qtype", "method"))
    table = pq.read_table(path, columns=list(META_COLUMNS)).to_pydict()
    assert table == {"dataset": ["world", "hotpotqa"], "method": ["search_r1", None], "qtype": ["bridge", None],
                     "hops": [2, 3]}
    assert json.loads(pq.read_table(path).column("meta_json")[0].as_py())["split"] == "dev"  # the rest stays JSON
    back = load_trajectories(path)
    assert [t.to_dict() for t in back] == [t.to_dict() for t in trajs]


def test_extra_column_named_like_a_typed_one_replaces_it(tmp_path):
    path = save_trajectories([_traj(0, method="a")], tmp_path / "t.parquet", extra_columns={"method": ["b"], "f1": [0.5]})
    t = pq.read_table(path)
    assert t.column_names.count("method") == 1 and t.column("method").to_pylist() == ["b"]
    assert load_trajectories(path)[0].meta["method"] == "a"  # meta_json keeps what the trajectory said


def test_old_files_without_the_columns_still_load(tmp_path):
    trajs = [_traj(0, dataset="world", hops=1, qtype="single", method="direct")]
    path = save_trajectories(trajs, tmp_path / "new.parquet")
    old = pq.read_table(path).drop_columns(list(META_COLUMNS))  # the layout before the typed columns
    pq.write_table(old, tmp_path / "old.parquet")
    back = load_trajectories(tmp_path / "old.parquet")
    assert [t.to_dict() for t in back] == [t.to_dict() for t in trajs]


def test_duckdb_filters_on_the_typed_columns(tmp_path):
    import duckdb

    save_trajectories([_traj(0, dataset="world", hops=2), _traj(1, dataset="world", hops=1)], tmp_path / "t.parquet")
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM '{tmp_path / 't.parquet'}' WHERE hops >= 2 AND dataset = 'world'").fetchone()
    assert n == (1,)
