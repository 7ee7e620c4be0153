"""``bench/ablate.py`` (the seeds' ablations: arms × seeds trained, evaluated and compared paired by question) and
``workbench.eval.paired`` (the comparison it writes and notebook 05 shows)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.eval import paired

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _ablate():
    spec = importlib.util.spec_from_file_location("bench_ablate", BENCH / "ablate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_ablate"] = mod  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _eval_run(parent: Path, name: str, cem: dict[str, float], searches: float = 1.0, method: str = "search_r1+lora",
              complete: bool = True) -> Path:
    from workbench.storage.runs import Run

    run = Run.create(parent, kind="eval", name=name, config={"kind": "eval"})
    ids = list(cem)
    pd.DataFrame({"example_id": ids, "method": method, "hops": [1 + i % 2 for i in range(len(ids))],
                  "cem": [cem[i] for i in ids], "n_searches": searches, "format_ok": True,
                  "answer": "x"}).to_parquet(run.path / "trajectories.parquet")
    if complete:
        run.mark_complete()
    return run.path


def _train_config(argv: list[str]):
    """What `workbench train ARGV` would train, built by the real CLI parser and config code (nothing runs)."""
    from workbench import methods
    from workbench.apps.cli import build_parser
    from workbench.rl.trainer import TrainConfig

    args = build_parser().parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if getattr(args, f.name) is not None}
    return methods.train_config(**given)


@pytest.mark.parametrize("name", ["dynasearcher_gain", "dspo_parts", "rsearch_evidence", "when_to_search_stages"])
def test_every_arm_is_a_valid_train_command_differing_only_in_its_part(name, tmp_path):
    ab = _ablate().ABLATIONS[name]
    configs = {arm: _train_config(ab.train_args(arm, 3, tmp_path, "runs/my-sft")) for arm in ab.arms}
    shared = ("steps", "questions_per_step", "group_size", "max_turns", "max_new_tokens", "max_total_tokens",
              "temperature", "lr", "init_adapter", "question_types", "seed", "encoder")
    for field in shared:  # equal compute and the same start in every arm
        assert len({json.dumps(getattr(c, field)) for c in configs.values()}) == 1, field
    assert all(c.seed == 3 for c in configs.values())
    assert all(c.init_adapter == "runs/my-sft" for c in configs.values())
    if name == "dynasearcher_gain":
        assert configs["acc_only"].reward_params == {"alpha": 0} and configs["acc_gain"].reward_params == {}
        assert configs["acc_only"].reward == configs["acc_gain"].reward == "dynasearcher"
        assert configs["acc_only"].loss_overrides == configs["acc_gain"].loss_overrides
    elif name == "rsearch_evidence":
        assert configs["no_evidence"].reward_weights == {"r_evid": 0} and configs["evidence"].reward_weights == {}
        assert configs["evidence"].evidence_model == configs["no_evidence"].evidence_model == "smollm2-135m"
    elif name == "when_to_search_stages":
        assert configs["stages"].stage_switch_searches == 1.0  # the method's declared switch
        assert configs["stage1"].stage_switch_searches == 1e6  # never reached: stage 1 throughout
        from workbench.methods import run_parts

        # r_s needs the queries' embeddings: "auto" loads the encoder because the method declares that need
        assert {c.encoder for c in configs.values()} == {"auto"}
        assert all(run_parts(c).needs.encoder for c in configs.values())
    else:
        assert {arm: c.preset for arm, c in configs.items()} == {"dspo": "dspo", "gspo": "gspo", "dapo": "dapo"}
        assert all(c.loss_overrides["num_mini_batches"] == 4 for c in configs.values())


@pytest.mark.parametrize("name", [n for n, ab in _ablate().ABLATIONS.items() if ab.init_adapter is None])
def test_the_cold_start_traces_fit_every_stages_turn_budget(name, world, tokenizer, tmp_path, monkeypatch, capsys):
    """An ablation that makes its own cold start trains on expert traces of the 1- and 2-hop train questions; a turn
    longer than the --max-new-tokens its SFT, RL and eval stages share would teach turns the rollouts cut before
    the closing tag (R-Search's evidence turn runs to 130 tokens: the recipe's 64 cut nearly every answer)."""
    from workbench.methods import get_method
    from workbench.rl.expert import expert_traces
    from workbench.tools.toolbox import build_toolbox

    ab = _ablate().ABLATIONS[name]
    method = get_method(ab.cold_start_method)
    protocol = method.training_protocol()
    train = world.split("train")
    questions = [e for e in train if e.hops == 1][:6] + [e for e in train if e.hops == 2][:18]
    res = expert_traces(questions, protocol, method.expert, build_toolbox(protocol, world, tokenizer=tokenizer),
                        tokenizer, world, method=ab.cold_start_method)
    assert len(res.trajectories) == len(questions)
    longest = max(len(t.token_ids) for tr in res.trajectories for t in tr.turns if t.kind == "policy")
    assert longest <= ab.max_new_tokens, (name, longest)
    lines = _dry_run(monkeypatch, capsys, name, "--seeds", "0", "--out", str(tmp_path))
    assert len(lines) == 2 + 3 * len(ab.arms)
    assert all(f"--max-new-tokens {ab.max_new_tokens} " in x for x in lines if " expert " not in x)


def _dry_run(monkeypatch, capsys, *argv: str) -> list[str]:
    """The commands ``bench/ablate.py ARGV --dry-run`` prints, one line each."""
    monkeypatch.setattr(sys, "argv", ["ablate", *argv, "--dry-run"])
    _ablate().main()
    return [x for x in capsys.readouterr().out.splitlines() if x.startswith("would run:")]


def test_dry_run_lists_train_then_eval_per_arm_and_seed(tmp_path, monkeypatch, capsys):
    lines = _dry_run(monkeypatch, capsys, "dynasearcher_gain", "--seeds", "0,5", "--out", str(tmp_path))
    assert len(lines) == 2 * 2 * 3  # arms x seeds x (train, eval dev, eval test)
    assert sum(" train " in x and "--seed 5" in x for x in lines) == 2
    assert sum("--split test" in x and "acc_only-s5-test" in x for x in lines) == 1
    assert not (tmp_path / "dynasearcher_gain" / "log.jsonl").exists()  # nothing ran


@pytest.mark.parametrize("argv, message", [
    (["nope"], "no ablation 'nope'; one of: dynasearcher_gain"),
    (["dspo_parts", "--arms", "dspo,grpo"], "unknown arm(s) grpo; dspo_parts has: dspo, gspo, dapo"),
    (["dspo_parts", "--seeds", "a,b"], "--seeds 'a,b' is not a comma-separated list of integers"),
    (["dspo_parts", "--seeds", ","], "--seeds names no seed"),
    (["dspo_parts", "--init-adapter", "runs/nope"], "--init-adapter runs/nope does not exist; pass an SFT adapter or "
                                                    "run directory of the search_r1 protocol, or leave it out (default: "
                                                    "data/adapters/search_r1-sft)"),
    (["rsearch_evidence", "--init-adapter", "runs/nope"], "of the rsearch_evidence protocol, or leave it out"),
])
def test_bad_arguments_are_one_line(argv, message, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["ablate", *argv, "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        _ablate().main()


def test_a_protocol_without_a_shipped_adapter_makes_its_cold_start_first(tmp_path, monkeypatch, capsys):
    lines = _dry_run(monkeypatch, capsys, "when_to_search_stages", "--seeds", "0", "--out", str(tmp_path))
    home = tmp_path / "when_to_search_stages" / "cold_start"
    assert " expert --method when_to_search --split train --hops 1,2 " in lines[0] and str(home / "expert") in lines[0]
    assert " sft --method when_to_search " in lines[1] and str(home / "expert" / "<expert run>") in lines[1]
    assert "--steps 168" in lines[1] and "--trace-hops '[1,2]'" in lines[1] and str(home / "sft") in lines[1]
    trains = [x for x in lines[2:] if " train " in x]
    assert len(trains) == 2 and all(f"--init-adapter {shlex.quote(str(home / 'sft' / '<sft run>'))}" in x for x in trains)
    assert not home.exists()  # a dry run makes nothing


def test_a_finished_cold_start_is_reused_and_a_given_adapter_skips_it(tmp_path, monkeypatch, capsys):
    from workbench.storage.runs import Run

    home = tmp_path / "rsearch_evidence" / "cold_start"
    expert = Run.create(home / "expert", kind="expert", name="x", config={"kind": "expert"})
    expert.mark_complete()
    sft = Run.create(home / "sft", kind="sft", name="s", config={"kind": "sft"})
    sft.mark_complete()
    lines = _dry_run(monkeypatch, capsys, "rsearch_evidence", "--seeds", "0", "--out", str(tmp_path))
    assert not any(" expert " in x or " sft " in x for x in lines)
    assert sum(f"--init-adapter {sft.path}" in x for x in lines) == 2  # both arms start from it
    given = tmp_path / "my-sft"
    given.mkdir()
    lines = _dry_run(monkeypatch, capsys, "rsearch_evidence", "--seeds", "0", "--out", str(tmp_path),
                     "--init-adapter", str(given))
    assert sum(f"--init-adapter {given}" in x for x in lines) == 2


def test_a_reused_run_made_with_another_turn_budget_is_named(tmp_path, monkeypatch, capsys):
    """A finished run made before the ablation's turn budget changed is reused, and the output says which run, the
    two budgets and the fix; a reused run made with the budget the ablation gives says nothing."""
    from workbench.storage.runs import Run

    home = tmp_path / "rsearch_evidence"
    Run.create(home / "cold_start" / "expert", kind="expert", name="x", config={"kind": "expert"}).mark_complete()
    old = Run.create(home / "cold_start" / "sft", kind="sft", name="s", config={"kind": "sft", "max_new_tokens": 64})
    old.mark_complete()
    same = Run.create(home / "evidence" / "seed0" / "eval", kind="eval", name="evidence-s0-dev",
                      config={"kind": "eval", "eval": {"max_new_tokens": 160}})
    same.mark_complete()
    monkeypatch.setattr(sys, "argv", ["ablate", "rsearch_evidence", "--seeds", "0", "--out", str(tmp_path),
                                      "--dry-run"])
    _ablate().main()
    out = capsys.readouterr().out
    assert (f"ablate: reusing {old.path}, made with --max-new-tokens 64; this ablation now gives 160: move the run "
            "away to redo it with 160") in out
    assert f"reusing {same.path}" not in out and out.count("ablate: reusing") == 1
    assert not any(x.endswith("--name evidence-s0-dev") for x in out.splitlines())  # reused, not run again


def test_a_training_run_stopped_midway_continues_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    """An arm's train run that stopped with a checkpoint is resumed (``--resume RUN``), not started over; one
    without a checkpoint (killed before its first save) is started over."""
    from workbench.storage.runs import Run

    home = tmp_path / "dspo_parts" / "dapo" / "seed1" / "train"
    stopped = Run.create(home, kind="train", name="dapo", config={"kind": "train"})
    (stopped.path / "checkpoints" / "latest").mkdir(parents=True)
    Run.create(tmp_path / "dspo_parts" / "dspo" / "seed1" / "train", kind="train", name="dspo", config={"kind": "train"})
    lines = _dry_run(monkeypatch, capsys, "dspo_parts", "--seeds", "1", "--arms", "dspo,dapo", "--out", str(tmp_path))
    trains = [x for x in lines if " train " in x]
    assert len(trains) == 2
    resumed = [x for x in trains if "--resume" in x]
    assert len(resumed) == 1 and f"--resume {stopped.path}" in resumed[0] and "--loss-overrides" not in resumed[0]
    assert "--init-adapter" in next(x for x in trains if "--resume" not in x)  # dspo: no checkpoint, a fresh start


def test_a_seed_evaluated_on_both_splits_is_not_trained_again(tmp_path, monkeypatch, capsys):
    """Eval runs copied without their training run (from another machine, or shipped): that arm × seed is reused as
    it is; a seed with one split evaluated still trains (its adapter is needed for the other split)."""
    _arm_runs(tmp_path, "acc_gain", 0, {"d1": 1.0}, {"t1": 1.0}, 1.0)
    _eval_run(tmp_path / "dynasearcher_gain" / "acc_only" / "seed0" / "eval", "acc_only-s0-dev", {"d1": 0.0})
    lines = _dry_run(monkeypatch, capsys, "dynasearcher_gain", "--seeds", "0", "--out", str(tmp_path))
    assert not any("acc_gain" in x for x in lines)  # neither trained nor evaluated again
    assert [x.split()[3] for x in lines] == ["train", "eval"] and "acc_only-s0-test" in lines[1]


def _arm_runs(out: Path, arm: str, seed: int, dev: dict[str, float], test: dict[str, float], searches: float,
             ablation: str = "dynasearcher_gain") -> None:
    home = out / ablation / arm / f"seed{seed}" / "eval"
    _eval_run(home, f"{arm}-s{seed}-dev", dev, searches)
    _eval_run(home, f"{arm}-s{seed}-test", test, searches)


def test_compare_only_pools_splits_averages_seeds_and_writes_the_comparison(tmp_path, monkeypatch, capsys):
    dev, test = ["d1", "d2", "d3", "d4"], ["t1", "t2", "t3", "t4"]
    _arm_runs(tmp_path, "acc_only", 0, dict.fromkeys(dev, 0.0), dict.fromkeys(test, 0.0), 2.0)
    _arm_runs(tmp_path, "acc_only", 1, {**dict.fromkeys(dev, 0.0), "d1": 1.0}, dict.fromkeys(test, 0.0), 2.0)
    _arm_runs(tmp_path, "acc_gain", 0, dict.fromkeys(dev, 1.0), dict.fromkeys(test, 1.0), 1.0)
    _arm_runs(tmp_path, "acc_gain", 1, dict.fromkeys(dev, 1.0), {**dict.fromkeys(test, 1.0), "t4": 0.0}, 1.0)
    monkeypatch.setattr(sys, "argv", ["ablate", "dynasearcher_gain", "--compare-only", "--out", str(tmp_path)])
    _ablate().main()
    printed = capsys.readouterr().out
    path = tmp_path / "dynasearcher_gain" / "comparison.json"
    c = paired.Comparison.load(path)
    rows = c.rows().set_index("hops")
    assert rows.loc["all", "n"] == 8
    assert rows.loc["all", "a"] == pytest.approx(0.5 / 8)  # one question right in one of two seeds
    assert rows.loc["all", "b"] == pytest.approx(7.5 / 8)
    assert rows.loc["all", "diff"] == pytest.approx(7 / 8) and rows.loc["all", "diff_lo"] > 0
    assert rows.loc["all", "searches_a"] == 2.0 and rows.loc["all", "searches_b"] == 1.0
    seeds = c.seed_table()
    assert list(seeds["mean"]) == pytest.approx([0.0, 1 / 8, 1.0, 7 / 8])
    assert c.a.label == "r_acc only" and c.b.label == "r_acc + r_gain" and "ablate.py dynasearcher_gain" in c.command
    assert "| all | 8 |" in printed and (path.with_suffix(".md")).read_text().count("| all |") == 3
    assert "recall left out" in printed  # these runs have no features.parquet: the other metrics still compare
    red = paired.Comparison.load(path.parent / "redundant" / "comparison.json").rows().set_index("hops")
    assert red.loc["1", "a"] == 1.0 and red.loc["all", "b"] == 0.0  # 2 searches on one-hop questions; then 1


def test_compare_only_names_the_missing_arm_run(tmp_path, monkeypatch):
    _arm_runs(tmp_path, "acc_only", 0, {"d1": 0.0}, {"t1": 0.0}, 1.0)
    monkeypatch.setattr(sys, "argv", ["ablate", "dynasearcher_gain", "--compare-only", "--seeds", "0",
                                      "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="acc_gain seed 0 has no finished dev and test eval under .*--arms acc_gain"):
        _ablate().main()


def test_an_unfinished_eval_is_not_reused(tmp_path):
    home = tmp_path / "eval"
    _eval_run(home, "a-s0-dev", {"q": 1.0}, complete=False)
    assert _ablate().finished(home, "a-s0-dev") is None
    done = _eval_run(home, "a-s0-dev", {"q": 1.0})
    assert _ablate().finished(home, "a-s0-dev") == done


def test_seeds_must_cover_the_same_questions(tmp_path):
    a0 = _eval_run(tmp_path / "a", "s0", {"q1": 1.0, "q2": 0.0})
    a1 = _eval_run(tmp_path / "a", "s1", {"q1": 1.0, "q3": 0.0})
    with pytest.raises(paired.CompareError, match="do not cover the same questions"):
        paired.side_scores([[a0], [a1]], "search_r1+lora")
    with pytest.raises(paired.CompareError, match="no trajectories of method 'x'; it has: search_r1\\+lora"):
        paired.run_scores(a0, "x")
    with pytest.raises(paired.CompareError, match="not a readable run|no trajectories.parquet"):
        paired.run_scores(tmp_path / "nope", "x")


def test_a_comparison_file_round_trips_and_a_bad_one_is_named(tmp_path):
    a = _eval_run(tmp_path / "a", "a", {"q1": 0.0, "q2": 1.0, "q3": 0.0})
    b = _eval_run(tmp_path / "b", "b", {"q1": 1.0, "q2": 1.0, "q3": 1.0})
    c = paired.Comparison.from_runs("x", paired.Side("A", "search_r1+lora", [[str(a)]]),
                                    paired.Side("B", "search_r1+lora", [[str(b)]]), question="q?", paper="p")
    path = c.save(tmp_path / "out" / "comparison.json")
    back = paired.Comparison.load(path)
    pd.testing.assert_frame_equal(back.rows(), c.rows())
    assert back.rows().set_index("hops").loc["all", "diff"] == pytest.approx(2 / 3)
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / "comparison.json").write_text("{not json")
    found = paired.find_comparisons(tmp_path / "out", tmp_path / "out2", tmp_path / "missing")
    assert isinstance(found[0][1], paired.Comparison)
    assert isinstance(found[1][1], str) and "not a comparison file" in found[1][1]


def test_a_metric_from_the_features_or_derived(tmp_path):
    from workbench.data.world import load_world

    run = _eval_run(tmp_path, "r", {"q1": 1.0, "q2": 0.0}, searches=2.0)  # hops 1 and 2
    df = pd.read_parquet(run / "trajectories.parquet").assign(id=["a", "b"])
    df.to_parquet(run / "trajectories.parquet")
    pd.DataFrame({"id": ["b", "a"], "recall": [0.5, 1.0]}).to_parquet(run / "features.parquet")
    assert paired.run_scores(run, "search_r1+lora", "recall")["v"].to_dict() == {"q1": 1.0, "q2": 0.5}
    assert paired.run_scores(run, "search_r1+lora", "redundant")["v"].to_dict() == {"q1": 1.0, "q2": 0.0}
    assert paired.run_scores(run, "search_r1+lora", "extra_searches")["v"].to_dict() == {"q1": 1.0, "q2": 0.0}
    # an answer naming a world entity the question does not name (on real questions: a name from training)
    name = next(e.name for e in load_world().entities.values() if e.type == "person")
    df.assign(answer=[f"It was {name}.", "Paris"], question=["Who wrote Hamlet?", "Capital of France?"]) \
        .to_parquet(run / "trajectories.parquet")
    assert paired.run_scores(run, "search_r1+lora", "world_leak")["v"].to_dict() == {"q1": 1.0, "q2": 0.0}
    df.assign(answer=name, question=f"Who is {name}?").to_parquet(run / "trajectories.parquet")  # asked: no leak
    assert paired.run_scores(run, "search_r1+lora", "world_leak")["v"].to_dict() == {"q1": 0.0, "q2": 0.0}
    df.to_parquet(run / "trajectories.parquet")
    searches = paired.run_scores(run, "search_r1+lora", "n_searches")  # a metric that is also a kept column
    assert searches["v"].to_dict() == {"q1": 2.0, "q2": 2.0} and searches["hops"].to_dict() == {"q1": 1, "q2": 2}
    with pytest.raises(paired.CompareError, match="'nope' is not a column of .* or features; one of: .*redundant"):
        paired.run_scores(run, "search_r1+lora", "nope")


def test_interval_of_a_constant_difference_is_that_value():
    assert paired.paired_interval(np.zeros(5), np.ones(5)) == (1.0, 1.0)


def test_compare_methods_saves_a_comparison_notebook_05_reads(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("bench_compare_methods", BENCH / "compare_methods.py")
    cm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cm)
    a = _eval_run(tmp_path / "a", "a", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}, method="m")
    b = _eval_run(tmp_path / "b", "b", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}, method="m+lora")
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--b-run", str(b), "--b", "m+lora", "--save",
                                      str(tmp_path / "res" / "x"), "--name", "adapter vs base", "--runs-command",
                                      "workbench eval ..."])
    cm.main()
    assert "wrote" in capsys.readouterr().out
    c = paired.Comparison.load(tmp_path / "res" / "x" / "comparison.json")
    assert c.name == "adapter vs base" and c.command.startswith("workbench eval ... && .venv/bin/python bench/compare_methods.py")
    assert "--runs-command" not in c.command
    assert set(c.provenance["runs"]) == {str(a), str(b)}
    assert (c.a.label, c.a.method, c.b.label) == ("m", "m", "m+lora")  # labels default to the methods
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m+lora", "--a-label", "SFT", "--b-run", str(b), "--b",
                                      "m+lora", "--b-label", "SFT + RL", "--save", str(tmp_path / "named")])
    with pytest.raises(SystemExit, match="m\\+lora"):  # run a has no m+lora rows: the labels do not change what is read
        cm.main()
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--a-label", "base", "--b-run", str(b), "--b",
                                      "m+lora", "--b-label", "adapter", "--save", str(tmp_path / "named")])
    cm.main()
    assert "| hops | n | cem base [95% CI] | cem adapter [95% CI]" in capsys.readouterr().out
    named = paired.Comparison.load(tmp_path / "named" / "comparison.json")
    assert (named.a.label, named.a.method, named.b.label, named.b.method) == ("base", "m", "adapter", "m+lora")
    assert named.name == "adapter vs base"
    (tmp_path / "res" / "broken").mkdir()
    (tmp_path / "res" / "broken" / "comparison.json").write_text("[]")

    from workbench.dashboard.figures import comparison_figure
    from workbench.dashboard.queries import comparison_table

    table = comparison_table(tmp_path / "res")
    assert list(table["hops"]) == ["1", "2", "all"] and set(table["comparison"]) == {"adapter vs base"}
    row = table.set_index("hops").loc["all"]
    assert row["diff"] == pytest.approx(0.5) and row["diff_lo"] <= 0.5 <= row["diff_hi"] and row["seeds_a"] == 1
    assert list(table.attrs["errors"]) == [str(tmp_path / "res" / "broken" / "comparison.json")]
    fig = comparison_figure(table)
    (trace,) = fig.data
    assert list(trace.x) == pytest.approx(list(table["diff"])) and trace.error_x.array is not None
    assert trace.y[-1] == "adapter vs base · all"
    monkeypatch.setattr(sys, "argv", ["cm", str(a), "--a", "m", "--b-run", str(b), "--b", "m+lora", "--reward",
                                      "search_r1", "--save", str(tmp_path / "r")])
    with pytest.raises(SystemExit, match="--save stores a metric comparison"):  # a reward is printed, not saved
        cm.main()
    with pytest.raises(paired.CompareError, match="no features.parquet, which a reward is computed from"):
        paired.run_scores(a, "m", reward=lambda f: f)


def test_a_three_arm_ablation_compares_each_arm_run_so_far_against_the_full_one(tmp_path, monkeypatch):
    for arm, v in (("dspo", 1.0), ("gspo", 0.0)):
        _arm_runs(tmp_path, arm, 0, {"d1": v, "d2": 0.0}, {"t1": v}, 1.0, ablation="dspo_parts")
    monkeypatch.setattr(sys, "argv", ["ablate", "dspo_parts", "--compare-only", "--seeds", "0", "--arms", "dspo,gspo",
                                      "--out", str(tmp_path)])
    _ablate().main()
    folders = {p.parent.relative_to(tmp_path / "dspo_parts") for p in (tmp_path / "dspo_parts").rglob("comparison.json")}
    assert folders == {Path("dspo_vs_gspo"), Path("dspo_vs_gspo/n_searches"), Path("dspo_vs_gspo/redundant")}
    path = tmp_path / "dspo_parts" / "dspo_vs_gspo" / "comparison.json"  # no DAPO arm yet: one pair
    c = paired.Comparison.load(path)
    assert (c.a.label, c.b.label) == ("GSPO (no filter)", "DSPO") and c.name == "dspo_parts: dspo vs gspo"
    assert c.rows().set_index("hops").loc["all", "diff"] == pytest.approx(2 / 3)


def _diff_cell(row: pd.Series) -> str:
    """A paired difference as RESULTS and the README write it: ``+0.017 [−0.02, +0.05]``."""
    return f"{row['diff']:+.3f} [{row['diff_lo']:+.2f}, {row['diff_hi']:+.2f}]".replace("-", "−")


def _cell(folder: Path, hops: str = "all") -> str:
    """The paired difference of the shipped comparison in ``folder`` on the hop level ``hops``."""
    return _diff_cell(paired.Comparison.load(folder / "comparison.json").rows().set_index("hops").loc[hops])


def _shipped_texts() -> tuple[str, str]:
    """The README with the user guide (docs/), and RESULTS."""
    root = BENCH.parent
    return (root / "README.md").read_text() + "".join(p.read_text() for p in sorted((root / "docs").rglob("*.md"))), (root / "bench" / "RESULTS.md").read_text()


def _check_arms(home: Path, labels: tuple[str, str], title: str, results: str) -> paired.Comparison:
    """The shipped two-arm comparison in ``home``: its arms' labels (A, B), 180 questions a seed on each side, and
    RESULTS' section ``title`` saying "(seed 0 only so far)" exactly when it holds one seed."""
    c = paired.Comparison.load(home / "comparison.json")
    assert (c.a.label, c.b.label) == labels and len(c.a.seeds) == len(c.b.seeds)
    assert sum(len(s) for s in c.b.seeds) == 180 * len(c.b.seeds)
    assert title in results
    assert (f"{title} (seed 0 only so far)" in results) == (len(c.b.seeds) == 1)
    return c


def test_the_shipped_ablation_figures_are_what_readme_and_results_quote():
    """The numbers the README and RESULTS quote for DynaSearcher's ablation are recomputed from the shipped
    comparison files (per-question scores of both arms and seeds)."""
    root = BENCH.parent
    readme, results = _shipped_texts()

    def diff(metric: str, hops: str = "all") -> str:
        return _cell(root / "data" / "results" / "dynasearcher_gain" / ("" if metric == "cem" else metric), hops)

    for metric, hops in (("cem", "all"), ("recall", "all"), ("n_searches", "all"), ("cem", "1")):
        assert diff(metric, hops) in readme and diff(metric, hops) in results, (metric, hops)
    assert diff("redundant") in results
    c = paired.Comparison.load(root / "data" / "results" / "dynasearcher_gain" / "comparison.json")
    assert len(c.a.seeds) == len(c.b.seeds) == 2 and sum(len(s) for s in c.b.seeds) == 2 * 180


def test_the_shipped_dspo_figures_are_what_readme_and_results_quote():
    """DSPO's ablation: the paired differences RESULTS' table and the README quote, recomputed from the shipped
    comparison files (two seeds a side)."""
    root = BENCH.parent
    readme, results = _shipped_texts()
    for other, seeds in (("gspo", 2), ("dapo", 2)):
        c = paired.Comparison.load(root / "data" / "results" / "dspo_parts" / f"dspo_vs_{other}" / "comparison.json")
        assert len(c.a.seeds) == len(c.b.seeds) == seeds and c.b.label == "DSPO"
        rows = c.rows().set_index("hops")
        cells = [_diff_cell(rows.loc[h]) for h in ("all", "1", "2")]
        assert " | ".join(cells) in results, (other, cells)
        assert cells[0] in readme


def test_the_shipped_when_to_search_figures_are_what_readme_and_results_quote():
    """When-to-Search's ablation and each arm against its SFT start: the paired differences RESULTS and the README
    quote, recomputed from the shipped comparison files; RESULTS says how many seeds they hold."""
    readme, results = _shipped_texts()
    home = BENCH.parent / "data" / "results" / "when_to_search_stages"
    _check_arms(home, ("stage 1 only", "stage 1 then 2"), "When-to-Search: stage 1 then 2 against stage 1 alone",
                results)
    assert _cell(home) in readme and _cell(home) in results and _cell(home / "n_searches") in readme
    for metric, hops in (("", "1"), ("", "2"), ("", "3"), ("n_searches", "all"), ("n_searches", "2")):
        assert _cell(home / metric, hops) in results, (metric, hops)
    for arm in ("stage1", "stages"):
        assert _cell(home / f"sft_vs_{arm}") in results and _cell(home / f"sft_vs_{arm}" / "n_searches") in results
        assert _cell(home / f"sft_vs_{arm}", "2") in results


def test_the_shipped_rsearch_evidence_figures_are_what_readme_and_results_quote():
    """R-Search's evidence ablation and each arm against its SFT start: the paired differences RESULTS and the
    README quote, recomputed from the shipped comparison files; RESULTS says how many seeds they hold, and the seed
    runs shipped beside them are the ones the comparison read."""
    readme, results = _shipped_texts()
    home = BENCH.parent / "data" / "results" / "rsearch_evidence"
    c = _check_arms(home, ("r_ans + r_fmt", "r_ans + r_evid + r_fmt"), "R-Search: the evidence reward against none",
                    results)
    assert _cell(home) in readme and _cell(home) in results and _cell(home / "n_searches") in results
    for metric, hops in (("", "1"), ("", "2"), ("", "3"), ("n_searches", "2")):
        assert _cell(home / metric, hops) in results, (metric, hops)
    for arm in ("evidence", "no_evidence"):
        assert _cell(home / f"sft_vs_{arm}") in results and _cell(home / f"sft_vs_{arm}" / "n_searches") in results
    shipped = {p.name for p in (home / "seed_runs").glob("*/seed*/eval/*") if (p / "trajectories.parquet").is_file()}
    assert shipped == {Path(r).name for side in (c.a, c.b) for seed in side.runs for r in seed}
    for side in (c.a, c.b):  # each seed's stored values are what its shipped runs give
        for runs, stored in zip(side.runs, side.frames()):
            local = [home / "seed_runs" / Path(r).relative_to("runs/ablations/rsearch_evidence") for r in runs]
            pd.testing.assert_frame_equal(paired.pooled_scores(local, side.method).sort_index(), stored.sort_index(),
                                          check_dtype=False)


def test_the_shipped_real_layout_figures_are_what_results_quotes():
    """The real-layout stage (SFT on MuSiQue train traces) against each baseline and the world-only adapter on the 60
    real dev questions, and the world-name leak before and after: the paired differences RESULTS quotes, recomputed
    from the shipped comparison files."""
    _, results = _shipped_texts()
    root = BENCH.parent / "data" / "results"
    for other in ("direct", "vanilla_rag", "ircot", "search_r1", "world_adapter"):
        c = paired.Comparison.load(root / f"real_layout_vs_{other}" / "comparison.json")
        assert c.b.label == "search_r1+lora (real-layout SFT)" and sum(len(s) for s in c.b.seeds) == 60
        assert _cell(root / f"real_layout_vs_{other}") in results, other
    assert _cell(root / "real_layout_world_leak") in results
    for other in ("sft", "world_adapter", "direct", "vanilla_rag"):  # the stage's second run, with RL
        c = paired.Comparison.load(root / f"real_layout_rl_vs_{other}" / "comparison.json")
        assert c.b.label == "search_r1+lora (real-layout SFT + RL)" and sum(len(s) for s in c.b.seeds) == 60
        for hops in ("all", "2", "4"):
            assert _cell(root / f"real_layout_rl_vs_{other}", hops) in results, (other, hops)
    assert _cell(root / "real_layout_rl_world_leak") in results


def test_the_shipped_deep_hop_oversampling_figures_are_what_results_quotes():
    """The oversampled deep SFT against the shipped adapter and the first deep recipe's two
    adapters on the 180 held-out questions: the paired differences RESULTS quotes, recomputed from the shipped
    comparison files."""
    _, results = _shipped_texts()
    root = BENCH.parent / "data" / "results" / "deep_over"
    for other in ("shipped64", "deepsft64", "deeprl64"):
        c = paired.Comparison.load(root / f"{other}_vs_over" / "comparison.json")
        assert c.b.label.startswith("oversampled deep SFT") and sum(len(s) for s in c.b.seeds) == 180
        for hops in ("all", "1", "3", "4"):
            assert _cell(root / f"{other}_vs_over", hops) in results, (other, hops)


def test_the_two_seeds_of_oversampling_against_the_shipped_adapter_are_what_results_quotes():
    """The oversampling lever's two seeds, each and pooled over seeds, against the shipped adapter at the same 6 x 96
    budget, and seed 1 against seed 0: the paired differences RESULTS quotes, recomputed from the shipped files."""
    _, results = _shipped_texts()
    root = BENCH.parent / "data" / "results" / "deep_over"
    seeds = {"shipped96_vs_over0": 1, "shipped96_vs_over1": 1, "shipped96_vs_over_seeds": 2, "over0_vs_over1": 1}
    for name, n_seeds in seeds.items():
        c = paired.Comparison.load(root / name / "comparison.json")
        assert len(c.b.seeds) == n_seeds and all(len(s) == 180 for s in c.b.seeds), name
        assert c.a.label == ("oversampled deep SFT, seed 0" if name.startswith("over0") else
                             "shipped search_r1-sft-grpo (6 x 96 tokens)")
        for hops in ("all", "1", "2", "3", "4"):
            if name != "over0_vs_over1" or hops != "1":  # RESULTS quotes seed 1 - seed 0 without its one-hop cell
                assert _cell(root / name, hops) in results, (name, hops)


def _check_lever_against_control(root: Path, name: str, a_label: str, b_label: str) -> None:
    """The shipped comparison ``root/name`` of a lever against its control: two seeds a side, 180 questions a seed,
    the sides' labels starting with ``a_label`` and ``b_label``."""
    c = paired.Comparison.load(root / name / "comparison.json")
    assert len(c.a.seeds) == len(c.b.seeds) == 2 and all(len(s) == 180 for s in c.a.seeds + c.b.seeds)
    assert c.a.label.startswith(a_label) and c.b.label.startswith(b_label)


def _assert_quoted(root: Path, quoted: dict[str, tuple[str, ...]], results: str) -> None:
    """Each comparison under ``root`` named in ``quoted``: its paired cell on each of the given hop levels is in RESULTS."""
    for name, levels in quoted.items():
        for hops in levels:
            assert _cell(root / name, hops) in results, (name, hops)


_LEVELS = ("all", "1", "2", "3", "4")


def test_the_outline_lever_against_its_control_is_what_results_quotes():
    """The outline traces (two seeds) against the shipped adapter and against the oversampling runs without the outline
    (two seeds a side), and seed 1 against seed 0: the paired differences RESULTS quotes, from the shipped files."""
    readme, results = _shipped_texts()
    root = BENCH.parent / "data" / "results" / "deep_outover"
    _check_lever_against_control(root, "over_seeds_vs_outover_seeds", "oversampled SFT (no outline)",
                                 "outline + oversampled SFT")
    _assert_quoted(root, {"over_seeds_vs_outover_seeds": _LEVELS, "shipped96_vs_outover_seeds": _LEVELS,
                          "outover0_vs_outover1": ("all", "1", "2", "3")}, results)
    assert f"writing the plan out costs {_cell(root / 'over_seeds_vs_outover_seeds')[:6]}" in readme


def test_the_residual_lever_against_its_control_is_what_results_quotes():
    """The residual traces (two seeds) against the shipped adapter and against the oversampling runs with plain steps
    (two seeds a side), and seed 1 against seed 0: the paired differences RESULTS quotes, from the shipped files."""
    readme, results = _shipped_texts()
    root = BENCH.parent / "data" / "results" / "deep_residual"
    _check_lever_against_control(root, "over_seeds_vs_residual_seeds", "oversampled SFT (plain steps)",
                                 "residual + oversampled SFT")
    names = ("over_seeds_vs_residual_seeds", "shipped96_vs_residual_seeds", "residual0_vs_residual1")
    _assert_quoted(root, dict.fromkeys(names, _LEVELS), results)
    assert f"naming the question left costs {_cell(root / 'over_seeds_vs_residual_seeds')[:6]}" in readme


def test_the_rl_stage_from_the_three_search_policy_is_what_results_quotes():
    """The RL stage started from the oversampled seed-1 SFT (two seeds), against the shipped adapter and against its
    start, each seed and both, and seed 1 against seed 0: the paired differences RESULTS quotes, from the shipped files."""
    readme, results = _shipped_texts()
    root = BENCH.parent / "data" / "results" / "deep_rl"
    for s in (0, 1):
        c = paired.Comparison.load(root / f"over1_vs_rl{s}" / "comparison.json")
        assert c.a.label.startswith("oversampled SFT, seed 1") and c.b.label == f"RL from the oversampled SFT, seed {s}"
        assert len(c.b.seeds) == 1 and len(c.b.seeds[0]) == 180
    both = paired.Comparison.load(root / "over1_vs_rl_seeds" / "comparison.json")
    assert len(both.b.seeds) == 2 and all(len(q) == 180 for q in both.b.seeds)
    names = ("shipped96_vs_rl0", "shipped96_vs_rl1", "over1_vs_rl0", "over1_vs_rl1", "shipped96_vs_rl_seeds",
             "over1_vs_rl_seeds", "rl0_vs_rl1")
    _assert_quoted(root, dict.fromkeys(names, _LEVELS), results)
    assert f"takes the third search away (3-hop {_cell(root / 'over1_vs_rl_seeds', '3')[:6]}" in readme
