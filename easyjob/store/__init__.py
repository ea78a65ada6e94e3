"""The store layer: every SQL statement easyjob runs lives in this package.

:class:`Store` wires the parts together: ``store.tasks`` (registration, due polling, schedule
advances), ``store.runs`` (claims and every later, version-checked transition),
``store.nodes`` (heartbeats, liveness in database time) and ``store.history``.
"""

from __future__ import annotations

from typing import Any

from easyjob.store.database import Database
from easyjob.store.history import HistoryStore
from easyjob.store.nodes import Heartbeat, NodeStore
from easyjob.store.retry import RetryPolicy, is_transient
from easyjob.store.runs import RunStore
from easyjob.store.tasks import TaskStore

__all__ = ["Database", "Heartbeat", "RetryPolicy", "Store", "is_transient"]


class Store:
    """One database, seen through its four tables' statement groups."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.tasks = TaskStore(db)
        self.runs = RunStore(db)
        self.nodes = NodeStore(db)
        self.history = HistoryStore(db)

    @classmethod
    def open(cls, url: str, *, create: bool = False, **options: Any) -> Store:
        """Connect to *url* and check the schema (creating it first when *create*)."""
        db = Database.open(url, **options)
        try:
            if create:
                db.create_schema()
            else:
                db.check_schema()
        except Exception:
            db.dispose()
            raise
        return cls(db)

    def close(self) -> None:
        self.db.dispose()
