"""SFT on trajectories (workbench.rl.sft) and starting RL from its adapter (TrainConfig.init_adapter)."""

from __future__ import annotations

import pytest
import torch

from workbench import methods as wm
from workbench.rl.sft import SFTConfig, is_correct
from workbench.rl.train_config import TrainConfig

SMALL = {"observation_mode": "chat", "few_shot": False}  # short prompts: the slow tests stay small


def test_config_needs_data_and_keeps_its_lr():
    with pytest.raises(ValueError, match="no data"):
        SFTConfig()
    cfg = wm.train_config("rsearch_dag", SFTConfig, traces=["x"])  # the method's RL lr (5e-6) is not SFT's
    assert cfg.lr == SFTConfig.lr and cfg.protocol == "rsearch_dag"
    with pytest.raises(ValueError, match="batch_size"):
        SFTConfig(traces=["x"], batch_size=0)
    with pytest.raises(ValueError, match="init_adapter_merge"):
        TrainConfig(init_adapter_merge=True)


def test_is_correct():
    from workbench.core.trajectory import Trajectory

    t = Trajectory("a", "q", "?", "search_r1", [1], answer="it was Nonwick", flags={"format_ok": True})
    assert is_correct(t, ["Nonwick"]) and not is_correct(t, ["Pelme"])
    t.flags["format_ok"] = False
    assert not is_correct(t, ["Nonwick"])


def test_adapter_dir(tmp_path):
    from workbench.rl.policy import adapter_dir

    with pytest.raises(FileNotFoundError, match="no adapter"):
        adapter_dir(tmp_path)
    ck = tmp_path / "checkpoints" / "step_000002"
    ck.mkdir(parents=True)
    (ck / "adapter_model.safetensors").write_bytes(b"")
    (ck / "trainer_state.json").write_text("{}")
    assert adapter_dir(tmp_path) == ck and adapter_dir(ck) == ck


def test_cli_has_the_commands():
    from workbench.apps.cli import build_parser

    p = build_parser()
    a = p.parse_args(["sft", "--traces", '["runs/x"]', "--trace-hops", "[1, 2]", "--batch-size", "2", "--steps", "3"])
    assert a.traces == ["runs/x"] and a.trace_hops == [1, 2] and a.batch_size == 2 and a.steps == 3
    a = p.parse_args(["train", "--init-adapter", "runs/sft-x"])
    assert a.init_adapter == "runs/sft-x"


# ================================ on the random-init model of the default architecture (conftest.tiny_model)


@pytest.fixture(scope="module")
def traces_run(world, tokenizer, tmp_path_factory):
    """An expert run of three one-hop search_r1 traces with the short (no demonstration) prompt."""
    from workbench.eval.expert import write_expert_run
    from workbench.methods import get_method
    from workbench.rl.expert import expert_traces
    from workbench.tools.toolbox import build_toolbox

    method = get_method("search_r1")
    protocol = method.training_protocol(**SMALL)
    exs = [e for e in world.split("train") if e.hops == 1][:3]
    res = expert_traces(exs, protocol, method.expert, build_toolbox(protocol, world, tokenizer=tokenizer), tokenizer,
                        world)
    assert len(res.trajectories) == 3
    return write_expert_run(res, "search_r1", protocol, out=tmp_path_factory.mktemp("expert")).path


def _config(traces_run, model, **kw):
    base = dict(method="search_r1", protocol_kwargs=SMALL, traces=[str(traces_run)], max_traces=2, steps=3, batch_size=1,
                micro_batch_size=1, lr=5e-4, eval_limit=0, save_every=0, device="cpu", max_new_tokens=48, model=model)
    return wm.train_config(base.pop("method"), SFTConfig, **{**base, **kw})


def _adapter(trainer):
    return {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters() if "lora_" in k}


@pytest.fixture(scope="module")
def trained(traces_run, tmp_path_factory, one_thread, tiny_model):
    """3 SFT steps; the pool's loss before and after."""
    tr = wm.trainer(_config(traces_run, tiny_model), run=tmp_path_factory.mktemp("sft"), progress=False)
    pool = tr.prepare()
    before = tr.eval_loss(pool)
    run = tr.train()
    return tr, run, before, tr.eval_loss(pool)


def test_hop_repeats_repeat_the_traces_of_those_hops(traces_run, tmp_path, one_thread, tiny_model):
    """``--hop-repeats '{"1": 3}'``: each one-hop trace comes up three times an epoch; the pool itself is unchanged."""
    from workbench.apps.cli import build_parser

    assert build_parser().parse_args(["sft", "--hop-repeats", '{"3": 3, "4": 3}']).hop_repeats == {"3": 3, "4": 3}
    tr = wm.trainer(_config(traces_run, tiny_model, hop_repeats={"1": 3}), run=tmp_path / "sft", progress=False)
    pool = tr.prepare()
    assert len(pool) == 2 and len(tr.data.examples) == 6
    assert sorted(t.id for t in tr.data.take(6)) == sorted([t.id for t in pool] * 3)


def test_traces_with_turns_longer_than_the_rollout_budget_are_counted_and_warned(traces_run, tmp_path, capsys,
                                                                                 one_thread, tiny_model):
    """A trace whose policy turn is longer than ``max_new_tokens`` teaches turns that rollouts cut before the closing
    tag: the pool counts them and SFT says which budget fits."""
    tr = wm.trainer(_config(traces_run, tiny_model, max_new_tokens=8), run=tmp_path / "sft", progress=False)
    tr.prepare()
    st = tr.pool_stats
    assert st.long_turns == 2 and st.longest_turn > 8
    # on stderr even without progress output
    said = capsys.readouterr().err.splitlines()
    assert any(line.startswith("warning: ") and f"--max-new-tokens {st.longest_turn} or more" in line for line in said)
    assert tr.run.config["sft_pool"]["longest_turn"] == st.longest_turn
    ok = wm.trainer(_config(traces_run, tiny_model, max_new_tokens=st.longest_turn), run=tmp_path / "sft2", progress=False)
    ok.prepare()
    assert ok.pool_stats.long_turns == 0


@pytest.mark.slow
def test_sft_lowers_the_loss_on_its_traces(trained):
    tr, run, before, after = trained
    assert after < before
    rows = [r for r in run.step_metrics() if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    # observation and prompt tokens are not trained: tokens = policy tokens of the batch
    pool = {t.id: t for t in tr.pool}
    assert rows[0]["tokens"] <= sum(t.n_policy_tokens for t in pool.values())
    m = run.metrics()
    assert m["kind"] == "sft" and m["pool"]["n"] == 2 and m["pool"]["by_source"] == {"expert": 2}
    assert (run.path / "sft" / "pool.trajectories.parquet").exists()


@pytest.mark.slow
def test_sft_resume_is_exact(trained, traces_run, tmp_path, one_thread, tiny_model):
    tr, _, _, _ = trained
    first = wm.trainer(_config(traces_run, tiny_model, steps=2), run=tmp_path, progress=False)
    run = first.train()  # checkpoint at step 2
    resumed = wm.resume(run.path, progress=False, steps=3)
    assert resumed.step == 2 and resumed.data.state_dict() == first.data.state_dict()
    resumed.train()
    a, b = _adapter(tr), _adapter(resumed)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_init_adapter_starts_rl_from_sft(trained, one_thread, tmp_path, tiny_model):
    tr, run, _, _ = trained
    cfg = wm.get_method("search_r1").train_config(protocol_kwargs=SMALL, init_adapter=str(run.path), device="cpu",
                                                  steps=1, eval_limit=0, model=tiny_model)
    rl = wm.trainer(cfg, run=tmp_path, progress=False)
    a, b = _adapter(tr), _adapter(rl)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    # merged: the base weights become the SFT policy, the new adapter starts at zero effect
    merged = wm.trainer(TrainConfig.from_dict({**cfg.to_dict(), "init_adapter_merge": True}), run=tmp_path / "m",
                     progress=False)
    t = tr.pool[0]
    ids = torch.tensor([t.token_ids])
    with torch.no_grad():
        want = tr.policy.logprobs(ids)
        got = merged.policy.logprobs(ids)
        ref = merged.policy.ref_logprobs(ids)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-4)
    torch.testing.assert_close(ref, want, rtol=0, atol=2e-4)


@pytest.mark.slow
def test_rejection_sampling_keeps_only_correct_trajectories(trained, world):
    from workbench.rollout.backends.scripted import ScriptedBackend

    tr = trained[0]
    gold = {e.question: e.answers[0] for e in world.examples}

    def right(text: str, turn: int) -> str:
        question = text.rsplit("Question: ", 1)[1].split("<|im_end|>")[0].strip()
        return f"<answer> {gold[question]} </answer>"

    saved = tr.backend
    try:
        tr.backend = ScriptedBackend(tr.tokenizer, right)
        kept = tr.rejection_sample(2)
        assert len(kept) == 2 * tr.config.group_size and {t.meta["source"] for t in kept} == {"rejection"}
        tr.backend = ScriptedBackend(tr.tokenizer, lambda text, turn: "<answer> nobody at all </answer>")
        assert tr.rejection_sample(2) == [] and tr.pool_stats.rejection["kept"] == 0
    finally:
        tr.backend = saved
