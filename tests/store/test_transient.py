"""Real transient errors from each backend are classified and retried; others are not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from easyjob.store import Database, RetryPolicy, Store, is_transient
from easyjob.store.retry import _transient_driver_error, error_kind
from tests.rig.servers import DatabaseServer
from tests.store.conftest import every_second


def _error(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as err:
        return err
    raise AssertionError("no error raised")


@pytest.fixture
def two_connections(store: Store) -> Iterator[tuple[sa.Connection, sa.Connection]]:
    quick = Database.open(
        str(store.db.engine.url.render_as_string(hide_password=False)), busy_timeout_s=0.1
    )
    first, second = store.db.engine.connect(), quick.engine.connect()
    yield first, second
    first.close()
    second.close()
    quick.dispose()


def test_lock_conflicts_are_transient(
    store: Store, two_connections: tuple[sa.Connection, sa.Connection]
) -> None:
    store.tasks.upsert([every_second("a")])
    first, second = two_connections
    update = "UPDATE easy_job_task SET version = version + 1 WHERE name = 'a'"
    tx = first.begin()
    first.exec_driver_sql(update)
    if store.db.dialect == "postgresql":
        second.exec_driver_sql("SET lock_timeout = '100ms'")
    elif store.db.dialect != "sqlite":
        second.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
    err = _error(lambda: second.exec_driver_sql(update))
    tx.rollback()
    assert is_transient(err), repr(err)


def test_constraint_and_programming_errors_are_not_transient(store: Store) -> None:
    store.tasks.upsert([every_second("a")])
    dup = "INSERT INTO easy_job_meta (name, value) VALUES ('schema_version', 'x')"
    err = _error(lambda: store.db.write("dup", lambda c: c.exec_driver_sql(dup)))
    assert isinstance(err, sa.exc.IntegrityError) and not is_transient(err)
    err = _error(lambda: store.db.read("bad", lambda c: c.exec_driver_sql("SELECT * FROM nope")))
    assert not is_transient(err)


def test_read_only_server_is_transient(store: Store, db_server: DatabaseServer | None) -> None:
    if db_server is None:
        pytest.skip("SQLite has no read-only server mode")
    impatient = Store(Database(store.db.engine, retry=RetryPolicy(deadline_s=0)))
    db_server.set_read_only(True)
    try:
        err = _error(lambda: impatient.tasks.upsert([every_second("a")]))
    finally:
        db_server.set_read_only(False)
    assert is_transient(err), repr(err)
    assert store.tasks.upsert([every_second("a")])[0].name == "a"


def test_killed_connections_are_retried(store: Store, db_server: DatabaseServer | None) -> None:
    if db_server is None:
        pytest.skip("SQLite has no server connections to kill")
    store.tasks.upsert([every_second("a")])
    with store.db.engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
        db_server.terminate_connections()
        err = _error(lambda: conn.exec_driver_sql("SELECT 1"))
    assert is_transient(err), repr(err)
    db_server.terminate_connections()
    assert store.tasks.get("a").name == "a"  # pool pre-ping and retries hide the loss


def test_a_write_waits_out_a_server_restart(store: Store, db_server: DatabaseServer | None) -> None:
    if db_server is None:
        pytest.skip("SQLite has no server to restart")
    store.tasks.upsert([every_second("a")])
    db_server.stop()
    comeback = threading.Timer(1.0, db_server.start)
    comeback.start()
    try:
        assert not db_server.running
        (row,) = store.tasks.upsert([every_second("written-while-down")])
    finally:
        comeback.join()
    assert row.name == "written-while-down"
    assert len(store.tasks.all()) == 2


def test_unknown_driver_errors_are_not_transient() -> None:
    assert not _transient_driver_error(None)
    assert not _transient_driver_error(RuntimeError("x"))
    assert is_transient(ConnectionResetError())


def test_a_transaction_stuck_mid_way_loses_its_session_and_its_locks(
    store: Store, db_server: DatabaseServer | None
) -> None:
    """A node paused inside one of its transactions (SIGSTOP, a VM freeze) must not hold its
    row locks until it wakes: the server ends the silent session after stuck_transaction_s,
    the others go on, and the paused client finds its connection gone."""
    if db_server is None:
        pytest.skip("SQLite has no server sessions: a paused writer holds the file lock")
    store.tasks.upsert([every_second("a")])
    url = store.db.engine.url.render_as_string(hide_password=False)
    paused = Database.open(url, stuck_transaction_s=1.0)
    update = "UPDATE easy_job_task SET version = version + 1 WHERE name = 'a'"
    try:
        conn = paused.engine.connect()
        tx = conn.begin()
        conn.exec_driver_sql(update)  # holds the row lock, then falls silent
        started = time.monotonic()
        store.db.write("other", lambda c: c.exec_driver_sql(update))  # waits, then goes on
        waited = time.monotonic() - started
        assert waited < 10, waited
        with pytest.raises(sa.exc.DBAPIError) as raised:
            conn.exec_driver_sql("SELECT 1")
            tx.commit()
        assert is_transient(raised.value), repr(raised.value)
        conn.invalidate()
        conn.close()
    finally:
        paused.dispose()


def test_failed_attempts_are_counted_by_kind(
    store: Store, two_connections: tuple[sa.Connection, sa.Connection]
) -> None:
    store.tasks.upsert([every_second("a")])
    first, second = two_connections
    update = "UPDATE easy_job_task SET version = version + 1 WHERE name = 'a'"
    tx = first.begin()
    first.exec_driver_sql(update)
    if store.db.dialect == "postgresql":
        second.exec_driver_sql("SET lock_timeout = '100ms'")
    elif store.db.dialect != "sqlite":
        second.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
    err = _error(lambda: second.exec_driver_sql(update))
    tx.rollback()
    assert error_kind(err) == "lock", repr(err)
    assert error_kind(ValueError("not a database error")) is None

    dup = "INSERT INTO easy_job_meta (name, value) VALUES ('schema_version', 'x')"
    before = store.counters()
    _error(lambda: store.db.write("dup", lambda c: c.exec_driver_sql(dup)))
    _error(lambda: store.db.read("bad", lambda c: c.exec_driver_sql("SELECT * FROM nope")))
    after = store.counters()
    assert after.get("errors.other", 0) - before.get("errors.other", 0) == 2


def test_a_table_another_session_is_creating_is_looked_for_again(store: Store) -> None:
    """MariaDB will not let a transaction that already holds a table wait for one that
    another session's DDL holds: looking at it (DESCRIBE, SQLAlchemy's ``has_table``) fails
    at once with 1684. A node's schema check meets it when `easyjob init-db` is creating
    Alembic's table beside it: transient, so looked for again once the DDL is done."""
    if store.db.dialect != "mysql":
        pytest.skip("only MariaDB refuses to wait for another session's DDL")
    creating = "CREATE TABLE ej_being_created AS SELECT SLEEP(2) AS s"
    creator = threading.Thread(
        target=lambda: store.db.write("slow create", lambda c: c.exec_driver_sql(creating))
    )
    creator.start()
    try:
        sleeping = sa.text(  # the table is held from the statement's start
            "SELECT COUNT(*) FROM information_schema.processlist "
            "WHERE info = :sql AND state = 'User sleep'"
        )
        while not store.db.read("seen", lambda c: c.scalar(sleeping, {"sql": creating})):
            assert creator.is_alive(), "the creation ended before it was seen running"

        def look(conn: sa.Connection) -> bool:
            conn.exec_driver_sql("SELECT COUNT(*) FROM easy_job_meta").scalar()  # holds a table
            return sa.inspect(conn).has_table("ej_being_created")

        impatient = Database(store.db.engine, retry=RetryPolicy(deadline_s=0))
        err = _error(lambda: impatient.read("look", look))
        assert is_transient(err) and error_kind(err) == "lock", repr(err)
        assert store.db.read("look", look)
    finally:
        creator.join()
