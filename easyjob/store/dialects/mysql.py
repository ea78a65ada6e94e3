"""MySQL and MariaDB through PyMySQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from easyjob.errors import DatabaseUnavailableError
from easyjob.store.dialects.base import AUTOCOMMITS, Dialect, EngineOptions, rows_to_lock
from easyjob.store.expressions import PRIMARY_KEY_HINT, at_versions, in_named, named_list

__all__ = ["MySQLDialect"]

_KINDS = {
    **{code: "connection" for code in (1040, 1047, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031)},
    1205: "lock",  # lock wait timeout
    1213: "deadlock",
    1684: "lock",  # a table another session's DDL is changing (see below)
    **{code: "read_only" for code in (1290, 1792, 1836)},
}
# 1040 too many connections, 1047 a Galera member that is not serving (out of quorum or
# not synced: "WSREP has not yet prepared node for application use"), 1053 shutdown in
# progress, 1290 --read-only, 1792 read-only transaction, 1836 read-only mode, 1927
# connection killed, 2002/2003 cannot connect, 2006 gone away, 2013/2055 lost connection,
# 4031 disconnected for inactivity. 1684: a transaction that already holds a table may not
# wait for one another session's DDL holds (MariaDB's deadlock avoidance), so looking at it
# (DESCRIBE, SQLAlchemy's has_table) fails at once: a node's schema check meeting `easyjob
# init-db` creating Alembic's table. The DDL ends; looking again finds the table.
_SCHEMA_LOCK_NAME = "easyjob_schema"
_SCHEMA_LOCK_WAIT_S = 60


class MySQLDialect(Dialect):
    """MySQL and MariaDB (PyMySQL); tested on MariaDB 10.11.

    - READ COMMITTED: under REPEATABLE READ, "select a missing row for update, then insert"
      deadlocks. utf8mb4, and socket timeouts, so a stalled server is an error, not a hang.
    - A session that sits inside a transaction for ``stuck_transaction_s`` (whole seconds)
      is ended by the server (``idle_transaction_timeout``).
    - A read-only engine's sessions are ``TRANSACTION READ ONLY``.
    - ``exists_to_in`` is off: MariaDB would turn a correlated EXISTS probed by index (the
      planner's "task behind" check in ``TaskStore.due``) into a scan of the run table.
    - No ``UPDATE ... RETURNING``: batch winners are locked and read back (:meth:`winners`).
    - No arrays: batch lists are IN lists padded to a power of two, a value per row is
      ``ELT(FIELD(...))`` (:meth:`lookup_sql`).
    - Insert-or-ignore is ``ON DUPLICATE KEY UPDATE`` of nothing (the primary key to
      itself), not ``INSERT IGNORE``,
      which would also turn other errors (a value too long, a bad date) into warnings and
      store mangled rows.
    - ``skip_locked`` is not offered. MariaDB 10.6+ has ``SKIP LOCKED``, but its locking
      reads lock every row they pass (the first form of the claim, with its join and sort,
      made MariaDB 10.11 abort with its buffer pool full of locks at 1,000 runs/s), and the
      form that locks only the rows it claims (a plain read, then a locking read by primary
      key) fell behind at 2,000 runs/s where optimistic claims kept up
      (docs/performance.md). MySQL 8 is untested, so not offered either.
    - Schema creators take turns through a named ``GET_LOCK`` (MySQL's DDL commits at once).
    """

    name = "mysql"
    sqlalchemy_names = ("mysql", "mariadb")
    schemes = ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql")
    driver = "mysql+pymysql"
    driver_module = "pymysql"
    install = "the MySQL/MariaDB driver PyMySQL is not installed: pip install 'easyjob[mysql]'"
    example_url = "mysql://USER:PASSWORD@HOST/DB"

    def engine_arguments(self, options: EngineOptions) -> tuple[dict[str, Any], dict[str, Any]]:
        stuck_whole_s = max(1, round(options.stuck_transaction_s))  # MariaDB takes seconds
        init = (
            f"SET SESSION idle_transaction_timeout={stuck_whole_s}, "
            "optimizer_switch='exists_to_in=off'"
        )
        if options.read_only:  # one statement only: init_command cannot hold two
            init = "SET SESSION TRANSACTION READ ONLY"
        connect_args = {
            "connect_timeout": options.connect_timeout_s,
            "read_timeout": options.io_timeout_s,
            "write_timeout": options.io_timeout_s,
            "charset": "utf8mb4",
            "init_command": init,
        }
        kwargs = {
            "pool_size": options.pool_size,
            "max_overflow": options.pool_size,
            "isolation_level": "READ COMMITTED",
        }
        return connect_args, kwargs

    def column_types(self) -> Mapping[str, sa.types.TypeEngine[Any]]:
        # microseconds (DATETIME keeps whole seconds); a traceback or result may pass TEXT's
        # 64 KiB
        return {"datetime": mysql.DATETIME(fsp=6), "long_text": mysql.MEDIUMTEXT()}

    def server(self, engine: sa.Engine) -> str:
        name = "mariadb" if getattr(engine.dialect, "is_mariadb", False) else "mysql"
        version = ".".join(str(part) for part in engine.dialect.server_version_info or ())
        return f"{name} {version}".strip()

    def offline(self) -> sa.engine.Dialect:
        return mysql.dialect()

    def id_step(self, conn: sa.Connection) -> int:
        """``auto_increment_increment``: on a Galera cluster its size (set by
        ``wsrep_auto_increment_control``), each member handing out ids that far apart."""
        step = conn.exec_driver_sql("SELECT @@auto_increment_increment").scalar()
        return max(1, int(step or 1))

    def is_transient(self, orig: BaseException) -> bool:
        return self.error_kind(orig) is not None

    def error_kind(self, orig: BaseException) -> str | None:
        code = orig.args[0] if orig.args and isinstance(orig.args[0], int) else None
        return _KINDS.get(code) if code is not None else None

    def identity_sql(self, dialect: sa.engine.Dialect) -> str:
        # the schema on this server; a Galera cluster's members are one database
        if getattr(dialect, "is_mariadb", False):
            server = (
                "IF(@@wsrep_on, CONCAT('galera ', @@wsrep_cluster_name), "
                "CONCAT(@@hostname, ':', @@port))"
            )
        else:
            server = "@@server_uuid"
        return f"CONCAT(DATABASE(), '@', {server})"

    def unusable(self, dbapi_connection: Any) -> str | None:
        # PyMySQL: the server's own autocommit flag, from its last reply
        return AUTOCOMMITS if dbapi_connection.get_autocommit() else None

    def now_sql(self) -> str:
        return "UTC_TIMESTAMP(6)"

    def epoch_sql(self, value: str) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {value}) / 1000000.0)"

    def insert_ignore(self, table: sa.Table, conflict: list[str] | None = None) -> sa.Insert:
        key = next(iter(table.primary_key.columns))  # set to itself: nothing changes
        return mysql.insert(table).on_duplicate_key_update({key.name: key})

    def insert_or_fill(self, table: sa.Table, conflict: list[str], fill: list[str]) -> sa.Insert:
        # no WHERE in ON DUPLICATE KEY UPDATE: each column keeps its value unless the first
        # fill column is NULL, which is assigned last (MySQL assigns left to right, and a
        # later assignment sees the earlier ones)
        insert = mysql.insert(table)
        empty = table.c[fill[0]].is_(None)
        order = [*fill[1:], fill[0]]
        values = [
            (name, sa.func.if_(empty, insert.inserted[name], table.c[name])) for name in order
        ]
        return insert.on_duplicate_key_update(values)

    def lookup_sql(
        self, column: str, bound: Callable[[str], str], type_: sa.types.TypeEngine[Any]
    ) -> str:
        # MariaDB names a VALUES list's columns after its first row's values, so no derived
        # table of pairs: FIELD gives the key's position (0: none), ELT the value there
        # (NULL for 0), as text (2.6 ms per 256-row UPDATE with its commit on MariaDB, the
        # CASE it replaced 2.5 ms)
        picked = f"ELT(FIELD({column}, {bound('keys')}), {bound('values')})"
        affinity = type_._type_affinity
        if affinity is not None and issubclass(affinity, sa.DateTime):
            return f"CAST({picked} AS DATETIME(6))"
        if affinity is not None and issubclass(affinity, sa.Integer):
            return f"CAST({picked} AS SIGNED)"
        return picked

    def winners(
        self,
        conn: sa.Connection,
        stmt: sa.Update,
        table: sa.Table,
        expected: Mapping[int, int],
        params: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The rows the UPDATE would change are first read and locked by primary key
        (``SELECT ... FOR UPDATE`` with the same WHERE: the batch's rows only, never the
        table), then updated. Nobody else can move a locked row meanwhile, so a locked row at
        its version read + 1 afterwards was moved by this statement and no other. (PyMySQL
        reports matched rows, not changed ones, as the rowcount: it only says whether every
        locked row was changed.)"""
        ids = list(conn.scalars(_lock_by_key(stmt, table), params))
        if not ids:
            return []
        # the locked ids as long a list as the batch's (the last repeated): the UPDATE's
        # text then depends on the batch size alone (see easyjob.store.expressions)
        listed = ids + ids[-1:] * (len(expected) - len(ids))
        locked = {**(params or {}), **named_list("locked", listed)}
        changed = conn.execute(_update_locked(stmt, table), locked).rowcount
        if changed == len(ids):
            return ids
        bumped = {i: expected[i] + 1 for i in ids}
        return list(conn.scalars(sa.select(table.c.id).where(at_versions(table, bumped))))

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
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


@lru_cache(maxsize=128)
def _lock_by_key(stmt: sa.Update, table: sa.Table) -> sa.Select[int]:
    """The lock of *stmt*'s rows by primary key (see :meth:`MySQLDialect.winners`), made once
    per statement object (see :func:`~easyjob.store.dialects.base.returning_id`)."""
    return rows_to_lock(stmt, table).with_hint(table, PRIMARY_KEY_HINT, "mysql")


@lru_cache(maxsize=128)
def _update_locked(stmt: sa.Update, table: sa.Table) -> sa.Update:
    """*stmt* narrowed to the rows :func:`_lock_by_key` locked (the list ``locked``), by
    primary key, made once per statement object."""
    update = stmt.where(in_named(table.c.id, "locked"))
    return update.with_hint(PRIMARY_KEY_HINT, dialect_name="mysql")
