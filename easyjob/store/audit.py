"""The operators' audit log (``easy_job_audit``): every action taken from the dashboard,
who took it, when (database time), what it targeted and how it ended."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from easyjob.core.store_values import AuditEntry
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.schema import audit_table

__all__ = ["AuditEntry", "AuditStore"]

a = audit_table

#: Longest text kept of a target or a message (the columns' widths; longer is cut).
_TARGET_CHARS = 255
_MESSAGE_CHARS = 2000


class AuditStore:
    """Append and read audit entries."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self,
        *,
        actor: str,
        action: str,
        target: str | None,
        result: str,
        message: str | None = None,
        detail: Mapping[str, Any] | None = None,
        remote: str | None = None,
    ) -> int:
        """Append one entry at the database's time; returns its id."""
        values = {
            "actor": actor[:255],
            "action": action[:32],
            "target": None if target is None else target[:_TARGET_CHARS],
            "result": result[:16],
            "message": None if message is None else message[:_MESSAGE_CHARS],
            "detail": dict(detail) if detail is not None else None,
            "remote": None if remote is None else remote[:64],
        }

        def write(conn: sa.Connection) -> int:
            now = database_time(conn)
            key = conn.execute(a.insert().values(at=now, **values)).inserted_primary_key
            assert key is not None
            return int(key[0])

        return self._db.write("audit_record", write)

    def entries(self, *, limit: int = 200) -> list[AuditEntry]:
        """The newest *limit* entries, newest first."""

        def read(conn: sa.Connection) -> list[AuditEntry]:
            query = sa.select(a).order_by(a.c.id.desc()).limit(limit)
            return [AuditEntry(**dict(row)) for row in conn.execute(query).mappings()]

        return self._db.read("audit_entries", read)
