# The two set-up commands: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HIR_DATA_HOME ?= $(CURDIR)/.hir
export DAGSTER_DISABLE_TELEMETRY := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test ui serve bench browser servers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,k8s]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/hir run

# Debian's Chromium drives the UI test; installed here so a fresh machine needs nothing by hand.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

# Debian's redis-server and PostgreSQL: the Feast online-store tests start their own on free
# loopback ports (so does `hir bench feast`, for Redis).
servers:
	@command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }

test: $(STAMP) browser servers
	$(BIN)/python -m pytest

ui: $(STAMP)
	$(BIN)/hir ui

serve: $(STAMP)
	$(BIN)/hir serve

bench: $(STAMP)
	$(BIN)/hir bench synthetic --json

clean:
	rm -rf .hir .pytest_cache
