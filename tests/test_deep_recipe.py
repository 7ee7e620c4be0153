"""``bench/deep_recipe.py``: the deep multi-hop recipe's stages as one resumable command, and its report."""

from __future__ import annotations

import dataclasses
import importlib.util
import shlex
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _recipe():
    spec = importlib.util.spec_from_file_location("bench_deep_recipe", BENCH / "deep_recipe.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_deep_recipe"] = mod
    spec.loader.exec_module(mod)
    return mod


def _commands(out: str) -> list[list[str]]:
    return [shlex.split(line[len("would run: "):]) for line in out.splitlines() if line.startswith("would run: ")]


def test_dry_run_is_expert_sft_train_then_three_adapters_evaluated(tmp_path, capsys):
    from workbench import methods
    from workbench.apps.cli import build_parser
    from workbench.rl.trainer import TrainConfig

    _recipe().main(["--dry-run", "--out", str(tmp_path / "deep")])
    cmds = _commands(capsys.readouterr().out)
    assert [c[1] for c in cmds] == ["expert", "sft", "train"] + ["eval"] * 6
    assert cmds[0][cmds[0].index("--hops") + 1] == "1,2,3,4"
    sft = cmds[1]
    assert sft[sft.index("--trace-hops") + 1] == "[1,2,3,4]" and sft[sft.index("--max-turns") + 1] == "6"
    assert str(tmp_path / "deep" / "expert" / "<expert run>") in sft[sft.index("--traces") + 1]
    args = build_parser().parse_args(cmds[2][1:])  # the RL stage is a valid train command with the recipe's room
    cfg = methods.train_config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                                  if getattr(args, f.name) is not None})
    assert "chain" in cfg.question_types and cfg.max_turns == 6 and cfg.max_total_tokens == 2048
    assert cfg.init_adapter == str(tmp_path / "deep" / "sft" / "<sft run>") and cfg.reward == "dynasearcher"
    adapters = [c[c.index("--adapter") + 1] for c in cmds[3:]]
    assert adapters[:2] == ["data/adapters/search_r1-sft-grpo"] * 2 and adapters[4].endswith("<train run>")
    assert all(c[c.index("--max-turns") + 1] == "6" for c in cmds[3:])  # the baseline gets the same turns
    assert not (tmp_path / "deep").exists() and "--outline" not in cmds[0]
    _recipe().main(["--dry-run", "--outline", "--out", str(tmp_path / "deep")])
    outline = _commands(capsys.readouterr().out)
    assert "--outline" in outline[0]  # and its turns (up to 81 tokens) fit every stage's and eval's budget
    assert all(c[c.index("--max-new-tokens") + 1] == "96" for c in outline[1:] + cmds[1:])
    _recipe().main(["--dry-run", "--residual", "--out", str(tmp_path / "deep")])
    residual = _commands(capsys.readouterr().out)
    assert "--residual" in residual[0] and "--outline" not in residual[0] and "--residual" not in cmds[0]
    with pytest.raises(SystemExit):
        _recipe().main(["--dry-run", "--residual", "--outline", "--out", str(tmp_path / "deep")])
    assert "give one of them" in capsys.readouterr().err
    _recipe().main(["--dry-run", "--hop-repeats", '{"3": 3, "4": 3}', "--out", str(tmp_path / "deep")])
    out = capsys.readouterr().out
    sft, rl = _commands(out)[1:3]
    for stage in (sft, rl):  # both stages oversample, as valid JSON
        assert stage[stage.index("--hop-repeats") + 1] == '{"3": 3, "4": 3}'


def _eval(parent: Path, name: str, cem: list[float], searches: list[int]) -> None:
    from workbench.storage.runs import Run

    run = Run.create(parent, kind="eval", name=name, config={"kind": "eval"})
    hops = [1, 2, 3, 4] * (len(cem) // 4)
    pd.DataFrame({"example_id": [f"{name.split('-')[-1]}{i}" for i in range(len(cem))], "method": "search_r1+lora",
                  "hops": hops, "cem": cem, "n_searches": searches, "finish_reason": "answer", "format_ok": True,
                  "answer": "x"}).to_parquet(run.path / "trajectories.parquet")
    run.mark_complete()


def test_report_tables_and_comparisons_from_finished_evals(tmp_path, capsys):
    out = tmp_path / "deep"
    for split in ("dev", "test"):
        _eval(out / "eval", f"shipped-{split}", [1, 1, 0, 0] * 3, [2, 2, 2, 2] * 3)
        _eval(out / "eval", f"rl-{split}", [1, 1, 1, 0] * 3, [1, 2, 3, 4] * 3)
    _recipe().main(["--report-only", "--out", str(out)])
    text = (out / "report.md").read_text()
    assert "## deep SFT + RL: searches against hops" in text and "| 3 | 6 | 1.000 | 3.00 | +0.00 |" in text
    assert "| 4 | 6 | 0.000 | 2.00 | -2.00 |" in text  # the shipped adapter's two searches on four hops
    assert (out / "shipped_vs_rl" / "comparison.json").is_file() and not (out / "sft_vs_rl").exists()
    assert "--out" in text and "deep_recipe.py" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--report-only"], "no finished eval under"),
    (["--max-turns", "0", "--dry-run"], "--max-turns must be at least 1"),
])
def test_bad_arguments_are_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _recipe().main([*argv, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err + str(exc.value.code)  # argparse prints; a SystemExit says it


def test_the_shipped_deep_recipe_figures_are_what_readme_and_results_quote():
    """The deep recipe's first run: the per-level cover-EM and paired differences RESULTS' tables and the README
    quote, recomputed from the shipped comparison files."""
    from workbench.eval import paired

    root = BENCH.parent
    readme, results = (root / "README.md").read_text() + "".join(p.read_text() for p in sorted((root / "docs").rglob("*.md"))), (root / "bench" / "RESULTS.md").read_text()  # README and the guide
    folder = root / "data" / "results" / "deep_recipe"

    def rows(name):
        return paired.Comparison.load(folder / name / "comparison.json").rows().set_index("hops")

    def cell(r, h):
        return f"{r.loc[h, 'diff']:+.3f} [{r.loc[h, 'diff_lo']:+.2f}, {r.loc[h, 'diff_hi']:+.2f}]".replace("-", "−")

    for name in ("shipped_vs_sft", "sft_vs_rl", "shipped_vs_rl"):
        r = rows(name)
        assert int(r.loc["all", "n"]) == 180
        assert " | ".join(cell(r, h) for h in ("all", "1", "2", "3", "4")) in results, name
    sft, rl = rows("shipped_vs_sft"), rows("sft_vs_rl")
    for label, side, r in (("shipped `search_r1-sft-grpo`", "a", sft), ("deep SFT", "b", sft), ("deep SFT + RL", "b", rl)):
        levels = " | ".join(f"{r.loc[h, side]:.3f}" for h in ("1", "2", "3", "4", "all"))
        assert f"| {label} | {levels} |" in results, label
    assert f"three-hop cover-EM {sft.loc['3', 'b']:.3f} after SFT and {rl.loc['3', 'b']:.3f}" in readme
    assert cell(sft, "all") in readme
    # searches and mid-chain answers per level come from the run's report (search_depth's tables, written by the recipe)
    report = (folder / "report.md").read_text().split("## ")
    for label, section in (("shipped `search_r1-sft-grpo`", "shipped search_r1-sft-grpo: searches"),
                           ("deep SFT", "deep SFT: searches"), ("deep SFT + RL", "deep SFT + RL: searches")):
        table = next(p for p in report if p.startswith(section))
        cells = {int(line.split("|")[1]): [c.strip() for c in line.split("|")[1:-1]]
                 for line in table.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
        searches = " / ".join(cells[h][3] for h in (1, 2, 3, 4))
        mid = f"{cells[3][9]} / {cells[4][9]}"
        assert f"| {searches} | {mid} |" in results.split(f"| {label} |")[1].splitlines()[0] + "|", label


def test_the_outline_run_figures_are_what_results_quotes():
    """The outline run's per-level cover-EM and paired differences in RESULTS, recomputed from its comparison files."""
    from workbench.eval import paired

    root = BENCH.parent
    results = (root / "bench" / "RESULTS.md").read_text()
    section = results.split("### The deep recipe with outline traces")[1].split("\n## ")[0]
    folder = root / "data" / "results" / "deep_outline"

    def rows(name):
        return paired.Comparison.load(folder / name / "comparison.json").rows().set_index("hops")

    sft, rl, both = rows("shipped_vs_sft"), rows("sft_vs_rl"), rows("shipped_vs_rl")
    for label, side, r in (("shipped `search_r1-sft-grpo`", "a", sft), ("outline SFT", "b", sft),
                           ("outline SFT + RL", "b", rl)):
        levels = " | ".join(f"{r.loc[h, side]:.3f}" for h in ("1", "2", "3", "4", "all"))
        assert f"| {label} | {levels} |" in section, label
    for text, r in (("outline SFT − shipped", sft), ("outline RL − outline SFT", rl), ("outline RL − shipped", both)):
        cell = f"{r.loc['all', 'diff']:+.3f} [{r.loc['all', 'diff_lo']:+.2f}, {r.loc['all', 'diff_hi']:+.2f}]"
        assert f"{text} {cell.replace('-', '−')}" in section, text
        assert int(r.loc["all", "n"]) == 180
    budget = rows("sft_64_vs_96_tokens")  # the first run's SFT adapter, dev, at 64 and at 96 tokens a turn
    cell = f"{budget.loc['all', 'diff']:+.3f} [{budget.loc['all', 'diff_lo']:+.2f}, {budget.loc['all', 'diff_hi']:+.2f}]"
    assert f"cover-EM {budget.loc['all', 'a']:.3f} → {budget.loc['all', 'b']:.3f}, paired {cell.replace('-', '−')}" in section
