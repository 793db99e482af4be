# The two commands of the README, and a few helpers. Each target installs what it needs
# into .venv first (again only when pyproject.toml or constraints.txt changed).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint bench clean

up: $(STAMP)  ## install, then run the whole stack in the foreground (Ctrl-C stops it)
	$(BIN)/agentd up

test: $(STAMP)  ## install, then run the test suite
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python tests/bench/turn_bench.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info
