"""One decode step of the int4 engine by row count: does a fuller step cost little more than an emptier one?

The engine's decode step reads every weight once for all its rows (the C step unpacks each int4 block once and
multiplies it into each row), so a step's time is a part all rows share plus a part per row. This times the step
``QuantBackend._decode_step`` takes (on a CPU without native bf16, the C step for any row count; with it, the C step
up to 8 rows) over the shipped adapter, after a prefill of the first dev questions' search_r1 prompts, at each row
count: the median of ``--steps`` consecutive steps. The fit ``time ~ shared + per_row * rows`` says how much fuller
steps (the rollout engine's slots) can save.

    .venv/bin/python bench/bench_decode_rows.py                       # rows 1 3 6 8 12 16, 1 thread
    .venv/bin/python bench/bench_decode_rows.py --threads 2 --rows 1 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 3, 6, 8, 12, 16], help="row counts (at most 24)")
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed at each row count (default 20)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--adapter", default="data/adapters/search_r1-sft-grpo", help="LoRA adapter ('' for none)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.threads < 1 or not all(1 <= r <= 24 for r in args.rows):
        ap.error("--steps and --threads must be >= 1 and each of --rows in 1..24")
    torch.set_num_threads(args.threads)

    from workbench.core.models import load_policy
    from workbench.data.world import load_world
    from workbench.eval.adapters import attach_adapter
    from workbench.methods import get_protocol
    from workbench.rollout.backends.base import encode_chat
    from workbench.rollout.backends.hf import _preallocate
    from workbench.rollout.backends.quant import QuantBackend

    model, tok = load_policy(device="cpu")
    if args.adapter:
        model = attach_adapter(model, args.adapter)
    backend = QuantBackend(model, tok)
    protocol = get_protocol("search_r1", observation_mode="chat")
    prompts = [encode_chat(tok, protocol.messages(ex)) for ex in load_world().split("dev")[: max(args.rows)]]
    out = {}
    with torch.inference_mode():
        for rows in args.rows:
            past, attn, pos, logits = backend._prefill(prompts[:rows], [None] * rows)
            _preallocate(past, None, args.steps + 2)
            token, times = logits.argmax(-1), []
            for _ in range(args.steps):
                attn, pos = torch.cat([attn, attn.new_ones((rows, 1))], -1), pos + 1
                t = time.perf_counter()
                past, logits = backend._decode_step(token, attn, pos, past)
                times.append(time.perf_counter() - t)
                token = logits.argmax(-1)
            out[rows] = statistics.median(times)
    per_row, shared = (statistics.linear_regression(list(out), list(out.values())) if len(out) > 1
                       else (float("nan"), float("nan")))
    print(f"{platform.processor() or platform.machine()}, {args.threads} thread(s); {backend.describe()}")
    print("| rows | ms a step | ms a row |\n|---:|---:|---:|")
    for rows, s in out.items():
        print(f"| {rows} | {1000 * s:.1f} | {1000 * s / rows:.1f} |")
    print(f"fit: {1000 * shared:.1f} ms shared by the rows + {1000 * per_row:.1f} ms a row")
    result = {"threads": args.threads, "steps": args.steps, "seconds": out, "shared_s": shared, "per_row_s": per_row,
              "engine": backend.describe()}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
