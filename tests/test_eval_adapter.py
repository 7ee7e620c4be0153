"""`workbench eval --adapter`: a trained LoRA adapter beside the untrained model, in one run."""

from __future__ import annotations

import pytest
import torch

from workbench.apps.cli import main
from workbench.storage.runs import list_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A saved adapter that changes what the model writes (LoRA B set to noise instead of zeros)."""
    from workbench.rl.policy import LoRAPolicy

    pol = LoRAPolicy(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return pol.save_adapter(tmp_path_factory.mktemp("adapter") / "a")


def _answers(run, method):
    return [t.response_text for t in run.trajectories() if t.meta["method"] == method]


def test_saved_adapter_files_are_readable_by_others(adapter):
    import stat

    for f in ("adapter_model.safetensors", "adapter_config.json"):
        assert stat.S_IMODE((adapter / f).stat().st_mode) == 0o644, f  # safetensors alone writes 0600


def test_trained_and_untrained_side_by_side(tmp_path, adapter, one_thread, capsys):
    common = ["--limit", "2", "--max-new-tokens", "16", "--out", str(tmp_path), "--no-progress"]
    assert main(["eval", "--method", "direct,direct+lora", "--adapter", str(adapter), "--name", "both", *common]) == 0
    assert main(["eval", "--method", "direct", "--name", "plain", *common]) == 0
    both, plain = (next(r for r in list_runs(tmp_path) if n in r.path.name) for n in ("both", "plain"))
    m = both.metrics()
    assert set(m["methods"]) == {"direct", "direct+lora"}
    assert both.config["eval"]["adapter"] == str(adapter)
    # the plain method is the base model exactly (adapter disabled); the +lora one is not
    assert _answers(both, "direct") == _answers(plain, "direct")
    assert _answers(both, "direct+lora") != _answers(both, "direct")
    assert {t.protocol for t in both.trajectories()} == {"direct"}
    assert "direct+lora" in capsys.readouterr().out


def test_adapter_errors_are_one_line(tmp_path, capsys):
    for argv, needle in (
        (["--method", "direct+lora"], "needs --adapter"),
        (["--method", "direct", "--adapter", str(tmp_path)], "no method is named M+lora"),
        (["--method", "direct,direct+lora", "--adapter", str(tmp_path / "nope")], "no such file"),
        (["--method", "direct,direct+lora", "--adapter", str(tmp_path)], "no adapter at"),
        (["--method", "nonsense+lora", "--adapter", str(tmp_path)], "unknown method 'nonsense+lora'"),
    ):
        assert main(["eval", *argv, "--limit", "1", "--out", str(tmp_path / "runs")]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, (argv, err)


def test_protocol_kwargs_go_over_each_methods_declaration():
    from workbench.eval.config import EvalConfig, EvalEntry

    cfg = EvalConfig(methods="search_r1,dynasearcher,direct", protocol_kwargs='{"observation_mode": "chat"}')
    for e in cfg.entries:  # each method resolved once, its protocol built with the eval's arguments it takes
        assert e.protocol.config()["observation_mode"] == "chat", e.label
    assert EvalEntry.parse("search_r1").protocol.config()["observation_mode"] == "inline"  # the declaration alone
    trained = EvalEntry.parse("search_r1+lora")
    assert (trained.label, trained.method.name, trained.trained) == ("search_r1+lora", "search_r1", True)
    with pytest.raises(ValueError, match=r"\['top_kk'\] is taken by none of the methods search_r1"):
        EvalConfig(methods="search_r1", protocol_kwargs={"top_kk": 3})
    with pytest.raises(ValueError, match="not JSON"):
        EvalConfig(methods="search_r1", protocol_kwargs="{bad")


def test_batch_budget_is_checked_and_reaches_the_backend(monkeypatch):
    import workbench.rollout.backends as backends
    from workbench.eval.config import EvalConfig
    from workbench.eval.runner import run_eval

    with pytest.raises(ValueError, match="batch_mib must be >= 1"):
        EvalConfig(batch_mib=0)
    seen = {}

    class Stop(Exception):
        pass

    def fake_backend(kind, policy, *, tokenizer, engine, **kw):
        assert kind == "hf" and engine in ("fp32", "int4")  # --rollout-engine auto resolved before (it is logged)
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(backends, "make_backend", fake_backend)
    monkeypatch.setattr("workbench.core.models.load_policy", lambda *a, **k: (torch.nn.Linear(1, 1), None))
    for mib, want in ((None, None), (48, 48 << 20)):
        with pytest.raises(Stop):
            run_eval(["direct"], "world", limit=1, batch_mib=mib, progress=False)
        assert seen["batch_bytes"] == want
