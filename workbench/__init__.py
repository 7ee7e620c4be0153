"""workbench: a notebook-first research workbench for LLM search agents trained with RL.

The package is the library behind the notebooks, widgets and dashboard. Import what
you need from the submodules (``workbench.data``, ``workbench.tools``,
``workbench.protocols``, ``workbench.rollout``, ``workbench.rewards``, ``workbench.rl``).
"""

import os as _os

# Invariant 7: nothing is fetched from a hub at run time, so nothing is even looked up (no DNS query
# for a model id that is not cached). Set before transformers / huggingface_hub read it; a user who
# really wants the hub sets HF_HUB_OFFLINE=0 themselves.
_os.environ.setdefault("HF_HUB_OFFLINE", "1")

__version__ = "0.1.0"

# $WORKBENCH_CPU (a lesser CPU level than the host's, for checking its engine paths): torch's and oneDNN's own
# switches go in before torch is imported (workbench.util.cpu)
from workbench.util.cpu import apply_torch_environment as _apply_torch_environment  # noqa: E402

_apply_torch_environment()

import warnings as _warnings  # noqa: E402

# peft (0.21) reads transformers' deprecated `is_gradient_checkpointing` whenever it wraps a model: a
# FutureWarning about their code, not the user's, printed on every LoRA load. Hidden; other warnings stay.
_warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
