# The two commands of the README: `make demo` (the main job on the local stack) and `make test`.
# Everything else is a step they call. Nothing here needs Docker.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install jars tools demo test test-unit test-hive3 bench lint clean stack-down

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

# Helm renders the chart in its test (tests/unit/deploy/test_chart.py); built from the Go module proxy
# into .cache/bin where Go is installed, else that test says why it is skipped.
HELM_VERSION := v3.19.0
tools:
	@if command -v go >/dev/null; then \
		test -x .cache/bin/helm || GOBIN=$(CURDIR)/.cache/bin go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
	else echo "go not found: the Helm chart test will be skipped"; fi

test: jars lint tools
	HELM=$(CURDIR)/.cache/bin/helm $(BIN)/pytest
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
