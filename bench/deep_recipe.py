"""The deep multi-hop recipe: the shipped recipe's stages with room for three and four hops,
run and judged in one command.

    .venv/bin/python bench/deep_recipe.py                    # every stage, then the tables
    .venv/bin/python bench/deep_recipe.py --dry-run          # print the stages' commands only
    .venv/bin/python bench/deep_recipe.py --report-only      # the tables from the finished runs

What changes against the shipped recipe (README, "the recipe"), and why (bench/RESULTS.md, "Deep multi-hop: why
three- and four-hop questions fail"): the expert traces cover all four hop levels (``--hops 1,2,3,4``: 420 train
traces, not 336), the RL stage samples the 3- and 4-hop ``chain`` questions too, and every stage gets the turns
and tokens four searches need (``--max-turns 6``, ``--max-total-tokens 2048``, and ``--max-new-tokens 96``: the
expert's turns run to 75 tokens, 81 with ``--outline``, and a turn cut at the budget loses its closing tag; the
first two runs had 64). Everything else is the recipe's.

Stages, each one command (printed as it starts; a finished run is reused and an SFT or RL run stopped midway
continues from its newest checkpoint, so an interrupted recipe continues):

1. ``workbench expert``: expert traces of the train split, hops 1-4;
2. ``workbench sft``: the cold start on them;
3. ``workbench train``: the RL stage from the SFT adapter (DynaSearcher's reward, GRPO, dynamic filter);
4. ``workbench eval``: the SFT adapter, the RL adapter and the shipped ``search_r1-sft-grpo`` (the baseline, given
   the same turns) on the world's dev and test splits, greedy;
5. the tables: searches against hops per level for each adapter (:mod:`bench.search_depth`; the goal: 3- and 4-hop
   cover-EM ≥ 0.40, 2-hop ≥ 0.70, 1-hop ≥ 0.85, searches within ±0.3 of the hop count on each level), and paired
   comparisons with 95% intervals (shipped → SFT, SFT → RL, shipped → RL) as ``comparison.json`` files notebook 05
   draws.

``OUT/log.jsonl`` records every command with its commit, start, seconds and load average, and
``OUT/report.md`` the tables.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablate import EVAL, ROOT, finished, run_logged, train_stage, with_values, workbench  # noqa: E402  (bench/ is not a package)

SHIPPED = "data/adapters/search_r1-sft-grpo"
QUESTION_TYPES = '["1hop","compositional","comparison","inference","chain"]'  # chain: the 3- and 4-hop questions


def stage_args(args: argparse.Namespace) -> dict[str, list[str]]:
    """Every stage's flags (the expert's, the SFT's and the RL stage's), from the command line's values."""
    budgets = ["--max-turns", str(args.max_turns), "--max-new-tokens", str(args.max_new_tokens), "--max-total-tokens",
               str(args.max_total_tokens)]
    repeats = ["--hop-repeats", args.hop_repeats] if args.hop_repeats else []
    return {
        "expert": ["--method", "search_r1", "--split", "train", "--hops", "1,2,3,4", *(["--outline"] if args.outline else []),
                   *(["--residual"] if args.residual else [])],
        "sft": ["--method", "search_r1", "--trace-hops", "[1,2,3,4]", "--steps", str(args.sft_steps), "--batch-size", "4",
                "--micro-batch-size", "2", "--lr", "4e-4", "--eval-limit", "0", *budgets, "--save-every", "30",
                "--seed", str(args.seed), "--threads", "2", *repeats],
        "train": ["--method", "search_r1", "--reward", "dynasearcher", "--encoder", "none", "--question-types",
                  QUESTION_TYPES, "--temperature", "0.7", "--steps", str(args.rl_steps), "--questions-per-step", "3",
                  "--group-size", "8", *budgets, "--lr", "1e-4", "--loss-overrides",
                  '{"kl_coef": 0.0, "dynamic_filter": true, "filter_max_rounds": 1}', "--micro-batching",
                  "shared_prefix", "--threads", "2", "--save-every", "2", "--eval-limit", "0", "--seed", str(args.seed),
                  *repeats],
    }


def eval_args(max_turns: int, max_new_tokens: int) -> list[str]:
    """The ablations' held-out eval flags with this recipe's turns and tokens a turn."""
    return with_values(EVAL, max_turns=max_turns, max_new_tokens=max_new_tokens)


def run_stage(kind: str, flags: list[str], home: Path, log: Path, dry: bool) -> Path:
    """Run ``workbench KIND FLAGS --out HOME`` unless HOME holds a finished run (an SFT or RL run stopped midway
    continues from its checkpoint); that run (a placeholder in a dry run)."""
    cmd = [workbench(), kind, *flags, "--no-progress", "--out", str(home)]
    if kind in ("sft", "train"):
        return train_stage(cmd, home, log, dry, arm="deep", seed=0, stage=kind)
    done = finished(home)
    if done is None:
        run_logged(cmd, log, dry, arm="deep", seed=0, stage=kind)
        done = finished(home) or home / f"<{kind} run>"
    return done


def evaluate(label: str, adapter: Path | str, out: Path, log: Path, dry: bool, max_turns: int,
             max_new_tokens: int) -> list[Path]:
    """``label``'s adapter on dev and test (each split unless finished); the two eval runs."""
    runs = []
    for split in ("dev", "test"):
        name = f"{label}-{split}"
        done = finished(out / "eval", name)
        if done is None:
            run_logged([workbench(), "eval", "--method", "search_r1+lora", "--adapter", str(adapter), "--split", split,
                        *eval_args(max_turns, max_new_tokens), "--no-progress", "--out", str(out / "eval"), "--name", name], log, dry,
                       arm=label, seed=0, stage=f"eval {split}")
            done = finished(out / "eval", name) or out / "eval" / f"<{name} run>"
        runs.append(done)
    return runs


LABELS = {"shipped": "shipped search_r1-sft-grpo", "sft": "deep SFT", "rl": "deep SFT + RL"}


def report(out: Path, evals: dict[str, list[Path]], command: str) -> str:
    """Searches against hops per adapter, and the paired comparisons; writes ``report.md`` and the comparisons."""
    import search_depth

    from workbench.eval.paired import CompareError, Comparison, Side

    def rel(r: Path) -> str:  # the checkout's runs as relative paths: the report and comparisons can ship
        return str(r.relative_to(ROOT)) if Path(r).is_relative_to(ROOT) else str(r)

    parts = [f"# The deep multi-hop recipe\n\nRe-run: `{command}`\n"]
    for key, runs in evals.items():
        t = search_depth.table(search_depth.load([str(r) for r in runs], "search_r1+lora"))
        parts.append(f"## {LABELS[key]}: searches against hops (dev + test)\n\n{search_depth.markdown(t)}\n")
    for a, b in (("shipped", "sft"), ("sft", "rl"), ("shipped", "rl")):
        if a not in evals or b not in evals:
            continue
        try:
            c = Comparison.from_runs(f"deep recipe: {LABELS[a]} vs {LABELS[b]}",
                                     Side(LABELS[a], "search_r1+lora", [[str(r) for r in evals[a]]]),
                                     Side(LABELS[b], "search_r1+lora", [[str(r) for r in evals[b]]]),
                                     question="Does the deep recipe answer three- and four-hop questions?",
                                     command=command)
        except CompareError as e:
            parts.append(f"## {LABELS[a]} vs {LABELS[b]}\n\nnot compared: {e}\n")
            continue
        for side in (c.a, c.b):
            side.runs = [[rel(Path(r)) for r in seed] for seed in side.runs]
        path = c.save(out / f"{a}_vs_{b}" / "comparison.json")
        parts.append(f"## {c.name} (cover-EM, paired by question; `{rel(path)}`)\n\n{c.markdown()}\n")
    text = "\n".join(parts)
    (out / "report.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/deep_recipe", help="folder the stages' runs go to (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="the SFT and RL stages' seed")
    ap.add_argument("--sft-steps", type=int, default=210, help="SFT steps of 4 traces (210: two passes over 420)")
    ap.add_argument("--rl-steps", type=int, default=8, help="RL steps of 3 questions x 8 samples")
    ap.add_argument("--max-turns", type=int, default=6, help="policy turns, every stage and eval (4 hops need 5)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="tokens a policy turn may hold, every stage "
                    "and eval (the expert's turns run to 75 tokens, 81 with --outline)")
    ap.add_argument("--max-total-tokens", type=int, default=2048, help="tokens a trajectory may hold in training "
                    "(the longest 4-hop expert trace has 1,591)")
    ap.add_argument("--outline", action="store_true", help="expert traces that write the plan out and count the "
                    "steps (workbench expert --outline); use another --out")
    ap.add_argument("--residual", action="store_true", help="expert traces that write the question left after each "
                    "hop (workbench expert --residual); use another --out")
    ap.add_argument("--hop-repeats", default=None, help="oversample deep questions in the SFT and RL stages: JSON "
                    "times per epoch by hop count, e.g. '{\"3\": 3, \"4\": 3}' (workbench sft/train --hop-repeats); "
                    "use another --out")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--report-only", action="store_true", help="the tables from the finished runs, train nothing")
    args = ap.parse_args(argv)
    if args.outline and args.residual:
        ap.error("--outline and --residual are two ways to write the expert's steps; give one of them")
    for name in ("sft_steps", "rl_steps", "max_turns", "max_new_tokens", "max_total_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    out = Path(args.out)
    if not out.is_absolute():
        out = ROOT / out
    log = out / "log.jsonl"
    flags = stage_args(args)
    command = ".venv/bin/python bench/deep_recipe.py" + "".join(  # the flags given; a switch as itself
        f" --{k.replace('_', '-')}" + ("" if v is True else f" {shlex.quote(str(v))}") for k, v in vars(args).items()
        if k not in ("dry_run", "report_only") and v != ap.get_default(k))
    if args.report_only:
        evals = {}
        for key in LABELS:
            runs = [finished(out / "eval", f"{key}-{s}") for s in ("dev", "test")]
            if None not in runs:
                evals[key] = runs
        if not evals:
            raise SystemExit(f"deep_recipe: no finished eval under {out / 'eval'}; run the recipe first")
        print(report(out, evals, command))
        return
    if not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    expert = run_stage("expert", flags["expert"], out / "expert", log, args.dry_run)
    sft = run_stage("sft", [*flags["sft"][:2], "--traces", json.dumps([str(expert)]), *flags["sft"][2:]], out / "sft",
                    log, args.dry_run)
    rl = run_stage("train", [*flags["train"][:6], "--init-adapter", str(sft), *flags["train"][6:]], out / "train", log,
                   args.dry_run)
    evals = {key: evaluate(key, adapter, out, log, args.dry_run, args.max_turns, args.max_new_tokens)
             for key, adapter in (("shipped", SHIPPED), ("sft", sft), ("rl", rl))}
    if not args.dry_run:
        print(report(out, evals, command))


if __name__ == "__main__":
    main()
