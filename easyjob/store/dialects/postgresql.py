"""PostgreSQL through psycopg 3."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from easyjob.store.dialects.base import Dialect, EngineOptions

__all__ = ["PostgreSQLDialect"]

_KINDS = {"40001": "deadlock", "40P01": "deadlock", "55P03": "lock", "25006": "read_only"}
#: SQLSTATE classes: connection exception, insufficient resources, operator intervention.
_CLASS_KINDS = {"08": "connection", "53": "resources", "57": "connection"}
#: Of class 57 only 57P (operator intervention: shutdown, terminated backend) is transient.
_TRANSIENT_CLASSES = ("08", "53", "57P")
#: The advisory lock schema creators take turns through.
_SCHEMA_LOCK_KEY = 0x65617379_6A6F62  # "easyjob"


class PostgreSQLDialect(Dialect):
    """PostgreSQL (psycopg 3).

    - A session that sits inside a transaction for ``stuck_transaction_s`` is ended by the
      server (``idle_in_transaction_session_timeout``): a node paused (SIGSTOP, a VM freeze)
      in one of its short transactions would otherwise hold its row locks.
    - A read-only engine's sessions are ``default_transaction_read_only``.
    - ``UPDATE ... RETURNING`` names batch winners; ``FOR UPDATE SKIP LOCKED`` is offered.
    - Batch lists bind as arrays (one SQL text per statement, which psycopg prepares).
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

    def engine_arguments(self, options: EngineOptions) -> tuple[dict[str, Any], dict[str, Any]]:
        stuck_ms = max(1, round(options.stuck_transaction_s * 1000))
        session = f"-c idle_in_transaction_session_timeout={stuck_ms}"
        if options.read_only:
            session += " -c default_transaction_read_only=on"
        connect_args = {
            "connect_timeout": max(1, round(options.connect_timeout_s)),
            "options": session,
        }
        return connect_args, {"pool_size": options.pool_size, "max_overflow": options.pool_size}

    def offline(self) -> sa.engine.Dialect:
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

    def now_sql(self) -> str:
        return "timezone('UTC', clock_timestamp())"

    def epoch_sql(self, value: str) -> str:
        return f"EXTRACT(EPOCH FROM {value})"

    def insert_ignore(self, table: sa.Table, conflict: list[str] | None = None) -> sa.Insert:
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict)

    @contextmanager
    def schema_lock(self, conn: sa.Connection) -> Iterator[None]:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        yield
