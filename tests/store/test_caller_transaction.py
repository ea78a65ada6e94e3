"""A trigger inside the caller's own transaction (``trigger(connection=)``), on each real
database and through PgBouncer: the run exists if and only if the caller commits, with
the caller's own rows; savepoints; bad input and unusable connections are refused before
anything is written, and leave the caller's transaction usable."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from easyjob import control
from easyjob.core.records import TaskSpec
from easyjob.core.states import RunStatus, Trigger
from easyjob.errors import ConfigError, TaskDefinitionError, TaskNotFoundError
from easyjob.store import Store
from tests.conftest import FAST_RETRY
from tests.rig.servers import DatabaseServer

FUNC = "tests.jobs:noop"
orders = sa.Table(
    "app_order", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=False)
)


def app_engine(url: str, *, savepoints: bool = False) -> sa.Engine:
    """The application's own engine: plain SQLAlchemy, none of easyjob's settings. With
    *savepoints* on SQLite, SQLAlchemy's recipe that lets pysqlite keep them (the driver
    begins no transaction of its own; SQLAlchemy sends BEGIN)."""
    connect_args = {"prepare_threshold": None} if url.startswith("postgresql") else {}
    engine = sa.create_engine(url, connect_args=connect_args)
    if savepoints and engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _no_driver_begin(dbapi_conn: object, record: object) -> None:
            dbapi_conn.isolation_level = None  # type: ignore[attr-defined]

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN")

    return engine


@pytest.fixture
def app(store: Store, db_url: str) -> Iterator[sa.Engine]:
    store.tasks.upsert(
        [TaskSpec(name="m", func=FUNC, accepts=("order",)), TaskSpec("s", FUNC, shards=3)]
    )
    engine = app_engine(db_url)
    orders.create(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def runs(store: Store, task: str = "m") -> list[tuple[int, object]]:
    return sorted((r.id, (r.kwargs or {}).get("order")) for r in store.history.runs(task=task))


def ordered(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.scalars(sa.select(orders.c.id).order_by(orders.c.id)))


def test_the_run_and_the_callers_rows_commit_together(store: Store, app: sa.Engine) -> None:
    sent: list[str] = []
    with app.begin() as conn:
        conn.execute(orders.insert().values(id=1))
        before = conn.scalar(sa.select(sa.func.count()).select_from(orders))
        sa.event.listen(app, "before_cursor_execute", lambda *a: sent.append(a[2]))
        run_id = control.trigger(store, "m", kwargs={"order": 1}, connection=conn)
        assert before == 1
        # on the caller's connection: the database's identity and time, the task, the insert
        assert len(sent) == 3 and sent[-1].startswith("INSERT INTO easy_job_task_detail")
        assert runs(store) == []  # nodes (other connections) see nothing yet
    assert runs(store) == [(run_id, 1)]
    assert ordered(app) == [1]
    (row,) = store.history.runs(ids=[run_id])
    assert (row.status, row.triggered_by, row.attempt) == (RunStatus.PENDING, Trigger.MANUAL, 1)
    assert row.due_time == row.fire_time and row.due_time <= store.now()


def test_a_rollback_takes_the_run_with_it(store: Store, app: sa.Engine) -> None:
    with app.connect() as conn:
        conn.begin()
        conn.execute(orders.insert().values(id=2))
        control.trigger(store, "m", kwargs={"order": 2}, connection=conn)
        control.trigger(store, "s", connection=conn)  # one row per shard
        conn.rollback()
    assert runs(store) == [] and runs(store, "s") == [] and ordered(app) == []
    later = control.trigger(store, "m", kwargs={"order": 3})  # the store's own way still works
    assert runs(store) == [(later, 3)]


def test_commit_as_you_go_commits_the_run_with_the_callers_commit(
    store: Store, app: sa.Engine
) -> None:
    with app.connect() as conn:
        conn.execute(orders.insert().values(id=4))  # SQLAlchemy begins the transaction
        run_id = control.trigger(store, "m", kwargs={"order": 4}, connection=conn)
        assert runs(store) == []
        conn.commit()
    assert runs(store) == [(run_id, 4)]


def test_savepoints(store: Store, app: sa.Engine, db_url: str) -> None:
    app = app_engine(db_url, savepoints=True)
    with app.begin() as conn:
        with conn.begin_nested() as savepoint:  # rolled back: its run goes
            control.trigger(store, "m", kwargs={"order": 10}, connection=conn)
            savepoint.rollback()
        with conn.begin_nested():  # released: its run stays
            kept = control.trigger(store, "m", kwargs={"order": 11}, connection=conn)
        outer = control.trigger(store, "m", kwargs={"order": 12}, connection=conn)
        with conn.begin_nested() as savepoint:  # a later savepoint rolled back keeps it
            conn.execute(orders.insert().values(id=13))
            savepoint.rollback()
    assert runs(store) == sorted([(kept, 11), (outer, 12)])
    with app.connect() as conn:
        conn.begin()
        with conn.begin_nested():
            control.trigger(store, "m", kwargs={"order": 14}, connection=conn)
        conn.rollback()  # the outer rollback takes a released savepoint's run too
    assert [order for _, order in runs(store)] == [11, 12]
    app.dispose()


def test_an_orm_session_lends_its_connection(store: Store, app: sa.Engine) -> None:
    with Session(app) as session, session.begin():
        session.execute(orders.insert().values(id=20))
        run_id = control.trigger(store, "m", kwargs={"order": 20}, connection=session.connection())
    assert runs(store) == [(run_id, 20)] and ordered(app) == [20]
    with Session(app) as session:
        session.execute(orders.insert().values(id=21))
        control.trigger(store, "m", kwargs={"order": 21}, connection=session.connection())
        session.rollback()
    assert runs(store) == [(run_id, 20)] and ordered(app) == [20]


@pytest.mark.parametrize(
    ("name", "kwargs", "at_s", "error", "message"),
    [
        ("nope", None, 0, TaskNotFoundError, "no task named 'nope'"),
        ("m", {"evil": 1}, 0, TaskDefinitionError, "does not accept trigger argument(s) 'evil'"),
        ("m", {"order": float("nan")}, 0, TaskDefinitionError, "kwargs must be JSON"),
        ("m", None, -3600, TaskDefinitionError, "in the past (database time"),
    ],
)
def test_bad_input_is_refused_and_the_callers_transaction_goes_on(
    store: Store,
    app: sa.Engine,
    name: str,
    kwargs: dict[str, object] | None,
    at_s: float,
    error: type[Exception],
    message: str,
) -> None:
    at = store.now() + timedelta(seconds=at_s) if at_s else None
    with app.begin() as conn:
        conn.execute(orders.insert().values(id=30))
        with pytest.raises(error) as info:
            control.trigger(store, name, at=at, kwargs=kwargs, connection=conn)
        conn.execute(orders.insert().values(id=31))  # on PostgreSQL too: nothing failed
    assert message in str(info.value)
    assert ordered(app) == [30, 31] and runs(store) == []


def test_a_trigger_at_a_later_time_reads_now_through_the_connection(
    store: Store, app: sa.Engine
) -> None:
    at = store.now() + timedelta(hours=1)
    with app.begin() as conn:
        run_id = control.trigger(store, "m", at=at, connection=conn)
    (row,) = store.history.runs(ids=[run_id])
    assert (row.fire_time, row.due_time) == (at, at)


def test_unusable_connections_are_refused_saying_why(store: Store, app: sa.Engine) -> None:
    def refused(connection: object) -> str:
        with pytest.raises(ConfigError) as info:
            control.trigger(store, "m", connection=connection)  # type: ignore[arg-type]
        return str(info.value)

    assert "takes a SQLAlchemy Connection" in refused(app)
    assert "with engine.begin() as conn" in refused(app)
    with Session(app) as session:
        assert "pass session.connection()" in refused(session)
    raw = app.raw_connection()
    try:
        assert "takes a SQLAlchemy Connection inside your transaction" in refused(raw)
    finally:
        raw.close()
    with app.connect() as conn:
        assert "trigger of 'm': the connection is not in a transaction" in refused(conn)
    conn = app.connect()
    conn.close()
    assert refused(conn) == "trigger of 'm': the connection is closed"
    with app.connect() as conn:
        conn.begin()
        conn.invalidate()  # as SQLAlchemy does when the database connection is lost
        assert "the connection was invalidated (its database connection was lost)" in refused(conn)
    with app.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.select(1))
        assert "commits each statement by itself (autocommit)" in refused(conn)
    assert runs(store) == []


def test_a_failed_postgresql_transaction_is_named(store: Store, app: sa.Engine) -> None:
    if app.dialect.name != "postgresql":
        pytest.skip("other databases go on after a failed statement")
    with app.connect() as conn:
        conn.begin()
        with pytest.raises(sa.exc.ProgrammingError):
            conn.execute(sa.text("SELECT * FROM no_such_table"))
        with pytest.raises(ConfigError, match=r"its transaction failed .*: roll it back"):
            control.trigger(store, "m", connection=conn)
        conn.rollback()


def test_a_connection_to_another_database_is_refused(
    store: Store, app: sa.Engine, db_server: DatabaseServer | None, tmp_path: Path
) -> None:
    """Even one with the easyjob tables and the same task: its run would never run."""
    name = f"ej_other_{uuid.uuid4().hex[:12]}"
    if db_server is None:
        other_url = f"sqlite:///{tmp_path}/other.db"
    else:
        other_url = db_server.create_database(name)
    other = Store.open(other_url, create=True, retry=FAST_RETRY)
    other.tasks.upsert([TaskSpec(name="m", func=FUNC)])
    engine = app_engine(other_url)
    try:
        with engine.begin() as conn, pytest.raises(ConfigError) as info:
            control.trigger(store, "m", connection=conn)
        assert "trigger of 'm': the connection reaches another database (" in str(info.value)
        assert "than the store's nodes use (" in str(info.value)
        assert other.history.runs(task="m") == [] and runs(store) == []
    finally:
        engine.dispose()
        other.close()
        if db_server is not None:
            db_server.drop_database(name)


def test_a_connection_to_another_kind_of_database_is_refused(
    store: Store, app: sa.Engine, tmp_path: Path
) -> None:
    if app.dialect.name == "sqlite":
        pytest.skip("needs a store on a server")
    engine = sa.create_engine(f"sqlite:///{tmp_path}/app.db")
    try:
        with engine.begin() as conn, pytest.raises(ConfigError) as info:
            control.trigger(store, "m", connection=conn)
        assert "the connection is to a sqlite database, the store's is " in str(info.value)
    finally:
        engine.dispose()


def test_the_same_sqlite_file_by_another_path_is_the_same_database(
    store: Store, app: sa.Engine, db_url: str, tmp_path: Path
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("a file path")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    engine = sa.create_engine(f"sqlite:///{link}/easyjob.db")
    try:
        with engine.begin() as conn:
            run_id = control.trigger(store, "m", connection=conn)
        assert runs(store) == [(run_id, None)]
    finally:
        engine.dispose()
