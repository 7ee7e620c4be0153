"""The seeds' ablations in miniature: each arm trained at equal compute with several seeds, evaluated on the same
held-out questions, compared paired by question with 95% intervals. One command re-runs an ablation:

    .venv/bin/python bench/ablate.py dynasearcher_gain --seeds 0,1          # train + eval every arm, then compare
    .venv/bin/python bench/ablate.py dynasearcher_gain --dry-run            # print the commands only
    .venv/bin/python bench/ablate.py dynasearcher_gain --compare-only       # the table from the finished runs
    .venv/bin/python bench/ablate.py --list

Each arm is the recipe's RL stage (README, "the recipe") from an SFT adapter with one part changed; every arm gets
the same steps, questions per step, group size and budgets. The adapter is the shipped ``search_r1-sft`` for the
ablations in Search-R1's protocol; for the others (R-Search's evidence, When-to-Search) the command first makes
its protocol's cold start the recipe's way (expert traces of the 1- and 2-hop train questions, then the recipe's
SFT stage, ~55 min on 2 cores) into ``OUT/<ablation>/cold_start/``, once, unless ``--init-adapter`` names one.

An arm × seed is trained into ``OUT/<ablation>/<arm>/seed<S>/train``, its adapter evaluated greedily on the
world's dev and test splits into ``.../eval``; a finished train or eval run is reused, so an interrupted ablation
continues where it stopped (one made with another ``--max-new-tokens`` than the ablation now gives is named).
``OUT/<ablation>/log.jsonl`` records every command with its commit, start, seconds and load average;
``OUT/<ablation>/comparison.json`` (``workbench.eval.paired.Comparison``, shown by notebook 05; with three arms one
per compared pair, ``OUT/<ablation>/<full>_vs_<arm>/comparison.json``) and ``comparison.md`` hold the paired table:
per question the mean over seeds, the difference B − A with a bootstrap interval over questions, and each seed's
mean beside it. Each arm is compared against the full one (B = the arm with every
part, A = the arm without one).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The recipe's RL stage (README, "the recipe"; data/adapters/README.md) minus the reward and the optimizer.
RECIPE_RL = ["--encoder", "none", "--question-types", '["1hop","compositional","comparison","inference"]', "--temperature", "0.7",
             "--steps", "8", "--questions-per-step", "3", "--group-size", "8", "--max-turns", "4",
             "--max-new-tokens", "64", "--max-total-tokens", "1536", "--lr", "1e-4",
             "--micro-batching", "shared_prefix", "--threads", "2", "--save-every", "2", "--eval-limit", "0"]

#: The recipe's SFT stage (README, "the recipe"; data/adapters/README.md): the cold start of an ablation whose
#: protocol has no shipped SFT adapter.
RECIPE_SFT = ["--trace-hops", "[1,2]", "--steps", "168", "--batch-size", "4", "--micro-batch-size", "2", "--lr", "4e-4",
              "--eval-limit", "0", "--max-turns", "4", "--max-new-tokens", "64", "--max-total-tokens", "1536",
              "--save-every", "21", "--seed", "0", "--threads", "2"]

#: Held-out evaluation of an arm's adapter: greedy, the recipe's budgets, chat observations.
EVAL = ["--protocol-kwargs", '{"observation_mode": "chat"}', "--max-turns", "4", "--max-new-tokens", "64",
        "--threads", "2"]


def with_values(flags: list[str], **values: object) -> list[str]:
    """A copy of the flag list ``flags`` with the named flags' values replaced (``max_turns=6``: ``--max-turns 6``)."""
    out = list(flags)
    for name, value in values.items():
        out[out.index("--" + name.replace("_", "-")) + 1] = str(value)
    return out


@dataclass
class Arm:
    label: str
    args: list[str] = field(default_factory=list)
    loss: dict = field(default_factory=dict)


@dataclass
class Ablation:
    question: str
    paper: str
    base: list[str]
    loss: dict
    arms: dict[str, Arm]
    full: str  # the arm with every part: each other arm is compared against it (B = full, A = the other)
    eval_method: str = "search_r1+lora"
    #: cover-EM first (``comparison.json``), then what else the question asks (``<metric>/comparison.json``)
    metrics: tuple[str, ...] = ("cem", "n_searches", "redundant")
    init_adapter: str | None = "data/adapters/search_r1-sft"  # None: made by cold_start(), or --init-adapter
    cold_start_method: str = "search_r1"  # whose protocol the expert traces and the SFT stage use
    #: the sentence encoder of the reward's embedding features: the recipe has none (its reward matches titles);
    #: When-to-Search's r_s is the similarity of a rollout's queries, undefined (NaN) without one
    encoder: str = "none"
    #: tokens a policy turn may hold in every stage (SFT, RL, eval): the recipe's 64, unless the cold start's expert
    #: turns run longer (R-Search's evidence turn quotes the sentences it used: up to 130 tokens)
    max_new_tokens: int = 64

    def train_args(self, arm: str, seed: int, out: Path, init_adapter: str | None = None) -> list[str]:
        loss = {**self.loss, **self.arms[arm].loss}
        init = init_adapter or self.init_adapter or "<SFT adapter>"
        rl = with_values(RECIPE_RL, encoder=self.encoder, max_new_tokens=self.max_new_tokens)
        return ["train", *self.base, "--init-adapter", init, *rl, *self.arms[arm].args,
                "--loss-overrides", json.dumps(loss), "--seed", str(seed), "--no-progress", "--out", str(out)]


ABLATIONS: dict[str, Ablation] = {
    "dynasearcher_gain": Ablation(
        question="DynaSearcher: does the gain term r_gain = α·(recall − hop penalty) raise accuracy and cut "
                 "redundant searches, against r_acc alone (α = 0)?",
        paper="DynaSearcher (file 000, Table 3, (b) → (c) w/ multi-reward): CEM 54.1 → 57.1 in-domain, 31.1 → 33.6 "
              "out-of-domain (F1 and EM slightly lower); Sec. 3.2: the penalty discourages redundant searches",
        base=["--method", "search_r1", "--reward", "dynasearcher"],
        loss={"kl_coef": 0.0, "dynamic_filter": True, "filter_max_rounds": 1},
        arms={"acc_gain": Arm("r_acc + r_gain"), "acc_only": Arm("r_acc only", ["--reward-params", '{"alpha": 0}'])},
        full="acc_gain", metrics=("cem", "recall", "n_searches", "redundant")),
    "dspo_parts": Ablation(
        question="DSPO: what do the dynamic filter and the sequence-level ratio each add? Full DSPO against GSPO "
                 "(no filter) and DAPO (token-level ratio)",
        paper="DSPO (file 002, Table 1, 7B, average over 7 datasets): DSPO 0.531 "
              "against w/o dynamic filter (GSPO) 0.313 and w/o sequence-level optimization (DAPO) 0.406",
        base=["--method", "dspo"],
        loss={"num_mini_batches": 4, "filter_max_rounds": 1},  # equal work: one rollout round, 4 updates a step
        arms={"dspo": Arm("DSPO", ["--preset", "dspo"]), "gspo": Arm("GSPO (no filter)", ["--preset", "gspo"]),
              "dapo": Arm("DAPO (token ratio)", ["--preset", "dapo"])},
        full="dspo"),
    "rsearch_evidence": Ablation(
        question="R-Search (evidence): does the evidence reward r_evid (a frozen model answering from the policy's "
                 "evidence alone) help, against r_ans + r_fmt?",
        paper="R-Search (file 001, Table 3, F1): w/o evidence is lower on every dataset, most on multi-hop "
              "(Qwen2.5-3B: 2Wiki 66.6 → 72.6, Bamboogle 42.3 → 49.8); the variant also drops the evidence from the "
              "rollout, here only the reward term",
        base=["--method", "rsearch_evidence", "--evidence-model", "smollm2-135m"],
        loss={"kl_coef": 0.0, "dynamic_filter": True, "filter_max_rounds": 1},
        arms={"evidence": Arm("r_ans + r_evid + r_fmt"),
              "no_evidence": Arm("r_ans + r_fmt", ["--reward-weights", '{"r_evid": 0}'])},
        full="evidence", eval_method="rsearch_evidence+lora", init_adapter=None, cold_start_method="rsearch_evidence",
        max_new_tokens=160),
    "when_to_search_stages": Ablation(
        question="Learning When to Search: does switching to the stage-2 reward (a correct answer pays 1 − β·RC) "
                 "cut searches without losing accuracy, against staying in stage 1?",
        paper="When-to-Search (file 004): stage 1 + 2 keeps accuracy with fewer retrievals than stage 1 alone",
        base=["--method", "when_to_search"],
        loss={"filter_max_rounds": 1},
        arms={"stages": Arm("stage 1 then 2"),
              "stage1": Arm("stage 1 only", ["--stage-switch-searches", "1000000"])},  # the switch never fires
        full="stages", eval_method="when_to_search+lora", init_adapter=None, cold_start_method="when_to_search",
        encoder="auto", max_new_tokens=80),  # its traces' turns run to 75 tokens
}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def finished(parent: Path, name: str = "") -> Path | None:
    """The complete run under ``parent`` (whose directory name contains ``name``), if there is one."""
    if not parent.is_dir():
        return None
    for run in sorted(parent.iterdir()):
        try:
            if name in run.name and json.loads((run / "status.json").read_text()).get("state") == "complete":
                return run
        except (OSError, ValueError):
            continue
    return None


def interrupted(parent: Path) -> Path | None:
    """The newest unfinished run under ``parent`` with a checkpoint to continue from (a stage stopped midway)."""
    from workbench.storage.runs import list_runs

    return next((r.path for r in list_runs(parent) if not r.complete and (r.path / "checkpoints" / "latest").exists()),
                None)


def check_reused(run: Path, cmd: list[str]) -> None:
    """Say so when the finished run reused in place of ``cmd`` was made with another turn budget than ``cmd`` gives
    (an ablation whose definition changed since): its figures keep the old budget until it is moved away."""
    if "--max-new-tokens" not in cmd:
        return
    want = int(cmd[cmd.index("--max-new-tokens") + 1])
    try:
        cfg = json.loads((run / "config.json").read_text())
    except (OSError, ValueError):
        return
    had = cfg.get("max_new_tokens", (cfg.get("eval") or {}).get("max_new_tokens"))
    if had is not None and int(had) != want:
        print(f"ablate: reusing {run}, made with --max-new-tokens {had}; this ablation now gives {want}: move the run "
              f"away to redo it with {want}", flush=True)


def train_stage(cmd: list[str], home: Path, log: Path, dry: bool, **meta: object) -> Path:
    """Run the training command ``cmd`` (``workbench sft|train ... --out HOME``) unless HOME holds a finished run;
    a run there that stopped midway continues from its newest checkpoint (``--resume``) instead of starting over.
    The finished run (a placeholder in a dry run)."""
    done = finished(home)
    if done is not None:
        check_reused(done, cmd)
    else:
        left = interrupted(home)
        if left is not None:  # the run's own config holds the rest; the thread count is not in it
            threads = cmd[cmd.index("--threads") + 1] if "--threads" in cmd else "2"
            cmd = [cmd[0], cmd[1], "--resume", str(left), "--threads", threads, "--no-progress"]
            meta = {**meta, "resumed": True}
        run_logged(cmd, log, dry, **meta)
        done = finished(home) or home / f"<{cmd[1]} run>"
    return done


def run_logged(cmd: list[str], log: Path, dry: bool, **meta: object) -> None:
    shown = " ".join(shlex.quote(c) for c in cmd)
    label = f"[{meta.get('arm')} seed {meta.get('seed')}: {meta.get('stage')}, {time.strftime('%H:%M:%S')}] "
    print(("would run: " if dry else label + "$ ") + shown, flush=True)
    if dry:
        return
    start, load, at = time.time(), os.getloadavg()[0], commit()  # the code the command starts with
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    rec = {"command": shown, "commit": at, "start": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
           "seconds": round(time.time() - start, 1), "load_before": round(load, 2),
           "load_after": round(os.getloadavg()[0], 2), "rc": rc, **meta}
    with log.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    if rc:
        raise SystemExit(f"ablate: the command above failed (exit {rc}); fix it and run the ablation again "
                         "(finished runs are reused)")


def workbench() -> str:
    exe = Path(sys.executable).with_name("workbench")
    return str(exe) if exe.exists() else "workbench"


def cold_start(ab: Ablation, out: Path, log: Path, dry: bool) -> str:
    """The ablation's SFT adapter made the recipe's way under ``out/cold_start`` (expert traces, then SFT on them);
    finished stages are reused. Returns the SFT run (a run directory ``--init-adapter`` takes)."""
    home, m = out / "cold_start", ab.cold_start_method
    expert = finished(home / "expert")
    if expert is None:
        run_logged([workbench(), "expert", "--method", m, "--split", "train", "--hops", "1,2", "--no-progress",
                    "--out", str(home / "expert")], log, dry, arm="cold_start", seed=0, stage="expert")
        expert = finished(home / "expert") or home / "expert" / "<expert run>"
    sft_flags = with_values(RECIPE_SFT, max_new_tokens=ab.max_new_tokens)
    sft = train_stage([workbench(), "sft", "--method", m, "--traces", json.dumps([str(expert)]), *sft_flags,
                       "--no-progress", "--out", str(home / "sft")], home / "sft", log, dry, arm="cold_start", seed=0,
                      stage="sft")
    return str(sft)


def run_arm(ab: Ablation, arm: str, seed: int, out: Path, log: Path, dry: bool, init: str | None) -> list[Path]:
    """Train (unless finished) and evaluate (each split unless finished) one arm × seed; the eval runs. Where both
    evals are finished the training run is not needed (it may be absent: eval runs copied from another machine)."""
    home = out / arm / f"seed{seed}"
    names = {split: f"{arm}-s{seed}-{split}" for split in ("dev", "test")}
    done = {split: finished(home / "eval", name) for split, name in names.items()}
    if all(done.values()):
        train = home / "train" / "<train run>"
    else:
        train = train_stage([workbench(), *ab.train_args(arm, seed, home / "train", init)], home / "train", log, dry,
                            arm=arm, seed=seed, stage="train")
    evals = []
    for split, name in names.items():
        cmd = [workbench(), "eval", "--method", ab.eval_method, "--adapter", str(train), "--split", split,
               *with_values(EVAL, max_new_tokens=ab.max_new_tokens), "--no-progress", "--out", str(home / "eval"),
               "--name", name]
        run = done[split]
        if run is not None:
            check_reused(run, cmd)
        else:
            run_logged(cmd, log, dry, arm=arm, seed=seed, stage=f"eval {split}")
            run = finished(home / "eval", name) or home / "eval" / f"<{name} run>"
        evals.append(run)
    return evals


def compare(name: str, ab: Ablation, out: Path, evals: dict[str, list[list[Path]]], seeds: list[int],
            init: str | None, given: str | None = None) -> None:
    """Write each arm's paired comparison against the full arm. ``init`` is the SFT adapter the arms started from
    (provenance); ``given`` the ``--init-adapter`` the user passed, which the re-run command repeats."""
    from workbench.eval.paired import CompareError, Comparison, Side, seed_markdown

    cmd = f".venv/bin/python bench/ablate.py {name} --seeds {','.join(map(str, seeds))} --out {out.parent}" + \
        (f" --init-adapter {given}" if given and given != ab.init_adapter else "")
    log = out / "log.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    prov = {"seeds": seeds, "commits": sorted({r["commit"] for r in records}),
            "train_seconds": {a: [r["seconds"] for r in records if r.get("arm") == a and r.get("stage") == "train"]
                              for a in ab.arms},
            "train_args": {a: ab.train_args(a, 0, Path("OUT"), init)[1:-5] for a in ab.arms},
            "init_adapter": init,
            "cold_start_seconds": {r["stage"]: r["seconds"] for r in records if r.get("arm") == "cold_start"},
            "load": [r["load_before"] for r in records], "machine": f"{os.cpu_count()} cores"}
    others = [a for a in ab.arms if a != ab.full and a in evals]  # the arms run so far (--arms)
    for other in others:
        pair = name if len(ab.arms) == 2 else f"{name}: {ab.full} vs {other}"
        folder = out if len(ab.arms) == 2 else out / f"{ab.full}_vs_{other}"
        sections = []
        for metric in ab.metrics:
            try:
                c = Comparison.from_runs(
                    pair if metric == "cem" else f"{pair} ({metric})",
                    Side(ab.arms[other].label, ab.eval_method, [[str(p) for p in s] for s in evals[other]]),
                    Side(ab.arms[ab.full].label, ab.eval_method, [[str(p) for p in s] for s in evals[ab.full]]),
                    metric=metric, question=ab.question, paper=ab.paper, command=cmd, provenance=prov)
            except CompareError as e:
                print(f"ablate: {metric} left out: {e}")
                continue
            path = c.save(folder / ("" if metric == "cem" else metric) / "comparison.json")
            sections.append(f"### {c.name}\n\n{c.markdown()}\n\nPer seed:\n\n"
                            f"{seed_markdown(c.seed_table(), c.a.label, c.b.label)}\n")
            print(f"wrote {path}")
        text = f"## {pair}\n\n{ab.question}\n\nPaper: {ab.paper}\n\n" + "\n".join(sections) + \
            f"\nRe-run: `{cmd}`\n"
        (folder / "comparison.md").write_text(text)
        print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="ablations: " + ", ".join(ABLATIONS),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ablation", nargs="?", help="which ablation (--list shows them)")
    ap.add_argument("--seeds", default="0,1", help="comma-separated training seeds, the same for every arm")
    ap.add_argument("--arms", default="", help="comma-separated arms to run (default: all)")
    ap.add_argument("--out", default="runs/ablations", help="root the ablation's folder is made in")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--compare-only", action="store_true", help="compare the finished runs, train nothing")
    ap.add_argument("--init-adapter", default=None, metavar="PATH",
                    help="the SFT adapter every arm starts from (default: the ablation's; required where it has none)")
    ap.add_argument("--list", action="store_true", help="name each ablation, its question and its arms")
    args = ap.parse_args()
    if args.list or not args.ablation:
        for n, ab in ABLATIONS.items():
            print(f"{n}: {ab.question}\n  arms: {', '.join(f'{k} ({v.label})' for k, v in ab.arms.items())}\n")
        return
    if args.ablation not in ABLATIONS:
        raise SystemExit(f"ablate: no ablation {args.ablation!r}; one of: {', '.join(ABLATIONS)}")
    ab = ABLATIONS[args.ablation]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"ablate: --seeds {args.seeds!r} is not a comma-separated list of integers, e.g. 0,1") from None
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] or list(ab.arms)
    bad = [a for a in arms if a not in ab.arms]
    if bad or not seeds:
        raise SystemExit(f"ablate: unknown arm(s) {', '.join(bad)}; {args.ablation} has: {', '.join(ab.arms)}"
                         if bad else "ablate: --seeds names no seed; e.g. --seeds 0,1")
    init = args.init_adapter or ab.init_adapter
    if init is not None and not args.compare_only and not args.dry_run and not Path(ROOT, init).exists():
        raise SystemExit(f"ablate: --init-adapter {init} does not exist; pass an SFT adapter or run directory of "
                         f"the {ab.cold_start_method} protocol, or leave it out"
                         + ("" if ab.init_adapter is None else f" (default: {ab.init_adapter})"))
    out = Path(args.out) / args.ablation
    if not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    if init is None and args.compare_only:  # the cold start this ablation made, for the comparison's provenance
        made = finished(out / "cold_start" / "sft")
        init = str(made) if made else None
    elif init is None:
        init = cold_start(ab, out, out / "log.jsonl", args.dry_run)
    evals: dict[str, list[list[Path]]] = {}
    for arm in arms:
        evals[arm] = []
        for seed in seeds:
            if args.compare_only:
                home = out / arm / f"seed{seed}" / "eval"
                runs = [finished(home, f"{arm}-s{seed}-{s}") for s in ("dev", "test")]
                if None in runs:
                    raise SystemExit(f"ablate: {arm} seed {seed} has no finished dev and test eval under {home}; "
                                     f"run `bench/ablate.py {args.ablation} --seeds {seed} --arms {arm}` first")
                evals[arm].append([r for r in runs if r is not None])
            else:
                evals[arm].append(run_arm(ab, arm, seed, out, out / "log.jsonl", args.dry_run, init))
    if args.dry_run:
        return
    if ab.full not in evals or len(evals) < 2:
        print(f"ablate: a comparison needs arm {ab.full!r} and another; run the rest with --arms, then --compare-only")
        return
    compare(args.ablation, ab, out, evals, seeds, init, args.init_adapter)


if __name__ == "__main__":
    main()
