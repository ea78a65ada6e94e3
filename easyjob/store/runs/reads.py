"""Reads of ``easy_job_task_detail`` shared by the run store: the claimable PENDING runs, the
runs each node holds, how many runs the cluster ended and missed lately, and the mapping of a
run's row to its record."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

import sqlalchemy as sa

from easyjob.core.pacing import Fates
from easyjob.core.records import Candidate, Run
from easyjob.core.states import HELD, Misfire, Overlap, RunStatus, TaskStatus, Trigger
from easyjob.core.strategies import ReadScope, Share
from easyjob.store.database import Database
from easyjob.store.expressions import in_list, not_in_list
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunReads", "claimable_by", "read_runs", "read_started"]

d = task_detail_table
t = task_table

#: A run's task schedule, for the admission rule (see ``Candidate.schedule_key``).
_SCHEDULE_COLUMNS = (
    t.c.cron_expr,
    t.c.tz,
    t.c.every_ms,
    t.c.anchor_time,
    t.c.starts_at,
    t.c.ends_at,
    t.c.jitter_ms,
)

#: A run's limit and priority, for the admission rule (a trigger's priority, else its task's).
_LIMIT_COLUMNS = (
    t.c.max_running,
    d.c.shards,
    sa.func.coalesce(d.c.priority, t.c.priority).label("priority"),
)

#: The columns of a :class:`Run`, in its fields' order (see :func:`_run`).
_RUN_COLUMNS = (
    d.c.id,
    d.c.version,
    d.c.status,
    d.c.node_id,
    d.c.task_id,
    t.c.name.label("task_name"),
    t.c.func,
    t.c.kwargs,
    d.c.fire_time,
    d.c.due_time,
    d.c.attempt,
    d.c.triggered_by,
    d.c.pid,
    t.c.overlap,
    t.c.retries,
    t.c.retry_delay_ms,
    t.c.timeout_ms,
    t.c.misfire,
    t.c.misfire_grace_ms,
    d.c.kwargs.label("trigger_kwargs"),
    t.c.origin,
    d.c.shard,
    d.c.target_node,
    d.c.priority.label("trigger_priority"),
    *_SCHEDULE_COLUMNS,
    *_LIMIT_COLUMNS,
)

#: The columns of a :class:`Candidate`, in its fields' order (see :func:`_candidate`).
_CANDIDATE_COLUMNS = (
    d.c.id,
    d.c.task_id,
    d.c.version,
    d.c.fire_time,
    d.c.due_time,
    t.c.name.label("task_name"),
    t.c.func,
    t.c.overlap,
    t.c.misfire,
    t.c.misfire_grace_ms,
    t.c.origin,
    d.c.shard,
    d.c.target_node,
    d.c.triggered_by,
    *_SCHEDULE_COLUMNS,
    *_LIMIT_COLUMNS,
)

E = TypeVar("E", bound=StrEnum)


class _ByValue(dict[str, E]):
    """Each member of an enumeration by its stored text: a dict lookup costs a fraction of
    the enumeration's own call, and the pending read makes several per row it returns. A
    text that names no member raises the enumeration's own ValueError."""

    def __init__(self, enum: type[E]) -> None:
        super().__init__((str(member), member) for member in enum)
        self._enum = enum

    def __missing__(self, text: str) -> E:
        return self._enum(text)


_TRIGGERS = _ByValue(Trigger)
_OVERLAPS = _ByValue(Overlap)
_MISFIRES = _ByValue(Misfire)
_STATUSES = _ByValue(RunStatus)


class RunReads:
    """The run store's plain reads: what may be claimed, and what each node holds."""

    _db: Database

    def pending(
        self,
        horizon: datetime,
        limit: int,
        exclude: Collection[int] = (),
        *,
        node_id: str | None = None,
        scope: ReadScope | None = None,
    ) -> list[Candidate]:
        """At most *limit* PENDING runs due by *horizon*, earliest first, of tasks not
        PAUSED and not in *exclude* (task ids: the loader's small set of tasks that are
        not its code's); with *node_id*, less the broadcast runs of other nodes; with a
        *scope* that has a share, only its home runs and those due by its ``others_by``
        (see :func:`easyjob.core.strategies.read_scope`). Served by the index on (status,
        due_time) and the task's primary key, the share a filter on that range: the cost is
        per row returned (and per index entry of the range), whatever the backlog or the
        number of tasks.

        The database orders by due time alone, so that it can stop after *limit* rows of
        the index: ordered by (due_time, id) as well, PostgreSQL read, joined and sorted
        every run due at one instant before keeping *limit* (its index breaks ties by row
        position, not id: 212 ms a read, against 0.7, with 20,000 minute tasks due on one
        minute, issue 25). The rows returned are then put in (due_time, id) order here. On
        SQLite and MariaDB the index's ties are in id order already (it holds the primary
        key), so the same rows come back; on PostgreSQL, which of several runs due at the
        same instant are cut by *limit* follows their place in the table (in practice the
        order they were written in)."""

        def read(conn: sa.Connection) -> list[Candidate]:
            query = (
                sa.select(*_CANDIDATE_COLUMNS)
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(
                    d.c.status == str(RunStatus.PENDING),
                    d.c.due_time <= horizon,
                    t.c.status != str(TaskStatus.PAUSED),
                )
                .order_by(d.c.due_time)
                .limit(limit)
            )
            if exclude:
                query = query.where(not_in_list(d.c.task_id, exclude))
            if node_id is not None:
                query = query.where(claimable_by(node_id))
            if scope is not None and scope.share is not None:
                query = query.where(_in_scope(scope.share, scope.others_by))
            found = [_candidate(row) for row in conn.execute(query)]
            found.sort(key=_due_order)
            return found

        return self._db.read("pending_runs", read)

    def held_counts(self) -> dict[str, int]:
        """How many runs each node holds (CLAIMED or RUNNING)."""

        def read(conn: sa.Connection) -> dict[str, int]:
            query = (
                sa.select(d.c.node_id, sa.func.count())
                .where(d.c.status.in_([str(s) for s in HELD]))
                .group_by(d.c.node_id)
            )
            return {row[0]: int(row[1]) for row in conn.execute(query)}

        return self._db.read("held_counts", read)

    def fates(self, since: datetime, until: datetime, due_since: datetime | None) -> Fates:
        """How many runs the cluster (every node) ended from *since* to *until* (database
        time, by ``end_time``): run (SUCCESS or FAILED), and MISSED after they were written
        (a version past the insert's: a summary row of a gap, written MISSED, is not one),
        of those due from *due_since* on (all with None; see
        :class:`~easyjob.core.pacing.Fates`). One range of the ``end_time`` index."""
        ended = (str(RunStatus.SUCCESS), str(RunStatus.FAILED), str(RunStatus.MISSED))

        def read(conn: sa.Connection) -> Fates:
            query = (
                sa.select(d.c.status, sa.func.count())
                .where(
                    d.c.end_time >= since,
                    d.c.end_time < until,
                    d.c.status.in_(ended),
                    d.c.version > 0,
                )
                .group_by(d.c.status)
            )
            if due_since is not None:
                query = query.where(d.c.due_time >= due_since)
            counts = {row[0]: int(row[1]) for row in conn.execute(query)}
            missed = counts.pop(str(RunStatus.MISSED), 0)
            return Fates(ran=sum(counts.values()), missed=missed)

        return self._db.read("run_fates", read)


def _due_order(candidate: Candidate) -> tuple[datetime, int]:
    return candidate.due_time, candidate.id


def read_runs(conn: sa.Connection, ids: Collection[int]) -> list[Run]:
    """The runs of *ids*, read afresh with their task's columns, in due order."""
    query = (
        sa.select(*_RUN_COLUMNS)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(in_list(d.c.id, ids))
        .order_by(d.c.due_time, d.c.id)
    )
    return [_run(row) for row in conn.execute(query)]


def read_started(
    conn: sa.Connection, node_id: str, fires: Collection[tuple[int, datetime]], at: datetime
) -> list[Run]:
    """The runs of *fires* (task id, fire time) that *node_id* inserted RUNNING in this
    transaction, whose database time is *at* (see :mod:`easyjob.store.runs.started`): a
    fire that already had a row (another node wrote it) is not among them. One probe of
    the index on (task_id, status)."""
    query = (
        sa.select(*_RUN_COLUMNS)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(
            in_list(d.c.task_id, sorted({task_id for task_id, _ in fires})),
            d.c.status == str(RunStatus.RUNNING),
            d.c.node_id == node_id,
            d.c.create_time == at,
        )
        .order_by(d.c.due_time, d.c.id)
    )
    wanted = set(fires)
    return [run for run in map(_run, conn.execute(query)) if (run.task_id, run.fire_time) in wanted]


def _in_scope(share: Share, others_by: datetime | None) -> sa.ColumnElement[bool]:
    """A home run of *share*, or any run due by *others_by*."""
    key = d.c.task_id + d.c.shard if share.by_task else d.c.id
    home = (key % share.nodes) == share.rank
    return home if others_by is None else sa.or_(home, d.c.due_time <= others_by)


def claimable_by(node_id: str) -> sa.ColumnElement[bool]:
    """Runs *node_id* may claim: any but another node's broadcast run."""
    return sa.or_(d.c.target_node.is_(None), d.c.target_node == node_id)


#: Where a row's schedule and limit values start (see :func:`_run` and :func:`_candidate`).
_RUN_SCHEDULE = len(_RUN_COLUMNS) - len(_LIMIT_COLUMNS) - len(_SCHEDULE_COLUMNS)
_CANDIDATE_SCHEDULE = len(_CANDIDATE_COLUMNS) - len(_LIMIT_COLUMNS) - len(_SCHEDULE_COLUMNS)


def _run(row: Sequence[Any]) -> Run:
    """The :class:`Run` of a row of :data:`_RUN_COLUMNS`."""
    (run_id, version, status, node_id, task_id, name, func, kwargs, fire_time, due_time) = row[:10]
    (attempt, trigger, pid, overlap, retries, retry_delay_ms, timeout_ms, misfire) = row[10:18]
    (grace_ms, trigger_kwargs, origin, shard, target, trigger_priority) = row[18:_RUN_SCHEDULE]
    limits = _RUN_SCHEDULE + len(_SCHEDULE_COLUMNS)
    max_running, shards, priority = row[limits:]
    return Run(
        run_id,
        version,
        _STATUSES[status],
        node_id,
        task_id,
        name,
        func,
        kwargs,
        fire_time,
        due_time,
        attempt,
        _TRIGGERS[trigger],
        pid,
        _OVERLAPS[overlap],
        retries,
        retry_delay_ms,
        timeout_ms,
        _MISFIRES[misfire],
        grace_ms,
        trigger_kwargs,
        origin,
        shard,
        shards,
        target,
        max_running,
        priority,
        trigger_priority,
        **_schedule(row[_RUN_SCHEDULE:limits]),
    )


def _candidate(row: Sequence[Any]) -> Candidate:
    """The :class:`Candidate` of a row of :data:`_CANDIDATE_COLUMNS`: built from the row's
    values by position (the pending read is the node's most frequent; a mapping per row and
    keyword arguments cost it as much again as reading the row)."""
    (run_id, task_id, version, fire_time, due_time, name, func, overlap, misfire) = row[:9]
    (grace_ms, origin, shard, target, trigger) = row[9:_CANDIDATE_SCHEDULE]
    limits = _CANDIDATE_SCHEDULE + len(_SCHEDULE_COLUMNS)
    max_running, shards, priority = row[limits:]
    return Candidate(
        run_id,
        task_id,
        version,
        fire_time,
        due_time,
        name,
        func,
        _OVERLAPS[overlap],
        _MISFIRES[misfire],
        grace_ms,
        origin,
        shard,
        target,
        _TRIGGERS[trigger],
        shards,
        max_running,
        priority,
        **_schedule(row[_CANDIDATE_SCHEDULE:limits]),
    )


def _schedule(values: Sequence[Any]) -> dict[str, Any]:
    """The schedule fields of a record from the values of :data:`_SCHEDULE_COLUMNS`."""
    cron_expr, tz, every_ms, anchor_time, starts_at, ends_at, jitter_ms = values
    return {
        "cron_expr": cron_expr,
        "tz": tz,
        "every_ms": every_ms,
        "anchor_time": anchor_time,
        "starts_at": starts_at,
        "ends_at": ends_at,
        "jitter_ms": jitter_ms,
    }
