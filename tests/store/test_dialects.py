"""One dialect object per database: the URL picks it, and the store's SQL goes through it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.errors import DatabaseURLError
from easyjob.store import Store
from easyjob.store.dialects import (
    DIALECTS,
    Dialect,
    MySQLDialect,
    PostgreSQLDialect,
    SQLiteDialect,
    dialect_for,
)
from easyjob.store.engine import db_now, dialect_of
from easyjob.store.schema import meta_table, task_table
from tests.rig.backends import only_backends

#: Each URL scheme users write, and the dialect and driver it must lead to.
SCHEMES = [
    ("sqlite:///x.db", SQLiteDialect, "sqlite"),
    ("sqlite+pysqlite:///x.db", SQLiteDialect, "sqlite"),
    ("postgresql://u:p@h/d", PostgreSQLDialect, "postgresql+psycopg"),
    ("postgres://u:p@h/d", PostgreSQLDialect, "postgresql+psycopg"),
    ("postgresql+psycopg://u:p@h/d", PostgreSQLDialect, "postgresql+psycopg"),
    ("mysql://u:p@h/d", MySQLDialect, "mysql+pymysql"),
    ("mariadb://u:p@h/d", MySQLDialect, "mysql+pymysql"),
    ("mysql+pymysql://u:p@h/d", MySQLDialect, "mysql+pymysql"),
    ("mariadb+pymysql://u:p@h/d", MySQLDialect, "mysql+pymysql"),
]


def test_there_is_one_dialect_object_per_database() -> None:
    assert [type(d) for d in DIALECTS] == [SQLiteDialect, PostgreSQLDialect, MySQLDialect]
    assert [d.name for d in DIALECTS] == ["sqlite", "postgresql", "mysql"]
    assert all(isinstance(d, Dialect) for d in DIALECTS)
    assert [d.skip_locked for d in DIALECTS] == [False, True, False]


@pytest.mark.parametrize(("url", "kind", "driver"), SCHEMES)
def test_the_url_picks_the_dialect_and_its_driver(url: str, kind: type, driver: str) -> None:
    dialect = dialect_of(url)
    assert type(dialect) is kind
    assert dialect.driver == driver


@pytest.mark.parametrize(
    "url", ["oracle://u@h/d", "postgresql+asyncpg://u@h/d", "mysql+mysqldb://u@h/d"]
)
def test_a_url_of_no_dialect_is_refused_naming_it_and_the_choices(url: str) -> None:
    with pytest.raises(DatabaseURLError) as err:
        dialect_of(url)
    assert str(err.value) == (
        f"unsupported database URL {url!r}: use sqlite:///FILE, "
        "postgresql://USER:PASSWORD@HOST/DB or mysql://USER:PASSWORD@HOST/DB"
    )


def test_the_store_uses_the_dialect_its_url_names(store: Store, db_url: str) -> None:
    expected = dialect_of(db_url)
    assert store.db.backend is expected
    assert dialect_for(store.db.engine.dialect.name) is expected
    assert store.server.split()[0] in {"sqlite": ["sqlite"], "postgresql": ["postgresql"]}.get(
        expected.name, ["mysql", "mariadb"]
    )
    compiled = str(sa.select(db_now()).compile(store.db.engine))
    assert expected.now_sql() in compiled
    before = store.now()
    assert store.db.read("now", lambda conn: conn.scalar(sa.select(db_now()))) >= before


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_insert_or_ignore_skips_only_duplicate_keys(dialect: Dialect) -> None:
    sql = str(dialect.insert_ignore(task_table, ["name"]).compile(dialect=dialect.offline()))
    if dialect.name == "mysql":
        assert "ON DUPLICATE KEY UPDATE id = " in sql and "IGNORE" not in sql
    else:
        assert "ON CONFLICT (name) DO NOTHING" in sql


def test_insert_or_ignore_writes_once_on_every_database(store: Store) -> None:
    insert = store.db.backend.insert_ignore(meta_table, ["name"])

    def write(conn: sa.Connection) -> list[tuple[str, str]]:
        conn.execute(insert, [{"name": "dup", "value": "first"}])
        conn.execute(insert, [{"name": "dup", "value": "second"}])
        query = sa.select(meta_table.c.name, meta_table.c.value).where(meta_table.c.name == "dup")
        return [(row[0], row[1]) for row in conn.execute(query)]

    assert store.db.write("insert_twice", write) == [("dup", "first")]
    with pytest.raises(sa.exc.IntegrityError):  # any other error still fails
        store.db.write("null", lambda conn: conn.execute(insert, [{"name": None, "value": "x"}]))


@only_backends("sqlite")
def test_a_sqlite_read_sends_no_begin_and_each_statement_sees_the_latest_commit(
    store: Store,
) -> None:
    """A read's statements each run in a transaction of their own, as on PostgreSQL: no
    ``BEGIN`` sent (one statement fewer for every read every node makes), and a commit made
    between two of them is seen by the second. A write still takes its turn with ``BEGIN
    IMMEDIATE``, and a read-only engine's read works the same way."""
    names: list[str] = []
    other = sa.create_engine(store.db.engine.url)

    def read(conn: sa.Connection) -> tuple[int, int]:
        first = conn.scalar(sa.select(sa.func.count()).select_from(task_table))
        with other.begin() as writer:  # another connection commits in between
            writer.execute(task_table.delete())
        return first, conn.scalar(sa.select(sa.func.count()).select_from(task_table))

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        names.append(statement.split()[0])

    store.tasks.upsert([TaskSpec(name="a", func="tests.jobs:noop", cron="* * * * * *")])
    sa.event.listen(store.db.engine, "before_cursor_execute", record)
    try:
        before = store.db.counters.snapshot()
        assert store.db.read("counts", read) == (1, 0)
        assert names == ["SELECT", "SELECT"]
        assert store.db.counters.snapshot()["commits"] == before["commits"]
        names.clear()
        store.db.write("count", lambda conn: conn.scalar(sa.select(sa.func.count())))
        assert names == ["BEGIN", "SELECT"]
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", record)
        other.dispose()
    reader = Store.open(str(store.db.engine.url), read_only=True)
    try:
        assert reader.tasks.all() == []
        with pytest.raises(sa.exc.DBAPIError, match="readonly"):
            reader.db.write("w", lambda conn: conn.execute(task_table.delete().where(False)))
    finally:
        reader.close()
