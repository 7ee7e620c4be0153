"""Train a method with TRL's GRPOTrainer, the workbench's multi-turn rollout function and its reward functions.

    workbench train --engine trl --method search_r1 --out runs/trl --steps 1 \\
        --group-size 2 --questions-per-step 2 --max-new-tokens 48     # a CPU smoke run (about a minute)

The rollout is our engine (``workbench.integrations.trl.RolloutFunc``: the method's protocol and toolbox, observations
appended as ids and masked out of the loss through TRL's ``env_mask``); the rewards are ``workbench.integrations.trl.to_trl`` of the method's
reward preset, scored on each completion's trajectory (the Rubric's numbers). The method's paper values go onto
``GRPOConfig`` (``grpo_config_kwargs``: clip, KL beta, loss aggregation, reward scaling, group size, learning rate;
what TRL has no field for is printed as a note); the flags below override them. LoRA via peft.

Writes a workbench train run into ``--out`` (a runs root; ``workbench.integrations.trl.RunRecorder``): per step the
trajectories with their rewards (``steps/``) and a ``metrics.jsonl`` row (the workbench trainer's names and TRL's,
as ``trl/<name>``), ``config.json``, ``adapter/`` (the LoRA adapter), ``trl/`` (TRL's output_dir) and ``recipe.json``
(what ran): the inspector, the reward playground and ``workbench dashboard --runs <out>`` open it.
``--report-to tensorboard,trackio`` copies its logs into those trackers (offline, into the run), as ``workbench train``.
``--dry-run`` builds the dataset and the GRPOConfig and prints them, without loading a model.
Tested on CPU with the default model (tests/test_trl.py); not yet run on GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

#: The command this module is (``workbench train`` hands its arguments here when they say ``--engine trl``).
PROG = "workbench train --engine trl"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--method", default="search_r1", help="a method with an optimizer preset (`workbench methods`)")
    ap.add_argument("--dataset", default="world", help="'world' or a dataset name / file (as `workbench export verl`)")
    ap.add_argument("--split", default=None, help="dataset split (world: train)")
    ap.add_argument("--limit", type=int, default=8, help="questions to train on")
    ap.add_argument("--corpus", default="world", help="'world' or a corpus file the toolbox searches")
    ap.add_argument("--retriever", default="bm25", choices=("bm25", "dense"))
    ap.add_argument("--model", default=None, help="policy model (default: the workbench's default model)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="runs root the run directory is created in (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    ap.add_argument("--report-to", default="none", metavar="T[,T...]",
                    help="experiment trackers: tensorboard, wandb, mlflow, trackio (workbench.rl.trackers; default: none)")
    ap.add_argument("--steps", type=int, default=1, help="optimizer steps (GRPOConfig.max_steps)")
    ap.add_argument("--group-size", type=int, default=None, help="completions per question (default: the paper's)")
    ap.add_argument("--questions-per-step", type=int, default=1, help="questions per step (batch = this x group)")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: the method's, else the paper's)")
    ap.add_argument("--beta", type=float, default=None, help="KL coefficient (default: the paper's)")
    ap.add_argument("--max-turns", type=int, default=None, help="policy turns per trajectory (default: the paper's)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="tokens per policy turn")
    ap.add_argument("--max-completion-length", type=int, default=512, help="completion tokens (policy + observations)")
    ap.add_argument("--lora-r", type=int, default=16, help="LoRA rank (q/k/v/o projections)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the dataset size and GRPOConfig; train nothing")
    return ap


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Everything but the model: method, examples, dataset, rollout function, rewards, GRPOConfig kwargs, notes."""
    from workbench.integrations.trl import grpo_config_kwargs, make_rollout_func, to_trl, trl_dataset
    from workbench.integrations.verl.export import dataset_examples  # the same dataset choice as `export verl`
    from workbench.methods import get_method
    from workbench.rl.trackers import tracker_names
    from workbench.rollout.engine import RolloutConfig

    for name in ("limit", "steps", "questions_per_step", "max_new_tokens", "max_completion_length", "lora_r"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    tracker_names(args.report_to)  # a library not installed: named before anything loads
    method = get_method(args.method)
    kw, notes = grpo_config_kwargs(args.method)
    train, _, _ = dataset_examples(args.dataset, args.split, args.limit)
    group = args.group_size or kw.get("num_generations") or 2
    if group < 2:
        raise ValueError(f"--group-size must be >= 2 (GRPO needs a group), got {group}")
    lr = args.lr or dict(method.train).get("lr") or kw.get("learning_rate") or 1e-5
    kw.update(num_generations=group, learning_rate=float(lr), max_steps=args.steps,
              per_device_train_batch_size=group * args.questions_per_step,
              max_completion_length=args.max_completion_length, seed=args.seed, logging_steps=1, report_to="none",
              save_strategy="no", gradient_checkpointing=False, output_dir="trl")  # under the run: train()
    if args.beta is not None:
        kw["beta"] = args.beta
    turns = args.max_turns or method.paper.get("max_turns") or dict(method.train).get("max_turns") or 4
    config = RolloutConfig(max_turns=int(turns), max_new_tokens=args.max_new_tokens, seed=args.seed)
    rf = make_rollout_func(args.method, corpus=args.corpus, retriever=args.retriever, config=config, examples=train)
    funcs, weights = to_trl(method.rubric(), rf.protocol)  # the recorder re-scores with the same (default) features
    kw["reward_weights"] = weights
    return {"method": method, "examples": train, "dataset": trl_dataset(train, rf.protocol), "rollout_func": rf,
            "reward_funcs": funcs, "grpo": kw, "notes": notes, "rollout_config": config.to_dict()}


def grpo_config(parts: dict[str, Any], on_cpu: bool) -> Any:
    """TRL's ``GRPOConfig`` (it validates itself: group size vs batch, loss type...)."""
    import torch
    import trl

    return trl.GRPOConfig(**parts["grpo"], use_cpu=on_cpu, bf16=not on_cpu and torch.cuda.is_bf16_supported())


def train(args: argparse.Namespace, parts: dict[str, Any], summary: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Train; returns the run (a workbench train run written by ``RunRecorder``, complete) and TRL's last log."""
    import trl
    from peft import LoraConfig

    from workbench.core.models import load_policy
    from workbench.integrations.trl import RunRecorder
    from workbench.storage.runs import Run

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL: we know
    model, tok = load_policy(args.model)
    on_cpu = next(model.parameters()).device.type == "cpu"
    from workbench.util.paths import runs_dir

    run = Run.create(args.out or runs_dir(), kind="train", name=f"trl-{args.method}")
    parts["grpo"]["output_dir"] = str(run.path / "trl")
    (run.path / "recipe.json").write_text(json.dumps(summary, indent=2, default=str))
    config = grpo_config(parts, on_cpu)
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    recorder = RunRecorder(parts["rollout_func"], parts["method"].rubric(), run=run, report_to=args.report_to,
                           config={"method": args.method, "model": args.model or "smollm2-135m", "recipe": summary})
    trainer = trl.GRPOTrainer(model=model, reward_funcs=parts["reward_funcs"], args=config,
                              train_dataset=parts["dataset"], processing_class=tok, rollout_func=parts["rollout_func"],
                              peft_config=lora, callbacks=[recorder])
    trainer.train()
    return run, next((e for e in reversed(trainer.state.log_history) if "loss" in e), {})


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        ap.exit(2, f"{PROG}: error: TRL is not installed; run `make setup` (or pip install -e '.[trl]')\n")
    try:
        parts = build(args)
        if args.dry_run:
            import torch

            grpo_config(parts, on_cpu=not torch.cuda.is_available())
    except (ValueError, KeyError, FileNotFoundError, ModuleNotFoundError) as e:
        ap.exit(2, f"{PROG}: error: {e}\n")
    summary = {"method": args.method, "questions": len(parts["examples"]), "grpo": parts["grpo"],
               "rollout": parts["rollout_config"], "notes": parts["notes"],
               "rewards": [f.__name__ for f in parts["reward_funcs"]]}
    if args.dry_run:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    run, last = train(args, parts, summary)
    print(json.dumps({k: last.get(k) for k in ("loss", "reward", "reward_std", "grad_norm", "step_time",
                                               "completions/mean_length")}, default=str))
    print(f"run: {run.path}  (workbench dashboard --runs {run.path.parent}; the inspector and the playground open it)")
    return 0

