"""One shared database: transactions with retries, the database clock, and schema upkeep."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from easyjob.core.store_values import ROWS_BY_WRITE
from easyjob.errors import (
    ConfigError,
    DatabaseUnavailableError,
    DatabaseURLError,
    SchemaMissingError,
)
from easyjob.store.compat import SCHEMA_VERSION_ROW, VERSION_TABLE, judge, read_versions
from easyjob.store.dialects import Dialect, dialect_for
from easyjob.store.dialects.base import NO_COMMIT, array_param
from easyjob.store.engine import READONLY, create_engine, database_time, safe_url
from easyjob.store.expressions import PRIMARY_KEY_HINT, at_versions, per_id, per_key, status_is
from easyjob.store.retry import RetryPolicy, error_kind, first_line
from easyjob.store.schema import SCHEMA_VERSION, meta_table, metadata

__all__ = ["PRIMARY_KEY_HINT", "Database", "at_versions", "per_id", "per_key", "status_is"]

T = TypeVar("T")
log = logging.getLogger("easyjob.store")


class Counters:
    """Statements sent and transactions committed through one engine: the round trips a
    node makes (each statement is one; a commit is one more, unless the transaction was
    never opened on the server: a PostgreSQL read, see :data:`NO_COMMIT`); rows written (inserted,
    updated or deleted, by table); and failed transaction attempts by kind of error
    (:func:`~easyjob.store.retry.error_kind`).

    A statement's rows are the driver's ``cursor.rowcount`` right after it ran; on SQLite at
    the connection's next statement, commit or rollback instead: sqlite3 counts the rows of
    a ``RETURNING`` statement only as they are fetched (0 right after it runs), while
    psycopg forgets the count once the cursor is closed. On MariaDB an
    ``INSERT ... ON DUPLICATE KEY UPDATE`` counts a row it skipped as one (SQLAlchemy's
    PyMySQL connections report rows found, not rows changed).

    Rows are also counted by *write*: the name of the store write whose transaction ran
    the statement (:meth:`Database.write`'s ``what``, e.g. ``advance_tasks``,
    ``claim_started_runs``), the table, and for an INSERT of rows with a ``status`` the
    status inserted (``""`` else): what a run costs, write by write. An INSERT of several
    statuses at once has its row count shared out by the statuses of the rows it was
    given (exact unless the database skipped some as duplicates)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements = 0
        self.commits = 0
        self.rows: dict[str, int] = {}
        self.by_write: dict[tuple[str, str, str], int] = {}
        self.errors: dict[str, int] = {}
        self._late = False

    def watch(self, engine: sa.Engine) -> None:
        self._late = engine.dialect.name == "sqlite"
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "after_cursor_execute", self._executed)
        sa.event.listen(engine, "commit", self._commit)
        sa.event.listen(engine, "rollback", self._rollback)

    def _statement(self, conn: sa.Connection, *_: Any) -> None:
        self._settle(conn)
        with self._lock:
            self.statements += 1

    def _executed(
        self,
        conn: sa.Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        table = written_table(statement, context)
        if table is None:
            return
        kind = (conn.info.get(WRITE_NAME, ""), table, inserted_statuses(context))
        if self._late:
            conn.info[_PENDING] = (cursor, kind)
        else:
            self._add(kind, cursor.rowcount)

    def _settle(self, conn: sa.Connection) -> None:
        if not self._late:
            return
        try:
            pending = conn.info.pop(_PENDING, None)
        except sa_exc.InvalidRequestError:  # closed or invalidated: nothing left to read
            return
        if pending is not None:
            self._add(pending[1], pending[0].rowcount)

    def _add(self, kind: tuple[str, str, Counter[str]], count: int) -> None:
        if count <= 0:  # -1: the driver does not know
            return
        write, table, statuses = kind
        with self._lock:
            self.rows[table] = self.rows.get(table, 0) + count
            for status, n in _share(count, statuses).items():
                key = (write, table, status)
                self.by_write[key] = self.by_write.get(key, 0) + n

    def _commit(self, conn: sa.Connection) -> None:
        self._settle(conn)
        if conn.info.pop(NO_COMMIT, False):  # no transaction on the server: nothing sent
            return
        with self._lock:
            self.commits += 1

    def _rollback(self, conn: sa.Connection) -> None:
        self._settle(conn)
        with contextlib.suppress(sa_exc.InvalidRequestError):  # closed or invalidated
            conn.info.pop(NO_COMMIT, None)

    def error(self, err: BaseException) -> None:
        kind = error_kind(err)
        if kind is not None:
            with self._lock:
                self.errors[kind] = self.errors.get(kind, 0) + 1

    def snapshot(self) -> dict[str, int]:
        """``statements``, ``commits``, ``rows_written`` (all tables) and
        ``rows_written.TABLE`` for each table written, and ``errors.KIND`` for each kind
        seen."""
        with self._lock:
            rows = {f"rows_written.{table}": n for table, n in sorted(self.rows.items())}
            errors = {f"errors.{kind}": n for kind, n in self.errors.items()}
            writes = {
                f"{ROWS_BY_WRITE}{write}.{table}.{status}": n
                for (write, table, status), n in sorted(self.by_write.items())
            }
            return {
                "statements": self.statements,
                "commits": self.commits,
                "rows_written": sum(self.rows.values()),
                **rows,
                **errors,
                **writes,
            }


#: ``conn.info`` key: the name of the store write whose transaction the connection runs.
WRITE_NAME = "easyjob_write"
_PENDING = "easyjob_rows_pending"


def _named(what: str, fn: Callable[[sa.Connection], T]) -> Callable[[sa.Connection], T]:
    """*fn*, its statements' rows counted under the store write *what* (see Counters)."""

    def named(conn: sa.Connection) -> T:
        conn.info[WRITE_NAME] = what
        try:
            return fn(conn)
        finally:
            with contextlib.suppress(sa_exc.InvalidRequestError):  # closed or invalidated
                conn.info.pop(WRITE_NAME, None)

    return named


def inserted_statuses(context: Any) -> Counter[str]:
    """For an INSERT compiled by SQLAlchemy, how many of the rows given have each
    ``status`` (a row per parameter set, or, in an INSERT of arrays, a row per element of
    the status array: see :func:`~easyjob.store.dialects.base.array_param`); ``{"": 1}``
    for any other statement (or rows with no status)."""
    params = getattr(context, "compiled_parameters", None) if context is not None else None
    if not params or not context.isinsert:
        return Counter({"": 1})
    statuses: Counter[str] = Counter()
    for p in params:
        arrayed = p.get(_STATUS_ARRAY)
        if isinstance(arrayed, list | tuple):
            statuses.update(str(status or "") for status in arrayed)
        else:
            statuses[str(p.get("status") or "")] += 1
    return statuses or Counter({"": 1})


_STATUS_ARRAY = array_param("status")


def _share(count: int, statuses: Counter[str]) -> dict[str, int]:
    """*count* rows shared out by *statuses* (a count of rows given per status) in
    proportion, the rounding's rest to the most common."""
    total = sum(statuses.values())
    out = {status: count * n // total for status, n in statuses.items()}
    top = max(statuses, key=lambda status: (statuses[status], status))
    out[top] += count - sum(out.values())
    return {status: n for status, n in out.items() if n}


_DML = re.compile(
    r"\s*(?:INSERT\s+(?:IGNORE\s+)?INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM)\s+[`\"]?(\w+)",
    re.IGNORECASE,
)


def written_table(statement: str, context: Any) -> str | None:
    """The table an INSERT, UPDATE or DELETE *statement* writes, else None: from the
    compiled statement when SQLAlchemy built it, from its text when it was written as SQL."""
    if context is not None and (context.isinsert or context.isupdate or context.isdelete):
        name = getattr(getattr(context.compiled.statement, "table", None), "name", None)
        if isinstance(name, str):
            return name
    match = _DML.match(statement)
    return match.group(1) if match else None


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
        #: The dialect object: everything that differs on this database.
        self.backend: Dialect = _dialect(engine)
        #: SQLite files only: writers take turns through it (see :mod:`easyjob.store.gate`).
        self.gate = self.backend.write_gate(engine.url, gate_timeout_s)
        self.retry = retry or RetryPolicy()
        #: SQLAlchemy's name of the dialect (``sqlite``, ``postgresql``, ``mysql``, ``mariadb``).
        self.dialect = engine.dialect.name
        self.counters = Counters()
        self.counters.watch(engine)

    @classmethod
    def open(cls, url: str, *, retry: RetryPolicy | None = None, **engine_options: Any) -> Database:
        """Connect to *url*; raises DatabaseURLError or DatabaseUnavailableError."""
        timeout = engine_options.get("busy_timeout_s", 30.0)
        db = cls(create_engine(url, **engine_options), retry=retry, gate_timeout_s=timeout)
        try:
            with db.engine.connect() as conn:  # a read: on SQLite no turn to write
                conn.execution_options(**READONLY).execute(sa.select(1))
                db.__dict__["id_step"] = db.backend.id_step(conn)  # known before any work
        except sa_exc.DBAPIError as err:
            db.dispose()
            raise DatabaseUnavailableError(
                f"cannot reach database {safe_url(url)!r}: {first_line(err.orig or err)}"
            ) from err
        return db

    @property
    def skip_locked(self) -> bool:
        """Whether the ``skip_locked`` claim mode is offered here (PostgreSQL only; each
        dialect says why in its docstring)."""
        return self.backend.skip_locked

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
        return self.backend.server(self.engine)

    @cached_property
    def id_step(self) -> int:
        """How far apart the database hands out ids (see :mod:`easyjob.core.ids`): 1, or on
        MySQL/MariaDB its ``auto_increment_increment`` (a Galera cluster's size). Read once,
        when the database is opened (or at first use, for one built on an engine): nodes
        started while a Galera cluster had another size deal by the old step, which splits
        less evenly, not wrongly (a run no node takes is stolen late)."""
        return self.read("id_step", self.backend.id_step)

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

        result: T = self.retry.retrying(what)(self._once, _named(what, attempt), {})
        return result

    def read(self, what: str, fn: Callable[[sa.Connection], T]) -> T:
        """Run *fn* in one read-only transaction, retried on transient errors."""
        result: T = self.retry.retrying(what)(self._once, _named(what, fn), READONLY)
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
        return self.read("db_now", database_time)

    def winners(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        expected: Mapping[int, int],
        params: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Run a batch version-checked UPDATE of rows ``id -> version read`` (with the
        execution *params* of a statement built once) and return the ids it changed (see
        :meth:`Dialect.winners <easyjob.store.dialects.base.Dialect.winners>`: ``RETURNING``
        where the database has it, locked rows read back where it has not; on the servers
        the rows are locked in id order first)."""
        return self.backend.winners(conn, stmt, table, expected, params)

    def winning_rows(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        params: Mapping[str, Any],
        joined: sa.ColumnElement[bool],
        columns: tuple[sa.ColumnElement[Any], ...],
    ) -> Sequence[sa.Row[Any]] | None:
        """The rows the batch UPDATE *stmt* changed, as *columns* (of *table* and of the
        tables *joined* joins it to) returned by the UPDATE itself, or None where the
        database cannot (see :meth:`Dialect.winning_rows
        <easyjob.store.dialects.base.Dialect.winning_rows>`: PostgreSQL can)."""
        return self.backend.winning_rows(conn, stmt, table, params, joined, columns)

    def lock_rows(self, conn: sa.Connection, table: sa.Table, ids: Collection[int]) -> None:
        """Lock rows *ids* of *table* until the transaction ends, in id order (see
        :meth:`Dialect.lock_rows <easyjob.store.dialects.base.Dialect.lock_rows>`; nothing
        on SQLite, which has one writer at a time). No ids: no statement."""
        if ids:
            self.backend.lock_rows(conn, table, ids)

    # -- schema -----------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create the tables if absent (idempotent), record the schema version and stamp
        Alembic's table with the head revision (see :mod:`easyjob.store.migrations`).

        Safe when any number of processes do it at once on an empty database: creators take
        turns through a lock of the database's own (:meth:`Dialect.schema_lock
        <easyjob.store.dialects.base.Dialect.schema_lock>`), and each looks for the tables
        only once it holds it. Tables of another version are left as they are, no table of
        this version added beside them (the check that follows refuses them)."""

        def state(conn: sa.Connection) -> tuple[str | None, bool]:
            """The version the tables are stored as (None: no tables yet, or a creation
            cut short), and whether their bookkeeping is complete."""
            found, compatible_from = None, None
            if sa.inspect(conn).has_table(meta_table.name):
                found, compatible_from = read_versions(conn)
            complete = compatible_from is not None and sa.inspect(conn).has_table(VERSION_TABLE)
            return found, complete

        def create(conn: sa.Connection) -> None:
            with self.backend.schema_lock(conn):
                found, complete = state(conn)
                if found is None:
                    metadata.create_all(conn, checkfirst=True)
                    conn.execute(
                        meta_table.insert().values(
                            name=SCHEMA_VERSION_ROW, value=str(SCHEMA_VERSION)
                        )
                    )
                if _to_create(found, complete):
                    from easyjob.store import migrations  # Alembic: imported when needed

                    migrations.complete_bookkeeping(conn)

        # a read first: every node start creates "if absent", and on SQLite a write waits
        # its turn behind the other nodes' (4 nodes registering 6,000 tasks: seconds)
        if _to_create(*self.read("look_for_schema", state)):
            self.write("create_schema", create)
        self.check_schema()

    def check_schema(self) -> None:
        """Raise SchemaMissingError, or SchemaVersionError (SchemaOutdatedError,
        SchemaTooNewError), unless this code may run on the tables: the rule of
        :mod:`easyjob.store.compat`. A newer, compatible schema is logged once."""

        def read(conn: sa.Connection) -> tuple[bool, str | None, str | None]:
            if not sa.inspect(conn).has_table(meta_table.name):
                return False, None, None
            return True, *read_versions(conn)

        present, version, compatible_from = self.read("check_schema", read)
        if not present:
            raise SchemaMissingError(
                f"the easyjob tables are missing in {self.url!r}: run `easyjob init-db`"
            )
        if version is None:  # MySQL commits each CREATE TABLE: a creator is half way
            raise SchemaMissingError(
                f"the easyjob tables in {self.url!r} have no schema_version yet (being created, "
                "or a creation was cut short): run `easyjob init-db`"
            )
        if not judge(self.url, version, compatible_from, SCHEMA_VERSION):
            log.info(
                "the easyjob tables are schema version %s, newer than this easyjob's %d and "
                "compatible with it (compatible_from %s)",
                version,
                SCHEMA_VERSION,
                compatible_from,
            )

    def upgrade_schema(self) -> tuple[int, int]:
        """Upgrade the tables in place to this code's schema version, keeping every row
        (:mod:`easyjob.store.migrations`); returns the versions before and after. Any number
        of processes may do it at once: they take turns through the schema lock, and the
        ones after the first find nothing left to do."""

        from easyjob.store import migrations  # Alembic: imported when needed

        def upgrade(conn: sa.Connection) -> tuple[int, int]:
            with self.backend.schema_lock(conn):
                return migrations.upgrade(conn, self.url)

        return self.write("upgrade_schema", upgrade)

    def drop_schema(self) -> None:
        """Drop every easyjob table (tests and `easyjob` uninstall only)."""
        self.write("drop_schema", lambda conn: metadata.drop_all(conn, checkfirst=True))


def _dialect(engine: sa.Engine) -> Dialect:
    dialect = dialect_for(engine.dialect.name)
    if dialect is None:
        raise DatabaseURLError(
            f"unsupported database {engine.dialect.name!r} in {safe_url(engine.url)!r}"
        )
    return dialect


def _to_create(found: str | None, complete: bool) -> bool:
    """Whether :meth:`Database.create_schema` has something to write for tables stored as
    version *found* (None: none yet) with their bookkeeping *complete* or not: tables of
    another version are left as they are."""
    return found in (None, str(SCHEMA_VERSION)) and not complete
