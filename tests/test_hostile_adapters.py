"""Hostile adapter files: what an adapter records (``provenance.json``, its run's ``config.json``) keeps the rules the
same settings keep as flags, and weights that would load silently as something else (no LoRA tensors, NaN, made for
other modules) or a FIFO where the weights should be are refused, one line naming the file, by every loader: eval's
``--adapter``, a policy's ``init_adapter``, and the completions server's ``/v1/load_lora_adapter`` (400, not
"Success"). Loopback only; the model is the random-init one of ``conftest.tiny_model``."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.test_adapter_settings import _fake_adapter
from workbench.apps.cli import main
from workbench.rl.adapter_settings import adapter_settings

# --------------------------------------------------------------------------- recorded settings


@pytest.mark.parametrize(("key", "text", "needle"), [
    ("max_turns", "1e9", "must be a whole number >= 1, got 1000000000.0"),
    ("max_new_tokens", "1e12", "must be a whole number >= 1, got 1000000000000.0"),
    ("max_new_tokens", "Infinity", "must be a whole number >= 1, got inf"),
    ("max_turns", "2.5", "must be a whole number >= 1, got 2.5"),
    ("max_turns", "true", "must be a whole number >= 1, got True"),
    ("max_total_tokens", "NaN", "must be a whole number >= 1, got nan"),
    ("max_turns", "0", "must be >= 1, got 0"),
    ("max_turns", '"4"', "must be a whole number >= 1, got '4'"),
    ("protocol_kwargs", '{"top_k": 100000}', "protocol_kwargs.top_k must be in [1, 100], got 100000"),
    ("protocol_kwargs", '{"top_k": 2.5}', "protocol_kwargs.top_k must be a whole number in [1, 100], got 2.5"),
    ("protocol_kwargs", '{"few_shot": "no"}', "protocol_kwargs.few_shot must be true or false, got 'no'"),
    ("protocol_kwargs", '"chat"', "protocol_kwargs must be a JSON object"),
    ("model", "5", "model must be a non-empty name, got 5"),
])
@pytest.mark.parametrize("where", ["provenance", "run"])
def test_a_recorded_setting_out_of_its_range_is_one_line_naming_file_key_and_rule(tmp_path, key, text, needle, where):
    """Each of these was applied by eval and ask (and ``Infinity`` then written to the run's config.json)."""
    d = _fake_adapter(tmp_path / "a", {"protocol": "search_r1", "max_turns": 4}, where=where)
    source = d / "provenance.json" if where == "provenance" else d / "config.json"
    data = json.loads(source.read_text())
    config = data["config"] if where == "provenance" else data
    config[key] = "@@"
    source.write_text(json.dumps(data).replace('"@@"', text))  # JSON text as a hand edit (or a hostile file) has it
    with pytest.raises(ValueError) as e:
        adapter_settings(d)
    msg = str(e.value)
    assert msg.startswith(f"{source}: ") and needle in msg and "\n" not in msg, msg
    assert "correct it in that file" in msg


def test_good_recorded_settings_still_apply(tmp_path):
    d = _fake_adapter(tmp_path / "a", {"protocol": "search_r1", "max_turns": 5, "max_new_tokens": 96,
                                       "protocol_kwargs": {"observation_mode": "chat", "top_k": 100, "few_shot": False}})
    assert adapter_settings(d).values["protocol_kwargs"]["top_k"] == 100


def test_eval_refuses_a_bad_recorded_setting_and_the_same_flag_value(tmp_path, capsys):
    d = _fake_adapter(tmp_path / "a", {"protocol": "search_r1"})
    (d / "provenance.json").write_text('{"config": {"protocol": "search_r1", "max_turns": Infinity}}')
    argv = ["eval", "--method", "search_r1,search_r1+lora", "--adapter", str(d), "--limit", "1", "--out",
            str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "provenance.json: max_turns must be a whole number >= 1, got inf" in err, err
    assert not (tmp_path / "runs").exists()  # no run (with Infinity in its config.json) was written
    # the flag is held to the rule the file is
    assert main(["eval", "--method", "search_r1", "--protocol-kwargs", '{"top_k": 100000}', "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--protocol-kwargs top_k must be in [1, 100], got 100000" in err, err


# --------------------------------------------------------------------------- weights


@pytest.fixture(scope="module")
def adapters(tiny_model, tmp_path_factory):
    """A good adapter of the tiny model (LoRA B set to noise, so it changes what the model writes) and its hostile
    variants, each a copy with other weights: no LoRA tensors, a NaN, LoRA tensors of modules the model does not
    have, and a FIFO in place of the weights file."""
    from safetensors.torch import load_file, save_file

    from workbench.rl.policy import LoRAPolicy

    root = tmp_path_factory.mktemp("adapters")
    pol = LoRAPolicy(tiny_model, device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    good = pol.save_adapter(root / "good")
    tensors = load_file(str(good / "adapter_model.safetensors"))

    def variant(name: str, weights: dict[str, torch.Tensor] | None) -> Path:
        d = root / name
        shutil.copytree(good, d)
        (d / "adapter_model.safetensors").unlink()
        if weights is None:
            os.mkfifo(d / "adapter_model.safetensors")
        else:
            save_file(weights, str(d / "adapter_model.safetensors"))
        return d

    nan = dict(tensors)
    first_b = next(k for k in nan if "lora_B" in k)
    nan[first_b] = nan[first_b].clone()
    nan[first_b][0, 0] = float("nan")
    return {
        "good": good,
        "none": variant("none", {"model.embed_tokens.weight": torch.zeros(4, 4)}),
        "nan": variant("nan", nan),
        "other": variant("other", {k.replace(".layers.", ".blocks."): v for k, v in tensors.items()}),
        "fifo": variant("fifo", None),
    }


#: What each hostile adapter's error says (besides the file's name).
REFUSED = {"none": "no LoRA tensors", "nan": "holds NaN or infinite values", "other": "no weights for 16 of the "
           "model's 16 LoRA tensors", "fifo": "a FIFO, not a PEFT adapter file"}


def within(seconds: float, fn: Callable[[], object], fifo: Path | None = None) -> object:
    """``fn()``'s result (or its exception, raised), failing if it takes longer than ``seconds``: a reader blocked on
    ``fifo`` is then let go (a writer opens and closes it) so the test ends."""
    out: dict[str, object] = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail(f"still waiting after {seconds} s")
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


@pytest.mark.parametrize("kind", list(REFUSED))
def test_eval_refuses_weights_that_would_load_as_something_else(adapters, tiny_model, kind):
    """Each loaded silently before: ``+lora`` rows were the base model (no LoRA tensors, other modules), garbage (NaN),
    or never came (a FIFO blocked the open)."""
    from workbench.core.models import load_policy
    from workbench.eval.adapters import attach_adapter

    model, _ = load_policy(tiny_model, device="cpu")
    d = adapters[kind]
    with pytest.raises(ValueError) as e:
        within(30, lambda: attach_adapter(model, d), fifo=d / "adapter_model.safetensors")
    msg = str(e.value)
    assert REFUSED[kind] in msg and str(d) in msg and "\n" not in msg, msg


def test_eval_cli_refuses_a_fifo_before_anything_loads(adapters, tmp_path, capsys):
    d = adapters["fifo"]
    rc = within(60, lambda: main(["eval", "--method", "search_r1,search_r1+lora", "--adapter", str(d), "--limit", "1",
                                  "--out", str(tmp_path)]), fifo=d / "adapter_model.safetensors")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "a FIFO" in err and str(d) in err, err


def test_a_good_adapter_still_loads_and_changes_the_model(adapters, tiny_model):
    from workbench.core.models import load_policy
    from workbench.eval.adapters import attach_adapter

    model, _ = load_policy(tiny_model, device="cpu")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        base = model(ids).logits
        peft_model = attach_adapter(model, adapters["good"])
        assert float((peft_model(ids).logits - base).abs().max()) > 1e-4


@pytest.mark.parametrize("kind", ["none", "nan", "fifo"])
@pytest.mark.parametrize("merge", [False, True])
def test_a_policy_refuses_a_hostile_init_adapter(adapters, tiny_model, kind, merge):
    from workbench.rl.policy import LoRAPolicy

    d = adapters[kind]
    with pytest.raises(ValueError) as e:
        within(30, lambda: LoRAPolicy(tiny_model, device="cpu", init_adapter=d, merge_init=merge),
               fifo=d / "adapter_model.safetensors")
    assert REFUSED[kind] in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- the completions server's LoRA API


@pytest.fixture(scope="module")
def lora_server(tiny_model, adapters):
    from workbench.core.models import load_policy
    from workbench.rollout.backends.hf import HFBackend
    from workbench.rollout.server import serve

    model, tok = load_policy(tiny_model, device="cpu")
    srv, url = serve(HFBackend(model, tok), model_name="tiny", enable_lora=True,
                     lora_dir=str(adapters["good"].parent))
    yield url
    srv.stop()


def _post(url: str, body: dict) -> tuple[int, str]:
    import httpx

    r = httpx.post(url, json=body, timeout=30)
    return r.status_code, r.text


def _greedy(url: str, model: str) -> tuple[list[int], list[float]]:
    """The greedy completion of a fixed prompt from ``model``: its ids and their logprobs."""
    code, text = _post(url + "/completions", {"model": model, "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0,
                                              "return_token_ids": True, "logprobs": 0})
    assert code == 200, text
    choice = json.loads(text)["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def test_the_load_endpoint_answers_400_for_hostile_adapters(lora_server, adapters):
    url = lora_server
    base = _greedy(url, "tiny")
    for kind, needle in REFUSED.items():
        d = adapters[kind]
        code, text = within(30, lambda d=d, kind=kind: _post(url + "/load_lora_adapter", {
            "lora_name": kind, "lora_path": str(d)}), fifo=d / "adapter_model.safetensors")
        assert code == 400 and needle in json.loads(text)["error"]["message"], (kind, code, text)
        assert "Success" not in text
    models = [m["id"] for m in json.loads(_get(url + "/models"))["data"]]
    assert models == ["tiny"] and _greedy(url, "tiny") == base  # nothing was left loaded
    # a good adapter still loads after the refusals, and changes what is served
    code, text = _post(url + "/load_lora_adapter", {"lora_name": "good", "lora_path": str(adapters["good"])})
    assert code == 200 and "Success" in text
    assert _greedy(url, "good") != base and _greedy(url, "tiny") == base
    assert _post(url + "/unload_lora_adapter", {"lora_name": "good"})[0] == 200


def _get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=30).text
