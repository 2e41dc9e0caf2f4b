# Two entry points (see README): `make run` and `make test`. Each creates .venv on first use
# and reinstalls only when pyproject.toml changed (stamp files record the last install).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch lies on this machine's disk; pinning it keeps pip from pulling a
# multi-GB CUDA build through a dependency that asks for plain `torch`.
TORCH_CPU := torch==2.13.0

.PHONY: run test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_CPU)
	$(BIN)/pip install --quiet -e '.[dev,torch,bench,atari,mujoco]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/rlsys train ppo --env gymnax:CartPole-v1

lint: $(VENV)/.installed-test
	$(BIN)/ruff check rlsys tests benchmarks tools
	$(BIN)/ruff format --check rlsys tests benchmarks tools
	PYTHONPATH=tools $(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
