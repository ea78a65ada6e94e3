# Developer and CI entry points. Database servers for tests are started (on free ports) and
# stopped by the pytest fixtures in tests/conftest.py, never here.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

# Root runs apt-get directly; anyone else goes through sudo when it exists.
SUDO := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null 2>&1 || echo sudo)
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: venv deps test lint typecheck run sql clean

venv: $(VENV)/.stamp

$(VENV)/.stamp: setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,postgres]'
	touch $@

deps:
	@need=""; \
	command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd \
		|| need="$$need mariadb-server mariadb-client"; \
	command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| need="$$need postgresql"; \
	command -v faketime >/dev/null 2>&1 || need_ft=1; \
	if [ -n "$$need" ] || [ -n "$$need_ft" ]; then $(APT_GET) update; fi; \
	if [ -n "$$need" ]; then \
		echo "installing:$$need"; \
		$(APT_GET) install -y --no-install-recommends $$need; \
	fi; \
	if [ -n "$$need_ft" ]; then \
		$(APT_GET) install -y --no-install-recommends faketime \
			|| echo "warning: could not install faketime (clock-skew tests will skip)"; \
	fi

test: venv deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check easyjob tests
	$(BIN)/ruff format --check easyjob tests

typecheck: venv
	$(BIN)/mypy

run: venv
	$(BIN)/easyjob run examples/jobs.py

sql: venv
	$(BIN)/python -m easyjob.store.ddl --write sql

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
