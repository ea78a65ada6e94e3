"""The store layer: every SQL statement easyjob runs lives in this package.

:class:`Store` wires the parts together: ``store.tasks`` (registration, due polling, schedule
advances), ``store.runs`` (claims and every later, version-checked transition),
``store.nodes`` (heartbeats, liveness in database time), ``store.history``,
``store.views`` (the dashboard's reads) and ``store.summary`` (``easyjob status``).
"""

from __future__ import annotations

from typing import Any

from easyjob.errors import SchemaMissingError
from easyjob.store.database import Database
from easyjob.store.engine import dialect_of, normalize_url, safe_url
from easyjob.store.history import HistoryStore
from easyjob.store.nodes import Heartbeat, NodeStore
from easyjob.store.retry import RetryPolicy, is_transient
from easyjob.store.runs import RunStore
from easyjob.store.schedules import ScheduleStore
from easyjob.store.summary import SummaryStore
from easyjob.store.tasks import TaskStore
from easyjob.store.views import ViewStore

__all__ = ["Database", "Heartbeat", "RetryPolicy", "Store", "is_transient"]


class Store:
    """One database, seen through its tables' statement groups."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.tasks = TaskStore(db)
        self.schedules = ScheduleStore(db)
        self.runs = RunStore(db)
        self.nodes = NodeStore(db)
        self.history = HistoryStore(db)
        self.views = ViewStore(db)
        self.summary = SummaryStore(db)

    @classmethod
    def open(cls, url: str, *, create: bool = False, **options: Any) -> Store:
        """Connect to *url* and check the schema (creating it first when *create*).

        Without *create*, a database known not to exist (a SQLite file that is not there) is
        reported as a missing schema without connecting (which would leave an empty file
        behind)."""
        if not create:
            _refuse_missing_database(url)
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


def _refuse_missing_database(url: str) -> None:
    parsed = normalize_url(url)
    if dialect_of(parsed).missing_database(parsed):
        raise SchemaMissingError(
            f"the easyjob tables are missing in {safe_url(parsed)!r}: run `easyjob init-db`"
        )
