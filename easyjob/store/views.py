"""Reads for the dashboard that the other statement groups do not have: tasks by name with
a limit, each task's last outcome, and runs and lateness over time. Every statement here
only reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from easyjob.core.records import TaskRow
from easyjob.core.states import TERMINAL, RunStatus, Trigger, by_value
from easyjob.core.store_values import Activity, Bucket, LastOutcome
from easyjob.store.database import Database
from easyjob.store.engine import compiled_by, database_time
from easyjob.store.history import name_matches
from easyjob.store.parents import parents_of
from easyjob.store.schema import UTCDateTime, task_detail_table, task_table
from easyjob.store.successes import counted_tasks

__all__ = ["Activity", "Bucket", "LastOutcome", "ViewStore"]

d = task_detail_table
t = task_table


#: Task ids per statement of a read by ids: well under every backend's limit of bound
#: parameters, however many tasks ``easyjob tasks --limit`` lists.
_IDS_PER_READ = 1000


class ViewStore:
    """Dashboard reads (read-only transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def tasks(self, *, name_contains: str | None = None, limit: int = 500) -> list[TaskRow]:
        """Tasks by name, at most *limit*, those whose name contains *name_contains*, with
        their ``success_count`` (see :mod:`easyjob.store.successes`)."""

        def read(conn: sa.Connection) -> list[TaskRow]:
            query = counted_tasks().order_by(t.c.name).limit(limit)
            if name_contains:
                query = query.where(t.c.name.contains(name_contains, autoescape=True))
            return [TaskRow.from_row(row) for row in conn.execute(query).mappings()]

        return self._db.read("view_tasks", read)

    def find_tasks(
        self, *, task: str | None = None, status: str | None = None, limit: int | None = None
    ) -> tuple[int, list[TaskRow]]:
        """How many tasks match, and the first *limit* of them by name: those whose name is
        *task* (or matches it as a pattern, see :func:`~easyjob.store.history.name_matches`)
        and whose status is *status*, when given; each with its ``success_count``."""

        def read(conn: sa.Connection) -> tuple[int, list[TaskRow]]:
            where = []
            if task is not None:
                where.append(name_matches(t.c.name, task))
            if status is not None:
                where.append(t.c.status == status)
            total = conn.scalar(sa.select(sa.func.count()).select_from(t).where(*where))
            query = counted_tasks().where(*where).order_by(t.c.name).limit(limit)
            rows = [TaskRow.from_row(row) for row in conn.execute(query).mappings()]
            return int(total or 0), rows

        return self._db.read("find_tasks", read)

    def last_outcomes(self, task_ids: Sequence[int]) -> dict[int, LastOutcome]:
        """The last ended run of each task in *task_ids* (newest row of a final status),
        read through the (task_id, status) index."""
        if not task_ids:
            return {}

        def read(conn: sa.Connection) -> dict[int, LastOutcome]:
            newest = (
                sa.select(sa.func.max(d.c.id))
                .where(d.c.task_id.in_(list(task_ids)), d.c.status.in_([str(s) for s in TERMINAL]))
                .group_by(d.c.task_id)
            )
            query = sa.select(d.c.task_id, d.c.status, d.c.end_time).where(
                d.c.id.in_(newest.scalar_subquery())
            )
            return {
                int(row.task_id): LastOutcome(by_value(RunStatus)[row.status], row.end_time)
                for row in conn.execute(query)
            }

        return self._db.read("view_last_outcomes", read)

    def parents(self, task_ids: Sequence[int]) -> dict[int, list[int]]:
        """By id of *task_ids*, the parents (in declared order) of each task of several
        parents; tasks of one parent or none are absent."""
        ids = list(task_ids)
        return self._db.read(
            "view_parents",
            lambda conn: {
                task_id: found
                for start in range(0, len(ids), _IDS_PER_READ)
                for task_id, found in parents_of(conn, ids[start : start + _IDS_PER_READ]).items()
            },
        )

    def next_fires(self, task_ids: Sequence[int]) -> dict[int, datetime]:
        """By task id of *task_ids*, the earliest fire time of its unstarted cron fires
        (PENDING or CLAIMED: written ahead, or due and waiting); tasks with none are absent.
        A task's next fire is the earlier of this and its ``next_start_time`` (the first
        fire not written yet). Read through the (task_id, status) index."""
        if not task_ids:
            return {}

        ids = list(task_ids)

        def read(conn: sa.Connection) -> dict[int, datetime]:
            found: dict[int, datetime] = {}
            for start in range(0, len(ids), _IDS_PER_READ):
                query = (
                    sa.select(d.c.task_id, sa.func.min(d.c.fire_time))
                    .where(
                        d.c.task_id.in_(ids[start : start + _IDS_PER_READ]),
                        d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)]),
                        d.c.triggered_by == str(Trigger.CRON),
                    )
                    .group_by(d.c.task_id)
                )
                found.update((int(task_id), first) for task_id, first in conn.execute(query))
            return found

        return self._db.read("view_next_fires", read)

    def takeovers(self, run_ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
        """By id of *run_ids*, the attempt that followed it (same task, fire and shard, the
        next attempt number): its id and the node that holds or ran it (None while no node
        has claimed it). Runs with no next attempt are absent."""
        if not run_ids:
            return {}
        ids = list(run_ids)
        after = d.alias("after")

        def read(conn: sa.Connection) -> dict[int, tuple[int, str | None]]:
            found: dict[int, tuple[int, str | None]] = {}
            for start in range(0, len(ids), _IDS_PER_READ):
                query = sa.select(d.c.id, after.c.id, after.c.node_id).join_from(
                    d,
                    after,
                    sa.and_(
                        after.c.task_id == d.c.task_id,
                        after.c.fire_time == d.c.fire_time,
                        after.c.shard == d.c.shard,
                        after.c.attempt == d.c.attempt + 1,
                    ),
                )
                query = query.where(d.c.id.in_(ids[start : start + _IDS_PER_READ]))
                found.update((int(old), (int(new), node)) for old, new, node in conn.execute(query))
            return found

        return self._db.read("view_takeovers", read)

    def activity(self, window: timedelta, buckets: int = 60) -> Activity:
        """Runs that ended in the last *window* (database time) in *buckets* equal buckets,
        read through the index on ``end_time``."""
        if buckets < 1 or window <= timedelta(0):
            raise ValueError(f"need a positive window and bucket count, got {window}, {buckets}")
        width = window / buckets
        width_s = width.total_seconds()

        def read(conn: sa.Connection) -> Activity:
            now = database_time(conn)
            start = now - window
            since = sa.literal(start, UTCDateTime())
            index = _floor((_epoch(d.c.end_time) - _epoch(since)) / width_s).label("bucket")
            late = _epoch(d.c.start_time) - _epoch(d.c.due_time)
            query = (
                sa.select(
                    index,
                    d.c.status,
                    sa.func.count(),
                    sa.func.count(d.c.start_time),
                    sa.func.sum(late),
                    sa.func.max(late),
                )
                .where(d.c.end_time >= since)
                .group_by(sa.literal_column("bucket"), d.c.status)
            )
            found = [Bucket(start + width * i) for i in range(buckets)]
            for i, status, runs, started, late_sum, late_max in conn.execute(query):
                bucket = found[min(max(int(i), 0), buckets - 1)]
                bucket.by_status[status] = bucket.by_status.get(status, 0) + int(runs)
                bucket.started += int(started)
                bucket.lateness_sum_s += float(late_sum or 0.0)
                bucket.lateness_max_s = max(bucket.lateness_max_s, float(late_max or 0.0))
            return Activity(now, width, found)

        return self._db.read("view_activity", read)


class _epoch(FunctionElement[float]):
    """Seconds since 1970-01-01 of a stored UTC time."""

    type = sa.Float()
    inherit_cache = True


@compiles(_epoch)
def _epoch_sql(element: _epoch, compiler: SQLCompiler, **kw: Any) -> str:
    return compiled_by(compiler).epoch_sql(compiler.process(element.clauses, **kw))


class _floor(FunctionElement[int]):
    """The largest integer not above a (positive) number."""

    type = sa.Integer()
    inherit_cache = True


@compiles(_floor)
def _floor_sql(element: _floor, compiler: SQLCompiler, **kw: Any) -> str:
    return compiled_by(compiler).floor_sql(compiler.process(element.clauses, **kw))
