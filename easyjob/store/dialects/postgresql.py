"""PostgreSQL through psycopg 3."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL

from easyjob.store.dialects.base import (
    AUTOCOMMITS,
    NO_COMMIT,
    Dialect,
    EngineOptions,
    array_param,
    rows_to_lock,
)

__all__ = ["PREPARE_THRESHOLD", "PostgreSQLDialect", "begin_sql", "prepare_threshold"]

_KINDS = {"40001": "deadlock", "40P01": "deadlock", "55P03": "lock", "25006": "read_only"}
#: SQLSTATE classes: connection exception, insufficient resources, operator intervention.
_CLASS_KINDS = {"08": "connection", "53": "resources", "57": "connection"}
#: Of class 57 only 57P (operator intervention: shutdown, terminated backend) is transient.
_TRANSIENT_CLASSES = ("08", "53", "57P")
#: The advisory lock schema creators take turns through.
_SCHEMA_LOCK_KEY = 0x65617379_6A6F62  # "easyjob"
#: The URL query parameter (psycopg's connection argument) for server-side prepares.
PREPARE_THRESHOLD = "prepare_threshold"
_NO_PREPARE = ("none", "null", "off", "")
#: libpq's PQTRANS_INERROR: a transaction in which a statement failed (psycopg's
#: ``conn.info.transaction_status``)
_IN_ERROR = 3
#: A host name or IPv4 address with its port (an IPv6 address has more than one colon).
_HOST_PORT = re.compile(r"[^:]+:\d+")


def prepare_threshold(url: URL) -> int | None:
    """psycopg's ``prepare_threshold`` for *url*: its ``?prepare_threshold=`` (a whole
    number N: prepare a statement on its Nth run, 0 at once; ``none`` or ``off``: never),
    None (never) when absent. Raises ValueError naming a bad value."""
    raw = url.query.get(PREPARE_THRESHOLD)
    if raw is None:
        return None
    values = {raw} if isinstance(raw, str) else set(raw)
    if len(values) != 1:
        raise ValueError(f"{PREPARE_THRESHOLD} is given more than once: {sorted(values)!r}")
    (text,) = values
    if text.strip().lower() in _NO_PREPARE:
        return None
    if not text.strip().isdigit():
        raise ValueError(
            f"invalid {PREPARE_THRESHOLD} {text!r}: use a whole number (0 or more) or none"
        )
    return int(text)


def begin_sql(options: EngineOptions) -> str:
    """The ``BEGIN`` of every transaction, with the transaction's settings: one simple-query
    message, so settings cost no round trip and outlive no transaction."""
    stuck_ms = max(1, round(options.stuck_transaction_s * 1000))
    begin = "BEGIN READ ONLY" if options.read_only else "BEGIN"
    return f"{begin}; SET LOCAL idle_in_transaction_session_timeout = {stuck_ms}"


class PostgreSQLDialect(Dialect):
    """PostgreSQL (psycopg 3).

    - Nothing is kept in the session, so PgBouncer's transaction pooling works at its
      defaults (docs/deployment.md, "Connection poolers"): no startup ``options`` (PgBouncer
      refuses them), every setting is the transaction's own, sent with its ``BEGIN`` in one
      message (no extra round trip): a transaction that sits idle for
      ``stuck_transaction_s`` is ended by the server (``SET LOCAL
      idle_in_transaction_session_timeout``: a node paused by SIGSTOP or a VM freeze in one
      of its short transactions would otherwise hold its row locks), and a read-only
      engine's transactions are ``BEGIN READ ONLY``.
    - A read (``engine.READONLY``: the store's read-only transactions) opens no transaction
      on the server: each of its statements runs in its own, as the driver's autocommit
      sends it, without the ``BEGIN`` and ``COMMIT`` round trips. Under READ COMMITTED a
      transaction's statements each see the data as of their own start anyway, a read takes
      no lock, and nothing is left idle in a transaction. (A read-only engine's reads keep
      their ``BEGIN READ ONLY``: there the server's refusal of writes is the point.)
    - Server-side prepared statements are off unless the URL asks for them
      (``?prepare_threshold=N``; psycopg's own default is 5): behind a transaction pooler a
      statement prepared on one server connection is unknown, or another statement, on the
      next. Measured, they were not worth having (docs/performance.md).
    - ``UPDATE ... RETURNING`` names batch winners; ``FOR UPDATE SKIP LOCKED`` is offered.
    - Batch lists bind as arrays (one SQL text per statement whatever the batch).
    - Schema creators take turns through a transaction-scoped advisory lock, so the DDL
      commits before the next creator looks.
    """

    name = "postgresql"
    sqlalchemy_names = ("postgresql",)
    schemes = ("postgresql", "postgres", "postgresql+psycopg")
    driver = "postgresql+psycopg"
    driver_module = "psycopg"
    install = "the PostgreSQL driver psycopg is not installed: pip install 'easyjob[postgres]'"
    example_url = "postgresql://USER:PASSWORD@HOST/DB"
    skip_locked = True
    array_lists = True

    def check_url(self, url: URL) -> str | None:
        try:
            prepare_threshold(url)
        except ValueError as err:
            return str(err)
        hosts = url.query.get("host", ())
        for host in (hosts,) if isinstance(hosts, str) else hosts:
            if "," in host and any(_HOST_PORT.fullmatch(h.strip()) for h in host.split(",")):
                return (
                    f"host={host!r} lists hosts with their ports in one value, which psycopg "
                    "reads as one host name: give each its own parameter "
                    "(?host=H1:P1&host=H2:P2) or the hosts and the ports apart "
                    "(?host=H1,H2&port=P1,P2)"
                )
        return None

    def url_arguments(self, url: URL) -> tuple[URL, dict[str, Any]]:
        threshold = prepare_threshold(url)
        return url.difference_update_query([PREPARE_THRESHOLD]), {PREPARE_THRESHOLD: threshold}

    def engine_arguments(self, options: EngineOptions) -> tuple[dict[str, Any], dict[str, Any]]:
        # autocommit at the driver: the "begin" hook below sends BEGIN itself, with the
        # transaction's settings in the same message (see prepare)
        connect_args = {
            "connect_timeout": max(1, round(options.connect_timeout_s)),
            "autocommit": True,
        }
        return connect_args, {"pool_size": options.pool_size, "max_overflow": options.pool_size}

    def prepare(self, engine: sa.Engine, options: EngineOptions) -> None:
        begin = begin_sql(options)
        read_only = options.read_only

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            if not read_only and conn.get_execution_options().get("easyjob_readonly", False):
                conn.info[NO_COMMIT] = True  # a read: each statement its own transaction
                return
            conn.exec_driver_sql(begin)

        @sa.event.listens_for(engine, "do_execute")
        def _execute(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
            if statement != begin:
                return False
            # two statements: the simple-query protocol, never a prepare (which
            # ?prepare_threshold=0 would ask for, and which takes one statement only)
            cursor.execute(statement, prepare=False)
            return True

    def offline(self) -> sa.engine.Dialect:
        from sqlalchemy.dialects import postgresql  # only the URL's database's

        return postgresql.dialect()  # type: ignore[no-untyped-call]

    def is_transient(self, orig: BaseException) -> bool:
        state: str = getattr(orig, "sqlstate", None) or ""
        if not state:  # no server reply at all: the connection broke
            return type(orig).__name__ in ("OperationalError", "InterfaceError")
        return state in _KINDS or state.startswith(_TRANSIENT_CLASSES)

    def error_kind(self, orig: BaseException) -> str | None:
        state: str = getattr(orig, "sqlstate", None) or ""
        if not state:
            return "connection" if self.is_transient(orig) else None
        return _KINDS.get(state) or _CLASS_KINDS.get(state[:2])

    def identity_sql(self, dialect: sa.engine.Dialect) -> str:
        # the cluster's system identifier: kept by a standby (made from its primary) and by
        # a promotion, the same through PgBouncer; the database's name, not an alias
        return (
            "(SELECT system_identifier::text || '/' || current_database() FROM pg_control_system())"
        )

    def unusable(self, dbapi_connection: Any) -> str | None:
        if dbapi_connection.autocommit:
            return AUTOCOMMITS
        if dbapi_connection.info.transaction_status == _IN_ERROR:
            return "its transaction failed (a statement in it raised an error): roll it back"
        return None

    def now_sql(self) -> str:
        return "timezone('UTC', clock_timestamp())"

    def epoch_sql(self, value: str) -> str:
        return f"EXTRACT(EPOCH FROM {value})"

    def winners(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        expected: Mapping[int, int],
        params: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """``UPDATE ... RETURNING id`` whose rows are locked first in id order, in the same
        statement (``WITH locked AS MATERIALIZED (SELECT id ... ORDER BY id FOR UPDATE)
        UPDATE ... FROM locked``), as every other locker of these rows does
        (:meth:`lock_rows`; MariaDB's :meth:`winners`). An UPDATE alone
        locks its rows in the order it finds them: a planner's advance of task rows and a
        serial start's lock of them (``busy_ids``) deadlocked 7 times in 30 s of 4
        saturated nodes, each a second's wait for the detector (``deadlock_timeout``) that
        held up every node's starts behind it."""
        return [row[0] for row in conn.execute(_locked_first(stmt, table), params)]

    def winning_rows(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        params: Mapping[str, Any],
        joined: sa.ColumnElement[bool],
        columns: tuple[sa.ColumnElement[Any], ...],
    ) -> Sequence[sa.Row[Any]]:
        """:meth:`winners`'s statement (its rows locked in id order first) returning
        *columns*, the joined tables' in its ``FROM`` (``UPDATE ... FROM locked, task WHERE
        ... RETURNING ...``): a claim's runs with their task's columns in one round trip."""
        return conn.execute(_locked_first_returning(stmt, table, joined, columns), params).all()

    def insert_ignore(self, table: sa.Table, conflict: list[str] | None = None) -> sa.Insert:
        from sqlalchemy.dialects import postgresql  # only the URL's database's

        return postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict)

    def insert_or_fill(self, table: sa.Table, conflict: list[str], fill: list[str]) -> sa.Insert:
        from sqlalchemy.dialects import postgresql  # only the URL's database's

        return self._on_conflict_fill(postgresql.insert(table), table, conflict, fill)

    def insert_rows(
        self, conn: sa.Connection, insert: sa.Insert, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """One ``INSERT ... SELECT unnest(array), ...`` for all *rows*: a column's values
        go as one array parameter, so the statement is one text whatever the number of rows
        (:mod:`easyjob.store.expressions`), planned once per call. psycopg's executemany
        sends one statement per row instead, and with prepared statements off (PgBouncer's
        transaction pooling, docs/performance.md) the server plans each row: 30,000 fire
        rows took 1.9 s of planning in two minutes of a 20,000-task minute burst (issue
        25). SQLAlchemy's own batching ("insertmanyvalues") renders a text per number of
        rows, and skips an INSERT with ON CONFLICT and no RETURNING."""
        if not rows:
            return
        keys = tuple(rows[0])
        stmt = _insert_arrays(insert, keys)
        table = insert.table
        assert isinstance(table, sa.Table)
        params = {
            array_param(key): _array_of(table.c[key], [row[key] for row in rows]) for key in keys
        }
        conn.execute(stmt, params)

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        yield


@lru_cache(maxsize=128)
def _insert_arrays(insert: sa.Insert, keys: tuple[str, ...]) -> sa.Insert:
    """*insert* from the arrays of the columns *keys* (see
    :meth:`PostgreSQLDialect.insert_rows`), made once per statement object and set of
    columns, executed with each column's values as :func:`_array_of`."""
    table = insert.table
    assert isinstance(table, sa.Table)
    columns = [table.c[key] for key in keys]
    arrays = [_unnest(array_param(key), column) for key, column in zip(keys, columns, strict=True)]
    return insert.from_select(columns, sa.select(*arrays))


def _unnest(name: str, column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """``unnest`` of the array parameter *name* of *column*'s values (:func:`_array_of`). A
    JSON column's values go as JSON text, cast back: a JSON array among them (a task's
    ``accepts``) would be taken for another dimension of the array, and rows of different
    lengths refused ("malformed array literal")."""
    if not isinstance(column.type, sa.JSON):
        return sa.func.unnest(sa.bindparam(name, type_=sa.ARRAY(column.type)))
    return sa.cast(sa.func.unnest(sa.bindparam(name, type_=sa.ARRAY(sa.Text))), column.type)


def _array_of(column: sa.Column[Any], values: list[Any]) -> list[Any]:
    """*values* as :func:`_unnest` binds them for *column*: as they are, or, for a JSON
    column, as JSON texts (None is SQL NULL where the column says so, else JSON ``null``,
    as SQLAlchemy writes it)."""
    if not isinstance(column.type, sa.JSON):
        return values
    null = None if column.type.none_as_null else "null"
    return [null if value is None else json.dumps(value) for value in values]


@lru_cache(maxsize=128)
def _locked_first(stmt: sa.Update, table: sa.Table) -> sa.Update:
    """*stmt* locking its rows in id order first and returning the ids it changed (see
    :meth:`PostgreSQLDialect.winners`), made once per statement object (see
    :func:`~easyjob.store.dialects.base.returning_id`)."""
    return _rows_locked_first(stmt, table).returning(table.c.id)


@lru_cache(maxsize=32)
def _locked_first_returning(
    stmt: sa.Update,
    table: sa.Table,
    joined: sa.ColumnElement[bool],
    columns: tuple[sa.ColumnElement[Any], ...],
) -> sa.Update:
    """:func:`_locked_first` joined by *joined* and returning *columns* (see
    :meth:`PostgreSQLDialect.winning_rows`), made once per statement object."""
    return _rows_locked_first(stmt, table).where(joined).returning(*columns)


def _rows_locked_first(stmt: sa.Update, table: sa.Table) -> sa.Update:
    """*stmt* joined to its rows, locked in id order by a CTE first."""
    # MATERIALIZED: the lock is taken once, before the UPDATE joins it (as a subquery the
    # planner re-ran it for each row the UPDATE found)
    locked = rows_to_lock(stmt, table).cte("locked").prefix_with("MATERIALIZED")
    return stmt.where(table.c.id == locked.c.id)
