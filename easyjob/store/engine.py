"""Engines with the care each backend needs, and the database clock.

- SQLite: WAL journal, a busy timeout, and ``BEGIN IMMEDIATE`` for every transaction that may
  write (a deferred ``BEGIN`` followed by read-then-write fails with "database is locked" under
  concurrency, busy timeout or not).
- MySQL/MariaDB: READ COMMITTED (under REPEATABLE READ, "select a missing row for update, then
  insert" deadlocks), utf8mb4, and socket timeouts so a stalled server is an error, not a hang.
- PostgreSQL and MySQL/MariaDB end a session that sits inside a transaction without a word
  for ``stuck_transaction_s`` (``idle_in_transaction_session_timeout``,
  ``idle_transaction_timeout``): a node paused (SIGSTOP, a VM freeze) in the middle of one of
  its short transactions would otherwise hold its row locks, and every other node touching
  those rows would wait with it. The paused node finds its connection gone and retries.
- A *read_only* engine (the dashboard's) cannot write: SQLite connections are
  ``query_only``, PostgreSQL sessions ``default_transaction_read_only``, MySQL/MariaDB
  sessions ``TRANSACTION READ ONLY``; the server refuses any write.
- No pool pings a connection before handing it out (a round trip per transaction): a
  connection found broken fails its transaction, which is retried as a whole on a fresh one
  (:mod:`easyjob.store.retry`).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from easyjob.clock import Clock, SystemClock
from easyjob.errors import DatabaseURLError
from easyjob.store.schema import UTCDateTime

__all__ = ["READONLY", "create_engine", "db_now", "normalize_url", "safe_url"]

_DRIVERS = {
    "sqlite": "sqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}
_SUPPORTED = ("sqlite", "sqlite+pysqlite", "postgresql+psycopg", "mysql+pymysql")
#: What to install when a backend's driver cannot be imported.
_INSTALL = {
    "postgresql": "the PostgreSQL driver psycopg is not installed: pip install 'easyjob[postgres]'",
    "mysql": "the MySQL/MariaDB driver PyMySQL is not installed: pip install PyMySQL",
}

#: Execution option for transactions that only read (SQLite then uses a deferred BEGIN).
READONLY = {"easyjob_readonly": True}


def normalize_url(url: str | URL) -> URL:
    """Parse *url* and pick easyjob's driver for a bare backend name (``postgresql://`` ...)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as err:
        raise DatabaseURLError(f"invalid database URL {str(url)!r}: {err}") from err
    name = _DRIVERS.get(parsed.drivername, parsed.drivername)
    if name == "mariadb+pymysql":
        name = "mysql+pymysql"
    if name not in _SUPPORTED:
        raise DatabaseURLError(
            f"unsupported database URL {safe_url(parsed)!r}: use sqlite:///FILE, "
            "postgresql://USER:PASSWORD@HOST/DB or mysql://USER:PASSWORD@HOST/DB"
        )
    if name.startswith("sqlite") and parsed.database in (None, "", ":memory:"):
        raise DatabaseURLError(
            f"unsupported database URL {safe_url(parsed)!r}: an in-memory SQLite database "
            "cannot be shared by nodes; give a file, e.g. sqlite:///easyjob.db"
        )
    return parsed.set(drivername=name)


def safe_url(url: str | URL) -> str:
    """*url* with its password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    connect_timeout_s: float = 10.0,
    io_timeout_s: float = 30.0,
    busy_timeout_s: float = 30.0,
    stuck_transaction_s: float = 10.0,
    clock: Clock | None = None,
    read_only: bool = False,
) -> sa.Engine:
    """An engine for *url* with the backend care described in this module's docstring.

    SQLite has no clock of its own: its database time is this process's *clock* (the
    system clock by default; tests pass a fake one, so that the node and its database
    share one time that only moves when the test moves it)."""
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = {}
    stuck_whole_s = max(1, round(stuck_transaction_s))  # MariaDB takes whole seconds
    connect_args: dict[str, Any] = {}
    if backend == "sqlite":
        connect_args["timeout"] = busy_timeout_s
        connect_args["check_same_thread"] = False
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size
        kwargs["poolclass"] = sa.pool.QueuePool
    elif backend == "postgresql":
        connect_args["connect_timeout"] = max(1, round(connect_timeout_s))
        stuck_ms = max(1, round(stuck_transaction_s * 1000))
        connect_args["options"] = f"-c idle_in_transaction_session_timeout={stuck_ms}"
        if read_only:
            connect_args["options"] += " -c default_transaction_read_only=on"
        kwargs.update(pool_size=pool_size, max_overflow=pool_size)
    else:
        connect_args.update(
            connect_timeout=connect_timeout_s,
            read_timeout=io_timeout_s,
            write_timeout=io_timeout_s,
            charset="utf8mb4",
            # exists_to_in off: MariaDB would turn a correlated NOT EXISTS probe (the
            # planner's "task behind" check, TaskStore.due) into a scan of the run table
            init_command=f"SET SESSION idle_transaction_timeout={stuck_whole_s}, "
            "optimizer_switch='exists_to_in=off'",
        )
        if read_only:  # one statement only: init_command cannot hold two
            connect_args["init_command"] = "SET SESSION TRANSACTION READ ONLY"
        kwargs.update(pool_size=pool_size, max_overflow=pool_size, isolation_level="READ COMMITTED")
    try:
        engine = sa.create_engine(parsed, connect_args=connect_args, **kwargs)
    except ImportError as err:
        why = _INSTALL.get(backend, str(err))
        raise DatabaseURLError(f"cannot use database URL {safe_url(parsed)!r}: {why}") from err
    except (ArgumentError, NoSuchModuleError) as err:
        raise DatabaseURLError(f"cannot use database URL {safe_url(parsed)!r}: {err}") from err
    if backend == "sqlite":
        _sqlite_care(engine, busy_timeout_s, clock or SystemClock(), read_only)
    return engine


def _sqlite_care(engine: sa.Engine, busy_timeout_s: float, clock: Clock, read_only: bool) -> None:
    def now() -> str:
        return clock.now().astimezone(UTC).strftime(_SQLITE_TIME)

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
        dbapi_conn.create_function("easyjob_now", 0, now)
        cursor = dbapi_conn.cursor()
        if not read_only:  # a read-only reader leaves the file's journal mode alone
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if read_only:
            cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        readonly = read_only or conn.get_execution_options().get("easyjob_readonly", False)
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


#: The text layout SQLAlchemy stores times in on SQLite, so stored values and database time
#: compare as times do.
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


class db_now(FunctionElement[Any]):
    """The database's current UTC time, microsecond (SQLite: millisecond) precision."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(db_now, "sqlite")
def _now_sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "easyjob_now()"  # see _sqlite_care


@compiles(db_now, "postgresql")
def _now_postgresql(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "timezone('UTC', clock_timestamp())"


@compiles(db_now, "mysql")
@compiles(db_now, "mariadb")
def _now_mysql(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "UTC_TIMESTAMP(6)"
