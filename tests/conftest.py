"""Shared fixtures. The default model is converted once into the user cache and reused.

Also the order ``make test``'s workers take the files in: ``--dist loadfile`` hands a worker one file at a time,
so the costliest files go first (longest first keeps the two workers' ends close). The costs are each file's
seconds from an earlier run, ``tests/durations.json``; ``pytest --store-durations`` rewrites it.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import settings

from workbench.util.paths import samples_dir

# tests/test_fuzz.py: 200 examples per target in CI; `make fuzz` (WORKBENCH_FUZZ=full) runs 2,000
settings.register_profile(
    "fuzz", max_examples=2000 if os.environ.get("WORKBENCH_FUZZ") == "full" else 200, deadline=None
)


DURATIONS = Path(__file__).with_name("durations.json")
_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test file's seconds (setup, call and teardown) to {DURATIONS.name}, which "
                          "orders the files for the workers of `make test`")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    """On an xdist worker (the controller schedules in the workers' collection order, as ``make test`` runs it with
    ``--no-loadscope-reorder``): files by their recorded seconds, costliest first; unrecorded files keep their
    order after them. A plain run keeps pytest's order."""
    if not hasattr(config, "workerinput") or not DURATIONS.exists():
        return
    try:
        cost = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except ValueError:
        return  # a broken cost file only loses the ordering
    items.sort(key=lambda item: -float(cost.get(_file_of(item.nodeid), 0.0)))


def pytest_runtest_logreport(report):
    _seconds[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
    if session.config.getoption("--store-durations", False) and not hasattr(session.config, "workerinput"):
        rows = sorted(_seconds.items(), key=lambda kv: -kv[1])
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in rows}, indent=1) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for a module (the machine's cores are shared), restored afterwards."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tokenizer():
    from workbench.core.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def policy():
    """(model, tokenizer) of the real default model on CPU."""
    from workbench.core.models import load_policy

    return load_policy(device="cpu")


@pytest.fixture(scope="session")
def hf_backend(policy):
    from workbench.rollout.backends.hf import HFBackend

    model, tok = policy
    return HFBackend(model, tok)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, tokenizer):
    """A random-init model of the default model's architecture (its config with 2 layers of width 64) and its
    tokenizer, as a local model directory: the training loop's mechanics at a fraction of the real model's cost
    (the real model trains in the notebook, regression-suite and end-to-end tests)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from workbench.core.models import resolve_model_path

    cfg = AutoConfig.from_pretrained(resolve_model_path())
    cfg.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16})
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny-model")
    AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    tokenizer.save_pretrained(d)
    return str(d)


@pytest.fixture(scope="session")
def world():
    from workbench.data.world import load_world

    return load_world()


@pytest.fixture(scope="session")
def samples():
    """``data/samples``: the benchmark samples in their published layouts."""
    return samples_dir()
