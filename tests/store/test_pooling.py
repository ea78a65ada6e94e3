"""PostgreSQL keeps nothing in the session, so PgBouncer's transaction pooling works at its
defaults: every setting belongs to one transaction, and prepared statements are off unless
the URL asks for them (docs/deployment.md, "Connection poolers")."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from easyjob.errors import DatabaseURLError
from easyjob.store import RetryPolicy, Store
from easyjob.store.database import Database
from easyjob.store.dialects.postgresql import prepare_threshold
from easyjob.store.engine import normalize_url
from tests.rig.backends import only_backends
from tests.store.conftest import every_second

BASE = "postgresql://u:p@h/d"


@pytest.mark.parametrize(
    ("query", "threshold"),
    [("", None), ("none", None), ("None", None), ("off", None), ("0", 0), ("5", 5)],
)
def test_the_url_sets_prepare_threshold(query: str, threshold: int | None) -> None:
    url = normalize_url(f"{BASE}?prepare_threshold={query}" if query else BASE)
    assert prepare_threshold(url) == threshold


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5"])
def test_a_bad_prepare_threshold_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(DatabaseURLError) as err:
        normalize_url(f"{BASE}?prepare_threshold={bad}")
    assert str(err.value) == (
        f"unsupported database URL 'postgresql://u:***@h/d?prepare_threshold={bad}': "
        f"invalid prepare_threshold {bad!r}: use a whole number (0 or more) or none"
    )


def test_prepare_threshold_given_twice_differently_is_refused() -> None:
    with pytest.raises(DatabaseURLError, match="prepare_threshold is given more than once"):
        normalize_url(f"{BASE}?prepare_threshold=0&prepare_threshold=5")
    url = make_url(f"{BASE}?prepare_threshold=3&prepare_threshold=3")
    assert prepare_threshold(url) == 3


def _driver_threshold(db: Database) -> object:
    with db.engine.connect() as conn:
        return conn.connection.driver_connection.prepare_threshold  # type: ignore[union-attr]


@only_backends("postgresql")
def test_prepared_statements_are_off_unless_the_url_asks(db_url: str) -> None:
    off = Database.open(db_url)
    on = Database.open(f"{db_url}?prepare_threshold=0")
    try:
        assert _driver_threshold(off) is None
        assert _driver_threshold(on) == 0
        for db in (off, on):
            assert db.read("one", lambda c: c.execute(sa.select(sa.literal(1))).scalar()) == 1
    finally:
        off.dispose()
        on.dispose()


@only_backends("postgresql", "pgbouncer")
def test_settings_belong_to_each_transaction_not_to_the_session(db_url: str) -> None:
    db = Database.open(db_url, stuck_transaction_s=2.5)
    try:
        show = "SHOW idle_in_transaction_session_timeout"
        assert db.write("show", lambda c: c.exec_driver_sql(show).scalar()) == "2500ms"
        with db.engine.connect() as conn:  # the same session outside any transaction
            raw = conn.connection.driver_connection
            assert raw is not None
            row = raw.execute(show, prepare=False).fetchone()
            assert row is not None and row[0] == "0"  # the server's default, untouched
    finally:
        db.dispose()


def _two_clock_reads(conn: sa.Connection) -> tuple[object, object]:
    """now() (its transaction's start) in two statements, 10 ms apart."""
    first = conn.exec_driver_sql("SELECT now()").scalar()
    conn.exec_driver_sql("SELECT pg_sleep(0.01)")
    return first, conn.exec_driver_sql("SELECT now()").scalar()


@only_backends("postgresql", "pgbouncer")
def test_a_read_opens_no_transaction_on_the_server(db_url: str) -> None:
    """A read's statements each run in a transaction of their own (no BEGIN, no COMMIT
    round trip, and no commit counted); a write's share one, as do a read-only engine's."""
    db = Database.open(db_url)
    reader = Database.open(db_url, read_only=True)
    try:
        before = db.counters.snapshot()
        first, second = db.read("clock", _two_clock_reads)
        after = db.counters.snapshot()
        assert first != second
        assert (after["statements"] - before["statements"], after["commits"]) == (
            3,
            before["commits"],
        )
        first, second = db.write("clock", _two_clock_reads)
        assert first == second
        assert db.counters.snapshot()["commits"] == before["commits"] + 1
        first, second = reader.read("clock", _two_clock_reads)
        assert first == second
    finally:
        db.dispose()
        reader.dispose()


@only_backends("postgresql", "pgbouncer")
def test_a_read_only_engine_cannot_write_through_the_pooler(store: Store, db_url: str) -> None:
    reader = Store.open(db_url, read_only=True, retry=RetryPolicy(deadline_s=0))
    try:
        assert reader.tasks.all() == []
        with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
            reader.tasks.upsert([every_second("a")])
    finally:
        reader.close()
    assert store.tasks.upsert([every_second("a")])[0].name == "a"
