# The two commands of the README: `make demo` (the main job on the local stack) and `make test`.
# Everything else is a step they call. Nothing here needs Docker: `make images` builds the images with
# buildah and the image tests run them with podman (Debian's packages, installed by container-tools).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install jars tools kerberos container-tools images demo test test-unit test-fast test-hive3 bench lint clean stack-down

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

# The Kerberos tests (tests/integration/test_metastore_kerberos.py) run a real MIT KDC: Debian's
# krb5-kdc, krb5-admin-server (kadmin.local), krb5-user (kinit) and libkrb5-dev (to build the gssapi
# module of the kerberos extra). Installed with apt-get when missing and this runs as root (CI does);
# elsewhere it says so and those tests skip with the reason.
KRB5_PACKAGES := krb5-kdc krb5-admin-server krb5-user libkrb5-dev
kerberos: install
	@missing=; for tool in krb5kdc kdb5_util kadmin.local kinit krb5-config; do \
		PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing MIT Kerberos for the Kerberos tests (missing:$$missing): apt-get install $(KRB5_PACKAGES)"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get update -qq && apt-get install -y -qq $(KRB5_PACKAGES) >/dev/null \
				|| { echo "apt-get could not install $(KRB5_PACKAGES)" >&2; exit 1; }; \
		else echo "MIT Kerberos missing ($$missing) and not installable here (needs root and apt-get:" \
			"apt-get install $(KRB5_PACKAGES)): the Kerberos tests will be skipped"; fi; \
	fi
	@if command -v krb5-config >/dev/null; then \
		$(BIN)/python -c 'import gssapi' 2>/dev/null || $(BIN)/pip install --quiet -e '.[kerberos]'; fi

# The images of deploy/docker, built with buildah (--isolation chroot) and run with podman and runc:
# Debian's packages, installed with apt-get when missing and this runs as root (CI does); elsewhere it
# says so and the image tests (tests/e2e/test_images.py) skip with the reason. CONTAINERS_CONF gives
# podman the settings these machines need (runc, no default ulimits).
CONTAINER_PACKAGES := podman buildah runc debootstrap
export CONTAINERS_CONF := $(CURDIR)/deploy/docker/containers.conf
container-tools:
	@missing=; for tool in podman buildah runc debootstrap; do \
		PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing the container engine for the images (missing:$$missing): apt-get install $(CONTAINER_PACKAGES)"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get update -qq && apt-get install -y -qq $(CONTAINER_PACKAGES) >/dev/null \
				|| { echo "apt-get could not install $(CONTAINER_PACKAGES)" >&2; exit 1; }; \
		else echo "container engine missing ($$missing) and not installable here (needs root and apt-get:" \
			"apt-get install $(CONTAINER_PACKAGES)): the image tests will be skipped"; fi; \
	fi

# The base of both images: PYTHON_IMAGE=python:3.11.10-slim-bookworm where an image registry is
# reachable; by default (none is, here) Debian bookworm with its Python 3.11, made by debootstrap from
# the Debian mirror once and kept in podman's image store as BASE_IMAGE.
IMAGE_TAG ?= 0.1.0
BASE_IMAGE ?= localhost/acidclean-base:bookworm
PYTHON_IMAGE ?=
# The builds' pip and curl trust the host's CA bundle, mounted during RUN steps only (not in any
# layer): where egress goes through a TLS proxy with its own CA (as on these machines), only the host
# trusts it. Empty HOST_CA_BUNDLE: the images' own CA certificates.
HOST_CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
HOST_TRUST := $(if $(HOST_CA_BUNDLE),--volume $(HOST_CA_BUNDLE):/etc/ssl/host-ca.crt:ro \
	--volume $(CURDIR)/deploy/docker/host-trust/pip.conf:/etc/pip.conf:ro \
	--volume $(CURDIR)/deploy/docker/host-trust/curlrc:/root/.curlrc:ro)
images: container-tools
	@if [ -z "$(PYTHON_IMAGE)" ]; then PATH="$$PATH:/usr/sbin:/sbin" deploy/docker/debian-base.sh $(BASE_IMAGE); fi
	@for image in cleaner vacuum; do \
		echo "building localhost/acidclean-$$image:$(IMAGE_TAG)"; \
		buildah bud --quiet --isolation chroot --layers \
			--build-arg PYTHON_IMAGE=$(or $(PYTHON_IMAGE),$(BASE_IMAGE)) $(HOST_TRUST) \
			--ignorefile deploy/docker/$$image.Dockerfile.dockerignore \
			-f deploy/docker/$$image.Dockerfile -t localhost/acidclean-$$image:$(IMAGE_TAG) . >/dev/null \
			|| exit 1; \
	done
	@podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^localhost/acidclean-'

# Three tiers (markers in pyproject.toml): test-fast, the inner loop (every pure test, a few Hypothesis
# examples each, under a minute); test-unit, the same tests at full strength; test, everything, with
# every integration test on the real services (serial: they share one Kafka, metastore and Spark).
# HYPOTHESIS_PROFILE picks the example counts (tests/conftest.py): ci keeps each test's own.
PURE := -m 'not integration and not bench'
WORKERS ?= 2

test: jars lint tools kerberos container-tools
	HYPOTHESIS_PROFILE=ci HELM=$(CURDIR)/.cache/bin/helm $(BIN)/pytest
	HYPOTHESIS_PROFILE=ci ACIDCLEAN_TEST_METASTORE=hive3 $(BIN)/pytest -m metastore tests/integration
	HYPOTHESIS_PROFILE=ci ACIDCLEAN_TEST_METASTORE=hive4 $(BIN)/pytest -m metastore tests/integration

test-unit: install
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest tests/unit $(PURE) -n $(WORKERS) --dist worksteal

test-fast: install
	HYPOTHESIS_PROFILE=fast $(BIN)/pytest tests/unit $(PURE) -n $(WORKERS) --dist worksteal -q

bench: jars
	$(BIN)/pytest tests/bench -m bench -s

# The documentation site (mkdocs.yml): the generated pages written, then built in strict mode into
# build/site (a warning, a broken link or anchor fails it). docs-check writes nothing: `make lint` runs it.
.PHONY: docs docs-check
docs: install
	$(BIN)/python -m acidclean.docsgen
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-check: install
	$(BIN)/python -m acidclean.docsgen --check
	site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$site"

lint: install docs-check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p acidclean
	$(BIN)/lint-imports
	$(BIN)/hadolint deploy/docker/cleaner.Dockerfile deploy/docker/vacuum.Dockerfile

# The Python bindings of Hive 4's compaction-queue calls (generated code, committed; exempt from the size
# limits), from the IDL subset beside them. Needs Debian's thrift-compiler (apt-get install thrift-compiler).
.PHONY: hive4-thrift
hive4-thrift:
	out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT \
	  && thrift --gen py -out "$$out" shared/hive4_queue/hive4_compaction_queue.thrift \
	  && rm -rf shared/hive4_queue/generated && rm "$$out/generated/ThriftHiveMetastore-remote" \
	  && mv "$$out/generated" shared/hive4_queue/generated

stack-down:
	$(BIN)/acidclean stack down

clean:
	rm -rf $(VENV) .stack stack-warehouse build *.egg-info
