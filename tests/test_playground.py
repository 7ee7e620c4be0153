"""Reward playground (widgets/playground.py), headless: controls drive the figures and the table, which
must agree with a direct ``counterfactual(...)`` call on the same features; notebook 02 through papermill."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from widgets.playground import reward_playground
from workbench.methods import PRESETS, get_preset
from workbench.rewards import counterfactual, load_features

# ----------------------------------------------------------------------------- helpers


def expected(box, features: pd.DataFrame):
    """What the playground should show: counterfactual() with the controls' current values."""
    st = box.state
    return counterfactual(features, get_preset(st.preset, weights=st.weights), st.params, base=get_preset(st.preset))


def check_bars(old_trace, new_trace, old: np.ndarray, new: np.ndarray) -> None:
    """Both traces are the histograms of ``old`` / ``new`` (NaN dropped) on the edges the bars carry."""
    for trace, values in ((old_trace, old), (new_trace, new)):
        finite = np.asarray(values, dtype=float)
        finite = finite[np.isfinite(finite)]
        assert sum(trace.y) == finite.size
        if finite.size:
            edges = np.r_[[c[0] for c in trace.customdata], trace.customdata[-1][1]]
            np.testing.assert_array_equal(trace.y, np.histogram(finite, edges)[0])
    assert list(old_trace.x) == list(new_trace.x)  # shared bins: old and new are comparable


def assert_shows(box, features: pd.DataFrame) -> None:
    """Figures, keep rate and rank-change table all match counterfactual() on ``features``."""
    cf = expected(box, features)
    rows, s = cf.rows, cf.summary
    total = box.figures["total"]
    check_bars(total.data[0], total.data[1], rows["reward_old"], rows["reward_new"])
    comps = box.figures["components"]
    assert len(comps.data) == 2 * len(cf.new.components)
    for i, name in enumerate(cf.new.components):
        check_bars(comps.data[2 * i], comps.data[2 * i + 1], cf.old.values[name], cf.new.values[name])
    adv = box.figures["advantages"]
    check_bars(adv.data[0], adv.data[1], rows["adv_std_old"], rows["adv_std_new"])
    check_bars(adv.data[2], adv.data[3], rows["adv_mean_old"], rows["adv_mean_new"])
    g = s["groups"]
    assert list(box.figures["keep"].data[0].y) == pytest.approx([s["kept_old"] / g, s["kept_new"] / g])
    changed = rows.loc[rows["rank_changed"], "id"].tolist()
    assert sorted(box.state.changed["id"]) == sorted(changed)
    if changed:
        assert f"{len(changed)} of {len(rows)} trajectories" in box.table.value
        for tid in changed:
            assert f">{tid}<" in box.table.value
    else:
        assert "none" in box.table.value
    m = box.metrics()
    assert m["rows_rank_changed"] == s["rows_rank_changed"] and m["n_groups"] == g


def row(id: str, group: str, **kw) -> dict:
    base = dict(id=id, group_id=group, sample_idx=0, protocol="search_r1", answer="x", format_ok=1.0, f1=0.0,
                cem=0.0, em=0.0, L_pred=1.0, L_gt=1.0, n_searches=2.0, hops=2.0, recall=0.0, answer_boxes=1.0,
                evidence_boxes=1.0, evidence_f1=0.5, dag_valid=1.0, query_concise=1.0, query_sim_mean=np.nan,
                query_sim_paper=np.nan)
    return {**base, **kw}


@pytest.fixture
def table() -> pd.DataFrame:
    """g1: A searched more and recalled everything but answered wrong; B answered right without searching.
    g2: two identical trajectories; g3: a single one."""
    return pd.DataFrame([
        row("A", "g1", n_searches=4.0, recall=1.0),
        row("B", "g1", f1=1.0, cem=1.0, em=1.0, n_searches=0.0),
        row("C", "g2", f1=0.5),
        row("D", "g2", f1=0.5),
        row("E", "g3", cem=1.0, f1=1.0),
    ])


# ----------------------------------------------------------------------------- builder, hand-built tables


def test_slider_moves_rescore_figures_and_table(table):
    box = reward_playground(table, "dynasearcher")
    assert set(box.sliders) == {"alpha", "beta", "gamma", "n"}
    assert_shows(box, table)
    st = box.state.result.rows.set_index("id")
    # DynaSearcher Eqs. 1-6 by hand: A = max(0.1, 0) + 0.5·(1 − (1 − 0.9²)) = 0.505; B = 1 + 0.5·(0 + 0.2) = 1.1
    assert st.loc["A", "reward_new"] == pytest.approx(0.505) and st.loc["B", "reward_new"] == pytest.approx(1.1)
    assert box.state.changed.empty
    before = list(box.figures["total"].data[1].y), list(box.figures["total"].data[1].x)
    box.sliders["alpha"].value = 2.0  # A = 0.1 + 2·0.81 = 1.72 now beats B = 1 + 2·0.2 = 1.4
    assert box.state.params["alpha"] == 2.0
    st = box.state.result.rows.set_index("id")
    assert st.loc["A", "reward_new"] == pytest.approx(1.72) and st.loc["B", "reward_new"] == pytest.approx(1.4)
    assert (st.loc["A", "rank_old"], st.loc["A", "rank_new"]) == (2.0, 1.0)
    assert sorted(box.state.changed["id"]) == ["A", "B"]
    assert (list(box.figures["total"].data[1].y), list(box.figures["total"].data[1].x)) != before
    assert_shows(box, table)
    assert box.metrics()["keep_rate_new"] == pytest.approx(1 / 3)  # g1 only: g2 all equal, g3 alone


PLOTLY = "application/vnd.plotly.v1+json"


def test_each_view_holds_its_whole_figure(table):
    """What a page opened or reloaded later draws: each figure's view holds the whole figure as it is now in its
    synced outputs, not only as changes sent to the views open at the time."""
    box = reward_playground(table, "dynasearcher")
    box.set(params={"alpha": 2.0}, weights={"r_gain": 0.5})
    for name, fig in box.figures.items():
        (out,) = box.views[name].outputs
        shown = out["data"][PLOTLY]
        assert [list(t["y"]) for t in shown["data"]] == [list(t.y) for t in fig.data], name
        assert shown["layout"]["title"]["text"] == fig.layout.title.text
    assert box.views["components"] in box.children
    assert any(box.views["total"] in getattr(c, "children", ()) for c in box.children)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_changing_preset_rebuilds_controls(table, name):
    start = "dspo" if name != "dspo" else "dynasearcher"
    box = reward_playground(table, start)
    old_components = box.figures["components"]
    box.preset.value = name
    rubric = get_preset(name)
    assert sorted(box.sliders) == rubric.param_names
    assert list(box.weight_sliders) == rubric.names
    assert box.figures["components"] is not old_components
    for k, w in box.sliders.items():
        assert w.value == rubric.params[k]
        spec = rubric.specs.get(k)
        if spec is not None and spec.choices is not None:
            assert tuple(w.options) == spec.choices
        elif hasattr(w, "min"):  # every value the slider can reach is valid for the rubric
            assert spec is None or (spec.check(w.min) is None and spec.check(w.max) is None)
    assert {k: w.value for k, w in box.weight_sliders.items()} == rubric.weights
    assert box.state.preset == name and box.state.error is None
    assert_shows(box, table)


def test_weight_zero_components_are_still_reported(table):
    box = reward_playground(table, "dynasearcher")
    titles = [a.text for a in box.figures["components"].layout.annotations]
    assert titles == ["r_acc<br>weight 1", "r_gain<br>weight 1", "r_ans<br>weight 0", "r_recall<br>weight 0",
                      "r_penalty<br>weight 0", "r_short<br>weight 0"]  # one per line: names and weights apart
    assert len({a.y for a in box.figures["components"].layout.annotations}) == 2  # three a row: two rows
    box.weight_sliders["r_gain"].value = 0.0
    cf = expected(box, table)
    np.testing.assert_allclose(cf.rows["reward_new"], cf.new.values["r_acc"])  # the total lost r_gain...
    comps = box.figures["components"]
    assert sum(comps.data[3].y) == len(table)  # ...but r_gain is still drawn
    assert comps.layout.annotations[1].text == "r_gain<br>weight 0"
    assert_shows(box, table)


def test_nan_features_and_absent_columns_do_not_crash(table):
    df = table.drop(columns=["recall", "evidence_f1"]).copy()
    df.loc[0, "f1"] = np.nan
    df.loc[2, "format_ok"] = np.nan
    df.loc[3, "n_searches"] = np.nan
    box = reward_playground(df, "dynasearcher")
    for name in sorted(PRESETS):
        box.preset.value = name
        assert box.state.error is None
        assert_shows(box, df)
        s = box.state.result.summary
        if s["missing_new"]:
            assert f"{s['missing_old']} old, {s['missing_new']} new" in box.summary.value
    box.preset.value = "dynasearcher"
    assert "recall" in box.metrics()["absent_columns"] and "absent" in box.summary.value
    assert box.metrics()["missing_new"] == len(df)  # no recall column: every gain, so every total, is NaN
    assert box.metrics()["keep_rate_new"] == 0.0


def test_nan_rewards_say_which_feature_is_missing_and_how_to_compute_it(table):
    box = reward_playground(table.assign(evidence_f1=np.nan), "rsearch_evidence")
    text = box.summary.value
    assert f"{len(table)} old, {len(table)} new" in text and f"missing in: r_evid ({len(table)} rows)" in text
    assert "needs the <b>evidence model</b>" in text and "evidence_f1 empty" in text
    assert "featurize_run(run, evidence_model=" in text and "workbench train --evidence-model PATH" in text
    assert "``" not in box.children[1].value and "<code>" in box.children[1].value  # the preset's doc, not raw RST


def test_rank_table_shows_ranks_as_integers_and_the_gold_answer(table):
    from widgets.playground import rank_changes

    box = reward_playground(table, "dynasearcher", params={"alpha": 2.0})  # A now beats B in g1
    assert set(box.state.changed["id"]) == {"A", "B"}
    head = re.findall(r"<th[^>]*>([^<]*)</th>", box.table.value)
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", r) for r in box.table.value.split("</thead>")[1].split("</tr>")[:-1]]
    assert sorted(r[head.index("rank_new")] for r in rows) == ["1", "2"]  # not 1.000 and 2.000
    with_gold = rank_changes(box.state.result, table.assign(example_id=table["group_id"]), {"g1": ["Ada Quist"]})
    assert with_gold["gold"].tolist() == [["Ada Quist"]] * 2 and list(with_gold.columns).index("gold") == 4


def test_groups_of_one(table):
    df = table.assign(group_id=table["id"])  # a run rolled out with group_size 1
    box = reward_playground(df, "dynasearcher", params={"alpha": 1.0})
    m = box.metrics()
    assert (m["n_groups"], m["keep_rate_old"], m["keep_rate_new"], m["rows_rank_changed"]) == (5, 0.0, 0.0, 0)
    rows = box.state.result.rows
    assert (rows["adv_std_new"] == 0).all() and (rows["adv_mean_new"] == 0).all()
    assert "one trajectory" in box.summary.value
    assert_shows(box, df)


def test_training_steps_make_separate_groups(table):
    df = pd.concat([table.assign(step=0), table.assign(step=1, f1=0.0, cem=0.0)], ignore_index=True)
    box = reward_playground(df, "dynasearcher")
    assert box.metrics()["n_groups"] == 6 and "(step, group_id)" in box.source_note
    assert_shows(box, box.state.features)
    assert box.state.features["group_id"].nunique() == 6


def test_set_moves_several_controls_validates_and_widens(table):
    box = reward_playground(table, "dynasearcher")
    n = box.state.updates
    box.set(params={"alpha": 10.0, "gamma": 0.5}, weights={"r_acc": 0.5})
    assert box.state.updates == n + 1  # one update for three controls
    assert box.sliders["alpha"].value == 10.0 and box.sliders["alpha"].max >= 10.0  # widened, not clamped
    assert box.state.params["alpha"] == 10.0 and box.state.weights["r_acc"] == 0.5
    assert_shows(box, table)
    with pytest.raises(ValueError, match="gamma"):
        box.set(params={"gamma": 1.5})
    with pytest.raises(ValueError, match="unknown"):
        box.set(params={"nope": 1})
    assert box.sliders["gamma"].value == 0.5


def test_invalid_typed_value_keeps_last_state(table):
    box = reward_playground(table, "when_to_search")
    box.set(params={"correct_metric": "f1>=0.5"})
    before = list(box.figures["total"].data[1].y)
    box.sliders["correct_metric"].value = "bogus"
    assert "correct_metric" in box.state.error and "Not updated" in box.summary.value
    assert list(box.figures["total"].data[1].y) == before and box.state.params["correct_metric"] == "f1>=0.5"
    box.sliders["correct_metric"].value = "em"
    assert box.state.error is None and box.state.params["correct_metric"] == "em"
    assert_shows(box, table)


def test_features_without_groups_are_refused(table):
    with pytest.raises(ValueError, match="group_id"):
        reward_playground(table.drop(columns=["group_id"]))


# ----------------------------------------------------------------------------- a real run (the default model)


@pytest.fixture(scope="module")
def group_run(policy, world, tmp_path_factory, one_thread):
    """3 dev questions × 4 samples (temperature 1) from the real default model, without features.parquet.

    The direct protocol: at 32 new tokens the tiny model rarely finishes a search turn, so search_r1
    groups would all score the same; direct answers differ in format and F1 within a group.
    """
    from workbench.methods import get_protocol
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.storage.runs import Run
    from workbench.tools.base import Toolbox

    model, tok = policy
    examples = world.split("dev")[:3]
    cfg = RolloutConfig(group_size=4, max_new_tokens=32, max_turns=1, temperature=1.0, seed=0)
    trajs = rollout(examples, get_protocol("direct"), Toolbox(), HFBackend(model, tok), cfg, progress=False)
    run = Run.create(tmp_path_factory.mktemp("runs"), kind="eval", name="groups", config={"rollout": cfg.to_dict()})
    run.write_trajectories(trajs)
    run.write_examples(examples)
    return run


@pytest.mark.slow
def test_real_run_is_featurized_and_rescored(group_run):
    assert not group_run.exists("features.parquet")
    box = reward_playground(group_run, "dynasearcher")
    assert group_run.exists("features.parquet") and "was missing" in box.source_note
    features = load_features(group_run)
    m = box.metrics()
    assert (m["n_trajectories"], m["n_groups"]) == (12, 3)
    assert_shows(box, features)
    box.sliders["alpha"].value = 1.5
    assert_shows(box, features)
    box.weight_sliders["r_acc"].value = 0.0  # only the (per-question constant) gain is left: no group signal
    assert box.metrics()["keep_rate_new"] == 0.0
    assert_shows(box, features)
    box = reward_playground(group_run, "when_to_search")  # the second time the stored table is read
    assert "features from" in box.source_note
    assert_shows(box, features)
    # where the table came from is said once: in the widget, not printed again by notebook 02
    import html

    import ipywidgets as W

    def texts(w):
        yield from ([w.value] if isinstance(w, W.HTML) else [])
        for c in getattr(w, "children", ()):
            yield from texts(c)

    assert sum(html.escape(box.source_note) in t for t in texts(box)) == 1
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "02_reward_playground.ipynb").read_text())
    assert not any("source_note" in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


@pytest.mark.slow
def test_notebook_02_executes(group_run, tmp_path):
    from workbench.apps.notebooks import execute_notebook

    params, weights = {"gamma": 0.5, "alpha": 1.0}, {"r_acc": 0.5}
    execute_notebook("02_reward_playground", tmp_path / "02.ipynb", {
        "run_dir": str(group_run.path), "out_dir": str(tmp_path), "params": params, "weights": weights,
        "max_rows": 5}, cell_timeout=300)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    box = reward_playground(load_features(group_run), "dynasearcher", params, weights)
    want = box.metrics()
    for k, v in want.items():
        got = metrics[k]
        assert got == pytest.approx(v) if isinstance(v, float) and not math.isnan(v) else got == v, k
    assert metrics["params"]["gamma"] == 0.5 and metrics["weights"]["r_acc"] == 0.5
    for name in ("total", "components", "advantages", "keep"):
        assert (tmp_path / f"{name}.html").stat().st_size > 1000


def test_the_setting_shown_goes_to_training_as_a_command_and_a_config_file(table, tmp_path):
    """The playground's reward reaches ``workbench train`` unchanged: the command line it shows, through the real CLI
    parser, and the file *save reward config* writes, through ``--config``, both build the rubric on screen."""
    import html
    import shlex

    from workbench import methods as wm
    from workbench.apps import cli
    from workbench.rewards import counterfactual

    path = tmp_path / "cfg" / "reward_config.yaml"
    box = reward_playground(table, "dynasearcher", config_path=path)
    box.set(params={"alpha": 2.0, "gamma": 0.5}, weights={"r_acc": 0.5})
    shown = box.state.result.rows.set_index("id")["reward_new"]
    cmd = re.findall(r"<code[^>]*>(.*?)</code>", box.train_box.value)[0]
    argv = shlex.split(html.unescape(cmd))
    assert argv[:2] == ["workbench", "train"]
    args = cli.build_parser().parse_args(argv[1:])
    fields = {k: getattr(args, k) for k in ("reward", "reward_params", "reward_weights")}
    configs = {"command": wm.train_config(**fields)}
    box.save_button.click()
    assert path.is_file() and f"workbench train --reward-config {path}" in html.unescape(box.train_box.value)
    configs["file"] = wm.train_config_file(path)
    # --reward-config reads the reward alone, under the flags: --reward-weights given too wins for its keys
    configs["reward-config"] = wm.train_config(**cli.reward_config_fields(path))
    argv = ["train", "--reward-config", str(path), "--reward-weights", '{"r_acc": 0.25}']
    args = cli.build_parser().parse_args(argv)
    assert args.reward_config == str(path) and args.reward_weights == {"r_acc": 0.25}
    both = {**cli.reward_config_fields(path), "reward_weights": args.reward_weights}
    assert wm.train_config(**both).reward_weights["r_acc"] == 0.25
    for how, cfg in configs.items():
        assert (cfg.reward, cfg.reward_params["alpha"], cfg.reward_weights["r_acc"]) == ("dynasearcher", 2.0, 0.5), how
        rubric = wm.run_parts(cfg).rubric(cfg)
        got = counterfactual(table, rubric, {}).rows.set_index("id")["reward_new"]
        np.testing.assert_allclose(got.loc[shown.index], shown, err_msg=how)


def test_reward_config_refuses_a_file_that_sets_more_than_the_reward(tmp_path, capsys):
    """``--reward-config`` carries the reward only: a file with other fields, or none, is refused in one line naming
    the fields and where they go, before any model loads."""
    from workbench.apps import cli

    more = tmp_path / "more.yaml"
    more.write_text("rewards:\n  reward: dynasearcher\nsteps: 50\n", encoding="utf-8")
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n", encoding="utf-8")
    for path, words in ((more, "sets steps: it carries the reward only"), (empty, "sets no reward field")):
        assert cli.main(["train", "--reward-config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and str(path) in err and "\n" not in err and "Traceback" not in err


def test_save_reward_config_says_why_it_could_not(table, tmp_path):
    (tmp_path / "file").write_text("x")
    box = reward_playground(table, "dynasearcher", config_path=tmp_path / "file" / "reward_config.yaml")
    box.save_button.click()
    assert "Not saved" in box.train_box.value and "file" in box.train_box.value
