"""An adapter carries what it was trained with: eval, ask, sft/train --init-adapter and notebook 04 apply its
protocol arguments and turn budget by default, and a value that contradicts them is a one-line error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.apps.cli import main
from workbench.eval.adapters import TRAINED_ADAPTER
from workbench.rl.adapter_settings import OVERRIDE_FLAG, AdapterSettings, adapter_settings
from workbench.rl.checkpoint import STATE_JSON
from workbench.util.paths import repo_root

SFT_ADAPTER = repo_root() / "data" / "adapters" / "search_r1-sft"


def _fake_adapter(d: Path, config: dict | None, where: str = "provenance") -> Path:
    """An adapter directory (its weights file is never read here) with its config as provenance.json, or as the
    config.json of the run it is the checkpoint of."""
    if where == "run":
        run, d = d, d / "checkpoints" / "step_000002"
        d.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps(config))
        (d / STATE_JSON).write_text("{}")  # a complete checkpoint
    else:
        d.mkdir(parents=True)
        if config is not None:
            (d / "provenance.json").write_text(json.dumps({"config": config}))
    (d / "adapter_model.safetensors").write_bytes(b"")
    (d / "adapter_config.json").write_text("{}")
    return run if where == "run" else d


def test_the_shipped_adapters_record_their_layout_and_budget():
    for path in (TRAINED_ADAPTER, SFT_ADAPTER):
        s = adapter_settings(path)
        assert s.source == path / "provenance.json"
        assert s.values["protocol"] == "search_r1" and s.values["protocol_kwargs"]["observation_mode"] == "chat"
        assert (s.values["max_turns"], s.values["max_new_tokens"]) == (4, 64)


def test_a_run_checkpoint_reads_its_runs_config(tmp_path):
    run = _fake_adapter(tmp_path / "run", {"kind": "sft", "protocol": "search_r1", "max_turns": 5,
                                           "protocol_kwargs": {"observation_mode": "chat"}}, where="run")
    for given in (run, run / "checkpoints" / "step_000002"):
        s = adapter_settings(given)
        assert s.source == run / "config.json" and s.values["max_turns"] == 5
    bare = _fake_adapter(tmp_path / "bare", None)  # an adapter from elsewhere: nothing to apply
    assert adapter_settings(bare).values == {} and adapter_settings(bare).source is None


def test_unreadable_provenance_and_missing_adapters_are_one_line_errors(tmp_path):
    d = _fake_adapter(tmp_path / "a", {"max_turns": 4})
    (d / "provenance.json").write_text("{not json")
    with pytest.raises(ValueError, match="provenance.json: not readable as JSON") as e:
        adapter_settings(d)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^--init-adapter .*nope: no adapter at"):
        adapter_settings(tmp_path / "nope", label="--init-adapter")


def test_apply_fills_checks_and_overrides():
    s = AdapterSettings(Path("a"), None, {"protocol": "search_r1", "max_turns": 4, "max_new_tokens": 64,
                                          "protocol_kwargs": {"observation_mode": "chat", "top_k": 3}})
    fields = ("protocol", "protocol_kwargs", "max_turns", "max_new_tokens")
    out, note = s.apply({"max_new_tokens": None}, fields)
    assert out == {"max_turns": 4, "max_new_tokens": 64, "protocol_kwargs": {"observation_mode": "chat", "top_k": 3}}
    assert "protocol" not in out and note.startswith("adapter a: ") and "observation_mode=chat" in note
    out, note = s.apply({"max_turns": 4, "protocol_kwargs": {"top_k": 3}}, fields)  # agreeing values: nothing said
    assert out["max_turns"] == 4 and note == "adapter a: observation_mode=chat, max_new_tokens=64 from its training config"
    # only the arguments the caller's protocol takes
    out, _ = s.apply({}, fields, takes=lambda kw: {k: v for k, v in kw.items() if k == "observation_mode"})
    assert out["protocol_kwargs"] == {"observation_mode": "chat"}
    for given, flag, mine, theirs in (
        ({"max_turns": 3}, "--max-turns", "3", "4"),
        ({"protocol_kwargs": {"observation_mode": "inline"}}, "--protocol-kwargs observation_mode", "inline", "chat"),
        ({"protocol": "dynasearcher"}, "--protocol", "dynasearcher", "search_r1"),
    ):
        with pytest.raises(ValueError) as e:
            s.apply(given, fields)
        msg = str(e.value)
        assert msg.startswith(f"{flag} {mine} contradicts the adapter a, trained with {theirs}") and OVERRIDE_FLAG in msg
        out, note = s.apply(given, fields, override=True)
        assert f"kept by {OVERRIDE_FLAG}" in note and f"(adapter: {theirs})" in note
        assert (out.get("protocol_kwargs", {}).get("observation_mode") == "inline") == ("inline" == mine)


def test_the_packaged_models_gguf_file_is_the_same_model_as_its_alias():
    """A GGUF file carried to a machine without the package (a GPU loan) is the model the adapter was trained with;
    another model's file, or another name, still contradicts it."""
    s = AdapterSettings(Path("a"), None, {"model": "smollm2-135m"})
    out, note = s.apply({"model": "/carried/SmolLM2-135M-Instruct.Q4_1.gguf"}, ("model",))
    assert out["model"] == "/carried/SmolLM2-135M-Instruct.Q4_1.gguf" and note is None
    for other in ("/carried/SmolLM2-360M-Instruct.Q4_1.gguf", "HuggingFaceTB/SmolLM2-135M-Instruct", "qwen"):
        with pytest.raises(ValueError, match="contradicts the adapter a, trained with smollm2-135m"):
            s.apply({"model": other}, ("model",))


def test_eval_takes_the_adapters_layout_and_budget():
    from workbench.eval.config import EvalConfig, with_adapter_settings

    opts, note = with_adapter_settings("search_r1,search_r1+lora", {"adapter": str(TRAINED_ADAPTER)}, "smollm2-135m")
    cfg = EvalConfig(methods="search_r1,search_r1+lora", **opts)
    assert [e.protocol.config()["observation_mode"] for e in cfg.entries] == ["chat", "chat"]
    assert (cfg.max_turns, cfg.max_new_tokens) == (4, 64) and "observation_mode=chat" in note
    # the same config as the README's hand-typed flags
    flags = dict(adapter=str(TRAINED_ADAPTER), protocol_kwargs={"observation_mode": "chat"}, max_turns=4,
                 max_new_tokens=64)
    typed, note2 = with_adapter_settings("search_r1,search_r1+lora", flags, "smollm2-135m")
    assert EvalConfig(methods="search_r1,search_r1+lora", **typed).to_dict() == cfg.to_dict() and note2 is None
    # no +lora method, or no adapter: nothing applied (EvalConfig names a missing half)
    assert with_adapter_settings("search_r1", {"max_turns": 2}, "m") == ({"max_turns": 2}, None)
    with pytest.raises(ValueError, match="protocol dynasearcher contradicts the adapter .* trained with search_r1"):
        with_adapter_settings("dynasearcher+lora", {"adapter": str(TRAINED_ADAPTER)}, "smollm2-135m")
    with pytest.raises(ValueError, match="--model other contradicts the adapter .* trained with smollm2-135m"):
        with_adapter_settings("search_r1+lora", {"adapter": str(TRAINED_ADAPTER)}, "other")
    # dspo shares Search-R1's protocol: the adapter applies
    opts, _ = with_adapter_settings("dspo+lora", {"adapter": str(TRAINED_ADAPTER)}, "smollm2-135m")
    assert opts["protocol_kwargs"] == {"observation_mode": "chat"}


def test_eval_cli_contradiction_is_one_line_and_override_keeps_it(tmp_path, capsys):
    argv = ["eval", "--method", "search_r1,search_r1+lora", "--adapter", str(TRAINED_ADAPTER), "--limit", "1",
            "--out", str(tmp_path), "--protocol-kwargs", '{"observation_mode": "inline"}']
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "inline" in err and "chat" in err and OVERRIDE_FLAG in err
    from workbench.apps.cli import build_parser

    args = build_parser().parse_args([*argv[:-2], OVERRIDE_FLAG, "--max-turns", "2"])
    assert args.override_adapter is True and args.max_turns == 2


def test_ask_uses_the_adapters_budget(tmp_path):
    from workbench.eval.ask import _config

    cfg, note = _config("Who founded Tarnholm Mills?", "search_r1+lora", {})
    assert cfg.adapter == str(TRAINED_ADAPTER) and (cfg.max_turns, cfg.max_new_tokens) == (4, 64)
    assert cfg.entries[0].protocol.config()["observation_mode"] == "chat" and "max_new_tokens=64" in note
    with pytest.raises(ValueError, match=f"--max-new-tokens 200 contradicts .* {OVERRIDE_FLAG}"):
        _config("q", "search_r1+lora", {"max_new_tokens": 200})
    cfg, note = _config("q", "search_r1+lora", {"max_new_tokens": 200, "override_adapter": True})
    assert cfg.max_new_tokens == 200 and "kept by" in note
    cfg, note = _config("q", "search_r1", {})  # the untrained model: no adapter, the chat layout by default
    assert note is None and cfg.max_new_tokens == 256 and cfg.entries[0].protocol.config()["observation_mode"] == "chat"


def test_train_and_sft_from_an_adapter_take_its_settings(tmp_path):
    from workbench import methods
    from workbench.rl.sft import SFTConfig

    said = []
    cfg = methods.train_config("search_r1", init_adapter=str(SFT_ADAPTER), log=said.append)
    assert (cfg.max_turns, cfg.max_new_tokens, cfg.max_total_tokens) == (4, 64, 1536)
    assert cfg.protocol_kwargs["observation_mode"] == "chat" and len(said) == 1 and "max_total_tokens=1536" in said[0]
    with pytest.raises(ValueError, match="--max-new-tokens 96 contradicts the adapter .* trained with 64"):
        methods.train_config("search_r1", init_adapter=str(SFT_ADAPTER), max_new_tokens=96, log=None)
    cfg = methods.train_config("search_r1", init_adapter=str(SFT_ADAPTER), max_new_tokens=96, override_adapter=True,
                               log=None)
    assert cfg.max_new_tokens == 96 and cfg.max_turns == 4
    sft = methods.train_config("search_r1", config_class=SFTConfig, init_adapter=str(SFT_ADAPTER), log=None,
                               rejection_questions=4)
    assert isinstance(sft, SFTConfig) and sft.max_total_tokens == 1536
    with pytest.raises(ValueError, match="--protocol dynasearcher contradicts"):
        methods.train_config("dynasearcher", init_adapter=str(SFT_ADAPTER), log=None)
    # a config file goes through the same check
    f = tmp_path / "run.yaml"
    f.write_text(f"method: search_r1\ninit_adapter: {SFT_ADAPTER}\nmax_turns: 2\n")
    with pytest.raises(ValueError, match="--max-turns 2 contradicts"):
        methods.train_config_file(f, log=None)
    assert methods.train_config_file(f, override_adapter=True, log=None).max_turns == 2
    # no adapter: nothing changes
    assert methods.train_config("search_r1", log=None).max_new_tokens == methods.train_config("search_r1").max_new_tokens


def test_train_cli_names_the_override(tmp_path, capsys):
    assert main(["train", "--method", "search_r1", "--init-adapter", str(SFT_ADAPTER), "--max-turns", "3",
                 "--steps", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--max-turns 3 contradicts" in err and OVERRIDE_FLAG in err


def test_a_copied_adapter_keeps_its_settings(tmp_path):
    copy = tmp_path / "mine"
    shutil.copytree(TRAINED_ADAPTER, copy)
    assert adapter_settings(copy).values == adapter_settings(TRAINED_ADAPTER).values


def test_a_caller_that_keeps_its_own_budget_is_named_in_the_note():
    """The demo evaluates the shipped adapter at its own 3 x 80 budget: the note says the demo kept it, not a
    --override-adapter the user never passed; a user's own flag is still named as the flag."""
    from workbench.eval.config import with_adapter_settings

    given = {"adapter": str(TRAINED_ADAPTER), "max_turns": 3, "max_new_tokens": 80,
             "override_adapter": "the demo's turn budget"}
    options, note = with_adapter_settings("search_r1,search_r1+lora", given)
    assert options["override_adapter"] is True
    assert "kept by the demo's turn budget: max_turns=3 (adapter: 4), max_new_tokens=80 (adapter: 64)" in note
    assert "--override-adapter" not in note
    _, note = with_adapter_settings("search_r1+lora", {**given, "override_adapter": True})
    assert "kept by --override-adapter: max_turns=3" in note
