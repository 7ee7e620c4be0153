"""Held-out evaluation of a training run's adapter against the untrained policy (adapter disabled).

    .venv/bin/python bench/eval_adapter.py RUN_DIR [--splits dev,test]

Greedy rollouts with the run's protocol, budgets and reward on every held-out question of the
run's question types in the given splits (never trained on); prints reward, cover-EM, F1,
searches and answered share for both policies.
"""

from __future__ import annotations

import argparse
import json

from workbench import methods as wm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--splits", default="dev,test")
    args = ap.parse_args()

    tr = wm.resume(args.run_dir, progress=False)
    types = set(tr.config.question_types or [])
    held = [e for s in args.splits.split(",") for e in tr.world.split(s) if not types or e.qtype in types]
    tr.eval_examples = held
    after = tr.evaluate(save=False)
    with tr.policy.model.disable_adapter():
        before = tr.evaluate(save=False)
    keys = ("eval_reward_mean", "eval_cem", "eval_f1", "eval_em", "eval_searches", "eval_answered")
    out = {"run": args.run_dir, "step": tr.step, "n": len(held), "splits": args.splits,
           "untrained": {k: round(before[k], 4) for k in keys}, "trained": {k: round(after[k], 4) for k in keys}}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
