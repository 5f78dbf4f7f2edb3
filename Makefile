# The two commands of the README: `make demo` (the main job on the local stack) and `make test`.
# Everything else is a step they call. Nothing here needs Docker.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install jars demo test test-unit test-hive3 bench lint clean stack-down

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "acidclean needs Python 3.10 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

jars: install
	$(BIN)/acidclean stack fetch

STORAGE ?= local

demo: jars
	$(BIN)/acidclean demo --storage $(STORAGE)

test: jars lint
	$(BIN)/pytest
	ACIDCLEAN_TEST_METASTORE=hive3 $(BIN)/pytest -m metastore tests/integration
	ACIDCLEAN_TEST_METASTORE=hive4 $(BIN)/pytest -m metastore tests/integration

test-unit: install
	$(BIN)/pytest tests/unit

bench: jars
	$(BIN)/pytest tests/bench -m bench -s

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy -p acidclean
	$(BIN)/lint-imports
	$(BIN)/hadolint deploy/docker/cleaner.Dockerfile deploy/docker/vacuum.Dockerfile

stack-down:
	$(BIN)/acidclean stack down

clean:
	rm -rf $(VENV) .stack build *.egg-info
