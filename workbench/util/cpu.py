"""Which CPU level the engines target: the host's own (``native``), or a lesser one it can stand in for.

The CPU engines pick their path from what the CPU has: bf16 prefill where oneDNN runs bf16 natively (AVX512-BF16 /
AMX), the C decode step's AVX-512, AVX2 + FMA or NEON kernels, torch's own kernels by ``ATEN_CPU_CAPABILITY``. One
switch, ``WORKBENCH_CPU``, makes a capable CPU take a lesser one's paths, so every path can be checked from one
machine (``make test-cpus``):

- ``native`` (the default): what the host has;
- ``avx2``: an x86-64 CPU with AVX2 + FMA and no AVX-512: no native bf16, the C step built for x86-64-v3, torch's
  AVX2 kernels and oneDNN capped at AVX2;
- ``portable``: a CPU with none of these vector units: no native bf16, the C step's plain loops (which the int4
  engine does not take: ``auto`` then picks fp32), torch's default kernels, oneDNN capped at SSE4.1.

torch reads ``ATEN_CPU_CAPABILITY`` and oneDNN reads ``ONEDNN_MAX_CPU_ISA`` when torch is imported, so
:func:`torch_environment` gives them for a child process (``make test-cpus`` sets them for pytest), and
``import workbench`` sets them where they are unset and torch is not yet imported. Knows nothing of the workbench.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ENV = "WORKBENCH_CPU"
LEVELS = ("native", "avx2", "portable")
#: torch's and oneDNN's own switches for each level below the host's
TORCH_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
             "portable": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}}
#: the C decode step's compiler flags for each level (native: this CPU's own instructions)
C_FLAGS = {"native": ["-march=native"], "avx2": ["-march=x86-64-v3"], "portable": ["-DWB_PORTABLE"]}


def cpu_flags() -> set[str]:
    """The host CPU's feature flags (``/proc/cpuinfo``'s ``flags`` / ``Features`` line; empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_levels() -> tuple[str, ...]:
    """The levels this host can take: ``native`` and ``portable`` always, ``avx2`` on an x86-64 CPU that has AVX2 +
    FMA (its own level where it lacks AVX-512, one it stands in for where it has it)."""
    flags = cpu_flags()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return ("native", "avx2", "portable") if x86 and {"avx2", "fma"} <= flags else ("native", "portable")


def levels_to_check() -> tuple[str, ...]:
    """The levels ``make test-cpus`` runs here: ``native``, ``avx2`` where the host has more than AVX2 (AVX-512;
    on an AVX2-only host it is the native level already) and ``portable``."""
    lesser = "avx2" in host_levels() and "avx512f" in cpu_flags()
    return ("native", "avx2", "portable") if lesser else ("native", "portable")


def cpu_level() -> str:
    """The level ``$WORKBENCH_CPU`` asks for (default ``native``). Raises ``ValueError`` naming the value and the
    fix for an unknown one, or one this host cannot take (``avx2`` on a CPU without AVX2)."""
    level = os.environ.get(ENV, "").strip().lower() or "native"
    if level not in LEVELS:
        raise ValueError(f"${ENV}={os.environ[ENV]!r} is not a CPU level: use one of {', '.join(LEVELS)}")
    if level == "avx2" and level not in host_levels():
        raise ValueError(f"${ENV}={level}: this CPU ({platform.machine()}) has no AVX2 + FMA to run it; use "
                         f"{' or '.join(host_levels())}")
    return level


def below_native() -> bool:
    """Whether the engines are asked to behave as a lesser CPU than the host."""
    return cpu_level() != "native"


def torch_environment(level: str) -> dict[str, str]:
    """The environment a process needs for torch and oneDNN to take ``level``'s kernels (empty for ``native``)."""
    return dict(TORCH_ENV.get(level, {}))


def apply_torch_environment() -> None:
    """Set torch's and oneDNN's switches for ``$WORKBENCH_CPU`` where the user has not, if torch is not imported yet
    (after that they would not take effect). A bad ``$WORKBENCH_CPU`` is left for :func:`cpu_level` to name."""
    if "torch" in sys.modules:
        return
    try:
        level = cpu_level()
    except ValueError:
        return
    for key, value in torch_environment(level).items():
        os.environ.setdefault(key, value)


def describe_levels() -> str:
    """One line per level: whether this host takes it, and what it stands for (``make test-cpus`` prints it)."""
    here, flags = host_levels(), cpu_flags()
    bf16 = {"avx512_bf16", "amx_bf16"} & flags
    native = ("AVX-512 with bf16" if bf16 else "AVX-512" if "avx512f" in flags else
              "AVX2 + FMA" if {"avx2", "fma"} <= flags else platform.machine())
    lines = [f"native: this CPU ({native})"]
    lines.append("avx2: x86-64-v3 kernels, no native bf16" if "avx2" in levels_to_check() else
                 "avx2: the native level here (AVX2 without AVX-512)" if "avx2" in here else
                 "avx2: skipped (this CPU has no AVX2 + FMA)")
    lines.append("portable: torch's default kernels, the fp32 engine")
    if not bf16:
        lines.append("avx512-bf16: skipped (this CPU has no AVX512-BF16 / AMX: its bf16 prefill and AVX-512 C "
                     "kernels run only on one that has; native here is the AVX2 path)")
    return "\n".join(lines)

