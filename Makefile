# Developer and CI entry points. Database servers for tests are started (on free ports) and
# stopped by the pytest fixtures in tests/conftest.py, never here.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

# Root runs apt-get directly; anyone else goes through sudo when it exists.
SUDO := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null 2>&1 || echo sudo)
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: venv deps chaos-deps test test-fast chaos lint typecheck run sql clean bench-ab

venv: $(VENV)/.stamp

$(VENV)/.stamp: setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,postgres,mysql]'
	touch $@

# chromium and chromium-driver: the dashboard's browser tests (tests/web/test_browser.py).
# pgbouncer: the store and cluster tests through PgBouncer in transaction pooling mode
# (tests/rig/servers.py starts it in front of the test PostgreSQL; the Debian service is unused).
# mariadb-server's post-install script cannot start a service without systemd; that is
# harmless, so success is judged by the binaries being there afterwards.
HAVE_MARIADB := command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd
HAVE_POSTGRES := command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
HAVE_PGBOUNCER := command -v pgbouncer >/dev/null 2>&1 || test -x /usr/sbin/pgbouncer

deps:
	@need=""; \
	$(HAVE_MARIADB) || need="$$need mariadb-server mariadb-client"; \
	$(HAVE_POSTGRES) || need="$$need postgresql"; \
	$(HAVE_PGBOUNCER) || need="$$need pgbouncer"; \
	command -v faketime >/dev/null 2>&1 || need_faketime=1; \
	{ test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } || need="$$need chromium chromium-driver"; \
	if [ -n "$$need" ] || [ -n "$$need_faketime" ]; then $(APT_GET) update; fi; \
	if [ -n "$$need" ]; then \
		echo "deps: installing$$need"; \
		$(APT_GET) install -y $$need || true; \
		$(HAVE_MARIADB) || { echo "deps: MariaDB is still missing" >&2; exit 1; }; \
		$(HAVE_POSTGRES) || { echo "deps: PostgreSQL is still missing" >&2; exit 1; }; \
		$(HAVE_PGBOUNCER) || { echo "deps: PgBouncer is still missing" >&2; exit 1; }; \
		test -x /usr/bin/chromedriver || { echo "deps: chromium-driver is still missing" >&2; exit 1; }; \
	fi; \
	if [ -n "$$need_faketime" ]; then \
		$(APT_GET) install -y faketime || echo "deps: warning: could not install faketime"; \
	fi

test: venv deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The inner loop: pure units, in-process nodes on a fake clock, and the store on SQLite;
# no server, no node process.
test-fast: venv
	$(BIN)/python -m pytest -q tests/unit tests/node tests/store tests/cli/test_settings.py -k "not postgresql and not mariadb and not pgbouncer" $(PYTEST_ARGS)

# The Galera scenario (tests/chaos/test_galera.py) needs galera-4 and rsync (state transfer);
# only `make chaos` installs them. Without them that scenario skips (fails when CI is set).
HAVE_GALERA := test -e /usr/lib/galera/libgalera_smm.so || test -e /usr/lib/galera-4/libgalera_smm.so
chaos-deps:
	@need=""; \
	$(HAVE_GALERA) || need="$$need galera-4"; \
	command -v rsync >/dev/null 2>&1 || need="$$need rsync"; \
	if [ -n "$$need" ]; then \
		echo "chaos-deps: installing$$need"; \
		$(APT_GET) update && $(APT_GET) install -y $$need || echo "chaos-deps: warning: could not install$$need" >&2; \
	fi

# The whole reliability suite (docs/reliability.md); `make test` runs only its fast tier.
# With EASYJOB_CHAOS_REPORT=results.jsonl each scenario appends its report there.
chaos: venv deps chaos-deps
	$(BIN)/python -m pytest -m chaos tests/chaos $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check easyjob tests
	$(BIN)/ruff format --check easyjob tests

typecheck: venv
	$(BIN)/mypy

run: venv
	$(BIN)/easyjob run examples/jobs.py

# CPU per run of this checkout beside another (BASE=DIR, e.g. a `git worktree add --detach`
# of the commit before), easyjob bench at default settings on SQLite and PostgreSQL, the two
# taking turns (tests/perf/bench_ab.py; docs/performance.md, "CPU per run, before and after").
BASE ?=
ROUNDS ?= 3
bench-ab: venv
	@test -n "$(BASE)" || { echo "bench-ab: give BASE=DIR, a checkout to compare with" >&2; exit 2; }
	$(BIN)/python -m tests.perf.bench_ab --a $(BASE) --b . --db sqlite --rounds $(ROUNDS)
	$(BIN)/python -m tests.perf.bench_ab --a $(BASE) --b . --db postgresql --rounds $(ROUNDS)

sql: venv
	$(BIN)/python -m easyjob.store.ddl --write sql

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
