"""One decode step of the int4 engine by row count: does a fuller step cost little more than an emptier one?

The engine's decode step reads every weight once for all its rows (the C step unpacks each int4 block once and
multiplies it into each row), so a step's time is a part all rows share plus a part per row. This times the step
``QuantBackend._decode_step`` takes (on a CPU without native bf16, the C step for any row count; with it, the C step
up to 8 rows) over the shipped adapter, after a prefill of the first dev questions' search_r1 prompts, at each row
count: the median of ``--steps`` consecutive steps. The fit ``time ~ shared + per_row * rows`` says how much fuller
steps (the rollout engine's slots) can save.

With ``--against`` (rows up to 8) it times instead, step by step in turn from the same caches, the C step this
machine builds and another build: ``exact``, the same file with ``-DWB_EXACT`` (on AVX2 without AVX512-BF16: fp32
products of bf16-rounded inputs, the kernel before the 16-bit integer one), or a C file (an earlier
``decode_step.c``: ``git show REV:workbench/rollout/backends/decode_step.c > old.c``) built as this one is; and it
says how far each one's logits are from the fp32 model's.

    .venv/bin/python bench/bench_decode_rows.py                       # rows 1 3 6 8 12 16, 1 thread
    .venv/bin/python bench/bench_decode_rows.py --threads 2 --rows 1 8 --json out.json
    .venv/bin/python bench/bench_decode_rows.py --against exact --rows 1 3 6 8
"""

from __future__ import annotations

import argparse
import copy
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
    ap.add_argument("--against", metavar="exact|FILE.c",
                    help="time this build in turn with the -DWB_EXACT build or a C file's (rows <= 8)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.threads < 1 or not all(1 <= r <= (8 if args.against else 24) for r in args.rows):
        ap.error(f"--steps and --threads must be >= 1 and each of --rows in 1..{8 if args.against else 24}")
    if args.against and args.against != "exact" and not Path(args.against).is_file():
        ap.error(f"--against {args.against}: not 'exact' and no such file (write one with git show "
                 "REV:workbench/rollout/backends/decode_step.c > old.c)")
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
    if args.against:
        return _against(args, model, backend, prompts)
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


def _first_step(backend, prompts: list[list[int]]):
    """The prompts prefilled, with room for a step, and the inputs of their first decode step (greedy tokens)."""
    from workbench.rollout.backends.hf import _preallocate

    past, attn, pos, logits = backend._prefill(prompts, [None] * len(prompts))
    _preallocate(past, None, 4)
    return past, torch.cat([attn, attn.new_ones((len(prompts), 1))], -1), pos + 1, logits.argmax(-1)


def _against(args, model, backend, prompts) -> dict:
    """Median step times of this machine's build and another, stepped in turn from copies of the same caches; then
    each build's largest |logit| gap to the fp32 model at one step, one prompt a row."""
    import torch.nn.functional as F

    from workbench.rollout.backends import native

    if backend.native is None:
        raise SystemExit(f"no C decode step here: {backend.native_why}")
    exact = args.against == "exact"
    other = "-DWB_EXACT" if exact else Path(args.against).name
    library = native.build(exact=True) if exact else native.build(source=Path(args.against).resolve())
    builds = {"this build": backend.native, other: native.NativeDecode.build(backend.lean, native.load(library))}
    for step in builds.values():
        step.active = step.refresh()
    out: dict = {"threads": args.threads, "simd": backend.native.lib.wb_simd(), "ms": {}, "gap": {}}
    with torch.inference_mode():
        for rows in args.rows:
            past, attn, pos, token = _first_step(backend, prompts[:rows])
            times: dict = {name: [] for name in builds}
            for _ in range(args.steps):
                for name, step in builds.items():
                    cache = copy.deepcopy(past)
                    t = time.perf_counter()
                    step(token, attn, pos, cache)
                    times[name].append(time.perf_counter() - t)
            out["ms"][rows] = {name: 1000 * statistics.median(v) for name, v in times.items()}
        gaps: dict = {name: [] for name in builds}
        for prompt in prompts[: max(args.rows)]:
            past, attn, pos, token = _first_step(backend, [prompt])
            ref = model(input_ids=torch.tensor([prompt + [int(token)]])).logits[0, -1]
            for name, step in builds.items():
                got = step(token, attn, pos, copy.deepcopy(past))[1][0]
                gaps[name].append((float((got - ref).abs().max()),
                                   float((F.log_softmax(got, -1) - F.log_softmax(ref, -1)).abs().mean())))
        out["gap"] = {name: {"max_logit_mean": statistics.mean(g[0] for g in v), "max_logit_max": max(g[0] for g in v),
                             "mean_abs_logprob": statistics.mean(g[1] for g in v), "prompts": len(v)}
                      for name, v in gaps.items()}
    print(f"{platform.processor() or platform.machine()}, {args.threads} thread(s), C kernels {out['simd']}; "
          f"median of {args.steps} steps each, in turn")
    print(f"| rows | this build ms | {other} ms | ratio |\n|---:|---:|---:|---:|")
    for rows, ms in out["ms"].items():
        print(f"| {rows} | {ms['this build']:.1f} | {ms[other]:.1f} | {ms[other] / ms['this build']:.2f}x |")
    for name, g in out["gap"].items():
        print(f"{name}: largest |logit| gap to the fp32 model {g['max_logit_mean']:.3f} on average, {g['max_logit_max']:.3f} "
              f"at most; mean |logprob| gap {g['mean_abs_logprob']:.4f} ({g['prompts']} prompts)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
