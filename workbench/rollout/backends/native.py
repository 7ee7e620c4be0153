"""Decode steps of up to 8 rows in one C call: the int4 engine's step for a single sequence (``ask``), a GRPO group, or
an eval batch's last rows, without a torch operator per norm, rotary embedding, attention or residual.

:class:`LeanDecode` already drops transformers' module machinery, but a one-row step still runs ~330 torch operators
and their dispatch costs about as much as the products themselves (``bench/RESULTS.md``, "One-row decode: where the
int4 engine's step goes"); with several rows torch's int4 kernel unpacks every weight again for each row. ``decode_step.c``
runs the whole step (embedding, 30 layers, final norm, head) over weights packed here from the int4 copy's grid,
unpacking each weight once for all the rows, and reads and writes the backend's own key/value buffers, so it drops in
for a step and hands back to the torch path for a larger batch or a prefill.

Its numerics follow the int4 engine's (the same int4 grid, bf16 scales and bf16-rounded activations, fp32 sums, the
LoRA terms in fp32 on the live peft weights); three things differ, so it is close to the torch step, not bit-equal: the
order of the sums; on AVX2 without AVX512-BF16 the int4 products' inputs, rounded per block of 32 to 16-bit integers
under one scale instead of to bf16 (exact integer products, and logits nearer the fp32 model's than with bf16 inputs);
and a matrix the torch path holds as two int4 levels (the default GGUF's Q8_0 head) is held here as int8 in blocks
of 32 with an fp32 scale, GGUF's Q8_0 rule: the head's own grid, nearer the fp32 logits. The rollout's logprobs come
from these logits, and the trainer's fp32 recompute with its importance correction covers the gap, as for the torch
int4 path.

The library is compiled from ``decode_step.c`` by the system's C compiler (``make setup`` does it once: about 2 s; else the
first use) into the cache (``$WORKBENCH_CACHE/native``), keyed by the source, the compiler and this CPU's flags, with
``-march=native``. Its kernels: AVX-512 with bf16 dot products, else AVX2 with FMA (the levels widened to 16-bit
words and multiplied by the 16-bit inputs with ``vpmaddwd``; ``build(exact=True)`` keeps the earlier kernel, the levels
widened to fp32 and multiplied by bf16-rounded inputs, for comparisons), else on ARM64 NEON (the levels widened to
fp32, bf16-rounded inputs; tested by building for ARM64 with a cross compiler and running the step under qemu; not yet
timed on ARM hardware), else plain C loops, which are slower than torch: :func:`library` says why when it cannot be
built or has only those, and the backend then keeps the torch step.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

if TYPE_CHECKING:
    from typing import TypeAlias

    from torch import nn
    from transformers import LlamaForCausalLM, LlamaModel, PretrainedConfig
    from transformers.cache_utils import Cache
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRMSNorm

    LeanLayer: TypeAlias = tuple[LlamaRMSNorm, LlamaAttention, LlamaRMSNorm, nn.Module, tuple[nn.Module, ...], object,
                                 object]
    """A decoder layer as ``LeanDecode`` collects it: input norm, attention, post-attention norm, activation, the 7
    int4 linears (q, k, v, o, gate, up, down) and the fused q/k/v and gate/up matrices (None where not fused)."""

SOURCE = Path(__file__).with_name("decode_step.c")
BLOCK = 32
MAX_RANK = 256  # the C step's LoRA scratch
MAX_ROWS = 8  # rows a C decode step takes (MAXROWS in decode_step.c): a GRPO group, an eval batch's last rows
STATIC_ROPE = ("default", "linear", "llama3")  # rotary types whose frequencies do not depend on the sequence length
SIMD = {512: "AVX-512 + bf16 dot products", 256: "AVX2 + FMA", 128: "ARM64 NEON"}  # wb_simd()'s answers: the kernels compiled in
_lib: ctypes.CDLL | None = None
_why: str | None = None


class _Mat(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("kind", ctypes.c_int32),
                ("pad_", ctypes.c_int32)]


class _Lora(ctypes.Structure):
    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("scale", ctypes.c_float), ("r", ctypes.c_int32)]


class _Layer(ctypes.Structure):
    _fields_ = [("norm1", ctypes.c_void_p), ("norm2", ctypes.c_void_p), ("qkv", _Mat), ("o", _Mat),
                ("gate_up", _Mat), ("down", _Mat), ("lora", _Lora * 7)]


class _Model(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in ("layers", "hidden", "inter", "heads", "kv_heads", "head_dim",
                                                    "vocab")] + \
               [(name, ctypes.c_float) for name in ("eps", "rope_scale", "attn_scale", "pad_")] + \
               [("inv_freq", ctypes.c_void_p), ("embed", ctypes.c_void_p), ("final_norm", ctypes.c_void_p),
                ("head", _Mat), ("layer", ctypes.POINTER(_Layer))]


def _cpu_key() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        return next((line for line in info.splitlines() if line.startswith(("flags", "Features"))), info[:2000])
    except OSError:
        import platform

        return platform.processor() + platform.machine()


def _compiler() -> tuple[str | None, str]:
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        return None, ""
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return cc, version


def library_path(cc_version: str, portable: bool = False, exact: bool = False, source: Path = SOURCE,
                 level: str = "native") -> Path:
    from workbench.util.paths import cache_dir

    level = "portable" if portable else level
    key = hashlib.sha256(source.read_bytes() + cc_version.encode() + _cpu_key().encode()).hexdigest()[:16]
    tag = "" if level == "native" else f"-{level}"
    return cache_dir() / "native" / f"decode-step-{key}{tag}{'-exact' if exact else ''}.so"


def build(quiet: bool = True, portable: bool = False, exact: bool = False, source: Path = SOURCE,
          level: str | None = None) -> Path:
    """The compiled library's path, compiling ``decode_step.c`` first if this machine has no copy yet. ``level``:
    the CPU level it is built for (:mod:`workbench.util.cpu`; default ``$WORKBENCH_CPU``, else ``native``):
    ``native`` with ``-march=native`` (this CPU's vector instructions), ``avx2`` for x86-64-v3 (AVX2 + FMA, no
    AVX-512: an AVX2 machine's kernels, built on any x86-64 CPU that runs them), ``portable`` (or ``portable=True``)
    the plain C loops, ``-DWB_PORTABLE``: a reference for the vector kernels. ``exact``: ``-DWB_EXACT``, on AVX2
    without AVX512-BF16 the fp32 products of bf16-rounded inputs instead of 16-bit integer ones, for comparisons;
    ``source``: another version of the file, e.g. an earlier revision's, to time beside this one. Raises
    ``RuntimeError`` naming what failed (no C compiler, a compile error)."""
    from workbench.util.cpu import C_FLAGS, cpu_level

    if level is None:
        try:
            level = cpu_level()
        except ValueError as e:
            raise RuntimeError(str(e)) from None
    level = "portable" if portable else level
    if level not in C_FLAGS:
        raise RuntimeError(f"unknown CPU level {level!r} for the C decode step: one of {', '.join(C_FLAGS)}")
    cc, version = _compiler()
    if cc is None:
        raise RuntimeError(f"no C compiler ({os.environ.get('CC') or 'cc, gcc or clang'}) to build the C decode "
                           "step: install one (Debian: apt-get install gcc) or set $CC")
    out = library_path(version, exact=exact, source=source, level=level)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    # the level's flags (the library is keyed by the level and this CPU's flags); a vector level then without them
    # (the compiler may not know the target), then no OpenMP
    flags = C_FLAGS[level]
    tries = [[*flags, "-fopenmp"], flags] if level == "portable" else [[*flags, "-fopenmp"], ["-fopenmp"], []]
    if exact:
        tries = [["-DWB_EXACT", *flags] for flags in tries]
    for flags in tries:
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cc, "-O3", "-shared", "-fPIC", *flags, "-o", tmp, str(source), "-lm"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            done = None
            errors.append(f"{' '.join(cmd)}: {e}")
        if done is not None and done.returncode == 0:
            os.replace(tmp, out)  # atomic: a concurrent build of the same key writes the same file
            if not quiet:
                print(f"built {out} ({' '.join(flags) or 'no extra flags'})")
            return out
        if done is not None:
            errors.append(f"{' '.join(cmd)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
        Path(tmp).unlink(missing_ok=True)
    raise RuntimeError("could not build the C decode step: " + " | ".join(errors))


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.wb_step.restype = ctypes.c_int
    lib.wb_step.argtypes = [ctypes.POINTER(_Model), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int]
    lib.wb_simd.restype = ctypes.c_int
    return lib


def library() -> tuple[ctypes.CDLL | None, str]:
    """``(the loaded library, "")`` or ``(None, why not)``; built on first use, loaded once per process."""
    global _lib, _why
    if _lib is None and _why is None:
        try:
            lib = load(build())
            if lib.wb_simd() <= 0:
                from workbench.util.cpu import ENV, cpu_level

                _why = (f"${ENV}=portable asks for the plain C loops, which are slower than torch" if
                        cpu_level() == "portable" else "this CPU or compiler has neither AVX2 + FMA, AVX-512 nor ARM64 "
                        "NEON (the plain C loops are slower than torch)")
            else:
                _lib = lib
        except (RuntimeError, OSError) as e:
            _why = str(e)
    return _lib, _why or ""


def pack_int4(q: Tensor, step: Tensor, low: Tensor) -> Tensor:
    """A matrix on its int4 grid (``quant.int4_groups``: levels ``q``, N x K with K a multiple of 64, and each block's
    ``step`` and ``low``) as the C step's int4 pairs of blocks: N x (K/64 x 48) bytes (``decode_step.c`` describes the
    layout), with the scale and zero rounded to bf16 as the int4 engine's torch kernel holds them."""
    N, K = q.shape
    P = K // (2 * BLOCK)
    qg = q.reshape(N, P, 2, BLOCK).to(torch.uint8)
    nibbles = qg[..., :16] | (qg[..., 16:] << 4)  # N x P x 2 blocks x 16 bytes
    levels = nibbles.reshape(N, P, 2, 8, 2).transpose(2, 3).reshape(N, P, 32)  # two bytes of A, two of B, ...
    scale, zero = step.to(torch.bfloat16).float(), (low + 8 * step).to(torch.bfloat16).float()
    s, zz = scale.reshape(N, P, 2), (zero - 136 * scale).reshape(N, P, 2)
    sz = torch.cat([s, zz], -1).contiguous().view(torch.uint8)  # N x P x 16 bytes
    return torch.cat([levels, sz], -1).reshape(N, P * 48).contiguous()


def pack_int8(w: Tensor) -> Tensor:
    """``w`` (N x K) as int8 blocks of 32 with an fp32 scale (Q8_0's rule: scale = max |w| / 127): N x (K/32 x 36)."""
    N, K = w.shape
    g = w.detach().float().reshape(N, K // BLOCK, BLOCK)
    d = g.abs().amax(-1) / 127
    q = torch.round(g / torch.where(d > 0, d, torch.ones_like(d))[..., None]).clamp_(-127, 127).to(torch.int8)
    return torch.cat([q.view(torch.uint8), d.contiguous().view(torch.uint8).reshape(N, K // BLOCK, 4)], -1) \
        .reshape(N, -1).contiguous()


class LeanModel(Protocol):
    """What :class:`NativeDecode` reads of a :class:`~workbench.rollout.backends.quant.LeanDecode` (that module imports
    this one, so the type is described here): the int4 copy of a Llama model, its inner model, its config and its
    decoder layers."""

    @property
    def model(self) -> LlamaForCausalLM: ...

    @property
    def inner(self) -> LlamaModel: ...

    @property
    def config(self) -> PretrainedConfig: ...

    @property
    def layers(self) -> Sequence[LeanLayer]: ...


class NativeDecode:
    """The C decode step for the copy a :class:`~workbench.rollout.backends.quant.LeanDecode` steps through.
    :meth:`build` returns ``None`` (with :attr:`why_not` set) where it does not apply; :meth:`takes` says whether a
    given step can go through it (1 to :data:`MAX_ROWS` rows in the backend's preallocated fp32 key/value buffers)."""

    why_not = ""
    max_rows = MAX_ROWS
    """Rows a step may have: above :data:`MAX_ROWS` it runs as one C call per :data:`MAX_ROWS` rows (each reads the
    weights again). The backend raises it where the torch path for larger batches is fp32 (no native bf16)."""

    def __init__(self, lean: LeanModel, lib: ctypes.CDLL):
        cfg, inner, model = lean.config, lean.inner, lean.model
        rope = (getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}).get("rope_type",
                                                                                                       "default")
        if getattr(cfg, "hidden_act", None) != "silu" or rope not in STATIC_ROPE:
            raise TypeError(f"activation {getattr(cfg, 'hidden_act', None)!r} / rotary type {rope!r}")
        head = model.lm_head
        mats = [m for entry in lean.layers for m in entry[4]] + [head]
        if not all(hasattr(m, "grid") and m.bias is None and m.in_features % BLOCK == 0 for m in mats):
            raise TypeError("a linear layer with a bias or not on the int4 copy")
        self.lib, self.lean, self.config = lib, lean, cfg
        self._keep: list[Tensor] = []  # every tensor whose address the C structs hold
        L = len(lean.layers)
        self.layer_structs = (_Layer * L)()
        self.modules = []  # per layer: its 7 QuantLinears (their live LoRA is read by refresh())
        for li, (norm1, _attn, norm2, _act, linears, _qkv, _gu) in enumerate(lean.layers):
            s = self.layer_structs[li]
            s.norm1, s.norm2 = self._ptr(norm1.weight), self._ptr(norm2.weight)
            s.qkv, s.o, s.gate_up, s.down = (self._mat(list(ms)) for ms in
                                             (linears[:3], linears[3:4], linears[4:6], linears[6:]))
            self.modules.append(linears)
        rot = inner.rotary_emb
        a0 = lean.layers[0][1]
        self.model = _Model(layers=L, hidden=cfg.hidden_size, inter=lean.layers[0][4][4].out_features,
                            heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, head_dim=a0.head_dim,
                            vocab=head.out_features, eps=float(inner.norm.variance_epsilon),
                            rope_scale=float(getattr(rot, "attention_scaling", 1.0)), attn_scale=float(a0.scaling),
                            inv_freq=self._ptr(rot.inv_freq), embed=self._ptr(inner.embed_tokens.weight),
                            final_norm=self._ptr(inner.norm.weight), head=self._mat([head]),
                            layer=ctypes.cast(self.layer_structs, ctypes.POINTER(_Layer)))
        if inner.embed_tokens.weight.shape[1] != cfg.hidden_size:
            raise TypeError("embedding width is not the hidden size")
        self.tokens = min(head.out_features, inner.embed_tokens.weight.shape[0])  # ids the step can embed and score
        self.kv_shape = (cfg.num_key_value_heads, a0.head_dim)
        self._kv: dict[int, tuple[Any, Any]] = {}  # first row of a chunk -> its key and value address tables
        self._kv_ptrs: list[int] = []
        self.active = self.refresh()

    @classmethod
    def build(cls, lean: LeanModel, lib: ctypes.CDLL | None = None) -> NativeDecode | None:
        """For ``lean``'s copy over ``lib`` (default: :func:`library`)."""
        lib, why = (lib, "") if lib is not None else library()
        if lib is None:
            cls.why_not = why
            return None
        try:
            return cls(lean, lib)
        except TypeError as e:
            cls.why_not = f"not this model: {e}"
            return None

    def _ptr(self, t: Tensor) -> int:
        if t.dtype != torch.float32 or t.device.type != "cpu":
            raise TypeError(f"a {t.dtype} tensor on {t.device} (the C step reads fp32 on the CPU)")
        t = t.detach().contiguous()
        self._keep.append(t)
        return t.data_ptr()

    def _mat(self, linears: list[Any]) -> _Mat:
        """The ``linears`` stacked by output, each packed on its own grid: int4 where the int4 copy holds one level
        (and the inputs come in pairs of blocks), else int8 (Q8_0's rule). Stacked matrices share one kind."""
        kind = int(any(m.levels > 1 or m.in_features % (2 * BLOCK) for m in linears))
        data = torch.cat([pack_int8(m._weight.detach()) if kind else pack_int4(*m.grid()) for m in linears])
        self._keep.append(data)
        return _Mat(data=data.data_ptr(), n=sum(m.out_features for m in linears), k=linears[0].in_features, kind=kind)

    def refresh(self) -> bool:
        """Read each projection's LoRA as peft would apply it now (enabled, not merged, its active adapter); returns
        whether the C step can take it (one active adapter per layer at most, fp32, rank <= 256)."""
        live = []
        for li, linears in enumerate(self.modules):
            for j, m in enumerate(linears):
                lora, entry = m.lora, _Lora()
                if lora is not None and not lora.disable_adapters and not lora.merged:
                    names = [n for n in lora.active_adapters if n in lora.lora_A]
                    if len(names) > 1:
                        return False
                    if names:
                        a, b = lora.lora_A[names[0]].weight, lora.lora_B[names[0]].weight
                        if a.dtype != torch.float32 or b.dtype != torch.float32 or a.shape[0] > MAX_RANK \
                                or not a.is_contiguous() or not b.is_contiguous() or a.device.type != "cpu":
                            return False
                        live += [a, b]
                        entry = _Lora(a=a.data_ptr(), b=b.data_ptr(), scale=float(lora.scaling[names[0]]),
                                      r=a.shape[0])
                self.layer_structs[li].lora[j] = entry
        self._lora_live = live
        return True

    def takes(self, tokens: Tensor, attn: Tensor, past: Cache) -> bool:
        from workbench.rollout.backends.hf import _BufferedLayer

        rows = tokens.shape[0]
        if not self.active or not 1 <= rows <= self.max_rows or not attn.is_contiguous() or tokens.dim() != 1 \
                or any(t.dtype != torch.int64 for t in (attn, tokens)):  # the C step reads int64 ids and masks
            return False
        layers = past.layers
        if len(layers) != len(self.modules) or not all(type(x) is _BufferedLayer for x in layers):
            return False
        k = layers[0]._k
        return (k.shape[0] == rows and k.dtype == torch.float32 and (k.shape[1], k.shape[3]) == self.kv_shape
                and attn.shape == (rows, layers[0].n + 1))

    def __call__(self, tokens: Tensor, attn: Tensor, pos: Tensor, past: Cache) -> tuple[Cache, Tensor]:
        layers = past.layers
        pos = pos.to(torch.int64)
        n = layers[0].n
        for layer in layers:
            layer.reserve(1)
        ptrs = [x._k.data_ptr() for x in layers] + [x._v.data_ptr() for x in layers]
        if ptrs != self._kv_ptrs:  # the buffers moved (grown, rows selected, a new call): new address tables
            self._kv_ptrs, self._kv = ptrs, {}
        tokens, pos = tokens.contiguous(), pos.reshape(-1).contiguous()
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.tokens:
            raise ValueError(f"token ids {tokens.tolist()}: outside the model's vocabulary of {self.tokens}")
        rows, (_, heads, cap, dim) = tokens.shape[0], layers[0]._k.shape
        logits = torch.empty((rows, self.model.vocab), dtype=torch.float32)
        for r0 in range(0, rows, MAX_ROWS):  # each chunk's rows: their slices of the buffers, mask, ids and logits
            m = min(MAX_ROWS, rows - r0)
            kv = self._kv.get(r0)
            if kv is None:
                L, off = len(layers), r0 * heads * cap * dim * 4
                kv = self._kv[r0] = ((ctypes.c_void_p * L)(*(p + off for p in ptrs[:L])),
                                     (ctypes.c_void_p * L)(*(p + off for p in ptrs[L:])))
            rc = self.lib.wb_step(ctypes.byref(self.model), kv[0], kv[1], m, cap, n, attn[r0].data_ptr(),
                                  tokens[r0].data_ptr(), pos[r0].data_ptr(), logits[r0].data_ptr(),
                                  torch.get_num_threads())
            if rc != 0:
                raise MemoryError(f"the C decode step failed ({rc}: -1 out of memory, -2 rows out of range)")
        for layer in layers:
            layer.n += 1
            layer._views()
        return past, logits


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m workbench.rollout.backends.native",
                                 description="Build (once per machine) the C decode step of the int4 rollout "
                                             "engine and say whether rollouts will use it.")
    ap.add_argument("--portable", action="store_true", help="build the plain C loops (no -march=native) instead")
    ap.add_argument("--level", choices=("native", "avx2", "portable"), default=None,
                    help="the CPU level to build for (default: $WORKBENCH_CPU, else native; workbench.util.cpu)")
    args = ap.parse_args(argv)
    try:
        path = build(quiet=False, portable=args.portable, level=args.level)
    except RuntimeError as e:
        print(f"C decode step: not built ({e}); the int4 engine steps through torch")
        return 0  # not an error: the engine works without it
    lib = load(path)
    print(f"C decode step: {path} ({SIMD.get(lib.wb_simd(), 'plain C loops')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
