"""Root pytest configuration: the docstring examples of ``workbench/`` run with ``--doctest-modules``
(pyproject ``[tool.pytest.ini_options]``); modules that need an optional package that is not
installed are not collected."""

from __future__ import annotations

import importlib.util

#: module -> the optional package it needs at import time (vllm: the ``gpu`` extra; verl, verifiers: their own venvs)
_OPTIONAL = {"workbench/rollout/backends/vllm.py": "vllm",
             "workbench/integrations/verl/agent_loop.py": "verl",  # built by `make verl-env` in .venv-verl
             "workbench/integrations/verifiers/environment.py": "verifiers"}  # `make verifiers-env`: .venv-verifiers

collect_ignore = [path for path, pkg in _OPTIONAL.items() if importlib.util.find_spec(pkg) is None]
