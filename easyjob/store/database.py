"""One shared database: transactions with retries, the database clock, and schema upkeep."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from easyjob.errors import (
    ConfigError,
    DatabaseUnavailableError,
    SchemaMissingError,
    SchemaVersionError,
)
from easyjob.store.engine import READONLY, create_engine, db_now, safe_url
from easyjob.store.gate import WriteGate
from easyjob.store.retry import RetryPolicy, error_kind, first_line
from easyjob.store.schema import SCHEMA_VERSION, meta_table, metadata

__all__ = ["PRIMARY_KEY_HINT", "Database", "at_versions", "per_id", "per_key", "status_is"]

T = TypeVar("T")
log = logging.getLogger("easyjob.store")

#: The lock schema creators take turns through (PostgreSQL advisory key; MySQL lock name).
_SCHEMA_LOCK_KEY = 0x65617379_6A6F62  # "easyjob"
_SCHEMA_LOCK_NAME = "easyjob_schema"
_SCHEMA_LOCK_WAIT_S = 60


#: MySQL/MariaDB statements that lock rows by a list of ids go through the primary key. On a
#: small table MariaDB read ``SELECT ... WHERE id IN (1, 2) FOR UPDATE`` from a covering
#: secondary index instead and locked every entry it passed (READ COMMITTED does not release
#: secondary-index locks): while that batch of two runs was uncommitted, a SKIP LOCKED read
#: of the table found no row at all. Seen with that plain SELECT; the store's own batch
#: statements chose the primary key there anyway, so the hint is a guard.
PRIMARY_KEY_HINT = "FORCE INDEX (PRIMARY)"


def at_versions(table: sa.Table, expected: Mapping[int, int]) -> sa.ColumnElement[bool]:
    """Rows ``id -> version`` still at the version read: the WHERE of every batch
    version-checked UPDATE (the primary key narrows the batch; the row-value IN checks each
    row). Both lists are single expanding parameters, so the statement compiles once for
    every batch size and is served from SQLAlchemy's compiled cache after that."""
    return sa.and_(
        table.c.id.in_(list(expected)),
        sa.tuple_(table.c.id, table.c.version).in_(list(expected.items())),
    )


def status_is(column: sa.ColumnElement[str], value: str) -> sa.ColumnElement[bool]:
    """``column = value`` for statements that address their rows by primary key (a batch
    ``id IN (...)``): compared through coalesce() so that no index on the status is usable.
    Given a batch of ids and an indexable status, SQLite's planner drives the statement
    from the status index instead, reading every row in that status (every ACTIVE task,
    every PENDING run: 16 ms per advance with 100,000 tasks) rather than the batch's rows."""
    return sa.func.coalesce(column, "") == value


def per_id(table: sa.Table, values: Mapping[int, Any], type_: Any = None) -> sa.Case[Any]:
    """A CASE giving each row ``id -> value``: :func:`per_key` on the primary key."""
    return per_key(table.c.id, values, type_)


def per_key(
    column: sa.ColumnElement[Any], values: Mapping[int, Any], type_: Any = None
) -> sa.Case[Any]:
    """A CASE giving each row the value of its *column* in ``values``: one WHEN per distinct
    value, each with an expanding IN of the keys (rows of a batch mostly share a value: one
    next fire time, a count of 1), so it compiles to few cached variants whatever the batch
    size."""
    groups: dict[Any, list[int]] = {}
    for key, value in values.items():
        groups.setdefault(value, []).append(key)
    return sa.case(
        *((column.in_(keys), sa.literal(value, type_)) for value, keys in groups.items()),
        else_=sa.null(),
    )


class Counters:
    """Statements sent and transactions committed through one engine: the round trips a
    node makes (each statement is one; a commit is one more); and failed transaction
    attempts by kind of error (:func:`~easyjob.store.retry.error_kind`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements = 0
        self.commits = 0
        self.errors: dict[str, int] = {}

    def watch(self, engine: sa.Engine) -> None:
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "commit", self._commit)

    def _statement(self, *_: Any) -> None:
        with self._lock:
            self.statements += 1

    def _commit(self, *_: Any) -> None:
        with self._lock:
            self.commits += 1

    def error(self, err: BaseException) -> None:
        kind = error_kind(err)
        if kind is not None:
            with self._lock:
                self.errors[kind] = self.errors.get(kind, 0) + 1

    def snapshot(self) -> dict[str, int]:
        """``statements``, ``commits``, and ``errors.KIND`` for each kind seen."""
        with self._lock:
            errors = {f"errors.{kind}": n for kind, n in self.errors.items()}
            return {"statements": self.statements, "commits": self.commits, **errors}


class Database:
    """An engine plus the way every store statement runs: one short transaction, retried
    as a whole on transient errors (see :mod:`easyjob.store.retry`)."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        retry: RetryPolicy | None = None,
        gate_timeout_s: float = 30.0,
    ) -> None:
        self.engine = engine
        #: SQLite files only: writers take turns through it (see :mod:`easyjob.store.gate`).
        self.gate = WriteGate.for_url(engine.url, gate_timeout_s)
        self.retry = retry or RetryPolicy()
        self.dialect = engine.dialect.name
        self.counters = Counters()
        self.counters.watch(engine)
        #: UPDATE ... RETURNING (PostgreSQL, SQLite); MariaDB finds its winners another way.
        self.update_returning = bool(engine.dialect.update_returning)

    @classmethod
    def open(cls, url: str, *, retry: RetryPolicy | None = None, **engine_options: Any) -> Database:
        """Connect to *url*; raises DatabaseURLError or DatabaseUnavailableError."""
        timeout = engine_options.get("busy_timeout_s", 30.0)
        db = cls(create_engine(url, **engine_options), retry=retry, gate_timeout_s=timeout)
        try:
            with db.engine.connect() as conn:
                conn.execute(sa.select(1))
        except sa_exc.DBAPIError as err:
            db.dispose()
            raise DatabaseUnavailableError(
                f"cannot reach database {safe_url(url)!r}: {first_line(err.orig or err)}"
            ) from err
        return db

    @property
    def skip_locked(self) -> bool:
        """Whether the ``skip_locked`` claim mode is offered here: PostgreSQL only.

        SQLite locks the whole database. MariaDB 10.6+ has ``SKIP LOCKED``, but its locking
        reads lock every row they pass (the first form of the claim, with its join and
        sort, made MariaDB 10.11 abort with its buffer pool full of locks at 1,000 runs/s),
        and the form that locks only the rows it claims (a plain read, then a locking read
        by primary key) fell behind at 2,000 runs/s where optimistic claims kept up
        (docs/performance.md). MySQL 8 is untested, so not offered either."""
        return self.dialect == "postgresql"

    def require_skip_locked(self) -> None:
        """Raise ConfigError naming this database unless the skip_locked mode is offered."""
        if not self.skip_locked:
            raise ConfigError(
                f"claim mode skip_locked is offered on PostgreSQL only, not on {self.server} "
                "(see docs/performance.md): use claim mode 'optimistic'"
            )

    @property
    def server(self) -> str:
        """The database product and version, e.g. ``mariadb 10.11.6``, for messages."""
        dialect = self.engine.dialect
        name = "mariadb" if getattr(dialect, "is_mariadb", False) else self.dialect
        version = ".".join(str(part) for part in dialect.server_version_info or ())
        return f"{name} {version}".strip()

    @property
    def url(self) -> str:
        return safe_url(self.engine.url)

    def dispose(self) -> None:
        self.engine.dispose()
        if self.gate is not None:
            self.gate.close()

    def write(
        self,
        what: str,
        fn: Callable[[sa.Connection], T],
        *,
        landed: Callable[[sa.Connection], T | None] | None = None,
    ) -> T:
        """Run *fn* in one read-write transaction, retried on transient errors.

        An attempt can fail after its COMMIT was applied (the reply was lost with the
        connection): its retry would then find its rows already moved and report them lost.
        A write whose retry cannot simply run again gives *landed*: on every retried attempt
        it runs first, in the new transaction, and returns the earlier attempt's result when
        that attempt's changes are in the database, or None (then *fn* runs).
        """
        attempts = 0

        def attempt(conn: sa.Connection) -> T:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and landed is not None:
                found = landed(conn)
                if found is not None:
                    log.warning("%s: an earlier attempt was committed; its reply was lost", what)
                    return found
            return fn(conn)

        result: T = self.retry.retrying(what)(self._once, attempt, {})
        return result

    def read(self, what: str, fn: Callable[[sa.Connection], T]) -> T:
        """Run *fn* in one read-only transaction, retried on transient errors."""
        result: T = self.retry.retrying(what)(self._once, fn, READONLY)
        return result

    def _once(self, fn: Callable[[sa.Connection], T], options: Mapping[str, Any]) -> T:
        if self.gate is not None and not options:
            with self.gate.held():
                return self._transaction(fn, options)
        return self._transaction(fn, options)

    def _transaction(self, fn: Callable[[sa.Connection], T], options: Mapping[str, Any]) -> T:
        try:
            with self.engine.connect() as conn:
                if options:
                    conn = conn.execution_options(**options)
                with conn.begin():
                    return fn(conn)
        except Exception as err:
            self.counters.error(err)
            raise

    def now(self) -> Any:
        """The database's current UTC time (aware datetime)."""
        return self.read("db_now", lambda conn: conn.scalar(sa.select(db_now())))

    def winners(
        self, conn: sa.Connection, stmt: sa.Update, table: sa.Table, expected: Mapping[int, int]
    ) -> list[int]:
        """Run a batch version-checked UPDATE of rows ``id -> version read`` and return the ids
        it changed.

        PostgreSQL and SQLite name them with ``RETURNING``. MySQL/MariaDB have no UPDATE ...
        RETURNING: there the rows the UPDATE would change are first read and locked by primary
        key (``SELECT ... FOR UPDATE`` with the same WHERE: the batch's rows only, never the
        table), then updated. Nobody else can move a locked row meanwhile, so a locked row at
        its version read + 1 afterwards was moved by this statement and no other: a row this
        caller moved in an earlier call is never reported again.
        """
        if self.update_returning:
            return [row[0] for row in conn.execute(stmt.returning(table.c.id))]
        where = stmt.whereclause if stmt.whereclause is not None else sa.true()
        locked = sa.select(table.c.id).where(where).order_by(table.c.id)
        locked = locked.with_hint(table, PRIMARY_KEY_HINT, "mysql")
        ids = list(conn.scalars(locked.with_for_update()))
        if not ids:
            return []
        update = stmt.where(table.c.id.in_(ids)).with_hint(PRIMARY_KEY_HINT, dialect_name="mysql")
        changed = conn.execute(update).rowcount
        if changed == len(ids):
            return ids
        bumped = {i: expected[i] + 1 for i in ids}
        return list(conn.scalars(sa.select(table.c.id).where(at_versions(table, bumped))))

    # -- schema -----------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables if absent (idempotent) and record the schema version.

        Safe when any number of processes do it at once on an empty database: creators take
        turns through a lock of the database's own (PostgreSQL: a transaction-scoped advisory
        lock, so the DDL commits before the next creator looks; MySQL/MariaDB, whose DDL
        commits at once: a named ``GET_LOCK``; SQLite: its write lock, taken at ``BEGIN``),
        and each looks for the tables only once it holds it."""

        def create(conn: sa.Connection) -> None:
            with self._schema_lock(conn):
                metadata.create_all(conn, checkfirst=True)
                found = conn.scalar(
                    sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")
                )
                if found is None:
                    conn.execute(
                        meta_table.insert().values(name="schema_version", value=str(SCHEMA_VERSION))
                    )

        self.write("create_schema", create)
        self.check_schema()

    @contextmanager
    def _schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        if self.dialect == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            yield
        elif self.dialect in ("mysql", "mariadb"):
            got = conn.scalar(
                sa.text("SELECT GET_LOCK(:name, :wait)"),
                {"name": _SCHEMA_LOCK_NAME, "wait": _SCHEMA_LOCK_WAIT_S},
            )
            if got != 1:
                raise DatabaseUnavailableError(
                    f"could not take the schema lock {_SCHEMA_LOCK_NAME!r} in "
                    f"{_SCHEMA_LOCK_WAIT_S}s: another process is creating the easyjob tables"
                )
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": _SCHEMA_LOCK_NAME})
        else:
            yield

    def check_schema(self) -> None:
        """Raise SchemaMissingError or SchemaVersionError unless the tables are this version's."""

        def read(conn: sa.Connection) -> tuple[bool, str | None]:
            if not sa.inspect(conn).has_table(meta_table.name):
                return False, None
            query = sa.select(meta_table.c.value).where(meta_table.c.name == "schema_version")
            return True, conn.scalar(query)

        present, version = self.read("check_schema", read)
        if not present:
            raise SchemaMissingError(
                f"the easyjob tables are missing in {self.url!r}: run `easyjob init-db`"
            )
        if version != str(SCHEMA_VERSION):
            raise SchemaVersionError(
                f"the easyjob tables in {self.url!r} are schema version {version!r}, "
                f"this easyjob needs version {SCHEMA_VERSION}"
            )

    def drop_schema(self) -> None:
        """Drop every easyjob table (tests and `easyjob` uninstall only)."""
        self.write("drop_schema", lambda conn: metadata.drop_all(conn, checkfirst=True))
