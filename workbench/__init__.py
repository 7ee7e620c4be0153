"""workbench: a notebook-first research workbench for LLM search agents trained with RL.

The package is the library behind the notebooks, widgets and dashboard. Import what
you need from the submodules (``workbench.data``, ``workbench.tools``,
``workbench.protocols``, ``workbench.rollout``, ``workbench.rewards``, ``workbench.rl``).
"""

__version__ = "0.1.0"
