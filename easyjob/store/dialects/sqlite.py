"""SQLite: one file, one writer at a time, the process's clock as database time."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping
from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL

from easyjob.clock import Clock
from easyjob.store.dialects.base import AUTOCOMMITS, Dialect, EngineOptions
from easyjob.store.gate import WriteGate

__all__ = ["SQLiteDialect"]

_TRANSIENT = {
    "database is locked": "lock",
    "database is busy": "lock",
    "disk is full": "resources",
    "disk i/o error": "resources",
}
#: The text layout SQLAlchemy stores times in on SQLite, so stored values and database time
#: compare as times do.
_TIME = "%Y-%m-%d %H:%M:%S.%f"
#: A commit that leaves the WAL this many pages long folds it back into the database file
#: (SQLite's default, 1,000 pages, is 4 MiB: more than a small volume holds, and until then
#: every row lives in the WAL alone; see docs/reliability.md, "SQLite and a full disk").
WAL_AUTOCHECKPOINT_PAGES = 256
#: Bytes a WAL file keeps once it starts over (a WAL that grew gives the rest back).
WAL_SIZE_LIMIT = 1 << 20
_DISK_FULL = "disk is full"


class SQLiteDialect(Dialect):
    """SQLite (the standard library's sqlite3).

    - WAL journal, a busy timeout, and ``BEGIN IMMEDIATE`` for every transaction that may
      write: a deferred ``BEGIN`` followed by read-then-write fails with "database is
      locked" under concurrency, busy timeout or not. Writers of one file first take turns
      through :class:`~easyjob.store.gate.WriteGate`.
    - No clock of its own: database time is the process's clock (``easyjob_now()``, a
      function registered on each connection; tests pass a fake clock). It is registered
      deterministic, so a statement reads it once per place it names it (SQLite factors
      a constant expression out of its row loop), not once per row: a batch write of 30
      runs called it 150 times, each a clock read and a ``strftime`` in Python. As with
      SQLite's own ``datetime('now')``, every row of a batch write gets the same time.
    - A read-only engine's connections are ``query_only``.
    - No ``SKIP LOCKED``: SQLite locks the whole database.
    - No arrays: batch lists are JSON arrays read with ``json_each`` (:attr:`json_lists`),
      a value per row (a version too) a ``json_extract`` from one bound JSON object
      (:meth:`lookup_sql`): one text per batch statement.
    - A statement cache of 512 per connection (the module's default is 128).
    - A full disk passes once space returns, even on a small volume: the WAL is folded back
      into the database file every :data:`WAL_AUTOCHECKPOINT_PAGES` pages and keeps at most
      :data:`WAL_SIZE_LIMIT` bytes, and after a "database or disk is full" error the next
      write transaction first checkpoints the WAL and truncates it to nothing
      (``wal_checkpoint(TRUNCATE)``), until that succeeds.
    """

    name = "sqlite"
    sqlalchemy_names = ("sqlite",)
    schemes = ("sqlite", "sqlite+pysqlite")
    driver = "sqlite"
    driver_module = "sqlite3"
    example_url = "sqlite:///FILE"
    local_clock = True
    one_writer = True
    json_lists = True

    def check_url(self, url: URL) -> str | None:
        if url.database in (None, "", ":memory:"):
            return (
                "an in-memory SQLite database cannot be shared by nodes; give a file, "
                "e.g. sqlite:///easyjob.db"
            )
        return None

    def missing_database(self, url: URL) -> bool:
        if url.query.get("uri") in ("true", "1"):
            return False
        return not os.path.exists(str(url.database))

    def engine_arguments(self, options: EngineOptions) -> tuple[dict[str, Any], dict[str, Any]]:
        connect_args = {
            "timeout": options.busy_timeout_s,
            "check_same_thread": False,
            # room for every statement the store sends: each batch statement has one text
            # (lists bound as JSON, see easyjob.store.expressions; padded IN lists gave up
            # to 9 each, 95 for the batch transitions alone), the default keeps 128
            "cached_statements": 512,
        }
        kwargs = {
            "pool_size": options.pool_size,
            "max_overflow": options.pool_size,
            "poolclass": sa.pool.QueuePool,
        }
        return connect_args, kwargs

    def prepare(self, engine: sa.Engine, options: EngineOptions) -> None:
        clock: Clock = options.clock
        read_only = options.read_only
        disk_full = threading.Event()

        def now() -> str:
            return clock.now().astimezone(UTC).strftime(_TIME)

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
            dbapi_conn.create_function("easyjob_now", 0, now, deterministic=True)
            cursor = dbapi_conn.cursor()
            if not read_only:  # a read-only reader leaves the file's journal mode alone
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
                cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            cursor.execute(f"PRAGMA busy_timeout={int(options.busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA synchronous=NORMAL")
            if read_only:
                cursor.execute("PRAGMA query_only=ON")
            cursor.close()

        @sa.event.listens_for(engine, "handle_error")
        def _error(context: sa.engine.ExceptionContext) -> None:
            if _DISK_FULL in str(context.original_exception).lower():
                disk_full.set()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            # transactions that only read (engine.READONLY) begin deferred
            readonly = read_only or conn.get_execution_options().get("easyjob_readonly", False)
            if not readonly and disk_full.is_set():
                _checkpoint(conn, disk_full)
            conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    def column_types(self) -> Mapping[str, sa.types.TypeEngine[Any]]:
        # only an INTEGER PRIMARY KEY autoincrements on SQLite
        return {"id": sa.Integer()}

    def write_gate(self, url: URL, timeout_s: float) -> WriteGate | None:
        return WriteGate.for_url(url, timeout_s)

    def offline(self) -> sa.engine.Dialect:
        from sqlalchemy.dialects import sqlite  # only the URL's database's

        return sqlite.dialect()

    def is_transient(self, orig: BaseException) -> bool:
        return self.error_kind(orig) is not None

    def error_kind(self, orig: BaseException) -> str | None:
        text = str(orig).lower()
        return next((kind for marker, kind in _TRANSIENT.items() if marker in text), None)

    def identity_sql(self, dialect: sa.engine.Dialect) -> str:
        return "(SELECT file FROM pragma_database_list WHERE name = 'main')"

    def identity(self, value: Any) -> str:
        return os.path.realpath(value) if value else ""  # the file, whatever path led to it

    def unusable(self, dbapi_connection: Any) -> str | None:
        # sqlite3 begins a transaction before a write unless its isolation_level is None
        # (SQLAlchemy's AUTOCOMMIT; easyjob's engines then send BEGIN themselves)
        driver = dbapi_connection
        if getattr(driver, "autocommit", None) is True:  # Python 3.12's own mode
            return AUTOCOMMITS
        if driver.isolation_level is None and not driver.in_transaction:
            return AUTOCOMMITS
        return None

    def now_sql(self) -> str:
        return "easyjob_now()"  # see prepare()

    def epoch_sql(self, value: str) -> str:
        return f"((julianday({value}) - 2440587.5) * 86400.0)"

    def floor_sql(self, value: str) -> str:
        # no FLOOR without SQLite's math extension; a CAST truncates, which is the floor
        # for the positive values easyjob floors
        return f"CAST({value} AS INTEGER)"

    def insert_ignore(self, table: sa.Table, conflict: list[str] | None = None) -> sa.Insert:
        from sqlalchemy.dialects import sqlite  # only the URL's database's

        return sqlite.insert(table).on_conflict_do_nothing(index_elements=conflict)

    def insert_or_fill(self, table: sa.Table, conflict: list[str], fill: list[str]) -> sa.Insert:
        from sqlalchemy.dialects import sqlite  # only the URL's database's

        return self._on_conflict_fill(sqlite.insert(table), table, conflict, fill)

    def lock_rows(self, conn: sa.Connection, table: sa.Table, ids: Collection[int]) -> None:
        """Nothing: writers already take turns (one at a time, through the write gate and
        ``BEGIN IMMEDIATE``)."""

    def lookup_sql(
        self, column: str, bound: Callable[[str], str], type_: sa.types.TypeEngine[Any]
    ) -> str:
        # json_extract parses the object once per statement (SQLite keeps the parse of a
        # bound argument), then finds the key: 0.2 ms for 256 rows, where a correlated
        # "(SELECT column2 FROM (VALUES ...) WHERE column1 = id)" scanned the list per row
        # (1.8 ms); and its text does not depend on the batch at all
        return f"json_extract({bound('mapping')}, '$.\"' || {column} || '\"')"


def _checkpoint(conn: sa.Connection, disk_full: threading.Event) -> None:
    """After a full disk: fold the WAL into the database file and truncate it, so the space
    it held is free again. While the disk is still full this fails like the write did (and
    the write is retried); once it succeeds, writes go on as before."""
    busy = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").scalar()
    if busy == 0:
        disk_full.clear()
