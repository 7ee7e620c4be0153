"""Where a one-row decode step of the int4 engine goes, beside llama.cpp's whole step on the same GGUF.

    .venv/bin/python bench/bench_decode_split.py [--repeats 3]

One thread, one prompt (the search_r1 agent's turn 0 of a dev question, ~335 tokens, as ``bench_quant_rollout.py``
builds it), greedy, no adapter. Per decode step, milliseconds of the process's CPU time (the steadier figure on a
shared machine), median of ``--repeats``:

- ``int4 engine, C step``: the step as rollouts run it, in C (``decode_step.c``; the call's CPU time less a one-token
  call's, over the extra tokens);
- ``int4, torch step``: the same engine with its one-row steps in torch (``LeanDecode``), and its split:
- ``its int4 products``: the same calls with every ``Int4Weight.matmul`` timed in place (211 a step);
- ``the rest``: the step with every product replaced by zeros of its shape (HF's layer code, norms, rotary
  embeddings, attention over the cache, sampling and the logprob): what a leaner forward could remove;
- ``llama.cpp``: its one-row decode step on the default model's GGUF (needs ``llama-cpp-python``; skipped if absent).

The question it answers: can the int4 engine reach llama.cpp's one-row decode by cutting per-op overhead, or does the
product kernel alone already cost about llama.cpp's whole step?
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def int4_steps(prompt: list[int], repeats: int) -> dict[str, float]:
    import torch

    from workbench.core.models import load_policy
    from workbench.rollout.backends import SamplingParams, make_backend, quant

    torch.set_num_threads(1)
    model, tok = load_policy(device="cpu")
    c_step = make_backend("hf", model, tokenizer=tok, engine="int4")  # as rollouts run it: one-row steps in C where it is built
    backend = quant.QuantBackend(model, tok, native=False)  # every step in torch (LeanDecode): the split below
    in_products = [0.0]
    real = quant.Int4Weight.matmul

    def timed_matmul(self, x):
        c = time.process_time()
        y = real(self, x)
        in_products[0] += time.process_time() - c
        return y

    def zeros(self, x):
        return torch.zeros(x.shape[0], self.out_features)

    def step_ms(backend=backend) -> tuple[float, float]:
        """(CPU ms a decode step, CPU ms of products a decode step)."""
        out = []
        for new in (1, 64):
            backend.clear_cache()
            in_products[0] = 0.0
            c = time.process_time()
            gen = backend.generate([prompt], SamplingParams(max_new_tokens=new, temperature=0.0))
            out.append((time.process_time() - c, in_products[0], len(gen[0].token_ids)))
        (c1, p1, _), (c2, p2, n) = out
        return 1000 * (c2 - c1) / (n - 1), 1000 * (p2 - p1) / (n - 1)

    res: dict[str, list[float]] = {"int4 engine, C step": [], "int4, torch step": [], "its int4 products": [],
                                   "the rest": []}
    if c_step.native is None:
        print(f"# no C step here: {c_step.native_why}")
        del res["int4 engine, C step"]
    for b in (c_step, backend):  # warm up
        b.generate([prompt], SamplingParams(max_new_tokens=4, temperature=0.0))
    try:
        for _ in range(repeats):
            quant.Int4Weight.matmul = real
            if c_step.native is not None:
                res["int4 engine, C step"].append(step_ms(c_step)[0])
            res["int4, torch step"].append(step_ms()[0])
            quant.Int4Weight.matmul = timed_matmul
            res["its int4 products"].append(step_ms()[1])
            quant.Int4Weight.matmul = zeros
            res["the rest"].append(step_ms()[0])
    finally:
        quant.Int4Weight.matmul = real
    return {k: statistics.median(v) for k, v in res.items()}


def llama_step(prompt: list[int], repeats: int) -> float | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return None
    from bench_quant_rollout import LlamaCpp

    from workbench.core.models import packaged_gguf_path

    err = os.dup(2)
    with open(os.devnull, "w") as null:  # llama.cpp logs every tensor it loads on stderr
        os.dup2(null.fileno(), 2)
        try:
            eng = LlamaCpp(str(packaged_gguf_path("smollm2-135m")), threads=1)
        finally:
            os.dup2(err, 2)
            os.close(err)
    ms = []
    for _ in range(repeats):
        c = time.process_time()
        eng.generate([prompt], 1, 0.0)
        c1 = time.process_time() - c
        c = time.process_time()
        n = eng.generate([prompt], 64, 0.0)
        ms.append(1000 * (time.process_time() - c - c1) / (n - 1))
    return statistics.median(ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from bench_quant_rollout import make_prompts

    prompt = make_prompts(1)[0][0]
    load0 = os.getloadavg()[0]
    rows = int4_steps(prompt, args.repeats)
    lc = llama_step(prompt, args.repeats)
    print(f"# one thread, one row, {len(prompt)}-token prompt, greedy; CPU ms a decode step, median of {args.repeats}; "
          f"load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    for k, v in rows.items():
        print(f"{k:<21} {v:7.1f} ms   {1000 / v:6.1f} tokens/s")
    print(f"{'llama.cpp':<21} " + ("not installed" if lc is None else f"{lc:7.1f} ms   {1000 / lc:6.1f} tokens/s"))


if __name__ == "__main__":
    main()
