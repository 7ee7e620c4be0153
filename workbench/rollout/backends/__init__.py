"""Generation backends behind one interface (see ``base.Backend``)."""

from workbench.rollout.backends.base import Backend, Generation, SamplingParams
from workbench.rollout.backends.scripted import ScriptedBackend

__all__ = ["Backend", "Generation", "SamplingParams", "ScriptedBackend"]
