"""`workbench export verl`: the parquet verl's RLHFDataset reads, the reward module, the launch scripts."""

from __future__ import annotations

import importlib.util
import math

import pytest

pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

from workbench.apps.cli import main  # noqa: E402
from workbench.integrations.verl.export import export_verl, verl_overrides  # noqa: E402
from workbench.methods import get_method, method_names  # noqa: E402

#: Columns verl's RLHFDataset / reward manager read (prompt_key=prompt, reward_fn_key=data_source).
VERL_COLUMNS = {"data_source", "prompt", "ability", "reward_model", "extra_info"}
TRAINED = [n for n in method_names() if get_method(n).reward is not None]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl")
    assert main(["export", "verl", "--method", "dynasearcher", "--limit", "4", "--out", str(out)]) == 0
    return out


def load_module(path):
    spec = importlib.util.spec_from_file_location("exported_reward", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parquet_round_trips_with_verls_columns(exported):
    for name in ("train.parquet", "val.parquet"):
        table = pq.read_table(exported / name)
        assert VERL_COLUMNS <= set(table.column_names)
        df = table.to_pandas()
        assert len(df) == 4
        row = df.iloc[0]
        msgs = list(row["prompt"])
        assert msgs[0]["role"] == "system" and msgs[-1]["role"] == "user" and "Question:" in msgs[-1]["content"]
        assert row["reward_model"]["style"] == "rule" and len(row["reward_model"]["ground_truth"]["target"]) >= 1
        info = row["extra_info"]
        for key in ("example_id", "question", "hops", "supporting_titles", "supporting_ids", "decomposition",
                    "sources"):
            assert key in info, key
        assert info["hops"] >= 1 and len(info["supporting_ids"]) >= 1


def test_reward_module_scores_our_rows_and_search_r1_rows_without_raising(exported):
    mod = load_module(exported / "reward.py")
    row = pd.read_parquet(exported / "train.parquet").iloc[0]
    gold = list(row["reward_model"]["ground_truth"]["target"])[0]
    answer = f"<think> t </think>\n<answer> The final answer is \\boxed{{{gold}}} </answer>"
    out = mod.compute_score(row["data_source"], answer, row["reward_model"]["ground_truth"], dict(row["extra_info"]))
    assert isinstance(out, dict) and math.isfinite(out["score"]) and out["score"] > 0
    # Search-R1's own parquet: extra_info has only split/index, no hops or supporting titles
    sr1_info = {"split": "train", "index": 0}
    for text in (answer, "no tags at all", "<search> x </search>\n\n<information>Doc 1(Title: A) b</information>"):
        got = mod.compute_score("nq", text, {"target": ["Oslo"]}, sr1_info)
        assert isinstance(got["score"], float)  # a number or NaN, never an exception
    assert math.isnan(mod.compute_score("nq", answer, {"target": [gold]}, sr1_info)["r_gain"])  # needs hops


def test_reward_module_survives_garbage(exported):
    mod = load_module(exported / "reward.py")
    for args in (("nq", None, None, None), ("nq", "\ud800<answer>", {"target": []}, {"hops": "two"})):
        assert isinstance(mod.compute_score(*args)["score"], float)


@pytest.mark.parametrize("name", TRAINED)
def test_launch_script_maps_paper_values_to_verl_keys(tmp_path, name):
    m = get_method(name)
    overrides, notes = verl_overrides(m, tmp_path)
    keys = dict(o.lstrip("+").split("=", 1) for o in overrides)
    assert keys["custom_reward_function.path"].endswith("reward.py")
    assert keys["data.train_files"].endswith("train.parquet")
    assert keys["algorithm.adv_estimator"] in ("grpo", "reinforce_plus_plus_baseline")
    assert keys["actor_rollout_ref.actor.loss_agg_mode"] in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                                            "seq-mean-token-sum-norm")
    if "lr" in m.paper:
        assert float(keys["actor_rollout_ref.actor.optim.lr"]) == m.paper["lr"]
    if "group_size" in m.paper:
        assert int(keys["actor_rollout_ref.rollout.n"]) == m.paper["group_size"]
    if "max_turns" in m.paper:
        assert int(keys["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"]) == m.paper["max_turns"] + 1
    assert (keys["actor_rollout_ref.actor.use_kl_loss"] == "True") == (
        float(m.paper.get("kl_loss_coef", m.paper.get("kl_coef", 0.001))) > 0)
    if name == "dspo":
        assert keys["algorithm.filter_groups.enable"] == "True"
        assert float(keys["actor_rollout_ref.actor.clip_ratio_high"]) == m.paper["eps_high"]
        assert keys["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"


def test_export_writes_a_launch_script_per_method(tmp_path):
    paths = export_verl("search_r1", "world", tmp_path, limit=2)
    text = paths["launch"].read_text()
    assert paths["launch"].name == "run_search_r1.sh" and "NOT YET RUN ON GPUs" in text
    assert "verl.trainer.main_ppo" in text and "actor_rollout_ref.rollout.n=5" in text
    with pytest.raises(ValueError, match="baseline"):
        export_verl("direct", "world", tmp_path / "x", limit=1)
