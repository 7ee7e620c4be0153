"""Where a rollout's decode step goes on a GPU: the HF backend with and without LoRA, against transformers'
own ``generate`` on the same model and batch.

    python bench/gpu/rollout_profile.py --model-dir DIR          # DIR: config.json + tokenizer (weights unused)
    python bench/gpu/rollout_profile.py --tiny                   # 2 layers on CPU in seconds (tests)

The model is the configuration in ``--model-dir`` (default: the packaged SmolLM2-135M) with random weights, bf16
on CUDA (fp32 on CPU): the time of a decode step does not depend on the weights. Each engine generates
``--new-tokens`` tokens for ``--rows`` rows sharing one ``--prompt-len``-token prompt (a GRPO group's turn):

- ``hf``: :class:`~workbench.rollout.backends.hf.HFBackend` on the bare model;
- ``hf+lora``: the same on the trainer's PEFT model (LoRA r=16 on the default targets), as training and
  ``eval --adapter`` run it;
- ``hf+lora merged``: LoRA merged into the weights (peft ``merge_adapter``);
- ``graph``: :class:`~workbench.rollout.backends.graph.GraphBackend` on the PEFT model (``--rollout-engine graph``,
  what ``auto`` picks on CUDA): the LoRA merged for each call, the decode step captured as a CUDA graph and replayed;
  ``graph, eager``: the same fixed-shape step without the capture (its share of the gain);
- ``transformers.generate``: the peer, sampling on the bare model with ``min_new_tokens`` = ``max_new_tokens``.

Then, for each of ``--group-rows`` (GRPO groups of 8 and 32 by default), ``transformers.generate``, ``hf+lora`` and
``graph`` again at that many rows. Reports milliseconds per decode step and tokens/s (a line as each timing ends),
the graph engine's greedy agreement with ``hf+lora``, and last, for one ``hf+lora`` call of ``--profile-tokens``
tokens, the operators with the most CPU time under ``torch.profiler`` and the share of the wall time the GPU was busy
(a low share: the step waits on Python and kernel launches, not on the GPU). Prints markdown; ``--out`` writes JSON
(before the profiler pass, and again after it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def build(model_dir: str | None, tiny: bool, device: str, dtype):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from workbench.core.models import load_tokenizer, resolve_model_path

    path = resolve_model_path(model_dir)
    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    if tiny:
        cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 64, 128
        cfg.num_attention_heads, cfg.num_key_value_heads = 4, 2
        cfg.head_dim = 16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(device).eval()
    return model, load_tokenizer(path), cfg


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _progress(name: str, rows: int, r: dict) -> None:
    """A line as each timing ends (a device call stopped by its time limit still shows what finished)."""
    print(f"[timed] {name}, {rows} rows: {r['ms_per_step']:.1f} ms a step, {r['tokens_per_s']:.0f} tokens/s", flush=True)


def time_backend(backend, prompt: list[int], rows: int, new_tokens: int, device: str, reps: int,
                 label: str = "") -> dict:
    """Best of ``reps`` timed ``generate`` calls (after one warm-up): ms per decode step and tokens/s."""
    import torch

    from workbench.rollout.backends.base import SamplingParams

    backend._eos = set()  # random weights: never stop early, so every call makes ``new_tokens`` steps
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    best = None
    with torch.no_grad():
        for i in range(reps + 1):
            backend.clear_cache()
            steps0 = backend.stats["decode_steps"]
            _sync(device)
            t0 = time.perf_counter()
            gens = backend.generate([prompt] * rows, params)
            _sync(device)
            secs = time.perf_counter() - t0
            steps = backend.stats["decode_steps"] - steps0
            toks = sum(len(g.token_ids) for g in gens)
            if i and (best is None or secs < best["seconds"]):
                best = {"seconds": secs, "decode_steps": steps, "tokens": toks}
    best["ms_per_step"] = 1000 * best["seconds"] / max(1, best["decode_steps"])
    best["tokens_per_s"] = best["tokens"] / best["seconds"]
    _progress(label or getattr(backend, "name", "backend"), rows, best)
    return best


def time_generate(model, prompt: list[int], rows: int, new_tokens: int, device: str, reps: int) -> dict:
    import torch

    ids = torch.tensor([prompt] * rows, device=device)
    best = None
    with torch.no_grad():
        for i in range(reps + 1):
            _sync(device)
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_p=1.0, top_k=0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=0)
            _sync(device)
            secs = time.perf_counter() - t0
            if i and (best is None or secs < best["seconds"]):
                best = {"seconds": secs, "decode_steps": new_tokens, "tokens": int(out[:, len(prompt):].numel())}
    best["ms_per_step"] = 1000 * best["seconds"] / new_tokens
    best["tokens_per_s"] = best["tokens"] / best["seconds"]
    _progress("transformers.generate", rows, best)
    return best


def profile_backend(backend, prompt: list[int], rows: int, new_tokens: int, device: str, top: int) -> dict:
    """One ``generate`` under ``torch.profiler``: the top operators by self CPU time, and the GPU's busy share."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from workbench.rollout.backends.base import SamplingParams

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    backend.clear_cache()
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    with torch.no_grad(), profile(activities=acts) as prof:
        _sync(device)
        t0 = time.perf_counter()
        backend.generate([prompt] * rows, params)
        _sync(device)
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    rows_out = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    table = [{"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1000} for e in rows_out]
    gpu_ms = None
    if device == "cuda":
        gpu_ms = sum(getattr(e, "self_device_time_total", 0) or 0 for e in events) / 1000
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                         "cudaGraphLaunch"))
    return {"wall_ms": wall * 1000, "gpu_busy_ms": gpu_ms, "kernel_launches": launches, "top_ops": table}


def agreement(lora, graph, prompt: list[int], rows: int, new_tokens: int) -> dict:
    """Greedy continuations of ``rows`` different prompts by ``hf+lora`` (the unmerged PEFT model, the reference) and
    ``graph``: the share of rows whose tokens are all the same, the mean length of the common prefix, the largest
    logprob gap over it, and whether the graph engine left every weight as it found it."""
    import torch

    from workbench.rollout.backends.base import SamplingParams

    prompts = [prompt[: len(prompt) - 7 * r] for r in range(rows)]  # different lengths: padding is exercised too
    before = [p.detach().clone() for p in graph.model.parameters()]
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    for b in (lora, graph):
        b.clear_cache()
    with torch.no_grad():
        ref, got = lora.generate(prompts, params), graph.generate(prompts, params)
    same, gaps, prefix = 0, [], []
    for a, b in zip(ref, got):
        n = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), min(len(a.token_ids),
                                                                                              len(b.token_ids)))
        same += a.token_ids == b.token_ids
        prefix.append(n)
        gaps += [abs(x - y) for x, y in zip(a.logprobs[: n], b.logprobs[: n])]
    restored = all(torch.equal(x, y) for x, y in zip(before, graph.model.parameters()))
    return {"rows": rows, "identical_rows": same, "mean_common_prefix": sum(prefix) / rows, "new_tokens": new_tokens,
            "max_logprob_gap": max(gaps, default=0.0), "weights_restored": restored}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default=None, help="a model directory or alias whose config.json and tokenizer "
                    "are used (default: the packaged SmolLM2-135M)")
    ap.add_argument("--rows", type=int, default=24, help="rows decoded together (default: %(default)s, a step's 3 x 8)")
    ap.add_argument("--group-rows", default="8,32", help="comma-separated row counts timed again for generate, "
                    "hf+lora and graph (default: %(default)s; '' for none)")
    ap.add_argument("--prompt-len", type=int, default=600)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--profile-tokens", type=int, default=16, help="new tokens of the hf+lora call run last under "
                    "torch.profiler (default: %(default)s; 0: none). On the H200 parsing a 64-token call's events "
                    "took over a minute")
    ap.add_argument("--top", type=int, default=12, help="operators listed from the profile")
    ap.add_argument("--tiny", action="store_true", help="2 layers, on CPU, small sizes (seconds)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from workbench.rl.policy import LoRAPolicy
    from workbench.rollout.backends.graph import GraphBackend
    from workbench.rollout.backends.hf import HFBackend

    if args.tiny:
        args.rows, args.prompt_len, args.new_tokens, args.reps, args.group_rows = 4, 16, 4, 1, "2"
        args.profile_tokens = min(args.profile_tokens, 4)
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, tok, cfg = build(args.model_dir, args.tiny, device, dtype)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(100, min(len(tok), cfg.vocab_size), (args.prompt_len,), generator=g).tolist()
    res: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
                 "dtype": str(dtype), "layers": cfg.num_hidden_layers, "rows": args.rows,
                 "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "engines": {}}
    eng = res["engines"]
    eng["transformers.generate"] = time_generate(model, prompt, args.rows, args.new_tokens, device, args.reps)
    eng["hf"] = time_backend(HFBackend(model, tok), prompt, args.rows, args.new_tokens, device, args.reps, label="hf")
    policy = LoRAPolicy(model=model, tokenizer=tok, r=16, alpha=32, device=None)
    with torch.no_grad():  # a trained adapter's B is not zero: merging must then change (and restore) the weights
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    lora = HFBackend(policy.model, tok)
    eng["hf+lora"] = time_backend(lora, prompt, args.rows, args.new_tokens, device, args.reps, label="hf+lora")
    policy.model.merge_adapter()
    eng["hf+lora merged"] = time_backend(lora, prompt, args.rows, args.new_tokens, device, args.reps, label="hf+lora merged")
    policy.model.unmerge_adapter()
    graph = GraphBackend(policy.model, tok)
    eng["graph"] = time_backend(graph, prompt, args.rows, args.new_tokens, device, args.reps, label="graph")
    eng["graph"]["stats"] = {k: graph.stats[k] for k in ("graph_captures", "graph_replays", "eager_steps",
                                                          "merged_layers", "graph_fallback")}
    res["agreement"] = agreement(lora, graph, prompt, min(args.rows, 8), args.new_tokens)
    eng["graph, eager"] = time_backend(GraphBackend(policy.model, tok, graphs=False), prompt, args.rows,
                                       args.new_tokens, device, args.reps, label="graph, eager")
    groups = res["groups"] = {}
    for n in [int(x) for x in args.group_rows.split(",") if x.strip()]:
        groups[n] = {"transformers.generate": time_generate(model, prompt, n, args.new_tokens, device, args.reps),
                     "hf+lora": time_backend(lora, prompt, n, args.new_tokens, device, args.reps, label="hf+lora"),
                     "graph": time_backend(graph, prompt, n, args.new_tokens, device, args.reps, label="graph")}

    print(f"{time.strftime('%Y-%m-%d')} · {res['device']} · torch {res['torch']} · {dtype} · {cfg.num_hidden_layers} "
          f"layers, random weights · {args.rows} rows x ({args.prompt_len} prompt + {args.new_tokens} new tokens)")
    print("| engine | ms / decode step | tokens/s | vs transformers.generate |\n|---|---:|---:|---:|")
    base = eng["transformers.generate"]["tokens_per_s"]
    for name, r in eng.items():
        print(f"| {name} | {r['ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / base:.2f}x |")
    if groups:
        print("\n| rows | generate tok/s | hf+lora tok/s | graph tok/s | graph vs generate |\n|---:|---:|---:|---:|---:|")
        for n, g in groups.items():
            gen_, lo, gr = (g[k]["tokens_per_s"] for k in ("transformers.generate", "hf+lora", "graph"))
            print(f"| {n} | {gen_:.0f} | {lo:.0f} | {gr:.0f} | {gr / gen_:.2f}x |")
    a = res["agreement"]
    print(f"\ngreedy, graph vs hf+lora on {a['rows']} prompts x {a['new_tokens']} tokens: {a['identical_rows']} rows "
          f"identical, common prefix {a['mean_common_prefix']:.1f} tokens on average, largest logprob gap on it "
          f"{a['max_logprob_gap']:.4f}; weights restored after the merge: {a['weights_restored']}")
    st = eng["graph"]["stats"]
    print(f"\ngraph: {st['graph_captures']} captures, {st['graph_replays']} replays, {st['eager_steps']} eager steps, "
          f"{st['merged_layers']} LoRA layers merged a call" + (f"; FELL BACK: {st['graph_fallback']}"
                                                                 if st["graph_fallback"] else ""))
    if args.out:  # before the profiler pass: parsing its events can take minutes on a GPU (many kernels)
        Path(args.out).write_text(json.dumps(res, indent=1))
    if not args.profile_tokens:
        return res
    p = res["profile_hf+lora"] = profile_backend(lora, prompt, args.rows, args.profile_tokens, device, args.top)
    busy = f", GPU busy {p['gpu_busy_ms']:.0f} ms ({100 * p['gpu_busy_ms'] / p['wall_ms']:.0f}%)" if p["gpu_busy_ms"] else ""
    print(f"\nhf+lora under the profiler ({args.profile_tokens} new tokens): wall {p['wall_ms']:.0f} ms{busy}, "
          f"{p['kernel_launches']} kernel launches")
    print("| operator | calls | self CPU ms |\n|---|---:|---:|")
    for r in p["top_ops"]:
        print(f"| {r['op']} | {r['calls']} | {r['self_cpu_ms']:.1f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
