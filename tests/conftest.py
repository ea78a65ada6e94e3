"""Shared fixtures: real database servers and a fresh, empty database per test and backend.

A test that takes ``db_url`` runs once per backend, with ids ``sqlite``, ``postgresql`` and
``mariadb`` (the store tests also ``pgbouncer``: PostgreSQL behind PgBouncer in transaction
pooling mode); ``db_server`` gives the server object of that backend (None for SQLite) for fault
injection. Servers start on first use, once per session, and are stopped at its end. A server
that cannot start skips its tests, or fails them when ``CI`` is set.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from easyjob.store import RetryPolicy, Store
from tests.rig.backends import ALL_BACKENDS, backend_params
from tests.rig.galera import GaleraCluster, GaleraMember
from tests.rig.servers import (
    DatabaseServer,
    MariaDBServer,
    PgBouncerServer,
    PostgresServer,
    PostgresStandby,
    ServerError,
    reap_orphans,
)

ENV_ADMIN_URLS = {
    "postgresql": "EASYJOB_TEST_POSTGRES_URL",
    "mariadb": "EASYJOB_TEST_MARIADB_URL",
}

S = TypeVar("S", bound=DatabaseServer)
log = logging.getLogger(__name__)
_startup_times: dict[str, str] = {}


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    for backend in ALL_BACKENDS:
        config.addinivalue_line("markers", f"{backend}: the {backend} run of a db_url test")
    # SIGTERM would end pytest without fixture teardown or atexit; make it an interrupt.
    in_main = threading.current_thread() is threading.main_thread()
    if in_main and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    reap_orphans()  # servers of earlier runs that were SIGKILLed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for backend, what in _startup_times.items():
        terminalreporter.write_line(f"rig: {backend} {what}")


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _session_server(cls: type[S]) -> Iterator[S]:
    backend = cls.backend
    external = os.environ.get(ENV_ADMIN_URLS[backend])
    if external:
        _startup_times[backend] = "external server (admin URL from environment)"
        yield cls(external_url=external)
        return
    reason = cls.missing()
    if reason:
        _unavailable(f"{backend} unavailable: {reason}")
    server = cls()
    try:
        started = time.monotonic()
        try:
            server.start()
        except ServerError as exc:
            _unavailable(f"cannot start {backend} server: {exc}")
        elapsed = time.monotonic() - started
        _startup_times[backend] = f"started in {elapsed:.2f} s on port {server.port}"
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server, started on first use."""
    yield from _session_server(PostgresServer)


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    """The session's MariaDB server, started on first use."""
    yield from _session_server(MariaDBServer)


@pytest.fixture(scope="session")
def pgbouncer_server(postgres_server: PostgresServer) -> Iterator[PgBouncerServer]:
    """PgBouncer in transaction pooling mode (otherwise at its defaults) in front of the
    session's PostgreSQL server, started on first use."""
    reason = PgBouncerServer.missing()
    if reason:
        _unavailable(f"pgbouncer unavailable: {reason}")
    if not postgres_server.managed:
        _unavailable("pgbouncer: not started in front of an external PostgreSQL server")
    server = PgBouncerServer(postgres_server)
    try:
        try:
            server.start()
        except ServerError as exc:
            _unavailable(f"cannot start pgbouncer: {exc}")
        _startup_times["pgbouncer"] = f"on port {server.port}"
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_primary_and_standby() -> Iterator[tuple[PostgresServer, PostgresStandby]]:
    """A PostgreSQL primary with a database ``app`` and its streaming hot standby, both of
    this test's own (a test may kill the primary and promote the standby)."""
    reason = PostgresServer.missing()
    if reason:
        _unavailable(f"postgresql unavailable: {reason}")
    primary = PostgresServer()
    standby: PostgresStandby | None = None
    try:
        try:
            primary.start()
            primary.create_database("app")
            standby = PostgresStandby(primary)
            standby.start()
        except ServerError as err:
            _unavailable(f"cannot start a PostgreSQL primary and standby: {err}")
        yield primary, standby
    finally:
        if standby is not None:
            standby.close()
        primary.close()


@pytest.fixture
def galera_cluster(request: pytest.FixtureRequest) -> Iterator[GaleraCluster]:
    """A three-member MariaDB Galera cluster of this test's own, every member synced (a
    test may kill a member and start it again). Indirect parametrization may pass more
    ``[mysqld]`` options for every member (a dict)."""
    reason = GaleraMember.missing()
    if reason:
        _unavailable(f"galera unavailable: {reason}")
    cluster = GaleraCluster(3, getattr(request, "param", None))
    try:
        try:
            cluster.start()
        except ServerError as err:
            _unavailable(f"cannot start a three-member Galera cluster: {err}")
        yield cluster
    finally:
        cluster.close()


_SERVER_FIXTURES = {
    "postgresql": "postgres_server",
    "mariadb": "mariadb_server",
    "pgbouncer": "pgbouncer_server",
}


@pytest.fixture(params=backend_params())
def db_backend(request: pytest.FixtureRequest) -> str:
    """This run's backend: ``sqlite``, ``postgresql`` or ``mariadb`` (see tests/rig/backends)."""
    backend: str = request.param
    return backend


@pytest.fixture
def db_server(request: pytest.FixtureRequest, db_backend: str) -> Iterator[DatabaseServer | None]:
    """Server of this run's backend (None for SQLite); faults a test leaves are undone after it."""
    if db_backend == "sqlite":
        yield None
        return
    server: DatabaseServer = request.getfixturevalue(_SERVER_FIXTURES[db_backend])
    server.ensure_healthy()
    yield server
    server.ensure_healthy()


def _database_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9]+", "_", test_name.lower()).strip("_")[:40]
    return f"ej_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def db_url(
    request: pytest.FixtureRequest, db_server: DatabaseServer | None, tmp_path: Path
) -> Iterator[str]:
    """SQLAlchemy URL of a fresh, empty database for this test, dropped afterwards."""
    if db_server is None:
        yield f"sqlite:///{tmp_path}/easyjob.db"
        return
    name = _database_name(request.node.name)
    url = db_server.create_database(name)
    yield url
    try:
        db_server.ensure_healthy()
        db_server.drop_database(name)  # also terminates connections the test left open
    except Exception:
        log.exception("could not drop test database %s", name)


#: Store writes in tests give up after 10 s instead of 30.
FAST_RETRY = RetryPolicy(deadline_s=10.0, initial_s=0.02, max_wait_s=0.5)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store on a fresh database of each backend, schema created."""
    store = Store.open(db_url, create=True, retry=FAST_RETRY)
    try:
        yield store
    finally:
        store.close()
