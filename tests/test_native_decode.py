"""The int4 engine's decode step in C for up to 8 rows (``workbench/rollout/backends/native.py`` + ``decode_step.c``): its
packing against the int4 grid, its logits against the fp32 model (with and without the adapter, one row and a padded
batch), the padding mask, buffer growth, thread counts, the plain C loops against the vector kernels, which steps take
it, and what happens without a compiler."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest
import torch

from workbench.rollout.backends import SamplingParams, native
from workbench.rollout.backends.hf import _preallocate
from workbench.rollout.backends.quant import QuantBackend, dequantize, int4_groups

pytestmark = [
    pytest.mark.skipif(not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"), reason="no CPU int4 kernel"),
    pytest.mark.skipif(native.library()[0] is None, reason=f"no one-row decode step here: {native.library()[1]}"),
]

ADAPTER = "data/adapters/search_r1-sft-grpo"
# Largest |logit| difference to the fp32 model at one step (logits up to ~40): measured 0.17-0.34 (int4 weights and
# bf16 activations, as the torch int4 path rounds them; its two-level int4 head is further off, 0.39-0.44; AVX2's
# 16-bit integer activations 0.16-0.18).
LOGIT_GAP = 1.0
# Largest |logit| difference between two runs of the same step that round differently (plain C loops against the
# vector kernels; a padded batch row against the prompt alone): measured 0.11-0.12, where bf16 rounding of an input
# flips. Ignoring the padding mask moves the logits by ~3.
NOISE = 0.5


@pytest.fixture(scope="module")
def engine(policy, one_thread):
    from workbench.eval.adapters import attach_adapter

    model, tok = policy
    peft_model = attach_adapter(model, ADAPTER)
    yield peft_model, QuantBackend(peft_model, tok)
    peft_model.unload()


def _prompts(tok, n: int = 3) -> list[list[int]]:
    from workbench.data.world import load_world
    from workbench.methods import get_protocol
    from workbench.rollout.backends.base import encode_chat

    protocol = get_protocol("search_r1", observation_mode="chat")
    return [encode_chat(tok, protocol.messages(ex)) for ex in load_world().split("dev")[:n]]


def _first_step(backend, prompt: list[int], room: int = 8):
    """A prefilled one-row cache for ``prompt`` and the inputs of its first decode step (the greedy token)."""
    past, attn, pos, logits = backend._prefill([prompt], [None])
    _preallocate(past, None, room)
    return past, torch.cat([attn, attn.new_ones((1, 1))], -1), pos + 1, logits.argmax(-1)


def unpack_int4(packed: torch.Tensor, K: int) -> torch.Tensor:
    """The matrix the C step's int4 pairs of blocks hold (the layout in ``decode_step.c``), from the bytes."""
    N, P = packed.shape[0], K // 64
    b = packed.reshape(N, P, 48)
    levels = b[..., :32].reshape(N, P, 8, 2, 2).transpose(2, 3).reshape(N, P, 2, 16).long()
    q = torch.cat([levels & 15, levels >> 4], -1).float()  # N x P x 2 blocks x 32
    sz = b[..., 32:].contiguous().view(torch.float32).reshape(N, P, 4)
    s, zz = sz[..., :2], sz[..., 2:]
    return ((128 + q) * s[..., None] + zz[..., None]).reshape(N, K)  # zz = zero - 136 scale


def test_int4_packing_holds_the_int4_engines_grid():
    w = torch.randn(6, 128)
    q, step, low = int4_groups(w)
    scale, zero = step.to(torch.bfloat16).float(), (low + 8 * step).to(torch.bfloat16).float()
    grid = ((q.reshape(6, 4, 32) - 8) * scale[..., None] + zero[..., None]).reshape(6, 128)  # what Int4Weight computes
    got = unpack_int4(native.pack_int4(q, step, low), 128)
    assert torch.allclose(got, grid, rtol=0, atol=1e-5)
    assert (got - w).abs().max() < 0.6 * float(step.max())  # on the nearest level (bf16 scale: a little more)
    assert torch.allclose(dequantize(q, step, low), grid, atol=0.02)
    q8 = native.pack_int8(w)  # int8 blocks: 32 levels and an fp32 scale of max |w| / 127
    levels = q8.reshape(6, 4, 36)[..., :32].contiguous().view(torch.int8).float()
    d = q8.reshape(6, 4, 36)[..., 32:].contiguous().view(torch.float32)
    assert torch.allclose((levels * d).reshape(6, 128), w, rtol=0, atol=float(d.max()) / 2 + 1e-7)


def test_the_one_row_step_gives_the_fp32_models_logits(engine):
    """One decode step in C against the fp32 peft model's forward over the same tokens, with the adapter enabled and
    disabled (as peft applies it, read at each call): the same greedy token, logits within the int4 grid's rounding,
    and each state's logits nearer its own reference than the other state's."""
    from workbench.eval.adapters import adapter_state

    peft_model, backend = engine
    prompt = _prompts(backend.tokenizer, 1)[0]
    got, ref = {}, {}
    for trained in (False, True):
        with adapter_state(peft_model, trained), torch.inference_mode():
            backend.native.active = backend.native.refresh()  # as each generate call does
            past, attn, pos, token = _first_step(backend, prompt)
            got[trained] = backend.native(token, attn, pos, past)[1][0]
            ref[trained] = peft_model(input_ids=torch.tensor([prompt + [int(token)]])).logits[0, -1]
            assert past.layers[0].n == len(prompt) + 1  # the new token's keys and values went into the cache
    for trained in (False, True):
        assert int(got[trained].argmax()) == int(ref[trained].argmax())
        gap = float((got[trained] - ref[trained]).abs().max())
        assert gap < LOGIT_GAP and gap < float((got[trained] - ref[not trained]).abs().max())


def test_one_row_generation_agrees_with_fp32_and_takes_the_c_step(engine):
    from workbench.rollout.backends.hf import HFBackend

    peft_model, backend = engine
    prompts = _prompts(backend.tokenizer)
    params = SamplingParams(max_new_tokens=24, temperature=0.0)
    before = backend.stats["native_steps"]
    fp32 = HFBackend(peft_model, backend.tokenizer)
    for p in prompts:  # one prompt a call: every decode step is a one-row step
        backend.clear_cache()
        a, b = fp32.generate([p], params)[0], backend.generate([p], params)[0]
        assert a.token_ids[:8] == b.token_ids[:8]
        n = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), len(b.token_ids))
        assert max(abs(x - y) for x, y in zip(a.logprobs[:n], b.logprobs[:n])) < 0.1
    assert backend.stats["native_steps"] - before >= len(prompts) * 8


def test_the_padding_mask_is_honoured(engine):
    """A row prefilled beside a longer prompt (its cache starts with padding) steps as the prompt alone does; the
    same step told to attend to the padding does not, so the comparison can fail."""
    _, backend = engine
    long_, other = _prompts(backend.tokenizer, 2)[:2]
    short = other[:200]
    with torch.inference_mode():
        past, attn, pos, logits = backend._prefill([short, long_], [None, None])
        _preallocate(past, [0], 8)
        attn, pos = torch.cat([attn[:1], attn.new_ones((1, 1))], -1), pos[:1] + 1
        assert int((attn == 0).sum()) == len(long_) - len(short)
        alone, attn1, pos1, token = _first_step(backend, short)
        unmasked = copy.deepcopy(past)
        _, padded_logits = backend.native(token, attn, pos, past)
        _, alone_logits = backend.native(token, attn1, pos1, alone)
        _, wrong = backend.native(token, torch.ones_like(attn), pos, unmasked)
    assert float((padded_logits - alone_logits).abs().max()) < NOISE
    assert float((wrong - alone_logits).abs().max()) > 2 * NOISE


def test_a_batched_step_gives_each_rows_fp32_logits(engine):
    """Three prompts of different lengths in one padded batch, one C step for all three rows (each weight row read
    once for the batch): each row's logits against the fp32 model's forward over that row alone."""
    peft_model, backend = engine
    prompts = [p[:n] for p, n in zip(_prompts(backend.tokenizer), (320, 260, 200))]
    with torch.inference_mode():
        backend.native.active = backend.native.refresh()
        past, attn, pos, logits = backend._prefill(prompts, [None] * 3)
        _preallocate(past, None, 8)
        tokens = logits.argmax(-1)
        attn, pos = torch.cat([attn, attn.new_ones((3, 1))], -1), pos + 1
        assert backend.native.takes(tokens, attn, past)
        _, got = backend.native(tokens, attn, pos, past)
        for r, p in enumerate(prompts):
            ref = peft_model(input_ids=torch.tensor([p + [int(tokens[r])]])).logits[0, -1]
            assert int(got[r].argmax()) == int(ref.argmax())
            assert float((got[r] - ref).abs().max()) < LOGIT_GAP


def test_thread_counts_and_the_plain_c_loops_agree(engine):
    """The step on 1 and 2 threads: bit-equal (each output row is summed by one thread); the portable build (plain C
    loops, no -march=native) against the vector kernels: within rounding noise, the same greedy token."""
    _, backend = engine
    prompt = _prompts(backend.tokenizer, 1)[0]
    portable = native.NativeDecode.build(backend.lean, native.load(native.build(portable=True)))
    assert portable is not None
    n = torch.get_num_threads()
    for rows in (1, 3):
        out = []
        with torch.inference_mode():  # one prefill (torch's own sums depend on threads)
            past, attn, pos, logits = backend._prefill([prompt] * rows, [None] * rows)
            _preallocate(past, None, 8)
            token, attn, pos = logits.argmax(-1), torch.cat([attn, attn.new_ones((rows, 1))], -1), pos + 1
            for step, threads in ((backend.native, 1), (backend.native, 2), (portable, 1)):
                torch.set_num_threads(threads)
                out.append(step(token, attn, pos, copy.deepcopy(past))[1])
        torch.set_num_threads(n)
        assert torch.equal(out[0], out[1])
        assert float((out[0] - out[2]).abs().max()) < NOISE and torch.equal(out[0].argmax(-1), out[2].argmax(-1))


def test_avx2_integer_products_are_nearer_the_fp32_model_than_bf16_inputs(engine):
    """On AVX2 without AVX512-BF16 the int4 products multiply the levels by 16-bit integer inputs (one scale per block
    of 32); ``-DWB_EXACT`` builds the kernel that rounds the inputs to bf16 and multiplies in fp32. One step of three
    real prompts with the adapter, each against the fp32 model's logits: the integer products give its greedy tokens
    and their largest gap is below the bf16 kernel's on average (measured over 8 prompts, one row each: 0.165 against
    0.245; the rest is the int4 weights')."""
    from workbench.util.cpu import host_levels

    peft_model, backend = engine
    if "avx2" not in host_levels():
        pytest.skip("the 16-bit integer products are the AVX2 build's: this CPU has no AVX2 + FMA to run it")
    # the AVX2 level built for this test whatever the host's own kernels are (an AVX-512 host runs x86-64-v3 code)
    int16 = native.NativeDecode.build(backend.lean, native.load(native.build(level="avx2")))
    exact = native.NativeDecode.build(backend.lean, native.load(native.build(level="avx2", exact=True)))
    assert int16 is not None and exact is not None and int16.lib.wb_simd() == exact.lib.wb_simd() == 256
    gaps = {"int16": [], "bf16": []}
    with torch.inference_mode():
        int16.active = int16.refresh()
        exact.active = exact.refresh()
        for p in _prompts(backend.tokenizer, 3):
            past, attn, pos, token = _first_step(backend, p)
            ref = peft_model(input_ids=torch.tensor([p + [int(token)]])).logits[0, -1]
            for name, step in (("int16", int16), ("bf16", exact)):
                got = step(token, attn, pos, copy.deepcopy(past))[1][0]
                gaps[name].append(float((got - ref).abs().max()))
                if name == "int16":
                    assert int(got.argmax()) == int(ref.argmax())
    assert max(gaps["int16"]) < LOGIT_GAP
    assert sum(gaps["int16"]) < sum(gaps["bf16"]), gaps


def test_the_cache_grows_and_larger_batches_stay_in_torch(tiny_model):
    """On a random-init model of the default architecture (width 64: int8 blocks for its off-grid matrices, the
    generic attention path for head width 16): ten steps from a buffer with room for two, each against the lean torch
    step on a copy of the cache; a call of more rows than the C step takes stays in torch."""
    from workbench.core.models import load_policy

    model, tok = load_policy(tiny_model, device="cpu")
    backend = QuantBackend(model, tok)
    assert backend.native is not None and "in C" in backend.describe()
    with torch.inference_mode():
        past, attn, pos, token = _first_step(backend, tok.encode("a short prompt for a tiny model"), room=2)
        for _ in range(10):
            ref_past, ref = backend.lean(token, attn, pos, copy.deepcopy(past))
            past, logits = backend.native(token, attn, pos, past)
            assert torch.allclose(logits, ref, rtol=0, atol=0.02 * float(ref.abs().max()))  # measured 0.8%
            token = ref.argmax(-1)
            attn, pos = torch.cat([attn, attn.new_ones((1, 1))], -1), pos + 1
        assert past.layers[0]._k.shape[2] >= past.layers[0].n == ref_past.layers[0].n
    backend.native.max_rows = native.MAX_ROWS  # as on a CPU with native bf16, whose torch path takes larger batches
    before = dict(backend.stats)
    prompts = [tok.encode(" ".join(["word"] * (i + 1))) for i in range(native.MAX_ROWS + 1)]
    out = backend.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.0))
    steps = backend.stats["decode_steps"] - before["decode_steps"]
    assert all(len(g.token_ids) == 6 for g in out)  # no row stops early: all 9 rows for every step
    assert steps == 6 and backend.stats["native_steps"] == before["native_steps"]


def test_a_larger_batch_runs_in_c_calls_of_eight_rows(tiny_model):
    """Where the engine prefills in fp32 (no native bf16) every decode step goes to C: 11 rows of different lengths
    run as calls of 8 and 3 rows, each on its own slice of the buffers, and give each row the lean torch step's
    logits; the generation takes no torch step."""
    from workbench.core.models import load_policy

    model, tok = load_policy(tiny_model, device="cpu")
    backend = QuantBackend(model, tok)
    backend.native.max_rows = 1 << 30
    prompts = [tok.encode(" ".join(["some words"] * (i + 1))) for i in range(11)]
    with torch.inference_mode():
        past, attn, pos, logits = backend._prefill(prompts, [None] * len(prompts))
        _preallocate(past, None, 4)
        token = logits.argmax(-1)
        attn, pos = torch.cat([attn, attn.new_ones((len(prompts), 1))], -1), pos + 1
        assert backend.native.takes(token, attn, past)
        _, ref = backend.lean(token, attn, pos, copy.deepcopy(past))
        _, got = backend.native(token, attn, pos, past)
    assert torch.allclose(got, ref, rtol=0, atol=0.02 * float(ref.abs().max()))
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9
    before = dict(backend.stats)
    out = backend.generate(prompts, SamplingParams(max_new_tokens=5, temperature=0.0))
    assert all(len(g.token_ids) == 5 for g in out)
    steps = backend.stats["decode_steps"] - before["decode_steps"]  # counts the sampling of the prefill's token too
    assert backend.stats["native_steps"] - before["native_steps"] == steps - 1 == 4


def test_without_a_compiler_the_engine_says_why_and_steps_in_torch(monkeypatch, tiny_model, tmp_path):
    from workbench.core.models import load_policy

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="no C compiler .*no-such-cc"):
        native.build()
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_why", None)
    model, tok = load_policy(tiny_model, device="cpu")
    backend = QuantBackend(model, tok)
    assert backend.native is None and "through torch (no C compiler" in backend.describe()
    out = backend.generate([tok.encode("hello")], SamplingParams(max_new_tokens=3, temperature=0.0))
    assert len(out[0].token_ids) == 3 and backend.stats["native_steps"] == 0
    assert "in C" not in QuantBackend(model, tok, native=False).describe()


HARNESS = Path(__file__).with_name("native_step_harness.c")
ARM64 = ("aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu")  # Debian: gcc-aarch64-linux-gnu, qemu-user


def dump_step(step: native.NativeDecode, tokens, attn, pos, past, path: Path) -> None:
    """One decode step's inputs as ``native_step_harness.c`` reads them: the model as the C step sees it (its packed
    matrices, norms, LoRA terms), the key/value buffers, the mask, tokens and positions."""
    import ctypes
    import struct

    def array(f, ptr: int, nbytes: int) -> None:
        f.write(struct.pack("<q", nbytes) + (ctypes.string_at(ptr, nbytes) if nbytes else b""))

    def tensor(f, t) -> None:
        t = t.detach().contiguous()
        array(f, t.data_ptr(), t.numel() * t.element_size())

    def mat(f, m) -> None:
        f.write(struct.pack("<qqq", m.n, m.k, m.kind))
        array(f, m.data, m.n * (m.k // 64 * 48 if m.kind == 0 else m.k // 32 * 36))

    m, layers = step.model, past.layers
    for layer in layers:
        layer.reserve(1)  # as the step itself does first: the buffers may move
    rows, _, cap, _ = layers[0]._k.shape
    H, D = m.hidden, m.head_dim
    embed_rows = step.lean.inner.embed_tokens.weight.shape[0]
    with open(path, "wb") as f:
        f.write(b"WBSTEP1\0" + struct.pack("<11q", m.layers, H, m.inter, m.heads, m.kv_heads, D, m.vocab, embed_rows, rows,
                                           cap, layers[0].n) + struct.pack("<4f", m.eps, m.rope_scale, m.attn_scale, 0))
        array(f, m.inv_freq, D // 2 * 4)
        array(f, m.embed, embed_rows * H * 4)
        array(f, m.final_norm, H * 4)
        mat(f, m.head)
        for li in range(m.layers):
            s = step.layer_structs[li]
            array(f, s.norm1, H * 4)
            array(f, s.norm2, H * 4)
            for x in (s.qkv, s.o, s.gate_up, s.down):
                mat(f, x)
            for lo, linear in zip(s.lora, step.modules[li]):  # q k v o gate up down, as the C step holds them
                r = lo.r if lo.a else 0
                f.write(struct.pack("<qff", r, lo.scale, 0))
                array(f, lo.a or 0, r * linear.in_features * 4)
                array(f, lo.b or 0, linear.out_features * r * 4)
        for layer in layers:
            tensor(f, layer._k)
            tensor(f, layer._v)
        for t in (attn, tokens, pos.reshape(-1)):
            tensor(f, t.to(torch.int64))


def _harness_logits(cc: list[str], run: list[str], step_file: Path, out: Path, rows: int, vocab: int):
    """Build the harness with ``cc`` (a command and its flags), run it (through ``run``: an emulator, or nothing) on
    ``step_file``; returns (the kernels it was built with, its logits)."""
    import subprocess

    exe = out.with_suffix(".exe")
    subprocess.run([*cc, "-O3", "-fopenmp", "-I", str(native.SOURCE.parent), "-o", str(exe), str(HARNESS), "-lm"],
                   check=True, capture_output=True, timeout=300)
    logits = out.with_suffix(".logits")
    done = subprocess.run([*run, str(exe), str(step_file), str(logits)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    simd = int(done.stdout.split()[1])
    return simd, torch.from_file(str(logits), size=rows * vocab, dtype=torch.float32).reshape(rows, vocab)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_the_arm64_neon_kernels_give_this_machines_step(engine, tmp_path):
    """The C step outside Python: three padded rows of real prompts with the adapter, written to a file and stepped by
    ``native_step_harness.c`` built here (bit-equal to the step in this process); then, where a cross compiler and
    qemu are installed, the same file stepped by the ARM64 build under emulation: its NEON kernels and its plain C
    loops each within rounding noise of this machine's step, the same greedy tokens."""
    _, backend = engine
    prompts = _prompts(backend.tokenizer, 3)
    with torch.inference_mode():
        past, attn, pos, logits = backend._prefill(prompts, [None] * 3)
        _preallocate(past, None, 8)
        token, attn, pos = logits.argmax(-1), torch.cat([attn, attn.new_ones((3, 1))], -1), pos + 1
        step_file = tmp_path / "step.bin"
        dump_step(backend.native, token, attn, pos, past, step_file)
        ref = backend.native(token, attn, pos, past)[1]
    vocab = ref.shape[1]
    cc = os.environ.get("CC") or ("cc" if shutil.which("cc") else "gcc")
    from workbench.util.cpu import C_FLAGS, cpu_level

    simd, here = _harness_logits([cc, *C_FLAGS[cpu_level()]], [], step_file, tmp_path / "host", 3, vocab)
    assert simd == backend.native.lib.wb_simd() and torch.equal(here, ref)
    if not (shutil.which(ARM64[0]) and shutil.which(ARM64[1])):
        pytest.skip("no ARM64 cross compiler and qemu (apt-get install gcc-aarch64-linux-gnu qemu-user)")
    for flags, kernels in (([], 128), (["-DWB_PORTABLE"], 0)):
        simd, arm = _harness_logits([ARM64[0], *flags], [ARM64[1], "-L", ARM64[2]], step_file,
                                    tmp_path / f"arm{kernels}", 3, vocab)
        assert simd == kernels
        # largest / mean |difference| against this machine's AVX2 step, measured: NEON 0.40 / 0.08, plain loops
        # 0.37 / 0.11 (bf16 roundings that flip, and a compiler that fuses other multiply-adds); a kernel that read
        # its lanes wrong moves the logits by several units
        assert float((arm - ref).abs().max()) < NOISE and float((arm - ref).abs().mean()) < 0.25
        assert torch.equal(arm.argmax(-1), ref.argmax(-1))
