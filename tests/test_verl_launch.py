"""The exported launch scripts' Hydra overrides, composed by verl's own ``ppo_trainer.yaml`` and validated by
verl (``workbench.integrations.verl.config.dry_run``, run in ``.venv-verl``): no unknown key, no failed check.
A dry run only: the scripts are not yet run on GPUs."""

from __future__ import annotations

import json

import pytest

from tests.verl_env import requires_verl_env, run_in_verl
from workbench.integrations.verl.export import export_verl
from workbench.methods import get_method, method_names

pytestmark = [pytest.mark.slow, requires_verl_env]
TRAINED = [n for n in method_names() if get_method(n).reward is not None]

CHECK = """
import json, sys
from workbench.integrations.verl.config import dry_run, script_overrides
out = {}
for script in sys.argv[1:]:
    try:
        cfg = dry_run(script_overrides(script))
        r = cfg.actor_rollout_ref.rollout
        out[script] = {"ok": True, "agent": r.agent.default_agent_loop, "loop_config": r.agent.agent_loop_config_path,
                       "n": r.n, "loss_mode": cfg.actor_rollout_ref.actor.policy_loss.loss_mode}
    except ValueError as e:
        out[script] = {"ok": False, "error": str(e)}
print("RESULT" + json.dumps(out))
"""


def dry_run_all(scripts):
    proc = run_in_verl(["-c", CHECK, *map(str, scripts)], timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def test_every_methods_launch_script_composes_and_validates_in_verl(tmp_path):
    scripts = {n: export_verl(n, "world", tmp_path / n, limit=2)["launch"] for n in TRAINED}
    got = dry_run_all(scripts.values())
    for name, script in scripts.items():
        r = got[str(script)]
        assert r["ok"], f"{name}: {r.get('error')}"
        assert r["agent"] == "workbench" and r["loop_config"].endswith("agent_loop.yaml")
        paper = get_method(name).paper
        if "group_size" in paper:
            assert r["n"] == paper["group_size"]
    assert got[str(scripts["dspo"])]["loss_mode"] == "gspo"


def test_dry_run_rejects_an_unknown_key_and_a_bad_value(tmp_path):
    script = export_verl("search_r1", "world", tmp_path, limit=1)["launch"]
    text = script.read_text()
    bad_key, bad_value = tmp_path / "bad_key.sh", tmp_path / "bad_value.sh"
    bad_key.write_text(text.replace("actor_rollout_ref.actor.ppo_epochs=", "actor_rollout_ref.actor.ppo_epoch="))
    bad_value.write_text(text.replace("actor_rollout_ref.rollout.n=5", "actor_rollout_ref.rollout.n=5 data.train_batch_size=3"))
    got = dry_run_all([bad_key, bad_value])
    assert not got[str(bad_key)]["ok"] and "ppo_epoch" in got[str(bad_key)]["error"]
    # 3 prompts x 5 samples = 15 rollouts cannot be split over the dry run's 8 GPUs: verl's validate_config says so
    assert not got[str(bad_value)]["ok"] and "validation fails" in got[str(bad_value)]["error"]
