# The two commands of the README, and a few helpers. Each target installs what it needs
# into .venv first (again only when pyproject.toml or constraints.txt changed).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test test-fast lint bench clean

up: $(STAMP)  ## install, then run the whole stack in the foreground (Ctrl-C stops it)
	$(BIN)/agentd up

# The suite runs in parallel processes (pytest-xdist), three per core and at most 8. It is
# CPU-bound (the daemons, workers, git and bubblewrap it starts), yet many tests wait on a
# process they started, so a third worker per core keeps the cores busy through those
# waits; each more collects every test (~2 s of CPU). On 2 cores, idle, two runs each:
# 4 workers 3 min 47 s, 6 workers 3 min 32 s and 3 min 36 s, 8 workers 3 min 35 s.
# Tests marked sdk run first, on one worker: only it imports litellm (tests/conftest.py).
# Measured on the 2-core VM, idle: `make test` 2 min 49 s to 3 min 13 s (1,413 tests;
# 5 min 19 s to 6 min 15 s of CPU, user and system, as the VM's host was quiet or busy:
# docs/performance.md says where it goes), `make test-fast` 38 s (the 1,075 not
# marked slow, none of which imports litellm). A busy machine makes them slower, not
# red: every wait is a ceiling that AGENTD_TEST_TIMEOUT_SCALE scales (default 4;
# tests/support/waiting.py).
# TEST_WORKERS=0 runs it in this one process. Bytecode caches are written (into the ignored
# __pycache__ directories) even where PYTHONDONTWRITEBYTECODE is set, so that the hundreds
# of Python processes the suite starts do not each recompile the project and its tests.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc) * 3 )); echo $$(( n > 8 ? 8 : n )))
# The tests' homes, their pytest tmp_path and what the processes they start write to the
# temp directory go to the tmpfs /dev/shm where there is one (tests/support/homes.py): the
# fsyncs that durability asks for cost nothing there, where on ext4 they took a tenth of
# the suite's CPU and made it wait for the disk besides.
TEST_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo /tmp)
TEST_ENV := PYTHONDONTWRITEBYTECODE= TMPDIR=$(TEST_TMPDIR)

test: $(STAMP)  ## install, then run the test suite
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP)  ## the inner loop: the suite without the tests marked slow
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow"

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
