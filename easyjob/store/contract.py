"""The store contract: what every part of easyjob outside ``easyjob/store/`` may rely on.

This module is the specification; :class:`easyjob.store.Store` is its SQL implementation
(one :class:`~easyjob.store.dialects.base.Dialect` object per database), and ``tests/store``
checks that implementation on every dialect. Nothing outside the store imports more than
this module and ``easyjob.store`` (a test walks the package to keep it so).

Time
    The database clock is the cluster's one clock. Every "now" below is database time, read
    by the statement that uses it; due-ness, liveness and every stored time are judged by it,
    never by a node's wall clock. All times are aware UTC datetimes.

Claims and fencing
    A run is claimed by one version-checked UPDATE, and each later transition of it (start,
    release, finish, fail, close, recover) is one UPDATE whose WHERE names the run's id, the
    version the caller holds (its fencing token), the status it expects and, once claimed,
    the holding node. Every transition moves the version up by one; versions only grow. A
    write that matches no row was *fenced*: the run was taken over, released, paused or timed
    out meanwhile; it changes nothing and the caller is told so by a ``False``/``None``
    result, or by the run's id missing from the ids returned. A node that was paused or cut
    off and comes back therefore cannot overwrite what the node that took over recorded.

Batches
    The batch methods (``claim``, ``start_many``, ``release_many``, ``finish_many``) write
    every run of the batch in one statement and report exactly the runs this call moved,
    each once; a run moved by an earlier call or by another node is never reported.

Transactions and retries
    Each method is one short transaction (none is held while user code runs), retried as a
    whole on transient database errors (restart, failover, lost connection, deadlock, lock
    wait, read-only server) with backoff up to a deadline; any other error is raised at once.
    An attempt can fail after its COMMIT was applied (the reply was lost with the
    connection). A claim or transition whose retry would then find its rows already moved
    first looks for its own earlier write: rows one version past the version read, in the
    status it writes, held by the node it names (by nobody, for a release), were moved by
    that earlier attempt, and it reports them as written (won, started, finished), not as
    fenced. Within one node one thread makes each transition, so no other call of the node
    can have left a row so. ``claim_next`` cannot tell: runs it won in a lost reply stay
    claimed by the node, and its recovery sweep takes them back as orphans.
    The one exception: ``TaskStore.trigger(connection=)`` writes in the caller's own
    transaction, which the caller commits or rolls back; nothing is retried there.

Errors
    A missing task is :class:`~easyjob.errors.TaskNotFoundError`; bad input is
    :class:`~easyjob.errors.TaskDefinitionError` or :class:`~easyjob.errors.ConfigError`
    naming the offending value, and nothing stored is changed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from easyjob.core.admission import Catalog
from easyjob.core.calendars import CalendarDay
from easyjob.core.pacing import Fates
from easyjob.core.records import (
    Advance,
    Advanced,
    Candidate,
    HeldRun,
    HistoryRow,
    NodeRow,
    PlanningRow,
    Run,
    TaskRow,
    TaskSpec,
)
from easyjob.core.states import Misfire, NodeStatus, Overlap, RunStatus, TaskStatus
from easyjob.core.store_values import (
    BLOCKED,
    DB_ERROR_KINDS,
    Activity,
    AuditEntry,
    Backlog,
    Blocked,
    Bucket,
    Cancelled,
    FailingTask,
    Heartbeat,
    LastOutcome,
    LateTask,
    Members,
    Starts,
    Summary,
    is_pattern,
)
from easyjob.core.strategies import ReadScope

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "BLOCKED",
    "DB_ERROR_KINDS",
    "Activity",
    "AuditEntry",
    "AuditStore",
    "Backlog",
    "BenchStore",
    "Blocked",
    "Bucket",
    "CancelStore",
    "Cancelled",
    "FailingTask",
    "Heartbeat",
    "HistoryStore",
    "LastOutcome",
    "LateTask",
    "Members",
    "NodeStore",
    "ProgressStore",
    "RunStore",
    "ScheduleStore",
    "Starts",
    "Store",
    "Summary",
    "SummaryStore",
    "TaskStore",
    "ViewStore",
    "is_pattern",
]


class TaskStore(Protocol):
    """Tasks: registration by name, the planner's due polling and schedule advances."""

    def upsert(self, specs: Sequence[TaskSpec]) -> list[TaskRow]:
        """Insert or update the tasks *specs* declare, by name; returns their rows. Safe when
        several nodes register the same tasks at once (the name is unique: an insert that
        loses the race becomes an update). A changed schedule recomputes the next fire from
        now; ``seen_time`` becomes now for each task written: only the tasks that are
        missing, changed, or not seen for ``SEEN_REFRESH`` are. An unknown parent raises
        TaskDefinitionError."""
        ...

    def register(
        self,
        specs: Sequence[TaskSpec],
        on_chunk: Callable[[dict[str, int]], None] | None = None,
    ) -> int:
        """:meth:`upsert` for a node's catalogue, writing only the tasks that are missing,
        changed, or not seen for ``SEEN_REFRESH`` (an unchanged catalogue writes no row),
        each chunk read first without a write lock; *on_chunk* gets each chunk's ids by
        name once stored. Returns how many task rows were written."""
        ...

    def get(self, name: str) -> TaskRow:
        """The task called *name*, with its ``success_count``; raises TaskNotFoundError."""
        ...

    def set_status(self, name: str, status: TaskStatus) -> TaskRow:
        """Pause or resume task *name* (its version moves: a planner mid-advance is fenced).
        Pausing closes every run of the task not yet started as SKIPPED in the same
        transaction (a claimed one's version moves, so its node's start is fenced): once the
        pause is committed no run of the task starts. A FINISHED task is refused."""
        ...

    def due(
        self,
        horizon: datetime,
        limit: int,
        exclude: Collection[int] = (),
        *,
        share: tuple[int, int] | None = None,
        overdue_before: datetime | None = None,
        behind_before: datetime | None = None,
        behind_since: datetime | None = None,
    ) -> list[PlanningRow]:
        """At most *limit* ACTIVE tasks whose next fire is by *horizon*, earliest first, but
        those in *exclude*; with *share* ``(rank, size)`` only tasks with ``id mod size ==
        rank`` plus those whose next fire is before *overdue_before*. With *behind_before*,
        not the ``fire_once``/``skip`` tasks *behind*: with a cron fire due before it that
        has not started (PENDING or CLAIMED); they are planned again once it has, so under
        overload rows are written per run started, not per fire offered; with
        *behind_since*, a fire due since then (the node's start: not the fires an outage
        left). Cost per row returned (plus one index probe per row scanned, with
        *behind_before*)."""
        ...

    def advance(
        self,
        node_id: str,
        advances: Sequence[Advance],
        *,
        on_error: Callable[[int, str], None] | None = None,
    ) -> list[int]:
        """Move each task's next fire forward from the version read and write the fires it
        passed as runs (PENDING, or MISSED), in one transaction; returns the ids of the tasks
        advanced. A task whose version moved meanwhile is left alone (fenced). Idempotent per
        fire: a fire that already has a row is skipped. Isolated per task: a task that fails
        for a reason that is not transient is reported to *on_error* and the others advance."""
        ...

    def advance_and_start(
        self,
        node_id: str,
        advances: Sequence[Advance],
        start: Mapping[int, int | None] | None = None,
        *,
        on_error: Callable[[int, str], None] | None = None,
    ) -> Advanced:
        """:meth:`advance`, writing the PENDING fire of each task of *start* (task id -> its
        run limit, :func:`~easyjob.core.admission.run_limit`; None: none) already RUNNING
        for *node_id* (claimed now, started now or at its due time), unless its task is at
        its limit: then PENDING. Returns the tasks advanced and the runs started so, which
        *node_id* must run (a lost COMMIT reply leaves them to its recovery sweep)."""
        ...

    def trigger(
        self,
        name: str,
        *,
        at: datetime | None = None,
        kwargs: Mapping[str, Any] | None = None,
        connection: sa.Connection | None = None,
        priority: int | None = None,
    ) -> int:
        """Create a manual fire of task *name* due *at* (default now) with trigger arguments
        *kwargs* (JSON, only names the task accepts) and *priority* (None: its task's);
        returns the (first) run id.

        With *connection*, a SQLAlchemy Connection inside the caller's transaction on this
        store's database, the run is written in that transaction (now read through it): it
        exists, and nodes see it, if and only if the caller commits. Not retried; database
        errors reach the caller as they are; ConfigError says why a connection cannot be
        used (not a Connection, closed, not in a usable transaction, autocommit, another
        database), before anything is written."""
        ...


class ScheduleStore(Protocol):
    """Tasks added, rescheduled and removed at run time (``easyjob schedule``)."""

    def add(
        self,
        name: str,
        func: str,
        *,
        cron: str | None = None,
        every: timedelta | str | float | None = None,
        tz: str = "UTC",
        start: datetime | None = None,
        end: datetime | None = None,
        max_runs: int | None = None,
        misfire: Misfire | str = Misfire.FIRE_ONCE,
        overlap: Overlap | str = Overlap.SERIAL,
        accepts: Sequence[str] = (),
        max_running: int | None = None,
        priority: int = 0,
    ) -> TaskRow:
        """Add task *name* calling *func*; a name taken by a task is refused."""
        ...

    def set(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: timedelta | str | float | None = None,
        tz: str | None = None,
    ) -> TaskRow:
        """Give task *name* a new schedule from now on; fires already written stay."""
        ...

    def remove(self, name: str) -> TaskRow:
        """Remove run-time task *name*: FINISHED, its unstarted runs SKIPPED, history kept."""
        ...


class RunStore(Protocol):
    """Runs: claimable PENDING rows, held CLAIMED/RUNNING rows, finished history.

    Every transition after the claim is fenced (see the module docstring)."""

    def pending(
        self,
        horizon: datetime,
        limit: int,
        exclude: Collection[int] = (),
        *,
        node_id: str | None = None,
        scope: ReadScope | None = None,
        newest: bool = False,
    ) -> list[Candidate]:
        """At most *limit* PENDING runs due by *horizon*, earliest first, of tasks not
        PAUSED and not in *exclude*; with *node_id*, less other nodes' broadcast runs; with
        a *scope* that has a share, only the share's home runs (``id mod nodes = rank``)
        and the runs due by its ``others_by``; with *newest*, the *limit* due last (the
        present ahead of a backlog). Each candidate carries the version read: the token its
        claim is checked against."""
        ...

    def miss_pending(self, runs: Mapping[int, tuple[int, str]]) -> set[int]:
        """PENDING -> MISSED for *runs* (``id -> (version read, reason)``), in one
        version-checked UPDATE: the misses :mod:`easyjob.core.admission` decided. Returns the
        ids written; a run claimed or changed meanwhile is left alone."""
        ...

    def claim(self, node_id: str, candidates: Sequence[Candidate]) -> list[Run]:
        """Claim *candidates* for *node_id* with one version-checked UPDATE. Returns exactly
        the runs this call won, CLAIMED at version + 1, in due order; a candidate whose
        version moved (another node claimed it) is not returned, and is no error."""
        ...

    def claim_started(
        self,
        node_id: str,
        candidates: Sequence[Candidate],
        *,
        exclusive: Collection[int] = (),
        deadlines: Mapping[int, datetime] | None = None,
    ) -> list[Run]:
        """Claim and start *candidates* (due now) for *node_id* with one version-checked
        UPDATE: PENDING -> RUNNING at version + 1, ``start_time`` = database time. Returns
        exactly the runs won, in due order; a candidate whose version moved, or whose id is
        in *exclusive* (a limited task) while its task's limit of RUNNING runs is reached
        (:func:`easyjob.core.admission.held_back`, counted under a lock of the task row;
        *candidates* in the order they take the places), or whose *deadlines* entry
        (``id -> instant``) has come in database time when the write lands, is not returned
        (the latter two stay PENDING)."""
        ...

    def claim_next(
        self, node_id: str, horizon: datetime, limit: int, exclude: Collection[int] = ()
    ) -> list[Run]:
        """Claim at most *limit* PENDING runs due by *horizon* skipping rows other
        transactions hold locked (the ``skip_locked`` mode: only where
        :attr:`Store.skip_locked`). Every run returned was won by this call."""
        ...

    def start(self, run: Run, *, exclusive: bool = False) -> Run | Blocked | None:
        """CLAIMED -> RUNNING at database time: :meth:`start_many` for one run."""
        ...

    def start_many(
        self,
        runs: Sequence[Run],
        *,
        exclusive: Collection[int],
        deadlines: Mapping[int, datetime] | None = None,
    ) -> Starts:
        """Start a batch of one node's CLAIMED runs with one version-checked UPDATE. Per run
        id: the RUNNING run (version + 1), :data:`BLOCKED` (its id is in *exclusive* and its
        task's limit of RUNNING runs is reached, as for :meth:`claim_started`, or its
        *deadlines* entry has come in database time when the write lands), or None when
        fenced."""
        ...

    def release(self, run: Run) -> bool:
        """Hand a CLAIMED run back (PENDING, claimable by any node); False if fenced."""
        ...

    def release_many(self, runs: Sequence[Run]) -> set[int]:
        """Hand a batch of one node's CLAIMED runs back; returns the ids released."""
        ...

    def close_unstarted(self, run: Run, status: RunStatus, reason: str) -> bool:
        """CLAIMED -> MISSED or SKIPPED with *reason*; False if fenced."""
        ...

    def close_many(
        self, runs: Sequence[Run], status: RunStatus, reasons: Mapping[int, str]
    ) -> set[int]:
        """CLAIMED -> MISSED or SKIPPED for a batch of one node's runs, each with its reason
        (run id -> text), in one version-checked UPDATE; returns the ids closed (the others
        were fenced)."""
        ...

    def finish(self, run: Run) -> bool:
        """RUNNING -> SUCCESS: :meth:`finish_many` for one run; False if fenced."""
        ...

    def finish_many(
        self,
        runs: Sequence[Run],
        results: Mapping[int, Any] | None = None,
        notes: Mapping[int, str] | None = None,
    ) -> set[int]:
        """RUNNING -> SUCCESS for a batch of one node's runs, in one transaction with a
        PENDING run for each active child task of each; returns the ids written. A fenced
        run is left alone and its children are not made. No task row is written (success
        counts are read from the history); the shards of one fire take turns on their
        task's row lock, so only the last to finish makes the children."""
        ...

    def fail(
        self,
        run: Run,
        error: str,
        *,
        retry_in: timedelta | None,
        traceback: str | None = None,
    ) -> bool:
        """RUNNING -> FAILED with *error*; in the same transaction a new PENDING attempt due
        *retry_in* from now, or (no retry) a SKIPPED row per child task. False if fenced."""
        ...

    def held_by_dead(
        self, dead_after: timedelta, limit: int, *, now: datetime | None = None
    ) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs whose node's heartbeat is older than
        *dead_after* at database time *now*, or whose node has no row."""
        ...

    def held_by(self, node_id: str, limit: int) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs of *node_id*."""
        ...

    def recover(
        self,
        runs: Sequence[HeldRun],
        by_node: str,
        *,
        reason: str | None = None,
        max_recoveries: int | None = None,
        gave_up: list[int] | None = None,
        recovered: list[tuple[HeldRun, int]] | None = None,
    ) -> list[int]:
        """Take back *runs* of dead nodes: each ends ABANDONED (version-checked: a run that
        moved meanwhile is left alone) and a new PENDING attempt is made; returns the new
        attempts' ids. With *max_recoveries* a run recovered that often from RUNNING ends
        FAILED instead (its id appended to *gave_up*): a crash is not contagious."""
        ...

    def held_counts(self) -> dict[str, int]:
        """How many runs each node holds (CLAIMED or RUNNING)."""
        ...

    def fates(self, since: datetime, until: datetime, due_since: datetime | None) -> Fates:
        """How many runs every node ended from *since* to *until* (database time): run, and
        MISSED after they were written, of those due from *due_since* on (all with None)."""
        ...


class NodeStore(Protocol):
    """Nodes: one row per node incarnation; liveness is heartbeat age in database time."""

    def register(
        self,
        node_id: str,
        *,
        host: str,
        pid: int,
        weight: int,
        strategy: str,
        workers: int,
        dead_after: timedelta | None = None,
        clock_offset_ms: int = 0,
        broadcast_tasks: Sequence[str] = (),
        catalog: Catalog | None = None,
    ) -> None:
        """Insert this node's row, RUNNING, heartbeat now. An existing id is taken over only
        if STOPPED, DEAD or stale beyond *dead_after*; otherwise NodeIdInUseError. The row
        names *catalog* (what its code declares), stored once per distinct catalog."""
        ...

    def catalogs(self, digests: Collection[str]) -> dict[str, Catalog]:
        """The catalogs stored under *digests* (those found), by digest: what the code of the
        nodes that name them declares (see :mod:`easyjob.core.admission`)."""
        ...

    def heartbeat(
        self,
        node_id: str,
        *,
        clock_offset_ms: int,
        claimed: int,
        completed: int,
        stuck: int = 0,
        health: str | None = None,
    ) -> Heartbeat:
        """Stamp the heartbeat with database time and the node's *health* (why it is
        unhealthy; None: healthy); a row a peer marked DEAD comes back (``revived``), a
        STOPPED or missing row is not touched (``accepted`` False)."""
        ...

    def set_status(self, node_id: str, status: NodeStatus) -> None:
        """Mark this node STOPPING or STOPPED."""
        ...

    def mark_dead(self, dead_after: timedelta, *, now: datetime | None = None) -> int:
        """Mark nodes whose heartbeat is older than *dead_after* at database time *now*
        DEAD; returns how many."""
        ...

    def prune(self, older_than: timedelta) -> int:
        """Delete STOPPED/DEAD nodes silent for *older_than* that hold no run."""
        ...

    def all(self) -> tuple[datetime, list[NodeRow]]:
        """Database time and every node row, heartbeat ages in database time."""
        ...

    def live(self, dead_after: timedelta) -> tuple[datetime, list[NodeRow]]:
        """Database time and the RUNNING nodes heard from within *dead_after*, by node id:
        the membership that strategies rank over."""
        ...

    def members(self, dead_after: timedelta) -> Members:
        """In one statement: its database time, :meth:`live`'s nodes, and the ids of the
        RUNNING or STOPPING nodes silent for longer than *dead_after* (those
        :meth:`mark_dead` would mark): a heartbeat's whole view of its peers."""
        ...


class HistoryStore(Protocol):
    """The run history: read newest first, pruned in batches."""

    def runs(
        self,
        *,
        task: str | None = None,
        status: RunStatus | None = None,
        node: str | None = None,
        limit: int = 100,
        ids: list[int] | None = None,
        since: datetime | None = None,
        started: bool | None = None,
    ) -> list[HistoryRow]:
        """At most *limit* runs, newest fire first, filtered as given (*task* may be a
        pattern, see :func:`is_pattern`). *started* True: only runs that started or ended;
        False: only the planned ones (neither), soonest fire first."""
        ...

    def prune(
        self,
        older_than: timedelta,
        *,
        batch: int = 1000,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished runs ended more than *older_than* ago, *batch* per transaction;
        runs pending or held are never deleted. The SUCCESS rows deleted are added to their
        tasks' ``pruned_success_count`` in the same transaction."""
        ...

    def prune_batch(self, older_than: timedelta, batch: int) -> int:
        """One batch of :meth:`prune`; returns how many were deleted."""
        ...

    def failures(
        self,
        *,
        limit: int = 10,
        statuses: Sequence[RunStatus] = (RunStatus.FAILED, RunStatus.MISSED, RunStatus.ABANDONED),
    ) -> list[HistoryRow]:
        """At most *limit* runs that ended in *statuses*, the most recently ended first."""
        ...

    def backlog(self, task_ids: Sequence[int] | None = None) -> tuple[datetime, dict[int, Backlog]]:
        """Database time and, by task id, the PENDING runs already due (count, oldest)."""
        ...


class ViewStore(Protocol):
    """The dashboard's and ``easyjob tasks``' reads (read-only transactions)."""

    def tasks(self, *, name_contains: str | None = None, limit: int = 500) -> list[TaskRow]:
        """Tasks by name, at most *limit*, those whose name contains *name_contains*, with
        their ``success_count``."""
        ...

    def find_tasks(
        self, *, task: str | None = None, status: str | None = None, limit: int | None = None
    ) -> tuple[int, list[TaskRow]]:
        """How many tasks match *task* (name or pattern) and *status*, and the first
        *limit* of them by name, with their ``success_count``."""
        ...

    def last_outcomes(self, task_ids: Sequence[int]) -> dict[int, LastOutcome]:
        """The last ended run of each task in *task_ids*."""
        ...

    def next_fires(self, task_ids: Sequence[int]) -> dict[int, datetime]:
        """By task id of *task_ids*, the earliest fire time of its unstarted cron fires
        (PENDING or CLAIMED); tasks with none are absent."""
        ...

    def takeovers(self, run_ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
        """By id of *run_ids*, the next attempt of the same fire: its id and its node."""
        ...

    def parents(self, task_ids: Sequence[int]) -> dict[int, list[int]]:
        """By id of *task_ids*, the parents (task ids, in declared order) of each task of
        several parents (a join); tasks of one parent or none are absent."""
        ...

    def activity(self, window: timedelta, buckets: int = 60) -> Activity:
        """Runs ended in the last *window* (database time), in *buckets* equal buckets."""
        ...


class SummaryStore(Protocol):
    """What ``easyjob status`` shows: bounded reads, whatever the size of the tables."""

    def summary(self, *, window: timedelta, late_after: timedelta, top: int) -> Summary:
        """Counts now and over *window*, and the *top* late and failing tasks."""
        ...


class CancelStore(Protocol):
    """Cancelling runs on request, from any host (see :mod:`easyjob.store.cancels`)."""

    def cancel(self, run_id: int, reason: str = ...) -> Cancelled:
        """End run *run_id* CANCELLED unless it ended already (version-checked); a node
        then starting it, or writing its outcome, is fenced. RunNotFoundError for an
        unknown id."""
        ...

    def cancelled(self, run_ids: Collection[int]) -> set[int]:
        """Which of *run_ids* are CANCELLED now (a node asks about the runs it runs)."""
        ...


class ProgressStore(Protocol):
    """Whether nodes do the work they hold (a node's ``/readyz``, ``easyjob status``)."""

    def held_due(
        self, by: timedelta = ..., node_id: str | None = None, *, now: datetime | None = None
    ) -> dict[str, int]:
        """How many runs each node (or just *node_id*) holds CLAIMED more than *by* (default
        ``HELD_DUE_AFTER``, 10 s) past their due time in database time (*now*, when the
        caller knows it: a node does), neither started nor handed back; runs waiting for a
        RUNNING run of their task are not counted."""
        ...


class BenchStore(Protocol):
    """``easyjob bench``: a trial's runs, and the database's own rate for the claim's SQL."""

    def reset(self) -> None:
        """Delete every task, run and node; ConfigError unless every task is the bench's."""
        ...

    def succeeded(self, start: datetime, end: datetime) -> list[tuple[int, datetime, datetime]]:
        """``(task id, fire time, start time)`` of the SUCCESS runs of bench tasks fired in
        [*start*, *end*]."""
        ...

    def succeeded_since(self, start: datetime) -> int:
        """How many runs fired at or after *start* succeeded."""
        ...

    def task_count(self) -> int:
        """How many tasks are registered."""
        ...

    def overdue(self, by: timedelta) -> int:
        """How many runs are PENDING or CLAIMED more than *by* past due (database time)."""
        ...

    def stale(self) -> int:
        """How many runs are PENDING or CLAIMED longer than their task's misfire grace."""
        ...

    def misses(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Of the MISSED rows of the window's fires: written as runs and then MISSED, and
        written MISSED (summaries)."""
        ...

    def seed_probe(self, task_id: int, rows: int) -> int:
        """Replace task *task_id*'s runs by *rows* PENDING runs of consecutive ids; returns
        the first id."""
        ...

    def probe_claim(self, first_id: int, count: int, node_id: str) -> int:
        """One claim of the claim's SQL shape over ids [*first_id*, *first_id* + *count*)
        that leaves the rows PENDING; returns the rows updated."""
        ...


class AuditStore(Protocol):
    """The operators' audit log: each dashboard action, who took it, when, and its result."""

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
        ...

    def entries(self, *, limit: int = 200) -> list[AuditEntry]:
        """The newest *limit* entries, newest first."""
        ...


class CalendarStore(Protocol):
    """Calendars of excluded days (``easy_job_calendar``; see :mod:`easyjob.core.calendars`)."""

    def add(self, name: str, first: date, last: date, note: str | None = None) -> CalendarDay:
        """Exclude *first* to *last* (inclusive) in calendar *name*; returns the row.
        ConfigError for a bad name or a reversed range (nothing written)."""
        ...

    def remove(self, name: str, days: tuple[date, date] | None = None) -> int:
        """Remove calendar *name*, or only *days* from it; returns the days no longer
        excluded. CalendarNotFoundError when it does not exist or excludes none of *days*."""
        ...

    def list(self, name: str | None = None) -> list[CalendarDay]:
        """The rows of calendar *name* (of all when None); CalendarNotFoundError when
        *name* has none."""
        ...

    def days(self, names: Collection[str]) -> dict[str, tuple[tuple[date, date], ...]]:
        """The excluded ranges of each existing calendar of *names*."""
        ...

    def version(self) -> tuple[int, int]:
        """A value that changes whenever any calendar changes (a cheap read)."""
        ...


class Store(Protocol):
    """One database seen through its statement groups; what the node layer, the CLI, the
    dashboard and the bench are given."""

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def schedules(self) -> ScheduleStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def nodes(self) -> NodeStore: ...

    @property
    def history(self) -> HistoryStore: ...

    @property
    def views(self) -> ViewStore: ...

    @property
    def summary(self) -> SummaryStore: ...

    @property
    def bench(self) -> BenchStore: ...

    @property
    def progress(self) -> ProgressStore: ...

    @property
    def cancels(self) -> CancelStore: ...

    @property
    def audit(self) -> AuditStore: ...

    @property
    def calendars(self) -> CalendarStore: ...

    @property
    def url(self) -> str:
        """The database URL with its password masked, for messages and logs."""
        ...

    @property
    def server(self) -> str:
        """The database product and version (``mariadb 10.11.6``), for messages."""
        ...

    @property
    def skip_locked(self) -> bool:
        """Whether :meth:`RunStore.claim_next` (the ``skip_locked`` mode) is offered."""
        ...

    def require_skip_locked(self) -> None:
        """Raise ConfigError naming the database unless :attr:`skip_locked`."""
        ...

    @property
    def local_clock(self) -> bool:
        """Whether database time is this process's own clock (SQLite), not a server's."""
        ...

    @property
    def id_step(self) -> int:
        """How far apart the database hands out ids (1; a Galera cluster's size): see
        :mod:`easyjob.core.ids`."""
        ...

    def now(self) -> datetime:
        """The database's current time (aware UTC)."""
        ...

    def counters(self) -> dict[str, int]:
        """Round trips since the store opened: ``statements``, ``commits``, and
        ``errors.KIND`` per kind of failed attempt (``connection``, ``deadlock``, ``lock``,
        ``read_only``, ``resources``, ``other``)."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...
