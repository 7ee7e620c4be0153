"""Batching a turn's prompts by the tokens each has to prefill, against batching them in call order: the held-out
eval of the shipped adapter both ways, in one process, on the same backend.

    .venv/bin/python bench/bench_batch_order.py [--limit 89] [--threads 2] [--repeats 1] [--orders new,call]

After the first turn each prompt of a multi-turn rollout is its kept cache plus a new part (the last sampled token
and the observation), and observations differ by hundreds of tokens; the backend left-pads a batch's new parts to
the longest. ``new`` (the default, ``HFBackend(by_new_tokens=True)``) batches the prompts in the order of their
new parts; ``call`` batches them as the engine passes them. Each (order, repeat) runs the README's eval command
(``search_r1+lora`` on the world's test split, chat observations, 4 turns x 64 tokens, greedy, the engine
``--rollout-engine auto`` picks) with the kept caches cleared first, orders interleaved; the table gives wall and
process CPU seconds of the rollouts, the tokens prefilled and what the forwards computed with padding, the decode
steps, cover-EM and how many answers differ from the first order's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "data" / "adapters" / "search_r1-sft-grpo"
EVAL = {"methods": "search_r1+lora", "split": "test", "protocol_kwargs": {"observation_mode": "chat"},
        "max_turns": 4, "max_new_tokens": 64}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="the first N test questions (default: all 89)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the machine's cores)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--orders", default="new,call",
                    help="comma-separated: new (by new tokens), call (call order), new-torch (by new tokens, the int4 "
                         "engine's one-row decode steps in torch's LeanDecode instead of C), new-hf (by new tokens, "
                         "every decode step through transformers' own forward)")
    ap.add_argument("--engine", default="auto", choices=("auto", "int4", "fp32"))
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    bad = [o for o in orders if o not in ("new", "call", "new-torch", "new-hf")]
    if bad:
        sys.exit(f"--orders: {bad} not among new, call, new-torch, new-hf")

    from workbench.util.threads import apply_threads

    apply_threads(args.threads)
    import pyarrow.parquet as pq

    from workbench.eval.config import EvalConfig
    from workbench.eval.runner import load_backend, run_eval

    opts = dict(EVAL, adapter=str(ADAPTER), rollout_engine=args.engine, limit=args.limit)
    backend, engine, what = load_backend(EvalConfig(**opts))
    print(f"{what}\nload average {os.getloadavg()[0]:.2f}", flush=True)
    rows, first_answers = [], None
    lean, one_row = getattr(backend, "lean", None), getattr(backend, "native", None)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for order in orders:
                backend.by_new_tokens = order != "call"
                if lean is not None:
                    backend.lean = None if order == "new-hf" else lean
                if one_row is not None:
                    backend.native = None if order in ("new-hf", "new-torch") else one_row
                backend.clear_cache()
                backend.stats.update({k: 0 for k in backend.stats})
                load0, c0, t0 = os.getloadavg()[0], time.process_time(), time.perf_counter()
                run = run_eval(model=backend, out=tmp, progress=False, log=None, **{k: v for k, v in opts.items()
                                                                                   if k != "rollout_engine"})
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                m = run.metrics()
                answers = pq.read_table(run.path / "trajectories.parquet", columns=["answer"]).column(0).to_pylist()
                first_answers = first_answers or answers
                summary = m["methods"]["search_r1+lora"]
                rows.append({"order": order, "repeat": rep, "engine": engine, "questions": summary["n"],
                             "rollout_s": round(m["rollout_seconds"], 1), "wall_s": round(wall, 1),
                             "cpu_s": round(cpu, 1), "load": f"{load0:.1f} -> {os.getloadavg()[0]:.1f}",
                             "prefill_tokens": backend.stats["prefill_tokens"],
                             "padded_tokens": backend.stats["prefill_padded_tokens"],
                             "decode_steps": backend.stats["decode_steps"],
                             "c_steps": backend.stats.get("native_steps", 0), "cover_em": round(summary["cem"], 3),
                             "searches": round(summary["n_searches"], 2),
                             "answers_differ": sum(a != b for a, b in zip(answers, first_answers))})
                print(json.dumps(rows[-1]), flush=True)
    cols = list(rows[0])
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
