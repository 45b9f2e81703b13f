# Corral: `make up` starts Corral on its embedded default; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check -q

.PHONY: up test lint unit integration bench clean postgres browser docs docs-gen

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[dev]'
	touch $@ $(VENV)/.installed

up: $(VENV)/.installed
	$(BIN)/corral up

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests bench docs/gen
	$(BIN)/ruff format --check src tests bench docs/gen
	$(BIN)/mypy src

# The suite starts its own PostgreSQL from the server binaries; install them if this machine lacks them.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing the PostgreSQL server (needed by the test suite)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# The browser tests drive Debian's Chromium (Playwright's own download cannot work offline).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Chromium (needed by the browser tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The documentation site into site/, strict: a broken link or anchor fails (mkdocs.yml).
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Writes the generated pages (API and CLI references, openapi.json, the tables the code enforces);
# the tests fail while a committed one differs from what this writes.
docs-gen: $(VENV)/.dev
	$(BIN)/python -m docs.gen

test: lint docs postgres browser
	$(BIN)/python tests/run.py

unit: $(VENV)/.dev
	$(BIN)/pytest -q tests/unit

integration: $(VENV)/.dev
	$(BIN)/pytest -q tests/integration

bench: $(VENV)/.installed
	$(BIN)/python bench/throughput.py --n 1000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
