"""The :class:`Dialect` base: what a database must say for easyjob to run on it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import URL

from easyjob.clock import Clock, SystemClock
from easyjob.store.expressions import PRIMARY_KEY_HINT, in_named, named_list
from easyjob.store.gate import WriteGate

__all__ = [
    "AUTOCOMMITS",
    "NO_COMMIT",
    "Dialect",
    "EngineOptions",
    "array_param",
    "returning_id",
    "rows_to_lock",
]

#: Why a connection lent to easyjob cannot hold its writes: see :meth:`Dialect.unusable`.
AUTOCOMMITS = "it commits each statement by itself (autocommit)"
#: ``Connection.info`` key a dialect's ``begin`` hook sets when it opens no transaction on
#: the server (a read that runs each statement in its own, see the PostgreSQL dialect):
#: its commit sends nothing, and the statement counters count none.
NO_COMMIT = "easyjob_no_commit"


@dataclass(frozen=True)
class EngineOptions:
    """The engine settings every dialect reads (see :func:`easyjob.store.engine.create_engine`)."""

    pool_size: int = 5
    connect_timeout_s: float = 10.0
    io_timeout_s: float = 30.0
    busy_timeout_s: float = 30.0
    stuck_transaction_s: float = 10.0
    read_only: bool = False
    clock: Clock = field(default_factory=SystemClock)


class Dialect:
    """Everything about one database product that easyjob's SQL does not say by itself.

    The store's statements are written once, in SQLAlchemy Core; each difference between
    databases is a method or attribute here, and nowhere else in the package. Adding a
    database means writing one subclass, listing it in :data:`easyjob.store.dialects.DIALECTS`
    and passing the store test suite (``tests/store``) against it.
    """

    #: easyjob's name for the database: ``sqlite``, ``postgresql``, ``mysql``.
    name: ClassVar[str]
    #: The names SQLAlchemy gives its dialect(s) for this database (``engine.dialect.name``).
    sqlalchemy_names: ClassVar[tuple[str, ...]]
    #: URL drivernames accepted for it (``postgres://`` ...), all mapped to :attr:`driver`.
    schemes: ClassVar[tuple[str, ...]]
    #: The SQLAlchemy drivername easyjob connects with, e.g. ``postgresql+psycopg``.
    driver: ClassVar[str]
    #: The DB-API module its errors come from (``type(err).__module__`` starts with it).
    driver_module: ClassVar[str]
    #: What to install when the driver cannot be imported; None: it ships with Python.
    install: ClassVar[str | None] = None
    #: An example URL, for the message that lists the supported databases.
    example_url: ClassVar[str]
    #: Whether the ``skip_locked`` claim mode is offered (see each dialect for why).
    skip_locked: ClassVar[bool] = False
    #: Whether database time is the calling process's own clock (no server clock).
    local_clock: ClassVar[bool] = False
    #: Whether one write transaction at a time runs on the whole database (SQLite): a long
    #: one holds up every other writer, the nodes' claims included.
    one_writer: ClassVar[bool] = False
    #: Whether batch lists bind as PostgreSQL arrays (``id = ANY(:ids)``: one SQL text per
    #: statement); else as JSON (:attr:`json_lists`) or as IN lists padded to a power of two
    #: (see :mod:`easyjob.store.expressions`).
    array_lists: ClassVar[bool] = False
    #: Whether batch lists bind as one JSON array each, read with ``json_each`` (SQLite): one
    #: SQL text per statement, and no IN list for SQLAlchemy to render at every execution
    #: (see :mod:`easyjob.store.expressions`). Ignored where :attr:`array_lists`.
    json_lists: ClassVar[bool] = False

    # -- URLs and connections ---------------------------------------------------------------

    def check_url(self, url: URL) -> str | None:
        """Why *url* (already on :attr:`driver`) cannot be used, or None when it can."""
        return None

    def missing_database(self, url: URL) -> bool:
        """True when *url* names a database known not to exist without connecting (a
        SQLite file that is not there: connecting would create an empty one)."""
        return False

    def url_arguments(self, url: URL) -> tuple[URL, dict[str, Any]]:
        """``(url, connect_args)``: query parameters of *url* (already checked by
        :meth:`check_url`) that easyjob reads itself, taken off the URL and turned into
        driver arguments of their proper types. Default: none."""
        return url, {}

    def engine_arguments(self, options: EngineOptions) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(connect_args, create_engine keyword arguments)``: pool, timeouts, session
        settings (isolation, read-only, idle-in-transaction limit)."""
        return {}, {"pool_size": options.pool_size, "max_overflow": options.pool_size}

    def prepare(self, engine: sa.Engine, options: EngineOptions) -> None:
        """Attach what the engine needs on each connection or transaction (event hooks)."""

    def write_gate(self, url: URL, timeout_s: float) -> WriteGate | None:
        """The gate write transactions take turns through first, or None (the database's
        own locks are enough)."""
        return None

    def server(self, engine: sa.Engine) -> str:
        """The product and version, e.g. ``postgresql 15.4``, for messages."""
        version = ".".join(str(part) for part in engine.dialect.server_version_info or ())
        return f"{self.name} {version}".strip()

    def offline(self) -> sa.engine.Dialect:
        """SQLAlchemy's dialect, to compile statements without a connection (``easyjob sql``)."""
        raise NotImplementedError

    def id_step(self, conn: sa.Connection) -> int:
        """How far apart this database hands out the ids of new rows (see
        :mod:`easyjob.core.ids`): 1, a sequence's or rowid's step."""
        return 1

    def column_types(self) -> Mapping[str, sa.types.TypeEngine[Any]]:
        """Column types that replace the schema's generic ones here, by role: ``id``
        (``BIGINT``), ``datetime`` (``DATETIME``/``TIMESTAMP``), ``long_text`` (``TEXT``)."""
        return {}

    # -- errors -------------------------------------------------------------------------------

    def is_transient(self, orig: BaseException) -> bool:
        """True when the driver error *orig* may pass if the transaction is simply run
        again (restart, failover, lost connection, deadlock, lock wait, read-only server)."""
        return False

    def error_kind(self, orig: BaseException) -> str | None:
        """``connection``, ``deadlock``, ``lock``, ``read_only`` or ``resources`` for a
        transient driver error *orig*; None for any other."""
        return None

    # -- a caller's own connection (``trigger(connection=)``) --------------------------------

    def identity_sql(self, dialect: sa.engine.Dialect) -> str:
        """SQL for one text that names the database a connection reaches: the same through
        every connection to it (a pooler in front, another member of a cluster, a standby
        since promoted) and different for another database. A connection an application
        gives easyjob is checked against the store's with it. *dialect* is SQLAlchemy's
        dialect of the connection (MySQL and MariaDB differ)."""
        raise NotImplementedError

    def identity(self, value: Any) -> str:
        """The identity :meth:`identity_sql` read, made comparable (default: as text)."""
        return str(value)

    def unusable(self, dbapi_connection: Any) -> str | None:
        """Why the driver connection cannot hold easyjob's writes inside its caller's
        transaction, or None when it can: it commits each statement by itself, or its
        transaction already failed. Default: the DB-API's ``autocommit`` attribute."""
        if getattr(dbapi_connection, "autocommit", False):
            return AUTOCOMMITS
        return None

    # -- SQL ----------------------------------------------------------------------------------

    def now_sql(self) -> str:
        """SQL for the database's current UTC time (:class:`easyjob.store.engine.db_now`)."""
        raise NotImplementedError

    def epoch_sql(self, value: str) -> str:
        """SQL for the seconds since 1970-01-01 of the stored UTC time *value* (SQL text)."""
        raise NotImplementedError

    def floor_sql(self, value: str) -> str:
        """SQL for the largest integer not above the number *value* (SQL text)."""
        return f"FLOOR({value})"

    def insert_ignore(self, table: sa.Table, conflict: list[str] | None = None) -> sa.Insert:
        """An INSERT into *table* that skips a row whose unique key (the *conflict*
        columns; None: any unique key) already has one, and fails on any other error."""
        raise NotImplementedError

    def insert_or_fill(self, table: sa.Table, conflict: list[str], fill: list[str]) -> sa.Insert:
        """An INSERT into *table* that, when the unique key of the *conflict* columns already
        has a row, sets that row's *fill* columns to the values given instead, if its first
        *fill* column is NULL (else leaves it alone). Each key at most once per statement."""
        raise NotImplementedError

    @staticmethod
    def _on_conflict_fill(
        insert: Any, table: sa.Table, conflict: list[str], fill: list[str]
    ) -> sa.Insert:
        """*insert* (PostgreSQL's or SQLite's, which share ``on_conflict_do_update``) made an
        :meth:`insert_or_fill`."""
        made = insert.on_conflict_do_update(
            index_elements=conflict,
            set_={name: insert.excluded[name] for name in fill},
            where=table.c[fill[0]].is_(None),
        )
        assert isinstance(made, sa.Insert)
        return made

    def insert_rows(
        self, conn: sa.Connection, insert: sa.Insert, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Run *insert* (an INSERT into a table, no VALUES of its own) for every row of
        *rows* (each with the same keys), in *conn*'s transaction. Default: an executemany,
        which the drivers here send as one statement per row (SQLite and PyMySQL cheaply)."""
        conn.execute(insert, list(rows))

    def lookup_sql(
        self, column: str, bound: Callable[[str], str], type_: sa.types.TypeEngine[Any]
    ) -> str:
        """SQL for the value of *column* (SQL text) among bound pairs, NULL when its key is
        not there (:func:`easyjob.store.expressions.per_key` where lists are padded).
        ``bound(name)`` renders one of the parameters (only those rendered are sent):
        ``mapping``, one JSON object ``{"key": value}``; ``keys`` and ``values``, the padded
        lists as comma-separated parameters (a key repeated maps to the same value). The
        result must compare and store as a value of *type_* does."""
        raise NotImplementedError

    def winners(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        expected: Mapping[int, int],
        params: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Run the batch version-checked UPDATE *stmt* of rows ``id -> version read`` (with
        the execution *params* of a statement built once) and return the ids it changed,
        each exactly once: a row this caller moved in an earlier call is never reported
        again. Default: ``UPDATE ... RETURNING id``."""
        return [row[0] for row in conn.execute(returning_id(stmt, table), params)]

    def winning_rows(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        params: Mapping[str, Any],
        joined: sa.ColumnElement[bool],
        columns: tuple[sa.ColumnElement[Any], ...],
    ) -> Sequence[sa.Row[Any]] | None:
        """Run the batch UPDATE *stmt* as :meth:`winners` does and return the rows it
        changed as *columns*: of *table* as written, and of the tables the condition
        *joined* joins it to, in the UPDATE's own reply (one round trip where
        :meth:`winners` and a read of the rows make two). None where the database cannot
        (the UPDATE is not run: the caller takes :meth:`winners` and reads the rows).
        Default: None."""
        return None

    def lock_rows(self, conn: sa.Connection, table: sa.Table, ids: Collection[int]) -> None:
        """Lock the rows *ids* of *table* until *conn*'s transaction ends, in id order (two
        lockers never wait on each other in a cycle): writers that must each see what the
        one before committed take turns through it, and under READ COMMITTED every statement
        after the lock reads afresh. Default: ``SELECT ... FOR UPDATE`` by primary key."""
        conn.execute(_lock_by_id(table), named_list("ids", sorted(set(ids)))).all()

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        """Hold, inside *conn*'s transaction, the lock schema creators take turns through.
        Default: nothing beyond the transaction's own write lock."""
        yield


@cache
def _lock_by_id(table: sa.Table) -> sa.Select[Any]:
    """:meth:`Dialect.lock_rows` of *table*'s rows of the list ``ids``: built once."""
    lock = sa.select(table.c.id).where(in_named(table.c.id, "ids"))
    return lock.order_by(table.c.id).with_for_update().with_hint(table, PRIMARY_KEY_HINT, "mysql")


@lru_cache(maxsize=128)
def returning_id(stmt: sa.Update, table: sa.Table) -> sa.Update:
    """*stmt* ``RETURNING`` the id of each row it changed, made once per statement object:
    SQLAlchemy keeps a statement's cache key on the object, so a statement built once and
    executed with parameters (see :func:`~easyjob.store.expressions.at_named_versions`) and
    then derived afresh on each call would cost its whole construction and key again
    (0.2-1.0 ms a batch UPDATE). Kept by identity; a statement built per call is a miss."""
    return stmt.returning(table.c.id)


def rows_to_lock(stmt: sa.Update, table: sa.Table) -> sa.Select[int]:
    """The ids of the rows of *table* the UPDATE *stmt* would change (its WHERE), in id order,
    locked (``FOR UPDATE``): how a dialect's :meth:`Dialect.winners` locks a batch's rows in
    the order every other locker of them does (see :meth:`Dialect.lock_rows`)."""
    where = stmt.whereclause if stmt.whereclause is not None else sa.true()
    return sa.select(table.c.id).where(where).order_by(table.c.id).with_for_update()


def array_param(column: str) -> str:
    """The name of the parameter holding *column*'s values in an INSERT of arrays (one
    array per column: :meth:`PostgreSQLDialect.insert_rows
    <easyjob.store.dialects.postgresql.PostgreSQLDialect.insert_rows>`); the store's row
    counters read the inserted statuses from it."""
    return f"rows_{column}"
