"""verl's own config, composed and validated without GPUs: the dry run of an exported launch script.

``dry_run(overrides)`` does what ``python3 -m verl.trainer.main_ppo <overrides>`` does before it starts Ray:
Hydra composes ``verl/trainer/config/ppo_trainer.yaml`` from the installed verl with the overrides (an
unknown key without ``+`` fails here, as it would there), then verl's ``validate_config`` checks batch
sizes and mutually exclusive keys, and the actor / rollout sections are built into verl's config
dataclasses (whose ``__post_init__`` checks values such as the loss mode and the rollout name).
Needs verl (``make verl-env``); imported lazily so this module loads anywhere.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

#: What a launch script leaves to the user's cluster, filled in for a dry run (8 GPUs, one node).
DRY_RUN_DEFAULTS = (
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
)


def verl_config_dir() -> Path:
    """``verl/trainer/config`` of the installed verl."""
    import verl

    return Path(verl.__file__).resolve().parent / "trainer" / "config"


def compose_config(overrides: list[str], config_name: str = "ppo_trainer") -> Any:
    """verl's trainer config with ``overrides`` applied by Hydra (as ``main_ppo`` composes it)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def dry_run(overrides: list[str], *, defaults: tuple[str, ...] = DRY_RUN_DEFAULTS) -> Any:
    """Compose and validate ``overrides`` as ``main_ppo`` would; returns the config or raises ``ValueError``
    naming the override or check that failed. ``defaults`` go first, so the overrides win."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    try:
        cfg = compose_config([*defaults, *overrides])
    except (HydraException, OmegaConfBaseException) as e:
        raise ValueError(f"verl's config rejects an override: {e}") from e
    try:
        OmegaConf.resolve(cfg)
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        for section in (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.rollout.agent,
                        cfg.actor_rollout_ref.rollout.multi_turn, cfg.algorithm):
            omega_conf_to_dataclass(section)
    except (AssertionError, ValueError, TypeError, OmegaConfBaseException) as e:
        raise ValueError(f"verl's validation fails: {type(e).__name__}: {e}") from e
    return cfg


def script_overrides(script: str | Path) -> list[str]:
    """The Hydra overrides of an exported ``run_<method>.sh`` (the arguments after ``verl.trainer.main_ppo``)."""
    text = Path(script).read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        if "verl.trainer.main_ppo" in line:
            words = shlex.split(line.split("verl.trainer.main_ppo", 1)[1])
            return [w for w in words if "=" in w and not w.startswith(("$", "2>&1"))]
    raise ValueError(f"{script}: no `python3 -m verl.trainer.main_ppo` line (not a script from `workbench export verl`?)")
