"""The multi-turn rollout engine and generation backends."""

from workbench.rollout.backends.base import Backend, Generation, SamplingParams
from workbench.rollout.engine import RolloutConfig, rollout

__all__ = ["Backend", "Generation", "RolloutConfig", "SamplingParams", "rollout"]
