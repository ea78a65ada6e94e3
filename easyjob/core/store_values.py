"""Values the store's API returns beyond the records of :mod:`easyjob.core.records`.

They belong to the store contract (:mod:`easyjob.store.contract` re-exports them) and hold
no database code, so that any store, and any caller, can use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from easyjob.core.records import NodeRow, Run
from easyjob.core.states import RunStatus

__all__ = [
    "BLOCKED",
    "DB_ERROR_KINDS",
    "ROWS_BY_WRITE",
    "Activity",
    "AuditEntry",
    "Backlog",
    "Blocked",
    "Bucket",
    "Cancelled",
    "FailingTask",
    "Heartbeat",
    "LastOutcome",
    "LateTask",
    "Members",
    "Starts",
    "Summary",
    "is_pattern",
]


def is_pattern(name: str) -> bool:
    """Whether a ``--task`` value is a pattern (holds ``*`` or ``?``) rather than a name."""
    return "*" in name or "?" in name


#: The kinds a store counts its failed database attempts by (``errors.KIND`` in
#: :meth:`~easyjob.store.contract.Store.counters`); metrics show each from the start, at 0.
#: The prefix of a store's counters of rows written by write:
#: ``rows_by_write.WRITE.TABLE.STATUS`` (see :class:`easyjob.store.database.Counters`).
ROWS_BY_WRITE = "rows_by_write."

DB_ERROR_KINDS = ("connection", "deadlock", "lock", "read_only", "resources", "other")


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat learned: whether the row was there, and the database time."""

    accepted: bool
    revived: bool  # the row was marked DEAD by a peer, and is RUNNING again
    db_time: datetime


@dataclass(frozen=True)
class Members:
    """The nodes as one read saw them (see :meth:`NodeStore.members
    <easyjob.store.contract.NodeStore.members>`): the database time of that read, the live
    nodes (RUNNING, heard from within the dead threshold) by node id, and the ids of the
    nodes RUNNING or STOPPING whose heartbeat is older than it (dead, not marked yet)."""

    db_time: datetime
    live: list[NodeRow]
    stale: list[str]


class Blocked:
    """The result of an exclusive start while another run of the same task is RUNNING."""

    def __repr__(self) -> str:
        return "BLOCKED"


BLOCKED = Blocked()

#: What :meth:`RunStore.start_many` returns: per run id, the started run, BLOCKED or None.
Starts = dict[int, Run | Blocked | None]


class Backlog(NamedTuple):
    """A task's PENDING runs that are due: how many, and the oldest due time."""

    runs: int
    oldest_due: datetime


@dataclass(frozen=True)
class LastOutcome:
    """A task's most recently ended run."""

    status: RunStatus
    end_time: datetime | None


@dataclass
class Bucket:
    """Runs that ended in ``[start, start + width)``: how many by status, and the lateness
    of their start (start time minus due time, seconds): sum over the started ones, max."""

    start: datetime
    by_status: dict[str, int] = field(default_factory=dict)
    started: int = 0
    lateness_sum_s: float = 0.0
    lateness_max_s: float = 0.0

    @property
    def runs(self) -> int:
        return sum(self.by_status.values())

    @property
    def lateness_avg_s(self) -> float:
        return self.lateness_sum_s / self.started if self.started else 0.0


@dataclass(frozen=True)
class Activity:
    """Runs over time: *buckets* of *width* each, the last one ending at *db_time*."""

    db_time: datetime
    width: timedelta
    buckets: list[Bucket]


@dataclass(frozen=True)
class LateTask:
    """An ACTIVE task whose oldest unstarted fire is more than the threshold overdue."""

    name: str
    next_start_time: datetime | None
    oldest_pending: datetime | None
    pending: int
    lag_s: float
    success_count: int
    fail_count: int


@dataclass(frozen=True)
class FailingTask:
    """A task with runs that ended FAILED or ABANDONED in the window."""

    name: str
    failures: int
    last_end_time: datetime
    fail_count: int


@dataclass(frozen=True)
class Summary:
    """What ``status`` shows, read at ``db_time``. Counts: tasks by status; unfinished runs
    by status (PENDING split into ``PENDING`` already due and ``PENDING_LATER``); runs ended
    in the window by status; nodes by status; runs held and ended in the window by node."""

    db_time: datetime
    tasks: dict[str, int]
    runs: dict[str, int]
    ended: dict[str, int]
    nodes: dict[str, int]
    by_node: dict[str, dict[str, int]]
    late_total: int
    late: list[LateTask]
    failing: list[FailingTask]


@dataclass(frozen=True)
class Cancelled:
    """What a cancel request found: the run, its status then (``was``), its node, and
    whether it ended CANCELLED (False: it had ended already, as ``was`` says)."""

    run_id: int
    was: RunStatus
    node_id: str | None
    cancelled: bool


@dataclass(frozen=True)
class AuditEntry:
    """One operator action (a row of ``easy_job_audit``): who (*actor*), what (*action* on
    *target*, with its *detail*), when (*at*, database time), from where (*remote*), and how
    it ended (*result*: ``ok``, ``refused`` or ``error``, with a *message*)."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any] | None
    result: str
    message: str | None
    remote: str | None
