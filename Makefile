# The two commands of the README are a contract: on a fresh machine with only Python, Java and
# git, `make run` installs what it needs and starts jetlog on its embedded default, and
# `make test` installs everything and passes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test test-fast bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

run: install
	$(BIN)/jetlog dev

test: install
	$(BIN)/python -m pytest -q -x --durations=15

test-fast: install
	$(BIN)/python -m pytest -q -x -m "not slow"

bench: install
	$(BIN)/jetlog bench --out docs/benchmarks.md

lint: install
	$(BIN)/ruff check jetlog tests
	$(BIN)/ruff format --check jetlog tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
