# The two commands of the README, and a few helpers. Each target installs what it needs
# into .venv first (again only when pyproject.toml or constraints.txt changed).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint bench clean

up: $(STAMP)  ## install, then run the whole stack in the foreground (Ctrl-C stops it)
	$(BIN)/agentd up

# The suite runs in parallel processes (pytest-xdist), three per core and at most 8: most of
# its time is spent waiting on the daemons, workers and Valkeys it starts, not computing
# (on 2 cores: 2 min 24 s with six, 2 min 47 s with four, 3 min 3 s with eight).
# TEST_WORKERS=0 runs it in this one process. Bytecode caches are written (into the ignored
# __pycache__ directories) even where PYTHONDONTWRITEBYTECODE is set, so that the hundreds
# of Python processes the suite starts do not each recompile the project and its tests.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc) * 3 )); echo $$(( n > 8 ? 8 : n )))

test: $(STAMP)  ## install, then run the test suite
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal

# The type checker reads agentd/, reflector/ and shared/ (pyproject.toml's [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python tests/bench/turn_bench.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info
