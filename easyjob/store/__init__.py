"""The store layer: every SQL statement easyjob runs lives in this package.

:class:`Store` implements the contract of :mod:`easyjob.store.contract` on a SQL database
(one dialect object per database, :mod:`easyjob.store.dialects`) and wires the parts
together: ``store.tasks`` (registration, due polling, schedule advances), ``store.runs``
(claims and every later, version-checked transition), ``store.nodes`` (heartbeats, liveness
in database time), ``store.history``, ``store.views`` (the dashboard's reads),
``store.summary`` (``easyjob status``), ``store.progress`` (runs held past due, for health),
``store.cancels`` (cancel requests), ``store.bench`` (``easyjob bench``), ``store.audit``
(the operators' actions) and ``store.calendars`` (calendars of excluded days).

Outside this package, code imports only this module and :mod:`easyjob.store.contract`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from easyjob.errors import SchemaMissingError
from easyjob.store import contract
from easyjob.store.audit import AuditStore
from easyjob.store.bench import BenchStore
from easyjob.store.calendars import CalendarStore
from easyjob.store.cancels import CancelStore
from easyjob.store.database import Database
from easyjob.store.engine import dialect_of, normalize_url, safe_url
from easyjob.store.history import HistoryStore
from easyjob.store.nodes import Heartbeat, NodeStore
from easyjob.store.progress import HELD_DUE_AFTER, ProgressStore
from easyjob.store.retry import RetryPolicy, is_transient
from easyjob.store.runs import RunStore
from easyjob.store.schedules import ScheduleStore
from easyjob.store.schema import task_detail_table, task_table
from easyjob.store.summary import SummaryStore
from easyjob.store.tasks import TaskStore
from easyjob.store.views import ViewStore

__all__ = [
    "HELD_DUE_AFTER",
    "RUNS_TABLE",
    "TASKS_TABLE",
    "Database",
    "Heartbeat",
    "RetryPolicy",
    "Store",
    "is_transient",
    "render_ddl",
    "render_upgrade",
    "upgrade_schema",
]

#: The documented tables' names: runs (one row per attempt) and tasks.
RUNS_TABLE: str = task_detail_table.name
TASKS_TABLE: str = task_table.name


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
        self.bench = BenchStore(db)
        self.progress = ProgressStore(db)
        self.cancels = CancelStore(db)
        self.audit = AuditStore(db)
        self.calendars = CalendarStore(db)

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

    @property
    def url(self) -> str:
        """The database URL with its password masked, for messages and logs."""
        return self.db.url

    @property
    def server(self) -> str:
        """The database product and version (``mariadb 10.11.6``), for messages."""
        return self.db.server

    @property
    def skip_locked(self) -> bool:
        """Whether the ``skip_locked`` claim mode is offered on this database."""
        return self.db.skip_locked

    def require_skip_locked(self) -> None:
        """Raise ConfigError naming the database unless the skip_locked mode is offered."""
        self.db.require_skip_locked()

    @property
    def id_step(self) -> int:
        """How far apart the database hands out ids (1; a Galera cluster's size): nodes deal
        work by ids' ordinals (see :mod:`easyjob.core.ids`)."""
        return self.db.id_step

    @property
    def local_clock(self) -> bool:
        """Whether database time is this process's clock (SQLite: no server clock)."""
        return self.db.backend.local_clock

    def now(self) -> datetime:
        """The database's current time (aware UTC)."""
        now: datetime = self.db.now()
        return now

    def counters(self) -> dict[str, int]:
        """Statements, commits and failed attempts by kind since the store opened."""
        return self.db.counters.snapshot()

    def close(self) -> None:
        """Release the store's connections."""
        self.db.dispose()


def render_ddl(dialect: str) -> str:
    """The schema's DDL for *dialect* (``sqlite``, ``postgresql`` or ``mysql``)."""
    from easyjob.store.ddl import render

    return render(dialect)


def render_upgrade(dialect: str, from_version: int) -> str:
    """The SQL that upgrades tables of schema version *from_version* to this code's, for
    *dialect* (``easyjob sql --upgrade-from N``; see :mod:`easyjob.store.migrations`)."""
    from easyjob.store.migrations import upgrade_sql

    return upgrade_sql(dialect, from_version)


def upgrade_schema(url: str, **options: Any) -> tuple[int, int]:
    """Upgrade the easyjob tables at *url* in place to this code's schema version, keeping
    every row (``easyjob upgrade-db``); returns the versions before and after."""
    _refuse_missing_database(url)
    db = Database.open(url, **options)
    try:
        return db.upgrade_schema()
    finally:
        db.dispose()


def _refuse_missing_database(url: str) -> None:
    parsed = normalize_url(url)
    if dialect_of(parsed).missing_database(parsed):
        raise SchemaMissingError(
            f"the easyjob tables are missing in {safe_url(parsed)!r}: run `easyjob init-db`"
        )


if TYPE_CHECKING:  # mypy checks here that Store keeps the contract
    _conforms: type[contract.Store] = Store
