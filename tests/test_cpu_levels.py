"""``$WORKBENCH_CPU`` (``workbench/util/cpu.py``): a capable CPU takes a lesser one's engine paths, so each path is
checked from one machine. Each level runs in a child process (torch reads its kernel switches when it is imported):
what the int4 engine's bf16 check, the C decode step's kernels, torch's capability and ``--rollout-engine auto``
say there. A level this host cannot take is skipped with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from workbench.util.cpu import LEVELS, cpu_flags, cpu_level, host_levels, torch_environment

PROBE = r"""
import json, sys
import workbench, torch
from workbench.rollout.backends import native
from workbench.rollout.backends.quant import choose_engine, cpu_has_bf16
from transformers import LlamaConfig, LlamaForCausalLM

model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
lib, why = native.library()
print(json.dumps({"bf16": cpu_has_bf16(), "capability": torch.backends.cpu.get_cpu_capability(),
                  "simd": None if lib is None else lib.wb_simd(), "why": why, "auto": choose_engine("auto", model)}))
"""


def _probe(level: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    env.update(WORKBENCH_CPU=level, OMP_NUM_THREADS="1")  # the torch switches come from `import workbench`
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_takes_its_own_engine_paths(level):
    if level not in host_levels():
        pytest.skip(f"WORKBENCH_CPU={level}: this CPU cannot take it (no AVX2 + FMA)")
    got = _probe(level)
    if level == "avx2":  # an AVX2 machine's paths: fp32 prefill, every decode step in the AVX2 C kernels
        assert got["bf16"] is False and got["capability"] == "AVX2" and got["simd"] == 256
        assert got["auto"][0] == "int4" and "AVX2 + FMA" in got["auto"][1] and "WORKBENCH_CPU=avx2" in got["auto"][1]
    elif level == "portable":  # no vector unit: no C step (its plain loops are slower than torch), the fp32 engine
        assert got["bf16"] is False and got["capability"] == "DEFAULT" and got["simd"] is None
        assert "WORKBENCH_CPU=portable" in got["why"]
        assert got["auto"][0] == "fp32" and "WORKBENCH_CPU=portable" in got["auto"][1]
    else:  # the host's own: bf16 prefill exactly where the CPU has AVX512-BF16 / AMX
        flags = cpu_flags()
        if {"avx512_bf16", "amx_bf16"} & flags:
            assert got["bf16"] is True and got["simd"] == 512 and got["auto"] == ["int4", "auto: a CPU with native bf16"]
        else:
            assert got["bf16"] is False
            if {"avx2", "fma"} <= flags:
                assert got["simd"] == 256 and got["auto"][0] == "int4"


def test_the_switch_reaches_the_int4_copy_at_construction(tiny_model, monkeypatch):
    """The cause of a test that passed on AVX2 and failed on an AVX512-BF16 Xeon: the copy's layers take bf16
    weights when they are built. Under ``WORKBENCH_CPU=avx2`` they are fp32 on any host, and an explicit
    ``prefill_bf16`` wins over the switch both ways."""
    from workbench.core.models import load_policy
    from workbench.rollout.backends.quant import QuantBackend, cpu_has_bf16

    model, tok = load_policy(tiny_model, device="cpu")
    monkeypatch.setenv("WORKBENCH_CPU", "portable")
    assert not cpu_has_bf16()
    lesser = QuantBackend(model, tok, native=False)
    assert not lesser.prefill_bf16 and all(m.weight16 is None for m in lesser.layers)
    assert not lesser.model.config.workbench_bf16 and "fp32 prefill" in lesser.describe()
    forced = QuantBackend(model, tok, native=False, prefill_bf16=True)
    assert forced.prefill_bf16 and all(m.weight16 is not None for m in forced.layers)
    assert not getattr(model.config, "workbench_bf16", False)  # the source model's config is not touched


def test_a_level_that_is_not_one_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CPU", "avx512x")
    with pytest.raises(ValueError, match=r"\$WORKBENCH_CPU='avx512x' is not a CPU level: use one of native, avx2"):
        cpu_level()
    monkeypatch.setenv("WORKBENCH_CPU", "")
    assert cpu_level() == "native"
    assert torch_environment("native") == {} and torch_environment("avx2")["ONEDNN_MAX_CPU_ISA"] == "AVX2"


@pytest.mark.parametrize("flags, levels, line", [
    ({"avx2", "fma", "avx512f", "avx512_bf16"}, ("native", "avx2", "portable"), "avx2: x86-64-v3 kernels"),
    ({"avx2", "fma"}, ("native", "portable"), "avx2: the native level here"),
    (set(), ("native", "portable"), "avx2: skipped (this CPU has no AVX2 + FMA)"),
], ids=["avx512-bf16", "avx2-only", "no-vector"])
def test_make_test_cpus_runs_each_level_the_host_stands_in_for(monkeypatch, flags, levels, line):
    """What ``make test-cpus`` runs on each kind of host, whatever host runs this test: an AVX2-only host's native
    level is the AVX2 one, and the AVX512-BF16 paths are said to need a CPU that has them."""
    from workbench.util import cpu

    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    assert cpu.levels_to_check() == levels
    text = cpu.describe_levels()
    assert line in text
    assert ("avx512-bf16: skipped" in text) == ("avx512_bf16" not in flags)
