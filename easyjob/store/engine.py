"""Engines for a database URL, each with the care its dialect asks for, and the database clock.

What differs between databases (session or transaction settings, URL parameters easyjob reads,
timeouts, read-only sessions, SQLite's ``BEGIN IMMEDIATE`` and write gate) lives in
:mod:`easyjob.store.dialects`. Common to all:

- PostgreSQL and MySQL/MariaDB end a session that sits inside a transaction without a word
  for ``stuck_transaction_s``: a node paused (SIGSTOP, a VM freeze) in the middle of one of
  its short transactions would otherwise hold its row locks, and every other node touching
  those rows would wait with it. The paused node finds its connection gone and retries.
- A *read_only* engine (the dashboard's) cannot write: the server refuses any write.
- No pool pings a connection before handing it out (a round trip per transaction): a
  connection found broken fails its transaction, which is retried as a whole on a fresh one
  (:mod:`easyjob.store.retry`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from easyjob.clock import Clock, SystemClock
from easyjob.errors import DatabaseURLError
from easyjob.store.dialects import DIALECTS, Dialect, EngineOptions, dialect_for
from easyjob.store.schema import UTCDateTime

__all__ = [
    "READONLY",
    "create_engine",
    "database_time",
    "db_now",
    "dialect_of",
    "normalize_url",
    "safe_url",
]

#: Execution option for transactions that only read (SQLite then uses a deferred BEGIN).
READONLY = {"easyjob_readonly": True}


def normalize_url(url: str | URL) -> URL:
    """Parse *url* and pick easyjob's driver for a bare backend name (``postgresql://`` ...)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as err:
        raise DatabaseURLError(f"invalid database URL {str(url)!r}: {err}") from err
    dialect = dialect_for(parsed.drivername)
    if dialect is None or parsed.drivername not in dialect.schemes:
        examples = ", ".join(d.example_url for d in DIALECTS[:-1])
        raise DatabaseURLError(
            f"unsupported database URL {safe_url(parsed)!r}: use {examples} "
            f"or {DIALECTS[-1].example_url}"
        )
    why = dialect.check_url(parsed)
    if why is not None:
        raise DatabaseURLError(f"unsupported database URL {safe_url(parsed)!r}: {why}")
    return parsed.set(drivername=dialect.driver)


def dialect_of(url: str | URL) -> Dialect:
    """The dialect object of *url* (normalised first; raises DatabaseURLError)."""
    dialect = dialect_for(normalize_url(url).drivername)
    assert dialect is not None  # normalize_url only passes known drivers
    return dialect


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
    """An engine for *url* with the care its dialect describes.

    SQLite has no clock of its own: its database time is this process's *clock* (the
    system clock by default; tests pass a fake one, so that the node and its database
    share one time that only moves when the test moves it)."""
    parsed = normalize_url(url)
    dialect = dialect_of(parsed)
    options = EngineOptions(
        pool_size=pool_size,
        connect_timeout_s=connect_timeout_s,
        io_timeout_s=io_timeout_s,
        busy_timeout_s=busy_timeout_s,
        stuck_transaction_s=stuck_transaction_s,
        read_only=read_only,
        clock=clock or SystemClock(),
    )
    connect_args, kwargs = dialect.engine_arguments(options)
    target, from_url = dialect.url_arguments(parsed)
    try:
        engine = sa.create_engine(target, connect_args={**connect_args, **from_url}, **kwargs)
    except ImportError as err:
        why = dialect.install or str(err)
        raise DatabaseURLError(f"cannot use database URL {safe_url(parsed)!r}: {why}") from err
    except (ArgumentError, NoSuchModuleError) as err:
        raise DatabaseURLError(f"cannot use database URL {safe_url(parsed)!r}: {err}") from err
    dialect.prepare(engine, options)
    return engine


class db_now(FunctionElement[Any]):
    """The database's current UTC time, microsecond (SQLite: millisecond) precision."""

    type = UTCDateTime()
    inherit_cache = True


@compiles(db_now)
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return compiled_by(compiler).now_sql()


#: ``SELECT`` the database's time: one statement object (its cache key made once).
_SELECT_NOW = sa.select(db_now())


def database_time(conn: sa.Connection) -> datetime:
    """The database's current UTC time, read on *conn* (in its transaction)."""
    now: datetime = conn.scalar(_SELECT_NOW)
    return now


def compiled_by(compiler: SQLCompiler) -> Dialect:
    """The dialect object of the database a statement is being compiled for."""
    dialect = dialect_for(compiler.dialect.name)
    if dialect is None:
        raise DatabaseURLError(f"easyjob has no dialect for {compiler.dialect.name!r}")
    return dialect
