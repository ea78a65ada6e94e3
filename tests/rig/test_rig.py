"""The test rig itself: fresh databases per backend, and faults that do what they say."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.rig.backends import SERVER_BACKENDS, only_backends
from tests.rig.servers import DatabaseServer

metadata = sa.MetaData()
probe = sa.Table(
    "probe",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(50), nullable=False),
)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(db_url, pool_pre_ping=True)
    yield engine
    engine.dispose()


@pytest.fixture
def server(db_server: DatabaseServer | None) -> DatabaseServer:
    assert db_server is not None, "use @only_backends(*SERVER_BACKENDS)"
    return db_server


@pytest.fixture
def managed(server: DatabaseServer) -> DatabaseServer:
    """The run's server when this session controls its process."""
    if not server.managed:
        pytest.skip("external server (EASYJOB_TEST_*_URL): no process control")
    return server


def names(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(probe.c.name).order_by(probe.c.id)).scalars())


def insert(engine: sa.Engine, row_id: int, name: str) -> None:
    with engine.begin() as conn:
        conn.execute(probe.insert().values(id=row_id, name=name))


def test_fresh_database_is_empty_and_writable(
    db_backend: str, db_server: DatabaseServer | None, db_url: str, engine: sa.Engine
) -> None:
    assert db_url.startswith(
        {"sqlite": "sqlite", "postgresql": "postgresql", "mariadb": "mysql"}[db_backend]
    )
    assert (db_server is None) == (db_backend == "sqlite")
    assert sa.inspect(engine).get_table_names() == []
    metadata.create_all(engine)
    insert(engine, 1, "a")
    assert names(engine) == ["a"]


@only_backends("mariadb")
def test_mariadb_is_read_committed_utf8mb4(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert conn.get_isolation_level() == "READ COMMITTED"
        row = conn.execute(sa.text("SELECT @@tx_isolation, @@character_set_database")).one()
    assert tuple(row) == ("READ-COMMITTED", "utf8mb4")


@only_backends("mariadb")
def test_mariadb_app_user_is_not_super(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        grants = " ".join(conn.execute(sa.text("SHOW GRANTS")).scalars())
    assert "SUPER" not in grants
    assert "ON *.*" not in grants.replace("GRANT USAGE ON *.*", "")


@only_backends(*SERVER_BACKENDS)
def test_restart_keeps_port_and_data(managed: DatabaseServer, engine: sa.Engine) -> None:
    metadata.create_all(engine)
    insert(engine, 1, "before")
    port, pid = managed.port, managed.pid
    managed.restart()
    assert (managed.port, managed.running) == (port, True)
    assert managed.pid != pid
    assert names(engine) == ["before"]


@only_backends(*SERVER_BACKENDS)
def test_kill_loses_no_acknowledged_commit(managed: DatabaseServer, engine: sa.Engine) -> None:
    metadata.create_all(engine)
    insert(engine, 1, "acknowledged")
    managed.kill()
    assert not managed.running
    managed.start()
    assert names(engine) == ["acknowledged"]


@only_backends(*SERVER_BACKENDS)
def test_read_only_blocks_app_user(server: DatabaseServer, engine: sa.Engine) -> None:
    metadata.create_all(engine)
    insert(engine, 1, "a")
    server.set_read_only(True)
    with pytest.raises(sa.exc.DBAPIError, match=r"read.only"):
        insert(engine, 2, "b")
    assert names(engine) == ["a"]  # reads still work
    server.set_read_only(False)
    insert(engine, 2, "b")
    assert names(engine) == ["a", "b"]


@only_backends(*SERVER_BACKENDS)
def test_terminate_connections(server: DatabaseServer, engine: sa.Engine) -> None:
    metadata.create_all(engine)
    with engine.connect() as conn:
        conn.execute(sa.select(1))
        assert server.terminate_connections() >= 1
        with pytest.raises(sa.exc.DBAPIError):
            conn.execute(sa.select(1))
    assert names(engine) == []  # the pool reconnects


@only_backends(*SERVER_BACKENDS)
def test_pause_stalls_until_resume(managed: DatabaseServer, db_url: str) -> None:
    # PyMySQL's connect_timeout covers only the TCP connect, which a stopped server's
    # kernel still accepts; the greeting is a read.
    args = {"connect_timeout": 1} if managed.backend == "postgresql" else {"read_timeout": 1}
    engine = sa.create_engine(db_url, connect_args=args, poolclass=sa.NullPool)
    try:
        managed.pause()
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError), engine.connect():
            pass
        assert time.monotonic() - started >= 0.9
        managed.resume()
        with engine.connect() as conn:
            assert conn.execute(sa.select(1)).scalar() == 1
    finally:
        engine.dispose()
