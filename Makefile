PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The pinned dependencies: `make install` installs the dev lock (the package, its dev, bench and otel extras),
# the image the runtime lock (the package alone, at the same versions). Both come from pyproject.toml
# through `make lock`; nothing else resolves versions.
LOCK_DEV     := requirements/dev.txt
LOCK_RUNTIME := requirements/runtime.txt

.PHONY: help install lock demo test chromium lint bench settings-doc clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv with the pinned dependencies (requirements/dev.txt) and the project

# uv installs the same pins as pip would, several times faster (it downloads and unpacks in parallel), and
# compiles them to bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, nothing else would, and every
# process would compile each module it imports again.
UV_VERSION := 0.13.9
UV_PIP     = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

$(STAMP): pyproject.toml $(LOCK_DEV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV_PIP) -r $(LOCK_DEV)
	$(UV_PIP) --no-deps -e .
	touch $(STAMP)

# Resolved on Python 3.11, the oldest supported and the image's, so every pin installs there; a pin keeps
# its version while pyproject.toml still allows it. `make lock LOCK_FLAGS=--upgrade` moves every pin to
# the newest allowed, `LOCK_FLAGS='--upgrade-package fastapi'` only that one.
LOCK_FLAGS ?=
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet --strip-extras --allow-unsafe \
	--no-emit-index-url --no-emit-find-links --no-emit-trusted-host $(LOCK_FLAGS)

lock: ## pin every dependency (requirements/*.txt) from pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "make lock resolves on Python 3.11: make clean lock PYTHON=python3.11" >&2; exit 1; }
	@test -x $(BIN)/pip-compile || $(BIN)/pip install --quiet 'pip-tools>=7.4'
	$(PIP_COMPILE) --extra dev --extra bench --extra otel -o $(LOCK_DEV) pyproject.toml
	$(PIP_COMPILE) --constraint $(LOCK_DEV) -o $(LOCK_RUNTIME) pyproject.toml

demo: install ## start a local stack and run the demo scenario
	$(BIN)/outbox-bridge demo

# Integration and end-to-end tests run on each of these stores (PostgreSQL from the local server at
# 127.0.0.1:5432; a session of tests gets a fresh database). `make test TEST_DATABASES=sqlite` for SQLite only.
TEST_DATABASES ?= sqlite,postgresql

# Two test processes share the two cores; the few `exclusive` tests (they restart the shared RabbitMQ) run
# afterwards, alone. `make test TEST_PROCESSES=1` runs everything in one process.
TEST_PROCESSES ?= 2

test: install chromium ## run every test (unit, integration, end-to-end) on SQLite and PostgreSQL
	TEST_DATABASES=$(TEST_DATABASES) $(BIN)/pytest -n $(TEST_PROCESSES) -m "not exclusive" --durations=20
	TEST_DATABASES=$(TEST_DATABASES) $(BIN)/pytest -m exclusive

# The dashboard test drives Debian's headless Chromium. As root with apt-get it is installed here; otherwise
# the test is skipped locally (and fails under CI=true), and this says how to get it.
chromium: ## make sure headless Chromium is present for the dashboard test
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "note: /usr/bin/chromium is missing, so the dashboard test will be skipped;" \
	    "install it with: sudo apt-get install chromium" >&2; \
	fi

# mypy reads the package as the wheel installs it: the folders pyproject.toml maps into `outbox_bridge`
# (api/, relay/, consumer/, ...) are laid out under build/typecheck/outbox_bridge, and mypy runs there (from
# the checkout's root it would also find the checkout's own, partial, outbox_bridge/); its errors name the
# files of that tree (outbox_bridge/api/app.py there is api/app.py here).
TYPECHECK := build/typecheck

lint: install ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/package_tree.py $(TYPECHECK) >/dev/null
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml \
	  --cache-dir $(CURDIR)/build/mypy-cache outbox_bridge

bench: install ## the standard benchmark set (writes docs/bench/)
	@command -v wrk >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; } || \
	  echo "note: wrk is missing, so the HTTP load phases will be skipped; install it with: sudo apt-get install wrk" >&2
	$(BIN)/outbox-bridge bench --mode both

# docs/settings.md is rendered from the settings' docstrings (outbox_bridge/core/settings.py);
# tests/unit/test_settings_reference.py fails when it is out of date.
settings-doc: install ## regenerate docs/settings.md from outbox_bridge/core/settings.py
	$(BIN)/python -m outbox_bridge.core.reference > docs/settings.md

clean: ## remove the virtualenv and local data
	rm -rf $(VENV) data
