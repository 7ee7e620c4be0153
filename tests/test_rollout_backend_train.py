"""The trainer with a served rollout backend (``TrainConfig.rollout_backend="openai"``): our completions
server runs a model in another process on loopback (the random-init model of the default architecture,
``conftest.tiny_model``: the hand-over's mechanics, not the model's answers), the trainer hot-swaps its LoRA adapter
there each step (vLLM's ``/v1/load_lora_adapter``), trains on the ids and logprobs the server returned,
and logs the rollout/trainer mismatch. Plus the config errors, the LoRA endpoints' errors, and
truncated importance sampling as a tensor function."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workbench.methods import run_parts
from workbench.rewards.rubric import RewardTable
from workbench.rl.config import get_loss_config
from workbench.rl.losses import policy_loss, truncated_is_weights
from workbench.rl.trainer import TrainConfig, Trainer

TINY = dict(questions_per_step=2, group_size=2, max_turns=1, max_new_tokens=12, max_total_tokens=1024,
            temperature=1.0, protocol_kwargs={"observation_mode": "chat", "few_shot": False}, save_every=0,
            micro_batch_size=2, reward="dynasearcher", lr=1e-3, tis_cap=2.0)


class LengthReward(Trainer):
    """A reward that differs inside every group, so each step moves the adapter."""

    def score(self, features):
        r = np.array([float(t.n_policy_tokens % 5) + 0.1 * t.sample_idx for t in self._last_trajs])
        return RewardTable({"total": r, "length": r}, {}, {"length": 1.0})

    def featurize(self, trajs, examples):
        self._last_trajs = list(trajs)
        return super().featurize(trajs, examples)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def server_url(tiny_model, tmp_path_factory):
    """``python -m workbench.rollout.server --model TINY --enable-lora`` on a free loopback port, in another process,
    loading adapters from under pytest's temporary directory (where the trainers' runs are)."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "workbench.rollout.server", "--model", tiny_model, "--port", str(port),
                             "--enable-lora", "--lora-dir", str(tmp_path_factory.getbasetemp()), "--threads", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {proc.stdout.read()[-2000:]}")
        try:
            with opener.open(f"http://127.0.0.1:{port}/health", timeout=2):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the server did not come up in 180 s")
            time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_openai_backend_trains_with_hot_swapped_adapter(server_url, tmp_path, one_thread, tiny_model):
    cfg = TrainConfig(rollout_backend="openai", server=server_url, steps=2, model=tiny_model, **TINY)
    tr = LengthReward(cfg, run_parts(cfg), run=tmp_path / "o",
                      progress=False)
    tr.train()
    rows = [r for r in tr.run.step_metrics() if "reward_mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert tr.adapter_sync.count == 2  # one adapter per optimizer step, handed over before each rollout
    for r in rows:
        assert r["batch_trajectories"] == 4 and r["grad_norm"] > 0
        # the server sampled from the trainer's current adapter: π_trainer / π_rollout == 1 on-policy
        assert r["rollout_ratio_mean"] == pytest.approx(1.0, abs=2e-3), r
        assert r["rollout_logprob_diff"] < 2e-3 and r["tis_clip_frac"] == 0.0
        assert r["ratio_mean"] == pytest.approx(1.0)
        assert r["trained_tokens"] > 0 and r["update_flops"] > 1e9 and r["update_flops_per_s"] > 0
        assert 0.0 <= r["padded_token_share"] < 1.0
    first = tr.adapter_sync.name
    tr.adapter_sync(tr.opt_step)  # hand over the weights of the last update too (served: step 2's rollouts' adapter)
    assert tr.adapter_sync.count == 3 and tr.adapter_sync.name != first
    served = [m["id"] for m in json.loads(urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        server_url + "/models", timeout=30).read())["data"]]
    assert served == [tiny_model, tr.adapter_sync.name]  # the previous adapter was unloaded

    # the swap is real: the served adapter's logprobs moved away from the base model's, onto the trainer's
    prompt = tr.tokenizer.encode("The capital of France is", add_special_tokens=False)
    lps = {}
    for model in (tiny_model, tr.adapter_sync.name):
        code, text = _post(server_url + "/completions", {"model": model, "prompt": prompt, "max_tokens": 6,
                                                          "temperature": 0, "logprobs": 1, "return_token_ids": True})
        assert code == 200, text
        choice = json.loads(text)["choices"][0]
        lps[model] = (choice["token_ids"], choice["logprobs"]["token_logprobs"])
    ids, served_lp = lps[tr.adapter_sync.name]
    full = torch.tensor([prompt + ids])
    with torch.no_grad():
        mine = tr.policy.logprobs(full)[0, len(prompt):]
    np.testing.assert_allclose(served_lp, mine.numpy(), atol=2e-3)
    base_ids, base_lp = lps[tiny_model]
    with torch.no_grad():
        ref = tr.policy.ref_logprobs(torch.tensor([prompt + base_ids]))[0, len(prompt):]
    np.testing.assert_allclose(base_lp, ref.numpy(), atol=2e-3)
    with torch.no_grad():
        ref_same = tr.policy.ref_logprobs(full)[0, len(prompt):]
    # the trained adapter is not the base model, and what the server sampled with is the trained one: its logprobs
    # are several times nearer the trainer's than the base model's
    moved = float((mine - ref_same).abs().max())
    assert moved > 1e-4 and float(np.abs(np.array(served_lp) - mine.numpy()).max()) < moved / 2

    # the same metrics as the in-process hf backend
    hf_cfg = TrainConfig(steps=1, model=tiny_model, **TINY)
    hf = LengthReward(hf_cfg, run_parts(hf_cfg), run=tmp_path / "h", progress=False)
    hf_row = hf.train_step()
    assert set(hf_row) == set(rows[0])


def test_lora_endpoints_report_bad_requests(server_url, tmp_path):
    code, text = _post(server_url + "/load_lora_adapter", {"lora_name": "x", "lora_path": str(tmp_path)})
    assert code == 400 and "not a PEFT adapter directory" in text
    # outside --lora-dir: one answer whether the path exists or not (the server's files are not probed)
    answers = set()
    for path in ("/etc", "/no/such/dir", str(tmp_path / ".." / ".." / ".." / ".." / "etc"), "/proc/self/cwd"):
        code, text = _post(server_url + "/load_lora_adapter", {"lora_name": "x", "lora_path": path})
        assert code == 403 and "outside this server's adapter directory" in text
        answers.add(json.loads(text)["error"]["message"].replace(repr(path), "PATH"))
    assert len(answers) == 1
    code, text = _post(server_url + "/unload_lora_adapter", {"lora_name": "nope"})
    assert code == 404 and "cannot be found" in text
    code, text = _post(server_url + "/completions", {"model": "nope", "prompt": [1, 2], "max_tokens": 1})
    assert code == 404 and "not served here" in text


def test_lora_endpoints_need_enable_lora():
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.server import serve

    tok = SimpleNamespace(encode=lambda t, **k: [1], decode=lambda ids, **k: "", eos_token_id=0)
    server, url = serve(ScriptedBackend(tok, []))
    try:
        code, text = _post(url + "/load_lora_adapter", {"lora_name": "a", "lora_path": "/tmp"})
        assert code == 400 and "--enable-lora" in text
    finally:
        server.stop()


def test_config_and_cli_errors_name_the_fix(capsys):
    with pytest.raises(ValueError, match=r"TrainConfig.server: .*--server"):
        TrainConfig(rollout_backend="openai")
    with pytest.raises(ValueError, match=r"TrainConfig.server: .*--rollout-backend openai"):
        TrainConfig(server="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="TrainConfig.rollout_backend"):
        TrainConfig(rollout_backend="sglang")
    with pytest.raises(ValueError, match="TrainConfig.tis_cap"):
        TrainConfig(tis_cap=0.5)
    with pytest.raises(ValueError, match="TrainConfig.micro_batching"):
        TrainConfig(micro_batching="packed")
    from workbench.apps.cli import main

    assert main(["train", "--rollout-backend", "openai", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--server" in err[0]


def test_unreachable_server_is_a_one_line_error(tokenizer):
    from workbench.rl.rollout_sync import make_rollout_backend

    port = _free_port()  # nothing listens there
    cfg = TrainConfig(rollout_backend="openai", server=f"http://127.0.0.1:{port}/v1",
                      rollout_kwargs={"max_retries": 0, "timeout_s": 2})
    with pytest.raises(ValueError, match="cannot reach the rollout server"):
        make_rollout_backend(cfg, SimpleNamespace(tokenizer=tokenizer))


def test_truncated_is_weights_scale_the_surrogate():
    logp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    rollout = torch.tensor([[0.0, -3.0, -1.9]])
    w = truncated_is_weights(logp.detach(), rollout, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, float(np.exp(-0.1))]]))  # e² capped at 2; 1 off the mask
    cfg = get_loss_config("grpo", kl_coef=0.0)
    adv = torch.tensor([1.0])
    plain, _ = policy_loss(logp, None, None, adv, mask, cfg, 2, 1)
    weighted, _ = policy_loss(logp, None, None, adv, mask, cfg, 2, 1, is_weights=w)
    # on-policy the surrogate is −A per token: the weighted mean is −(2 + e^−0.1)/2
    assert float(plain.detach()) == pytest.approx(-1.0)
    assert float(weighted.detach()) == pytest.approx(-(2.0 + np.exp(-0.1)) / 2)
    nan_rollout = torch.tensor([[0.0, float("nan"), -2.0]])
    assert truncated_is_weights(logp.detach(), nan_rollout, mask, 2.0)[0, 1] == 1.0


def test_adapter_sync_hands_over_only_new_weights(tmp_path):
    """The ``vllm`` path's hand-over (a new LoRARequest per adapter), with a stand-in for VLLMBackend."""
    from pathlib import Path

    from workbench.rl.rollout_sync import AdapterSync

    calls = []

    class FakeVLLM:
        name = "vllm"

        def set_adapter(self, path, name=None):
            calls.append((Path(path), name))

    class FakePolicy:
        def save_adapter(self, d):
            d.mkdir(parents=True)
            (d / "adapter_model.safetensors").write_text("x")
            return d

    sync = AdapterSync(FakeVLLM(), FakePolicy(), tmp_path, keep=2)
    a = sync(0)
    assert sync(0) == a and len(calls) == 1  # unchanged weights: nothing handed over
    b, c = sync(1), sync(2)
    assert len(calls) == 3 and len({a, b, c}) == 3 and calls[-1] == (tmp_path / c, c)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([b, c])  # older adapter directories removed
    assert AdapterSync(SimpleNamespace(name="hf"), FakePolicy())(5) is None  # hf samples from the live model
