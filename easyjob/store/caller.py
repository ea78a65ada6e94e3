"""A connection the application lends to easyjob, to write inside the caller's transaction.

``trigger(..., connection=conn)`` inserts its run with *conn*, in the transaction its caller
began and will end, so the run exists if and only if the caller commits. There easyjob
neither retries nor commits (the caller owns the transaction), and what the database raises
reaches the caller as it is. :meth:`CallerConnections.check` first makes sure, and says
what is wrong otherwise (ConfigError), that *conn* is a SQLAlchemy Connection, open, inside
a transaction that is still usable, not committing each statement by itself, and on the
store's own database (:meth:`Dialect.identity_sql
<easyjob.store.dialects.base.Dialect.identity_sql>`): a run written anywhere else would
never be seen by the store's nodes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from easyjob.errors import ConfigError
from easyjob.store.database import Database
from easyjob.store.engine import db_now

__all__ = ["CallerConnections"]


class CallerConnections:
    """Checks connections lent to the store of *db* (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._identity: str | None = None

    def check(self, conn: object, what: str) -> tuple[sa.Connection, datetime]:
        """*conn* as a Connection easyjob may write in, and database time read through it
        (on SQLite, which has no clock of its own, the store's: see
        :mod:`easyjob.store.engine`). ConfigError starting with *what* when it may not."""
        connection = _connection(conn, what)
        _in_transaction(connection, what)
        backend = self._db.backend
        if connection.dialect.name not in backend.sqlalchemy_names:
            raise ConfigError(
                f"{what}: the connection is to a {connection.dialect.name} database, the "
                f"store's is {self._db.server} ({self._db.url})"
            )
        why = backend.unusable(connection.connection.dbapi_connection)
        if why is not None:
            raise ConfigError(
                f"{what}: the connection cannot hold the run in your transaction: {why}"
            )
        identity: sa.ColumnClause[Any] = sa.literal_column(backend.identity_sql(connection.dialect))
        if backend.local_clock:
            found, now = connection.scalar(sa.select(identity)), self._db.now()
        else:
            found, now = connection.execute(sa.select(identity, db_now())).one()
        theirs = backend.identity(found)
        if theirs != self._store_identity(fresh=False):
            ours = self._store_identity(fresh=True)  # it may have moved (a failover)
            if theirs != ours:
                raise ConfigError(
                    f"{what}: the connection reaches another database ({theirs}) than the "
                    f"store's nodes use ({ours}, {self._db.url}): a run written there would "
                    "never run"
                )
        return connection, now

    def _store_identity(self, *, fresh: bool) -> str:
        if self._identity is None or fresh:
            backend = self._db.backend

            def read(conn: sa.Connection) -> str:
                identity: sa.ColumnClause[Any] = sa.literal_column(
                    backend.identity_sql(conn.dialect)
                )
                found = conn.scalar(sa.select(identity))
                return backend.identity(found)

            self._identity = self._db.read("database_identity", read)
        return self._identity


def _connection(conn: object, what: str) -> sa.Connection:
    if isinstance(conn, sa.Connection):
        return conn
    if isinstance(conn, sa.Engine):
        hint = "an Engine is no transaction: pass the conn of `with engine.begin() as conn:`"
    elif callable(getattr(conn, "get_bind", None)):  # an ORM Session, or scoped_session
        hint = "for an ORM Session (Flask-SQLAlchemy's db.session too) pass session.connection()"
    else:
        hint = "open your transaction with SQLAlchemy (`with engine.begin() as conn:`)"
    raise ConfigError(
        f"{what}: connection= takes a SQLAlchemy Connection inside your transaction, got "
        f"{conn!r}: {hint}"
    )


def _in_transaction(conn: sa.Connection, what: str) -> None:
    if conn.closed:
        raise ConfigError(f"{what}: the connection is closed")
    if conn.invalidated:
        raise ConfigError(
            f"{what}: the connection was invalidated (its database connection was lost): "
            "roll back and begin again"
        )
    if not conn.in_transaction():
        raise ConfigError(
            f"{what}: the connection is not in a transaction: begin one (`with "
            "engine.begin() as conn:`, `conn.begin()`, or `session.connection()`) so that the "
            "run commits or rolls back with your work"
        )
    transaction = conn.get_nested_transaction() or conn.get_transaction()
    if transaction is not None and not transaction.is_active:
        raise ConfigError(
            f"{what}: the connection's transaction can no longer be used (a statement in it "
            "failed): roll it back"
        )
