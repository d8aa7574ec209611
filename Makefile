PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help install demo test lint bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install the project with its test tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install ## start a local stack and run the demo scenario
	$(BIN)/outbox-bridge demo

test: install ## run every test (unit, integration, end-to-end)
	$(BIN)/pytest

lint: install ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy jobstore handlers baseline api relay consumer outbox_bridge bench

bench: install ## the standard benchmark set (writes docs/bench/)
	$(BIN)/outbox-bridge bench --mode both

clean: ## remove the virtualenv and local data
	rm -rf $(VENV) data
