"""GPU benchmark suite: HF rollout tokens/s, LoRA GRPO training-step tokens/s and MFU, peak memory, and the
largest group × length that fits, on random-initialised models of real architectures.

    python bench/gpu/suite.py                                  # Qwen2.5 0.5B/1.5B/3B/7B on the CUDA GPU
    python bench/gpu/suite.py --models qwen2.5-0.5b --groups 1,8 --out results.json
    python bench/gpu/suite.py --tiny                            # a 2-layer model on CPU in seconds (tests)

Self-contained: needs torch, transformers, peft, accelerate and this package; no internet. The models are
the published Qwen2.5 configurations (written out below) with random weights — throughput and memory do not
depend on the weights — and the tokenizer is the packaged SmolLM2 one (``--tokenizer``; its ids are valid in Qwen2.5's larger
vocabulary). bf16 weights on CUDA with the training forward under bf16 autocast (``LoRAPolicy(amp="auto")``;
LoRA weights and the log-softmax fp32), fp32 on CPU. MFU is the step's FLOPs
(:mod:`workbench.rl.flops`) per second over the device's measured dense matmul peak (bf16 on CUDA, fp32 on
CPU), measured here with large square ``torch.matmul``. Gradient checkpointing: the memory the training forward
holds for its backward (:mod:`workbench.rl.memory`: CUDA allocated bytes, or the C heap in use on a CPU), and on
CUDA the step's peak, with and without it (no shared prefix in either: the two do not combine). Prints one
markdown table; ``--out`` writes JSON.

Figures on a GPU: not yet measured on hardware (see ``bench/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

# Qwen2.5 configurations (config.json of Qwen/Qwen2.5-{0.5B,1.5B,3B,7B}-Instruct, written out: no download).
_QWEN = dict(model_type="qwen2", vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
             rms_norm_eps=1e-6, hidden_act="silu")
CONFIGS: dict[str, dict] = {
    "qwen2.5-0.5b": {**_QWEN, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-1.5b": {**_QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-3b": {**_QWEN, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                   "num_attention_heads": 16, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-7b": {**_QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False},
    "tiny": {**_QWEN, "vocab_size": 49152, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
}


def build_model(name: str, device, dtype):
    """A random-initialised Qwen2 causal LM of configuration ``name`` on ``device`` in ``dtype``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**{k: v for k, v in CONFIGS[name].items() if k != "model_type"})
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def matmul_peak(device, dtype, n: int) -> float:
    """Best dense matmul FLOP/s on ``device`` (``n × n`` operands)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(6):
        _sync(device)
        t0 = time.perf_counter()
        torch.matmul(a, b)
        _sync(device)
        if i:  # the first is a warm-up
            best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _batch(tok, group: int, prompt_len: int, resp_len: int, seed: int):
    """A GRPO group: one prompt of ``prompt_len`` tokens, ``group`` responses of up to ``resp_len`` tokens."""
    import torch

    from workbench.core.trajectory import POLICY, Trajectory, Turn
    from workbench.rl.batch import build_batch

    g = torch.Generator().manual_seed(seed)
    vocab = min(len(tok), 49152)
    prompt = torch.randint(100, vocab, (prompt_len,), generator=g).tolist()
    trajs = []
    for i in range(group):
        n = max(1, resp_len - (i * resp_len) // (4 * max(1, group)))  # lengths differ a little, as sampled ones do
        t = Trajectory(id=f"q#{i}", example_id="q", question="", protocol="bench", prompt_ids=prompt, group_id="q",
                       sample_idx=i)
        t.turns.append(Turn(POLICY, "", torch.randint(100, vocab, (n,), generator=g).tolist(), [-1.0] * n, "length", {}))
        trajs.append(t)
    adv = torch.linspace(-1, 1, group) if group > 1 else torch.ones(1)
    return build_batch(trajs, advantages=adv, pad_id=0)


def _grpo_loss(policy, b, prefix_len: int):
    from workbench.rl.config import get_loss_config
    from workbench.rl.losses import policy_loss

    logp = policy.logprobs(b.input_ids, b.attention_mask, target_mask=b.loss_mask > 0, prefix_len=prefix_len)
    loss, _ = policy_loss(logp, None, None, b.advantages, b.loss_mask, get_loss_config("grpo", kl_coef=0.0),
                          b.global_tokens, b.global_seqs)
    return loss


def train_step(policy, optimizer, batch, shared_prefix: bool) -> tuple[float, float]:
    """One LoRA GRPO step (forward, loss, backward, AdamW) on ``batch``; returns ``(seconds, FLOPs)``."""
    from workbench.rl.flops import backward_flops, forward_flops, model_shape, work_of
    from workbench.rl.shared_prefix import common_prefix_len

    dev = policy.device
    b = batch.to(dev)
    P = common_prefix_len(b.input_ids, b.attention_mask) if shared_prefix and len(b) > 1 else 0
    _sync(dev)
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    _grpo_loss(policy, b, P).backward()
    optimizer.step()
    _sync(dev)
    secs = time.perf_counter() - t0
    shape = model_shape(policy.base)
    work = work_of(b.attention_mask.sum(-1).tolist(), int((b.loss_mask > 0).sum()), P)
    return secs, forward_flops(shape, *work) + backward_flops(shape, *work)


def checkpointing_memory(policy, optimizer, batch) -> dict:
    """MiB the training forward holds for its backward without and with gradient checkpointing (and on CUDA the
    step's peak allocated GiB for each); no shared prefix in either."""
    import torch

    from workbench.rl.memory import held_for_backward

    dev = policy.device
    b = batch.to(dev)
    out = {}
    for name, on in (("plain", False), ("ckpt", True)):
        policy.enable_gradient_checkpointing() if on else policy.disable_gradient_checkpointing()
        optimizer.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        loss, held = held_for_backward(lambda: _grpo_loss(policy, b, 0), dev)
        loss.backward()
        del loss
        out[f"held_{name}_mib"] = held / 2**20
        if dev.type == "cuda":
            out[f"step_peak_{name}_gib"] = torch.cuda.max_memory_allocated() / 2**30
    policy.disable_gradient_checkpointing()
    optimizer.zero_grad(set_to_none=True)
    return out


def _is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def largest_fit(policy, optimizer, tok, group: int, prompt_len: int, lengths: list[int]) -> int:
    """The longest response length in ``lengths`` (ascending) whose training step fits in memory (0: none)."""
    import torch

    fit = 0
    for n in lengths:
        try:
            train_step(policy, optimizer, _batch(tok, group, prompt_len, n, seed=7), shared_prefix=True)
            fit = n
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            if not _is_oom(e):
                raise
            break
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return fit


def peak_memory_gib(device) -> float:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux: this process's peak RSS


def run_model(name: str, args, device, dtype, peak: float, tok) -> list[dict]:
    import torch

    from workbench.rl.policy import LoRAPolicy
    from workbench.rollout.backends.base import SamplingParams
    from workbench.rollout.backends.hf import HFBackend

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = build_model(name, device, dtype)
    policy = LoRAPolicy(model=model, tokenizer=tok, r=args.lora_r, alpha=2 * args.lora_r, device=None)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    backend = HFBackend(policy.model, tok, batch_size=max(args.groups), prefix_cache=False)
    rows = []
    for G in args.groups:
        prompt = _batch(tok, 1, args.prompt_len, 1, seed=G).input_ids[0, : args.prompt_len].tolist()
        params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
        with torch.no_grad():
            backend.generate([prompt] * G, params)  # warm-up
            _sync(device)
            t0 = time.perf_counter()
            gens = backend.generate([prompt] * G, params)
            _sync(device)
        gen_s = time.perf_counter() - t0
        gen_tokens = sum(len(g.token_ids) for g in gens)
        batch = _batch(tok, G, args.prompt_len, args.new_tokens, seed=G)
        policy.model.train(False)
        train_step(policy, optimizer, batch, args.shared_prefix)  # warm-up
        secs, flops = min(train_step(policy, optimizer, batch, args.shared_prefix) for _ in range(args.reps))
        tokens = int(batch.attention_mask.sum())
        rows.append({"model": name, "group": G, "rollout_tokens_per_s": gen_tokens / gen_s,
                     "train_tokens_per_s": tokens / secs, "train_step_s": secs, "mfu": flops / secs / peak,
                     "peak_memory_gib": peak_memory_gib(device)})
        rows[-1].update(checkpointing_memory(policy, optimizer, batch))
    fit = largest_fit(policy, optimizer, tok, max(args.groups), args.prompt_len, args.fit_lengths)
    for r in rows:
        r["largest_fit"] = f"{max(args.groups)} x ({args.prompt_len}+{fit})" if fit else "none"
    del policy, model, backend, optimizer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-7b",
                    help=f"comma-separated, from {', '.join(CONFIGS)}")
    ap.add_argument("--groups", default="1,8,32", help="group sizes (default: %(default)s)")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--fit-lengths", default="512,1024,2048,4096,8192", help="response lengths tried for the largest fit")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-shared-prefix", dest="shared_prefix", action="store_false",
                    help="train without shared-prompt prefill")
    ap.add_argument("--tokenizer", default=None, help="a model directory, .gguf file or alias whose tokenizer is "
                    "used (default: the packaged SmolLM2)")
    ap.add_argument("--tiny", action="store_true", help="the 2-layer config on CPU with small sizes (seconds)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere in the checkout
    from workbench.core.models import load_tokenizer

    if args.tiny:
        args.models, args.prompt_len, args.new_tokens, args.fit_lengths, args.reps = "tiny", 24, 8, "8,16", 1
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in CONFIGS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {', '.join(CONFIGS)}")
    try:
        args.groups = [int(x) for x in args.groups.split(",")]
        args.fit_lengths = [int(x) for x in str(args.fit_lengths).split(",")]
    except ValueError:
        ap.error("--groups and --fit-lengths take comma-separated integers, e.g. 1,8,32")
    cuda = torch.cuda.is_available() and not args.tiny
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    peak = matmul_peak(device, dtype, 8192 if cuda else (512 if args.tiny else 2048))
    tok = load_tokenizer(args.tokenizer)
    rows = [r for name in names for r in run_model(name, args, device, dtype, peak, tok)]
    where = torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    print(f"{time.strftime('%Y-%m-%d')} · {where} · torch {torch.__version__} · {dtype} · matmul peak "
          f"{peak / 1e12:.2f} TFLOP/s · prompt {args.prompt_len}, {args.new_tokens} new tokens, LoRA r={args.lora_r} · "
          f"autocast {'bf16' if cuda else 'off'}")
    print("| model | group | rollout tok/s | train tok/s | step (s) | MFU | peak mem (GiB) | largest fit "
          "| held for backward (MiB): plain → checkpointed |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        held = f"{r['held_plain_mib']:.1f} → {r['held_ckpt_mib']:.1f}"
        if "step_peak_plain_gib" in r:
            held += f" (step peak {r['step_peak_plain_gib']:.2f} → {r['step_peak_ckpt_gib']:.2f} GiB)"
        print(f"| {r['model']} | {r['group']} | {r['rollout_tokens_per_s']:.0f} | {r['train_tokens_per_s']:.0f} | "
              f"{r['train_step_s']:.2f} | {100 * r['mfu']:.1f}% | {r['peak_memory_gib']:.1f} | {r['largest_fit']} "
              f"| {held} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": where, "dtype": str(dtype), "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
