"""A saved adapter names its base model portably: the alias (or HF id), not this machine's cache path."""

from __future__ import annotations

import json

import pytest
import torch


def test_portable_model_name_prefers_the_alias(tmp_path):
    from types import SimpleNamespace

    from workbench.rl.policy import portable_model_name

    m = SimpleNamespace(config=SimpleNamespace(name_or_path_alias="smollm2-135m", _name_or_path="/cache/x"))
    assert portable_model_name(m, "/cache/x") == "smollm2-135m"
    m.config.name_or_path_alias = "HuggingFaceTB/SmolLM2-135M-Instruct"  # a hub id
    assert portable_model_name(m, "/cache/x") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    m.config.name_or_path_alias = str(tmp_path)  # a local directory: kept as the path it is
    assert portable_model_name(m, str(tmp_path)) == str(tmp_path)


@pytest.mark.slow
def test_saved_adapter_names_the_alias_and_loads_through_it(tmp_path, one_thread, capfd):
    from peft import PeftModel

    from workbench.core.models import load_policy
    from workbench.rl.policy import LoRAPolicy

    model, tok = load_policy("smollm2-135m", device="cpu")
    pol = LoRAPolicy(model=model, tokenizer=tok, r=4, alpha=8)
    with torch.no_grad():
        for p in pol.trainable_parameters():
            p.add_(0.01)  # a non-zero adapter
    d = pol.save_adapter(tmp_path / "adapter")
    cfg = json.loads((d / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "smollm2-135m"
    base, _ = load_policy(cfg["base_model_name_or_path"], device="cpu")  # another machine: the alias resolves
    assert "Loading weights" not in capfd.readouterr().err  # no per-file loading bars
    reloaded = PeftModel.from_pretrained(base, str(d)).eval()
    ids = tok(["Paris is the capital of"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(pol.model(input_ids=ids).logits, reloaded(input_ids=ids).logits)
