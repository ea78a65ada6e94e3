"""One dialect object per database: the URL picks it, and the store's SQL goes through it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

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
