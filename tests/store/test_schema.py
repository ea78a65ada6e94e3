"""The schema: created idempotently, version-checked, and identical to sql/*.sql."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.errors import SchemaMissingError, SchemaVersionError
from easyjob.store import Database, Store
from easyjob.store.ddl import DIALECTS, render
from easyjob.store.schema import meta_table, metadata

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_sql_files_match_the_definitions(dialect: str) -> None:
    assert (SQL_DIR / f"{dialect}.sql").read_text() == render(dialect), (
        f"sql/{dialect}.sql is out of date: run `make sql`"
    )


def test_the_sql_file_creates_the_same_schema(db_url: str) -> None:
    """Running sql/<dialect>.sql by hand gives tables the store accepts."""
    db = Database.open(db_url)
    dialect = "mysql" if db.dialect in ("mysql", "mariadb") else db.dialect
    statements = [s.strip() for s in render(dialect).split(";\n") if s.strip()]
    with db.engine.begin() as conn:
        for statement in statements:
            body = "\n".join(x for x in statement.splitlines() if not x.startswith("--"))
            if body.strip():
                conn.exec_driver_sql(body)
    db.check_schema()
    inspected = sa.inspect(db.engine)
    for table in metadata.sorted_tables:
        assert {c["name"] for c in inspected.get_columns(table.name)} == set(table.c.keys())
    db.dispose()


def test_create_is_idempotent_and_checked(db_url: str) -> None:
    db = Database.open(db_url)
    with pytest.raises(SchemaMissingError, match=r"tables are missing in .*run `easyjob init-db`"):
        db.check_schema()
    db.create_schema()
    db.create_schema()
    db.check_schema()
    db.write("bump", lambda conn: conn.execute(meta_table.update().values(value="999")))
    with pytest.raises(SchemaVersionError, match="are schema version '999', this easyjob needs"):
        Store.open(db_url)
    db.dispose()


def test_database_time_is_utc_with_subsecond_precision(store: Store) -> None:
    first = store.now()
    assert first.tzinfo is UTC
    assert abs(first - datetime.now(UTC)) < timedelta(seconds=5)
    # SQLite keeps milliseconds, the servers microseconds; a whole-second clock would give 0
    # every time (20 samples all on a whole millisecond: about 1e-60).
    assert any(store.now().microsecond != 0 for _ in range(20))
    assert store.now() >= first


def test_opening_a_store_on_sqlite_takes_no_turn_to_write(tmp_path: Path) -> None:
    """Every node start opens its store "creating the tables if absent": with the tables
    there, it reads, and does not wait for SQLite's write lock (4 nodes registering 6,000
    tasks each kept a starting node waiting seconds for it)."""
    url = f"sqlite:///{tmp_path / 'held.db'}"
    Store.open(url, create=True).close()
    holder = sqlite3.connect(tmp_path / "held.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writes meanwhile
    try:
        store = Store.open(url, create=True, busy_timeout_s=0.2)
        assert store.now().tzinfo is UTC
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
