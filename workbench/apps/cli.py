"""The ``workbench`` command line. ``workbench <command> --help`` documents each command."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- flag values
# argparse types: a bad value is argparse's error line naming the flag and the value (exit 2), before any work


def _finite_float(text: str) -> float:
    """A number flag's value; nan and the infinities are refused (no option reads them as "unbounded")."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _positive_int(text: str) -> int:
    """A count's value: a whole number >= 1."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return v


def _in_range(kind: type, rule: str) -> Callable[[str], Any]:
    """A number flag's type whose value must keep ``rule`` (the config's ``RANGES``, :mod:`workbench.util.ranges`)."""
    from workbench.util.ranges import value_error

    def value(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        error = value_error(v, rule, kind)  # the check a value from a file goes through (an adapter's settings)
        if error:
            raise argparse.ArgumentTypeError(error)
        return v

    value.__name__ = kind.__name__  # argparse names the type in its messages
    return value


def _port(any_free: bool) -> Callable[[str], int]:
    """A TCP port flag's type: 1..65535, and 0 (any free port) where the command can report the port it got."""
    low, fix = (0, "use 1..65535, or 0 for any free port") if any_free else (1, "use 1..65535")

    def port(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = -1
        if not low <= v <= 65535:
            raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port: {fix}")
        return v

    return port


def _out_dir(text: str) -> str:
    """``--out``: a directory that exists or can be made, in a folder this user can write in. Checked as the flags
    are read, so a bad one fails at once rather than after the work, whose results it would lose."""
    _nonempty(text)  # '' would be the current folder
    try:
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a file, not a directory: give a directory (made if missing)")
        there = path
        while not there.exists() and there != there.parent:  # the nearest folder that exists
            there = there.parent
        if not there.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {there} is a file, not a directory: give a directory (made "
                                             "if missing)")
        if not os.access(there, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{text}: {there} is not writable by this user: give a directory "
                                             "you can write in")
    except (OSError, ValueError) as e:  # a name the system refuses (too long, a NUL byte)
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return text


def _nonempty(text: str) -> str:
    """A text flag's value: not empty (``--resume ''`` started a new run, ``--model ''`` took the default model,
    ``--out ''`` wrote into the current folder: an empty value never stands for "the default")."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a non-empty value, got {text!r}")
    return text


def _run_name(text: str) -> str:
    """``--name``: a label a run folder can carry (:func:`workbench.storage.runs.run_label`), checked before the work
    (an eval makes its run folder after the evaluation)."""
    from workbench.storage.runs import run_label

    try:
        run_label(_nonempty(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _check_values(p: argparse.ArgumentParser) -> None:
    """The checks every command's flags share, whoever declared them: a float flag is finite, ``--out`` a directory
    this user can write in, ``--name`` a label a run folder can carry, a text value not empty. Ranges that depend on
    the flag (ports, counts) are in each flag's own type."""
    for action in p._actions:
        if action.type is float:
            action.type = _finite_float
        if action.dest == "out":
            action.type = _out_dir
        elif action.dest == "name" and action.option_strings:  # --name, not `methods NAME`
            action.type = _run_name
        elif action.type in (None, str) and action.nargs != 0 and not isinstance(
                action, (argparse._StoreConstAction, argparse._HelpAction, argparse._SubParsersAction,
                         argparse._CountAction, argparse._VersionAction)):
            action.type = _nonempty


# --------------------------------------------------------------------------- demo


def _demo_args(p: argparse.ArgumentParser) -> None:
    import inspect

    from workbench.apps.demo import run_demo

    d = {k: v.default for k, v in inspect.signature(run_demo).parameters.items()}
    p.add_argument("--limit", type=_positive_int, default=d["limit"], help="dev questions to evaluate (default: %(default)s)")
    p.add_argument("--group-size", type=_positive_int, default=d["group_size"], help="samples per question and method (default: %(default)s)")
    p.add_argument("--out", default=None, help="runs root directory (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--model", default="smollm2-135m", help="model alias, local path or cached HF id (default: %(default)s)")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=d["temperature"], help="0 = greedy (default: %(default)s)")
    p.add_argument("--max-turns", type=_positive_int, default=d["max_turns"], help="policy turns per trajectory (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=d["max_new_tokens"], help="tokens per turn (default: %(default)s)")
    p.add_argument("--no-notebooks", action="store_true", help="skip executing the notebooks and writing the static dashboard into the run")
    p.add_argument("--rollout-engine", default=d["rollout_engine"], choices=("auto", "fp32", "int4", "graph"),
                   help="fp32: the exact HF backend; int4: int4 decode / bf16 prefill (CPU); graph: LoRA merged, decode step as a CUDA graph (CUDA); auto: graph on CUDA, int4 on a CPU with native bf16 or AVX2/NEON (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: $OMP_NUM_THREADS, else 1 on a busy machine, else the cores; see workbench.util.threads)")


def demo(args: argparse.Namespace) -> int:
    from workbench.apps.demo import run_demo
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    run_demo(
        limit=args.limit,
        out=args.out,
        seed=args.seed,
        model=args.model,
        device=args.device,
        temperature=args.temperature,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        notebooks=not args.no_notebooks,
        group_size=args.group_size,
        rollout_engine=args.rollout_engine,
    )
    return 0


# --------------------------------------------------------------------------- eval


def _eval_args(p: argparse.ArgumentParser) -> None:
    from workbench.data.records import LAYOUTS
    from workbench.eval.config import EvalConfig

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench eval --method direct,search_r1 --limit 20\n"
        "  workbench eval --method search_r1,vanilla_rag --dataset hotpotqa_dev_distractor.json --limit 50\n"
        "  workbench eval --method search_r1 --dataset nq/dev.jsonl --corpus wiki18.jsonl --retriever dense\n"
        "  workbench eval --method search_r1 --dataset musique_ans_dev.jsonl --corpus per-question\n"
        "  workbench eval --method search_r1 --dataset nq/dev.jsonl --retrieval-url http://127.0.0.1:8000   # shared server\n"
        "  workbench eval --method dynasearcher --dataset 2wiki_dev.json --kg codex-s/train.txt entities.json relations.json\n"
        "  workbench eval --suite search-r1 --data-dir flashrag_datasets --method search_r1+lora --adapter DIR \\\n"
        "      --corpus wiki18.jsonl   # Search-R1's seven benchmarks, one table (Markdown, CSV, LaTeX)\n"
        "writes runs/<run_id>/ with trajectories.parquet, examples.jsonl, config.json, metrics.json (per method\n"
        "and per hop count) and features.parquet; prints the metrics tables. With --suite: one run per dataset\n"
        "and runs/<stamp>-suite-<name>/ with table.md, table.csv, table.tex and suite.json."
    )
    # every EvalConfig field is a flag, its help the field's docstring; these fields read a little differently
    _config_flags(p, EvalConfig, flags={
        "methods": {"flags": ["--method"], "type": str, "required": True, "metavar": "M[,M...]"},
        "retriever": {"choices": ("bm25", "dense")},
        "corpus": {"metavar": "FILE|pooled|per-question"},
        "format": {"choices": LAYOUTS},
        "kg": {"type": str, "nargs": "+", "metavar": "FILE"},
        "retrieval_url": {"metavar": "URL"},
        "protocol_kwargs": {"metavar": "JSON"},
        "adapter": {"metavar": "DIR"},
        "batch_mib": {"metavar": "MIB"},
        "skip_unavailable": {"action": "store_true"},
        "allow_pickle_weights": {"action": "store_true"},
        "override_adapter": {"action": "store_true"},
    })
    p.add_argument("--suite", default=None, metavar="NAME",
                   help="evaluate a paper's table of datasets instead of --dataset: search-r1 (NQ, TriviaQA, PopQA, "
                        "HotpotQA, 2Wiki, MuSiQue, Bamboogle; exact match, top-3 passages, test split else dev), read "
                        "from --data-dir")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="with --suite: a folder in FlashRAG's dataset layout, <dataset>/<split>.jsonl (datasets it "
                        "lacks are named and skipped)")
    p.add_argument("--out", default=None, metavar="DIR", help="runs root the run directory is created in (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--name", default=None, help="label in the run id (default: <dataset>-<methods>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: $OMP_NUM_THREADS, else 1 on a busy machine, else the cores; see workbench.util.threads)")


def eval_command(args: argparse.Namespace) -> int:
    import dataclasses

    from workbench.eval.config import DEFAULT_MODEL, EvalConfig

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(EvalConfig) if getattr(args, f.name) is not None}
    EvalConfig(**{"dataset": "world", "model": DEFAULT_MODEL, **given})  # a bad value is said before the heavy imports
    if args.suite is not None or args.data_dir is not None:
        return _suite_command(args, given)
    from workbench.eval.runner import RunNotSaved, format_table, run_dir_hint, run_eval
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    try:
        run = run_eval(given.pop("methods"), given.pop("dataset", "world"), given.pop("model", DEFAULT_MODEL),
                       out=args.out, name=args.name, progress=not args.no_progress, **given)
    except RunNotSaved as e:  # the scores are shown, then the one error line says the run was not written
        print(f"\nper method (NOT SAVED):\n{format_table(e.results)}")
        raise
    metrics = run.metrics()
    print(f"\nper method ({metrics['n_examples']} questions):\n{format_table(metrics)}")
    if any(s.get("by_hops") for s in metrics["methods"].values()):
        print(f"\nper hop count:\n{format_table(metrics, by_hops=True)}")
    print(f"\ntools took {100 * metrics['tool_share']:.2f}% of rollout time "
          f"({metrics['tool_seconds']:.2f}s of {metrics['rollout_seconds']:.1f}s)")
    print(run_dir_hint(run))
    return 0


def _suite_command(args: argparse.Namespace, given: dict[str, Any]) -> int:
    """``workbench eval --suite NAME --data-dir DIR``: every dataset of the suite, then its table."""
    from workbench.eval.suites import get_suite

    if args.suite is None or args.data_dir is None:
        raise ValueError("--suite and --data-dir go together: --suite names the table (e.g. search-r1), --data-dir "
                         "the folder of its datasets in FlashRAG's layout (<dataset>/<split>.jsonl)")
    if "dataset" in given:
        raise ValueError(f"--dataset {given['dataset']} with --suite: the suite's datasets come from --data-dir; "
                         "drop --dataset (or --suite to evaluate one file)")
    if args.name is not None:
        raise ValueError("--name with --suite: each dataset's run is named <dataset>-suite-<suite>; drop --name")
    get_suite(args.suite)  # a wrong name is said before anything loads
    from workbench.eval.suites import run_suite
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    from workbench.eval.config import DEFAULT_MODEL

    methods, model = given.pop("methods"), given.pop("model", DEFAULT_MODEL)
    split = given.pop("split", None)
    folder, _ = run_suite(args.suite, args.data_dir, methods, model, out=args.out, split=split,
                          progress=not args.no_progress, **given)
    print("\n" + (folder / "table.md").read_text(encoding="utf-8"))
    print(f"table written to {folder} (table.md, table.csv, table.tex, suite.json)")
    return 0


# --------------------------------------------------------------------------- ask


def _ask_args(p: argparse.ArgumentParser) -> None:
    import dataclasses

    from workbench.eval.config import ASK_FIELDS, DEFAULT_METHOD, EvalConfig

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench ask \"Who founded Tarnholm Mills?\"                 # the trained agent over the world\n"
        "  workbench ask \"Who founded Tarnholm Mills?\" --method search_r1   # the untrained model\n"
        "  workbench ask \"who wrote hamlet\" --corpus wiki.jsonl --method dynasearcher --kg ...\n"
        "  workbench ask \"who wrote hamlet\" --retrieval-url http://127.0.0.1:8000   # a running serve-retrieval\n"
        "  workbench ask \"who wrote hamlet\" --retriever dense --index e5_Flat.index --corpus wiki-18.jsonl "
        "--encoder /models/e5-base-v2\n"
        "prints each turn as it happens (thought, query, passages found, answer) and writes the exchange as a run\n"
        "(kind ask: one trajectory) that the inspector and the dashboard open."
    )
    p.add_argument("question", help="the question")
    p.add_argument("--method", default=DEFAULT_METHOD, metavar="M", help="the method that answers (workbench methods); "
                   "M+lora: with --adapter (default: %(default)s, with the shipped adapter data/adapters/search_r1-sft-grpo)")
    p.add_argument("--answer", action="append", default=None, metavar="TEXT",
                   help="a gold answer, if you know it (repeat for aliases): the run then scores the agent's answer")
    _config_flags(p, EvalConfig, [f for f in dataclasses.fields(EvalConfig) if f.name in ASK_FIELDS], flags={
        "retriever": {"choices": ("bm25", "dense")},
        "corpus": {"metavar": "world|FILE"},
        "kg": {"type": str, "nargs": "+", "metavar": "FILE"},
        "retrieval_url": {"metavar": "URL"},
        "protocol_kwargs": {"metavar": "JSON", "help": "protocol arguments over the method's declared ones (default: "
                            "{\"observation_mode\": \"chat\"} where the protocol takes it: the layout the adapters "
                            "were trained on)"},
        "adapter": {"metavar": "DIR"},
        "index": {"metavar": "FILE"},
        "batch_mib": {"metavar": "MIB"},
        "allow_pickle_weights": {"action": "store_true"},
        "override_adapter": {"action": "store_true"},
    })
    p.add_argument("--out", default=None, metavar="DIR", help="runs root the run directory is created in (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: $OMP_NUM_THREADS, else 1 on a busy machine, else the cores; see workbench.util.threads)")


def ask_command(args: argparse.Namespace) -> int:
    from workbench.eval.ask import ASK_FIELDS, Asker, format_step
    from workbench.eval.runner import run_dir_hint
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    given = {k: getattr(args, k) for k in ASK_FIELDS if getattr(args, k) not in (None, False)}
    print(f"Q: {args.question}", flush=True)
    done = Asker().ask(args.question, args.method, answers=args.answer, out=args.out,
                       on_step=lambda step: print(format_step(step), flush=True),
                       log=lambda msg: print(msg, file=sys.stderr, flush=True), **given)
    t = done.trajectory
    searches = sum(len(turn.tool_calls) for turn in t.turns)
    print(f"\nanswer: {t.answer if t.answer is not None else '(none: ' + t.finish_reason + ')'}  "
          f"({sum(turn.kind == 'policy' for turn in t.turns)} turns, {searches} tool calls, {done.seconds:.1f}s)")
    if args.answer:  # the gold answers given: the verdict, as the run stores it
        from workbench.eval.compare import judge

        v = judge(t.answer, args.answer)
        print(f"verdict: {'correct' if v.correct else 'wrong'} ({v.reason()})")
    print(run_dir_hint(done.run))
    return 0


# --------------------------------------------------------------------------- train

_TRAIN_FLAGS = {"preset": "--preset", "reward": "--reward", "model": "--model"}


def _train_args(p: argparse.ArgumentParser) -> None:

    from workbench.rl.train_config import TrainConfig

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench train --preset dspo --reward dynasearcher --steps 20\n"
        "  workbench train --method dynasearcher --preset dspo   # a method's declaration, DSPO optimizer\n"
        "  workbench train --loss-overrides '{\"surrogate\": \"dual_clip\", \"adv_norm\": \"rloo\"}'\n"
        "  workbench train --config my_run.yaml --steps 50          # file first, flags on top\n"
        "  workbench train --resume runs/train-...                  # continue a killed run\n"
        "  accelerate launch --multi_gpu --num_processes 2 -m workbench train --steps 4  # data parallel\n"
        "    (torchrun launcher: NCCL on GPUs, gloo on CPU-only machines)\n"
        "  workbench train --engine trl --method search_r1 --steps 1 --out runs/trl   # TRL's GRPOTrainer\n"
        "    (its own flags: workbench train --engine trl --help)\n"
        "dict/list fields take JSON, e.g. --reward-params '{\"alpha\": 0.3}' --question-types '[\"1hop\"]'.\n"
        "writes runs/<run_id>/: config.json, metrics.jsonl (one row per step), steps/, checkpoints/, metrics.json"
    )
    p.add_argument("--config", default=None, metavar="FILE", help="TrainConfig as JSON or YAML (flags override it)")
    p.add_argument("--reward-config", default=None, metavar="FILE",
                   help="the reward alone (reward, reward_params, reward_weights) from a JSON or YAML file, e.g. the "
                        "reward playground's 'save reward config'; over --config, under the reward flags")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue this run from its newest checkpoint")
    p.add_argument("--out", default=None, metavar="DIR", help="runs root the run directory is created in (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: $OMP_NUM_THREADS, else 1 on a busy machine, else the cores; see workbench.util.threads)")
    p.add_argument("--override-adapter", action="store_true",
                   help="keep the flags' values where they contradict what --init-adapter was trained with (its "
                        "provenance.json or its run's config.json: protocol, protocol arguments, turn budget, model); "
                        "without it each contradiction is an error, and values not given are taken from the adapter")
    _config_flags(p, TrainConfig)


def _train_command_args(p: argparse.ArgumentParser) -> None:
    _train_args(p)
    p.add_argument("--engine", choices=TRAIN_ENGINES, default="workbench",
                   help="workbench: the workbench's own trainer (the flags here); trl: TRL's GRPOTrainer with the "
                        "workbench's rollout function and rewards, which takes its own flags (see --engine trl --help)")


def _train_or_say(trainer: Any, command: str) -> Any:
    """``trainer.train()``; a write that fails on the way (a full disk) becomes one error line saying at which step
    the run stopped, what it keeps, and how to continue it."""
    try:
        return trainer.train()
    except OSError as e:
        if getattr(trainer, "run", None) is None:
            raise
        from workbench.rl.checkpoint import latest_checkpoint

        run = trainer.run.path
        then = (f"free space and continue it with `workbench {command} --resume {run}`" if latest_checkpoint(run)
                else "no checkpoint was saved yet: free space and start it again")
        raise OSError(f"{e.strerror or e} ({e.filename or 'a run file'}): {command} stopped at step {trainer.step}; "
                      f"{run} keeps the steps and checkpoints written before it (incomplete); {then}") from None


def _json_arg(text: str):
    def not_finite(name: str) -> None:  # NaN, Infinity: Python's json reads them; JSON has no such numbers
        raise argparse.ArgumentTypeError(f"expected JSON with finite numbers, got {name} in {text!r}")

    try:
        return json.loads(text, parse_constant=not_finite)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected JSON (e.g. '{{\"key\": 1}}' or '[\"a\"]'), got {text!r}: {e}") from e


def reward_config_fields(path: str | os.PathLike) -> dict[str, Any]:
    """The reward fields of a ``--reward-config`` file (:func:`workbench.methods.assemble.reward_config_fields`)."""
    from workbench.methods.assemble import reward_config_fields

    return reward_config_fields(path)


def train_command(args: argparse.Namespace) -> int:
    import dataclasses

    from workbench import methods
    from workbench.rl.train_config import TrainConfig
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    given = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.resume:
        if args.reward_config:
            given = {**methods.reward_config_fields(args.reward_config), **given}
        trainer = methods.resume(args.resume, progress=not args.no_progress, **given)
    else:  # a `method:` key in the file, or --method, starts from that method's declaration
        cfg = methods.assemble(config_file=args.config, reward_file=args.reward_config, flags=given,
                               override_adapter=args.override_adapter)
        trainer = methods.trainer(cfg, run=args.out, progress=not args.no_progress)
    if trainer.rank == 0:
        print(f"training {trainer.config.preset} / {trainer.config.reward} / {trainer.config.protocol} on "
              f"{trainer.config.model}: {trainer.config.steps} steps -> {trainer.run.path}", flush=True)
    run = _train_or_say(trainer, "train")
    if trainer.rank == 0:
        m = run.metrics()
        print(f"done: {m.get('steps')} steps, reward {m.get('reward_first', float('nan')):.3f} -> "
              f"{m.get('reward_last', float('nan')):.3f} (first/last quarter), {m.get('seconds_per_step', 0):.1f}s/step")
        if "eval_after" in m:
            b, a = m["eval_before"], m["eval_after"]
            print(f"held-out: reward {b['eval_reward_mean']:.3f} -> {a['eval_reward_mean']:.3f}, "
                  f"cover-EM {b['eval_cem']:.3f} -> {a['eval_cem']:.3f}, F1 {b['eval_f1']:.3f} -> {a['eval_f1']:.3f}")
        for alarm in m.get("alarms", []):
            print(f"alarm {alarm['name']} at step {alarm['step']}: {alarm['text']}")
        if "stopped_by_alarm" in m:
            print(f"stopped at step {m['stopped_by_alarm']['step']} by alarm {m['stopped_by_alarm']['name']} "
                  "(--stop-on-alarm)")
        if "best" in m:
            b = m["best"]
            print(f"adapter: {run.path / 'checkpoints' / 'best'} (step {b['step']}, validation {b['metric']} "
                  f"{b['value']:.3f}; the last step's beside it in {run.path / 'checkpoints'})")
        print(f"run: {run.path}  (adapter: {run.path / 'checkpoints'}; curves: workbench dashboard; what happened: "
              f"workbench report {run.path})")
    return 0


# --------------------------------------------------------------------------- expert


def _expert_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench expert --method search_r1 --split train --out runs/\n"
        "  workbench expert --method search_r1,dynasearcher,r1_searcher --limit 50\n"
        "  workbench expert --method search_r1 --dataset musique_ans_train.jsonl --hops 2,3,4\n"
        "each method's trace uses its training protocol (workbench train --method M): one search per hop whose\n"
        "query the real BM25 tool answers, observations rendered by the protocol, the answer in its format.\n"
        "writes one run per method (trajectories.parquet, examples.jsonl, metrics.json with the yield per hop\n"
        "count and why questions were dropped) and prints the yield table."
    )
    p.add_argument("--method", required=True, metavar="M[,M...]", help="method(s) whose protocol the traces follow")
    p.add_argument("--dataset", default="world", help="world (default), or a MuSiQue or 2WikiMultiHopQA file in its "
                   "published layout (a path, or a name load_dataset finds): each question searches its own paragraphs, "
                   "one search per annotated hop (MuSiQue's decomposition, 2Wiki's evidences)")
    p.add_argument("--split", default=None, help="world split (default: train); for a --dataset name, the split "
                   "whose file is looked up")
    p.add_argument("--limit", type=_positive_int, default=None, help="first N questions of the split (default: all)")
    p.add_argument("--hops", default=None, metavar="H[,H...]", help="only questions with these hop counts, e.g. 1,2")
    p.add_argument("--model", default="smollm2-135m", help="whose tokenizer encodes the traces (default: %(default)s)")
    p.add_argument("--protocol-kwargs", type=_json_arg, default=None, metavar="JSON",
                   help="protocol arguments over the method's training ones, e.g. '{\"observation_mode\": \"inline\"}'")
    p.add_argument("--max-new-tokens", type=_positive_int, default=256, help="tokens per expert turn at most (default: %(default)s)")
    p.add_argument("--max-total-tokens", type=_positive_int, default=4096, help="tokens per trajectory at most (default: %(default)s)")
    p.add_argument("--outline", action="store_true", help="the expert writes its plan out first (how many searches, "
                   "which relations) and 'Step k of n' before each search, so that a policy can count on deep questions")
    p.add_argument("--residual", action="store_true", help="after each hop the expert writes the question that is "
                   "left, the entity it found in place of what that hop answered ('Now the question is: Who founded "
                   "Zirnix Press?'), so that what remains of a deep question shows without counting; not with --outline")
    p.add_argument("--out", default=None, metavar="DIR", help="runs root the run directories are created in (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def expert_command(args: argparse.Namespace) -> int:
    from workbench.core.models import load_tokenizer
    from workbench.data.world import load_world
    from workbench.eval.expert import write_expert_run
    from workbench.methods import METHODS, get_method
    from workbench.rl.expert import expert_traces, format_yield
    from workbench.tools.toolbox import build_toolbox

    if args.outline and args.residual:
        raise ValueError("--outline and --residual are two ways to write the steps; give one of them")
    bench = str(args.dataset).lower() != "world"
    world = None if bench else load_world()
    if bench:
        from workbench.data.loaders import load_dataset

        examples = load_dataset(args.dataset, split=args.split)
        if not examples:
            raise ValueError(f"--dataset {args.dataset}: no questions")
    else:
        examples = world.split(args.split or "train")
    if args.hops:
        hops = {int(h) for h in args.hops.split(",") if h.strip()}
        examples = [e for e in examples if e.hops in hops]
    examples = examples[: args.limit] if args.limit else examples
    tokenizer = load_tokenizer(args.model)
    results = {}
    for method in [m.strip() for m in args.method.split(",") if m.strip()]:
        m = get_method(method)
        if m.expert is None:
            raise ValueError(f"--method {method}: no expert writer (its protocol {m.protocol.name!r} has none); "
                             f"methods with one: {', '.join(n for n, x in METHODS.items() if x.expert is not None)}")
        protocol = m.training_protocol(**(args.protocol_kwargs or {}))
        if bench:  # each question searches its own paragraphs
            from workbench.data.corpora import corpus_from_contexts

            def toolbox(ex, protocol=protocol):
                passages = corpus_from_contexts([ex], fill_supporting=False)
                return build_toolbox(protocol, passages=passages, tokenizer=tokenizer), passages
        else:
            toolbox = build_toolbox(protocol, world, tokenizer=tokenizer)
        res = expert_traces(examples, protocol, m.expert, toolbox, tokenizer, world, method=method,
                            max_new_tokens=args.max_new_tokens, max_total_tokens=args.max_total_tokens,
                            progress=not args.no_progress, outline=args.outline, residual=args.residual)
        source = {"dataset": str(args.dataset)} if bench else {"world": world.fingerprint()}
        run = write_expert_run(res, method, protocol, out=args.out, split=args.split or ((examples[0].split if examples else "dev") if bench else "train"),
                               config={**source, "tokenizer": args.model, "hops": args.hops, "outline": args.outline,
                                                "residual": args.residual})
        results[method] = res
        print(f"{method}: {len(res.trajectories)} of {len(examples)} questions have a valid trace "
              f"({res.seconds:.1f}s) -> {run.path}", flush=True)
        for d in res.dropped[:3]:
            print(f"  dropped {d['example_id']} ({d['stage']}): {d['reason'][:200]}")
    where = args.dataset if bench else f"{args.split or 'train'} split"
    print(f"\nyield (valid traces / questions) per hop count, {where}:\n{format_yield(results)}")
    return 0


# --------------------------------------------------------------------------- sft


def _sft_args(p: argparse.ArgumentParser) -> None:
    import dataclasses

    from workbench.rl.train_config import SFTConfig, TrainConfig

    _train_args(p)  # every TrainConfig flag, --config, --resume, --out, --no-progress
    p.epilog = (
        "examples:\n"
        "  workbench expert --method search_r1 --split train --out runs/\n"
        "  workbench sft --method search_r1 --traces '[\"runs/<expert run>\"]' --trace-hops '[1, 2]' --steps 30 --eval-limit 36\n"
        "  workbench sft --method search_r1 --rejection-questions 64 --group-size 4 --steps 20\n"
        "  workbench train --method search_r1 --init-adapter runs/<sft run>   # then RL from the SFT adapter\n"
        "writes runs/<run_id>/: config.json, metrics.jsonl (loss, tokens, tokens/s per step; eval rows),\n"
        "sft/pool.trajectories.parquet, eval/, checkpoints/, metrics.json (held-out cover-EM per hop before/after)"
    )
    extra = [f for f in dataclasses.fields(SFTConfig) if f.name not in {g.name for g in dataclasses.fields(TrainConfig)}]
    _config_flags(p, SFTConfig, extra)
    for action in p._actions:  # the SFT defaults differ from RL's for these
        if action.dest == "lr":
            action.help = action.help.replace("(default: 2e-05)", f"(default: {SFTConfig.lr})")


def _config_flags(p: argparse.ArgumentParser, cls: type, fields: list | None = None,
                  flags: dict[str, dict[str, Any]] | None = None) -> None:
    """One flag per dataclass field (default: every field of ``cls``): ``--field-name``, its docstring as help, its type
    from the annotation (``X | None`` -> X, a float finite through :func:`_check_values`; lists, dicts and bools take
    JSON), default None (= the dataclass's own).
    ``flags`` overrides argparse arguments per field (``"flags"``: the option strings)."""
    import dataclasses
    import types
    import typing

    from workbench.eval.config import field_docs

    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    fields = list(fields if fields is not None else dataclasses.fields(cls))
    names = {f.name for f in fields}
    sections = getattr(cls, "SECTIONS", {})  # TrainConfig's named sections: one help group each, in their order
    groups = {name: p.add_argument_group(f"{cls.__name__} {name}") for name, members in sections.items()
              if names & set(members)}
    home = {f: groups[s] for s, members in sections.items() if s in groups for f in members}
    for f in fields:
        hint = hints[f.name]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)  # X | None -> X; lists, dicts -> JSON
        inner = [a for a in typing.get_args(hint) if a is not type(None)] if optional else []
        kind = hint if hint in (int, float, str) else (inner[0] if len(inner) == 1 and inner[0] in (int, float, str)
                                                       else _json_arg)
        choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None  # a choice of names
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        text = docs.get(f.name, "").replace("``", "").replace("%", "%%")
        rule = getattr(cls, "RANGES", {}).get(f.name)
        if rule is not None and kind in (int, float):
            kind = _in_range(kind, rule)
        kw: dict[str, Any] = {"dest": f.name, "type": kind, "default": None,
                              "help": f"{text} (default: {json.dumps(default, default=str)})"}
        if choices:
            kw.update(type=str, choices=choices, metavar="{" + ",".join(choices) + "}")
        kw.update((flags or {}).get(f.name, {}))
        if kw.get("action") == "store_true":  # a switch: no value
            kw.pop("type")
        if kw.get("required"):  # no default to show
            kw["help"] = text
        home.get(f.name, p).add_argument(*kw.pop("flags", ["--" + f.name.replace("_", "-")]), **kw)


def sft_command(args: argparse.Namespace) -> int:
    import dataclasses

    from workbench import methods
    from workbench.rl.sft import SFTConfig, benchmark_examples
    from workbench.util.threads import apply_threads

    apply_threads(args.threads)  # --threads comes with the train flags
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(SFTConfig) if getattr(args, f.name) is not None}
    if args.resume:
        if args.reward_config:  # the reward of rejection samples, as train takes it
            given = {**methods.reward_config_fields(args.reward_config), **given}
        trainer = methods.resume(args.resume, progress=not args.no_progress, **given)
    else:
        cfg = methods.assemble(config_file=args.config, reward_file=args.reward_config, flags=given,
                               config_class=SFTConfig, override_adapter=args.override_adapter)
        kw = {}
        extra = benchmark_examples(cfg.traces)  # traces of a benchmark file's questions: train on those too
        if extra:
            if cfg.rejection_questions:
                raise ValueError(f"--rejection-questions {cfg.rejection_questions}: rejection sampling draws the "
                                 f"world's questions, and traces of {extra[0].dataset} questions are given too; pass "
                                 "--rejection-questions 0, or make the rejection samples in a run of their own")
            from workbench.data.world import load_world

            kw["examples"] = load_world().split(cfg.split) + extra
        trainer = methods.trainer(cfg, run=args.out, progress=not args.no_progress, **kw)
    cfg = trainer.config
    print(f"SFT of {cfg.model} on {cfg.protocol}: {cfg.steps} steps of {cfg.batch_size} trajectories "
          f"-> {trainer.run.path}", flush=True)
    run = _train_or_say(trainer, "sft")
    m = run.metrics()
    print(f"done: {m.get('steps')} steps, loss {m.get('loss_first', float('nan')):.3f} -> "
          f"{m.get('loss_last', float('nan')):.3f} (first/last quarter), {m.get('seconds_per_step', 0):.1f}s/step")
    for when in ("before", "after"):
        by = (m.get("eval_by_hops") or {}).get(when)
        if by:
            print(f"held-out {when}: " + ", ".join(f"{h}-hop cover-EM {v['cem']:.3f} (n={v['n']})" if h != "all" else
                                                   f"all {v['cem']:.3f} (n={v['n']})" for h, v in by.items()))
    print(f"run: {run.path}  (RL from it: workbench train --method {cfg.method or '...'} --init-adapter {run.path})")
    return 0


# --------------------------------------------------------------------------- report


def _report_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench report runs/20261202-...-grpo-dynasearcher-...\n"
        "  workbench report RUN --json | jq .alarms\n"
        "start against end: behaviour by hop count (searches, answered, format, out of turns), held-out questions\n"
        "fixed and broken, the reward components that moved, the health alarms and their steps, the validation\n"
        "rounds and the kept checkpoint; the question that changed most is written side by side to\n"
        "RUN/report/changed_most.html."
    )
    p.add_argument("run", metavar="RUN", help="a training run directory (workbench train writes one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")


def report_command(args: argparse.Namespace) -> int:
    from workbench.eval.run_report import format_report, run_report

    if not Path(args.run).is_dir():
        raise FileNotFoundError(f"{args.run}: no such run directory (give a directory workbench train wrote)")
    r = run_report(args.run)
    print(json.dumps(r, indent=1, default=str) if args.json else format_report(r))
    return 0


# --------------------------------------------------------------------------- compare


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench compare runs/<eval A> runs/<eval B> --method search_r1+lora\n"
        "  workbench compare RUN RUN --a search_r1 --b search_r1+lora --metric f1   # two methods of one run\n"
        "pairs the two sides by question (per hop count and overall: both means with 95% intervals, the difference\n"
        "B - A with its paired bootstrap interval). The runs' eval cards (card.json) must agree on every setting\n"
        "that changes a score (model weights, adapter, data and split, corpus and retriever, top-k and the other\n"
        "protocol arguments, the prompt, sampling, turn and token budgets); else it refuses and names them."
    )
    p.add_argument("run_a", metavar="RUN_A", help="an eval run directory (side A)")
    p.add_argument("run_b", metavar="RUN_B", help="an eval run directory (side B; may be RUN_A)")
    p.add_argument("--method", default=None, help="the method on both sides (as the runs label it, e.g. search_r1+lora)")
    p.add_argument("--a", default=None, metavar="METHOD", help="side A's method (default: --method)")
    p.add_argument("--b", default=None, metavar="METHOD", help="side B's method (default: --method, else --a)")
    p.add_argument("--metric", default="cem", help="a trajectories.parquet column such as em, cem, f1 (default: %(default)s)")
    p.add_argument("--allow-different", action="store_true",
                   help="compare even when the cards differ in a score-changing setting (each is printed above the table)")


def compare_command(args: argparse.Namespace) -> int:
    from workbench.eval.card import describe
    from workbench.eval.compare_runs import compare_runs

    a = args.a or args.method
    if a is None:
        raise ValueError("name the method: --method M for both sides, or --a M and --b M")
    for d in (args.run_a, args.run_b):
        if not Path(d).is_dir():
            raise FileNotFoundError(f"{d}: no such run directory (give eval run directories workbench eval wrote)")
    r = compare_runs(args.run_a, args.run_b, a, args.b or args.method or a, args.metric, args.allow_different)
    if r.differences:
        print(f"WARNING: the runs were not measured alike (--allow-different): {describe(r.differences)}")
    if r.code[0] != r.code[1]:
        print(f"code: A at {r.code[0]}, B at {r.code[1]}")
    print(r.table)
    return 0


# --------------------------------------------------------------------------- methods


def _methods_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=None, help="show one method's whole declaration (default: list them "
                   "all); `new NAME` writes a new method's package and its test")
    p.add_argument("new_name", nargs="?", default=None, metavar="NAME", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--title", default=None, help="with new: the paper's title")
    p.add_argument("--citation", default=None, help="with new: authors and year, e.g. 'Song et al., 2025'")
    p.add_argument("--arxiv", default=None, help="with new: the paper's arXiv id, e.g. 2503.05592")
    p.add_argument("--summary", default=None, help="with new: what the method changes, in one sentence")
    p.epilog = ("workbench methods new my_searcher --title '...' --citation 'Doe et al., 2026' --arxiv 2601.01234\n"
                "  writes workbench/methods/my_searcher/ (declaration, reward) and tests/test_my_searcher.py;\n"
                "  `workbench methods` lists it and `make test` tests it, no other file touched")
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def methods_command(args: argparse.Namespace) -> int:
    from workbench.methods import get_method, method_names

    if args.name == "new":
        from workbench.apps.scaffold import new_method
        from workbench.util.paths import repo_root

        if not args.new_name:
            print("error: workbench methods new NAME: give the new method's name (e.g. my_searcher)", file=sys.stderr)
            return 2
        root = repo_root()
        try:
            files = new_method(args.new_name, root, args.title or "", args.citation or "", args.arxiv or "",
                               args.summary or "")
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for f in files:
            print(f"wrote {f.relative_to(root)}")
        print(f"next: `workbench methods {args.new_name}` shows it; `.venv/bin/python -m pytest tests/test_"
              f"{args.new_name}.py` tests it; make it the paper's in workbench/methods/{args.new_name}/ "
              "(docs/howto/add-method.md)")
        return 0
    if args.new_name:
        print(f"error: workbench methods {args.name} {args.new_name}: one NAME shows a method; "
              "`workbench methods new NAME` writes one", file=sys.stderr)
        return 2
    if args.name:
        m = get_method(args.name)
        d = {**m.summary(), "title": m.title, "citation": m.citation, "protocol_kwargs": dict(m.protocol_kwargs),
             "reward_params": dict(m.reward_params), "stages": dict(m.stages),
             "optimizer_overrides": dict(m.optimizer_overrides), "train": dict(m.train), "paper_values": dict(m.paper),
             "notes": dict(m.notes), "train_defaults": m.train_defaults()}
        if args.json:
            print(json.dumps(d, indent=2, default=str, ensure_ascii=False))
        else:
            width = max(len(k) for k in d)
            for k, v in d.items():
                print(f"{k:<{width}}  {v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)}")
        return 0
    rows = [get_method(n).summary() for n in method_names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("method", "protocol", "tools", "reward", "optimizer", "needs", "paper")
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols[:-1]}
    print("  ".join(f"{c:<{widths[c]}}" for c in cols[:-1]) + "  paper")
    for r in sorted(rows, key=lambda r: (r["baseline"], r["method"])):
        print("  ".join(f"{str(r[c]):<{widths[c]}}" for c in cols[:-1]) + f"  {r['paper']}")
    print("\n`workbench methods NAME` shows a method's whole declaration; `workbench eval --method NAME`, "
          "`workbench train --method NAME` use it.")
    return 0


# --------------------------------------------------------------------------- world


def _world_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="world config JSON (default: data/world.json)")
    p.add_argument("--save", type=_out_dir, default=None, metavar="DIR", help="also write the world's files into this directory")


def world(args: argparse.Namespace) -> int:
    import time

    from workbench.data.world import WorldConfig, load_world

    cfg = WorldConfig.from_file(args.config) if args.config else None
    t0 = time.perf_counter()
    w = load_world(cfg)
    print(f"world {w.fingerprint()} ({time.perf_counter() - t0:.2f}s): {len(w.entities)} entities, "
          f"{len(w.relations)} relations, {len(w.triples)} triples, {len(w.passages)} passages, {len(w.examples)} questions")
    for split in ("train", "dev", "test"):
        print(f"  {split}: {len(w.split(split))} questions")
    if args.save:
        print("saved to", w.save(args.save))
    return 0


# --------------------------------------------------------------------------- dashboard


def _dashboard_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", default=None, help="runs root directory (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--port", type=_port(any_free=True), default=5006, help="port (default: %(default)s; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the dashboard has no authentication: anyone who can reach it sees every run)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="also answer pages served from ORIGIN, e.g. https://dash.example.org behind a reverse proxy "
                   "(repeatable; by default only the dashboard's own address)")
    p.add_argument("--static", metavar="FILE", default=None,
                   help="write the dashboard as one self-contained HTML file (opens offline) and exit")


def dashboard(args: argparse.Namespace) -> int:
    from workbench.dashboard.app import check_host, save_static, serve_dashboard
    from workbench.dashboard.origins import ForeignRequest

    if args.static:
        print("wrote", save_static(args.static, args.runs))
        return 0
    check_host(args.host, args.allow_remote)
    ForeignRequest(args.host, args.port, args.allow_origin)  # a malformed --allow-origin: said before loading
    _check_listen(args.host, args.port)  # a port in use: said now, not after the server has loaded
    if args.allow_remote and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host} without authentication (--allow-remote)", file=sys.stderr)
    serve_dashboard(args.runs, port=args.port, host=args.host, allow_remote=args.allow_remote,
                    allowed_origins=args.allow_origin)
    return 0


# --------------------------------------------------------------------------- lab


def _lab_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=_port(any_free=False), default=8888, help="port (default: %(default)s)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (print the URL only)")
    p.epilog = ("Any other flag goes to Jupyter as is, e.g. `workbench lab --ServerApp.open_browser=False`. "
                "Opens at the project root, so notebooks/ and the executed notebooks under runs/ are both reachable.")


def lab_command(port: int = 8888, no_browser: bool = False, root: str | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The JupyterLab command line: the project root, loopback only, the `workbench` kernel by default.

    As root (a container) it adds ``--allow-root``, which Jupyter otherwise demands; ``extra`` flags
    are passed through to Jupyter unchanged. The token is not on it: a command line is readable by every user of
    the machine (``ps``), so :func:`lab` hands it over in the server's environment (``JUPYTER_TOKEN``).
    """
    import os

    from workbench.apps.notebooks import KERNEL
    from workbench.util.paths import repo_root

    given = {flag.split("=", 1)[0] for flag in extra}
    # a setting the user passes replaces ours (Jupyter refuses two values for one setting: "only accepts one value")
    defaults = [(("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir"),
                 ["--notebook-dir", str(root or repo_root())]),
                (("--ip", "--ServerApp.ip"), ["--ServerApp.ip=127.0.0.1"]),
                (("--port", "--ServerApp.port"), [f"--ServerApp.port={port}"]),
                (("--MultiKernelManager.default_kernel_name",), [f"--MultiKernelManager.default_kernel_name={KERNEL}"])]
    cmd = [sys.executable, "-m", "jupyterlab"]
    for names, flags in defaults:
        if not given.intersection(names):
            cmd += flags
    if no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        cmd.append("--allow-root")
    return cmd + list(extra)


def lab(args: argparse.Namespace) -> int:
    import secrets

    extra = getattr(args, "extra", [])
    if not any(flag.startswith(("--ServerApp.port", "--ServerApp.ip", "--ip")) for flag in extra):
        # Jupyter would move on to a free port, and the URL printed below would name the wrong server
        _check_listen("127.0.0.1", args.port, fix="pick another --port, or stop the server using this one")
    if any(flag.startswith(("--IdentityProvider.token", "--ServerApp.token", "--NotebookApp.token")) for flag in extra):
        raise SystemExit("workbench lab: error: a token on the command line is visible to every user of this machine "
                         "(ps); leave it out (a fresh one is made), or set JUPYTER_TOKEN in the environment")
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    cmd = lab_command(args.port, args.no_browser, extra=extra)
    print(f"JupyterLab: http://127.0.0.1:{args.port}/lab?token={token}\n"
          "  (kernel 'workbench'; notebooks/ holds the notebooks, runs/<id>/notebooks/ the executed ones)", flush=True)
    return _run_until_stopped(cmd, env={**os.environ, "JUPYTER_TOKEN": token})


class _Stopped(Exception):
    pass


def _run_until_stopped(cmd: list[str], grace: float = 10.0, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` and return its exit status; a SIGTERM or SIGHUP to this process (or Ctrl-C) stops it first, so the
    server does not outlive the command that started it (it kept its port, orphaned, before)."""
    import signal
    import subprocess

    def stop(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    proc = subprocess.Popen(cmd, env=env)
    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return proc.wait()
    except (KeyboardInterrupt, _Stopped):
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- regress


def _regress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="suite YAML (default: notebooks/regress.yaml)")
    p.add_argument("--notebooks", default=None, help="notebooks folder (default: the suite YAML's folder)")
    p.add_argument("--baselines", default=None, help="baselines folder (default: baselines/ beside the suite YAML)")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all; cases they use are added)")
    p.add_argument("--jobs", type=_positive_int, default=None, help="notebooks executed at once (default: min(2, CPU count))")
    p.add_argument("--cell-timeout", type=_positive_int, default=600, help="seconds per notebook cell (default: %(default)s)")
    p.add_argument("--kernel", default="workbench", help="Jupyter kernel (default: %(default)s)")
    p.add_argument("--out", default=None, help="output folder (default: runs/regress-<timestamp>/)")
    p.add_argument("--update-baselines", action="store_true",
                   help="write the current metrics as the new baselines (exit non-zero only on errors)")


def regress(args: argparse.Namespace) -> int:
    from workbench.apps.notebooks import notebooks_dir
    from workbench.regress import run_regress

    report = run_regress(
        args.config or notebooks_dir() / "regress.yaml",
        out=args.out,
        cases=[c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None,
        jobs=args.jobs,
        cell_timeout=args.cell_timeout,
        kernel=args.kernel,
        update_baselines=args.update_baselines,
        notebooks_dir=args.notebooks,
        baselines_dir=args.baselines,
    )
    n = report.counts
    print(f"regress: {'FAILED' if report.failed else 'OK'}: {n['pass']} pass, {n['regressed']} regressed, "
          f"{n['error']} error, {n['new']} new in {report.wall_seconds:.0f}s; report: {report.out_dir}/report.md (.html)")
    return 1 if report.failed else 0


# --------------------------------------------------------------------------- main


def _integration(name: str) -> Callable[..., Any]:
    """``workbench.integrations.cli_commands.<name>``, imported when the command is built or run."""

    def call(*args: Any) -> Any:
        from workbench.integrations import cli_commands

        return getattr(cli_commands, name)(*args)

    call.__name__ = name
    return call


def _check_listen(*args: Any, **kw: Any) -> None:
    from workbench.integrations.cli_commands import check_listen

    check_listen(*args, **kw)


# --------------------------------------------------------------------------- schema

def _schema_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench schema                      # both files\n"
        "  workbench schema --file features      # features.parquet: features, judges, rewards, training columns\n"
        "  workbench schema --json | jq '.[] | select(.dtype == \"bool\")'\n"
        "dtypes are the Parquet (Arrow) types in the file: counts int64/int32, flags bool, text string; NULL = missing.\n"
        "<name> and <component> stand for a judge's name and a reward preset's component."
    )
    p.add_argument("--file", choices=("trajectories", "features"), default=None, help="one run file only (default: both)")
    p.add_argument("--json", action="store_true", help="a JSON list of {file, name, dtype, meaning} instead of the table")


def schema_command(args: argparse.Namespace) -> int:
    from workbench.methods import PRESETS
    from workbench.storage.schema import format_schema, schema

    df = schema(args.file, presets=PRESETS.values())
    if args.json:
        print(json.dumps(df.to_dict("records"), indent=1, ensure_ascii=False))
    else:
        print(format_schema(df), end="")
    return 0


#: name -> (add_arguments, run, help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "demo": (_demo_args, demo, "evaluate the default model on the synthetic world (direct, search agent untrained and with the shipped SFT + GRPO adapter, search + KG agent), then every view"),
    "eval": (_eval_args, eval_command, "evaluate methods (protocols, baselines) on the world or a benchmark file; writes a run"),
    "ask": (_ask_args, ask_command, "ask a method (by default the trained agent) one question and watch it search; writes a run"),
    "train": (_train_command_args, train_command, "LoRA RL training (GRPO, DAPO, GSPO, DSPO, Dr. GRPO) of a search agent; writes a run"),
    "expert": (_expert_args, expert_command, "expert trajectories of the world's questions for a method's protocol; writes a run"),
    "sft": (_sft_args, sft_command, "LoRA SFT on expert traces and rejection samples (the cold start before RL); writes a run"),
    "report": (_report_args, report_command,
               "what happened in a training run: start against end by hop count, questions fixed and broken, alarms"),
    "compare": (_compare_args, compare_command,
                "two eval runs paired by question, once their eval cards show they were measured alike"),
    "methods": (_methods_args, methods_command, "list the published methods (protocol, tools, reward, optimizer, paper)"),
    "world": (_world_args, world, "build (or load from cache) the synthetic world and print its statistics"),
    "dashboard": (_dashboard_args, dashboard, "serve the Panel dashboard over runs/ on 127.0.0.1 (or --static FILE)"),
    "lab": (_lab_args, lab, "open JupyterLab at the project root with the workbench kernel (127.0.0.1 only)"),
    "regress": (_regress_args, regress, "execute the notebook regression suite and compare metrics with the baselines"),
    "serve-retrieval": (_integration("serve_retrieval_args"), _integration("serve_retrieval"),
                        "serve BM25/dense, KG and plan search over HTTP in Search-R1's /retrieve API (127.0.0.1)"),
    "export": (_integration("export_args"), _integration("export_command"),
               "export a method for verl (dataset parquet, reward module, launch script) or as a verifiers environment"),
    "import": (_integration("import_args"), _integration("import_command"),
               "import a verl run (rollout/validation dumps, metrics) or vf-eval's traces as a workbench run"),
    "schema": (_schema_args, schema_command,
               "every column of a run's trajectories.parquet and features.parquet: dtype and meaning"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line (every command's flags: ``docs/cli-reference.md`` is generated from it), or with
    ``only``, every command named but only that one's flags built: what :func:`main` parses with, so that a command's
    ``--help`` or a bad flag costs that command's light imports and no other's (tests/test_cli_fast.py)."""
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Research workbench for LLM search agents trained with RL. Run `workbench <command> --help`.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (add_args, _, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            add_args(sp)
            _check_values(sp)
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not a flag: the top level's only flag, ``-v``, takes no
    value), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


#: ``workbench train --engine``: the trainers a run can come from.
TRAIN_ENGINES = ("workbench", "trl")


def trl_argv(argv: list[str]) -> list[str] | None:
    """The arguments for TRL's trainer when ``argv`` is ``train ... --engine trl ...`` (``--engine`` taken out); None
    for any other command line. TRL's trainer has flags of its own, so it parses them itself."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != "train":
        return None
    rest = list(argv[argv.index("train") + 1:])
    for i, a in enumerate(rest):
        if a == "--engine" and i + 1 < len(rest) and rest[i + 1] == "trl":
            return rest[:i] + rest[i + 2:]
        if a == "--engine=trl":
            return rest[:i] + rest[i + 1:]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    trl_args = trl_argv(argv)
    if trl_args is not None:
        from workbench.integrations.trl_train import main as trl_main

        return trl_main(trl_args)
    word = command_word(argv)
    parser = build_parser(only=word if word in COMMANDS else "")  # an unknown word: argparse names the choices
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":  # only `workbench lab` passes unknown flags on (to Jupyter)
        parser.parse_args(argv)  # the usual one-line error and exit 2
    args.extra = extra
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command][1](args)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        print(f"workbench {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `workbench schema --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a full disk, a folder that cannot be written: the system's one line, naming the file
        print(f"workbench {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
