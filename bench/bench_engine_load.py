"""What building the int4 rollout engine costs before the first token, phase by phase, beside the fp32 engine.

Every ``workbench eval``, ``ask``, ``train`` and ``make demo`` builds its rollout engine once: the model loaded (most
of it importing transformers), the adapter attached, then for the int4 engine a quantized copy of the model (each
linear layer's int4 grid and how far the weight lies from it; torch's int4 matrices where its int4 products run, that
is on a CPU with native bf16) and the C decode step's packed matrices. The fp32 engine (the peer: what
``--rollout-engine fp32`` pays) stops after the adapter. Median seconds over ``--repeats`` builds in one process
(the first build's imports are not counted: ``load`` is the model's weights and tokenizer, imports done).

    .venv/bin/python bench/bench_engine_load.py                  # 3 builds, 1 thread
    .venv/bin/python bench/bench_engine_load.py --threads 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch


def _phases(adapter: str | None) -> dict[str, float]:
    from workbench.core.models import load_policy
    from workbench.eval.adapters import attach_adapter
    from workbench.rollout.backends.native import NativeDecode
    from workbench.rollout.backends.quant import LeanDecode, quant_layers, quantize_model

    out, t = {}, time.perf_counter()
    model, _tok = load_policy(device="cpu")
    out["load"], t = time.perf_counter() - t, time.perf_counter()
    if adapter:
        model = attach_adapter(model, adapter)
    out["adapter"], t = time.perf_counter() - t, time.perf_counter()
    qmodel = quantize_model(model)
    out["quantize"], t = time.perf_counter() - t, time.perf_counter()
    native = NativeDecode.build(LeanDecode.build(qmodel))
    for m in quant_layers(qmodel):  # as QuantBackend does once the C step has packed them
        m.drop_grid()
    out["C step"] = time.perf_counter() - t
    out["fp32 engine"] = out["load"] + out["adapter"]
    out["int4 engine"] = out["fp32 engine"] + out["quantize"] + out["C step"]
    out["C step built"] = float(native is not None)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="builds to take the median of (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--adapter", default="data/adapters/search_r1-sft-grpo",
                    help="LoRA adapter to attach ('' for none; default: the shipped one)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    _phases(args.adapter or None)  # imports and the model file's first read
    runs = [_phases(args.adapter or None) for _ in range(args.repeats)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{platform.processor() or platform.machine()}, {args.threads} thread(s), median of {args.repeats}:")
    for k in ("load", "adapter", "quantize", "C step", "fp32 engine", "int4 engine"):
        print(f"  {k:12s} {med[k]:6.2f} s")
    print(f"  the int4 engine adds {med['int4 engine'] - med['fp32 engine']:.2f} s to the fp32 engine's "
          f"{med['fp32 engine']:.2f} s ({med['int4 engine'] / med['fp32 engine']:.2f}x)"
          + ("" if med["C step built"] else "; no C step built here"))
    result = {"threads": args.threads, "repeats": args.repeats, "median_s": med, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
