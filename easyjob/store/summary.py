"""Bounded reads for ``easyjob status``: counts by status and node, and the top N late and
failing tasks. Each statement returns at most a few rows per status, node or requested
task, however many tasks and runs the tables hold; every one is served by an index
(``status`` first on both tables, ``end_time`` for the window)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from easyjob.core.states import HELD, RunStatus, TaskStatus
from easyjob.core.store_values import FailingTask, LateTask, Summary
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.schema import node_table, task_detail_table, task_table
from easyjob.store.successes import counted_tasks

__all__ = ["FailingTask", "LateTask", "Summary", "SummaryStore"]

d = task_detail_table
t = task_table
n = node_table

#: Bad endings counted as a task's failures in the window.
FAILING = (RunStatus.FAILED, RunStatus.ABANDONED)


class SummaryStore:
    """The status summary (read-only transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def summary(self, *, window: timedelta, late_after: timedelta, top: int) -> Summary:
        """Counts now and over the last *window*, and at most *top* late tasks (lag above
        *late_after*, most late first) and failing tasks (most failures in the window first)."""

        def read(conn: sa.Connection) -> Summary:
            now = database_time(conn)
            since, late_before = now - window, now - late_after
            total, late = _late(conn, now, late_before, top)
            return Summary(
                db_time=now,
                tasks=_counts(conn, sa.select(t.c.status, sa.func.count()).group_by(t.c.status)),
                runs=_unfinished(conn, now),
                ended=_counts(
                    conn,
                    sa.select(d.c.status, sa.func.count())
                    .where(d.c.end_time >= since)
                    .group_by(d.c.status),
                ),
                nodes=_counts(conn, sa.select(n.c.status, sa.func.count()).group_by(n.c.status)),
                by_node=_by_node(conn, since),
                late_total=total,
                late=late,
                failing=_failing(conn, since, top),
            )

        return self._db.read("status_summary", read)


def _counts(conn: sa.Connection, query: sa.Select[Any]) -> dict[str, int]:
    return {str(key): int(count) for key, count in conn.execute(query)}


def _unfinished(conn: sa.Connection, now: datetime) -> dict[str, int]:
    due = sa.case((d.c.due_time > now, "PENDING_LATER"), else_=d.c.status)
    query = (
        sa.select(due, sa.func.count())
        .where(d.c.status.in_([str(RunStatus.PENDING), *(str(s) for s in HELD)]))
        .group_by(due)
    )
    return _counts(conn, query)


def _by_node(conn: sa.Connection, since: datetime) -> dict[str, dict[str, int]]:
    held = (
        sa.select(d.c.node_id, d.c.status, sa.func.count())
        .where(d.c.status.in_([str(s) for s in HELD]))
        .group_by(d.c.node_id, d.c.status)
    )
    ended = (
        sa.select(d.c.node_id, d.c.status, sa.func.count())
        .where(d.c.end_time >= since, d.c.node_id.is_not(None))
        .group_by(d.c.node_id, d.c.status)
    )
    found: dict[str, dict[str, int]] = {}
    for query in (held, ended):
        for node_id, status, count in conn.execute(query):
            found.setdefault(node_id, {})[status] = int(count)
    return found


def _late(
    conn: sa.Connection, now: datetime, before: datetime, top: int
) -> tuple[int, list[LateTask]]:
    """How many ACTIVE tasks are late, and the *top* most late. A task is late when its first
    fire not yet written (``next_start_time``, the planning cursor: fires are written ahead
    of it, so a cursor ahead of now is no lag) or its oldest due PENDING run is older than
    *before*; its lag is database time minus the older of the two (never negative: one of
    them is older than *before*)."""
    active = t.c.status == str(TaskStatus.ACTIVE)
    unwritten = sa.select(t.c.id).where(active, t.c.next_start_time < before)
    waiting = (
        sa.select(d.c.task_id)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(d.c.status == str(RunStatus.PENDING), d.c.due_time < before, active)
    )
    either = sa.union(unwritten, waiting).subquery()
    total = int(conn.scalar(sa.select(sa.func.count()).select_from(either)) or 0)
    if not total:
        return 0, []
    oldest = (
        sa.select(d.c.task_id, sa.func.min(d.c.due_time).label("oldest"))
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(d.c.status == str(RunStatus.PENDING), d.c.due_time < before, active)
        .group_by(d.c.task_id)
        .order_by(sa.func.min(d.c.due_time))
        .limit(top)
    )
    ids = {int(row.task_id) for row in conn.execute(oldest)}
    ids |= set(
        conn.scalars(
            sa.select(t.c.id)
            .where(active, t.c.next_start_time < before)
            .order_by(t.c.next_start_time)
            .limit(top)
        )
    )
    due = d.c.status == str(RunStatus.PENDING), d.c.due_time <= now, d.c.task_id.in_(ids)
    backlog = {
        int(task_id): (int(count), first)
        for task_id, count, first in conn.execute(
            sa.select(d.c.task_id, sa.func.count(), sa.func.min(d.c.due_time))
            .where(*due)
            .group_by(d.c.task_id)
        )
    }
    found = []
    for row in conn.execute(counted_tasks().where(t.c.id.in_(ids))).mappings():
        count, first = backlog.get(int(row["id"]), (0, None))
        times = [x for x in (row["next_start_time"], first) if x is not None]
        found.append(
            LateTask(
                name=row["name"],
                next_start_time=row["next_start_time"],
                oldest_pending=first,
                pending=count,
                lag_s=(now - min(times)).total_seconds(),
                success_count=int(row["success_count"]),
                fail_count=int(row["fail_count"]),
            )
        )
    found.sort(key=lambda late: (-late.lag_s, late.name))
    return total, found[:top]


def _failing(conn: sa.Connection, since: datetime, top: int) -> list[FailingTask]:
    failures = sa.func.count().label("failures")
    last = sa.func.max(d.c.end_time).label("last_end")
    worst = (
        sa.select(d.c.task_id, failures, last)
        .where(d.c.end_time >= since, d.c.status.in_([str(s) for s in FAILING]))
        .group_by(d.c.task_id)
        .order_by(failures.desc(), last.desc())
        .limit(top)
        .subquery()
    )
    query = (
        sa.select(t.c.name, worst.c.failures, worst.c.last_end, t.c.fail_count)
        .join_from(worst, t, t.c.id == worst.c.task_id)
        .order_by(worst.c.failures.desc(), worst.c.last_end.desc(), t.c.name)
    )
    return [
        FailingTask(row.name, int(row.failures), row.last_end, int(row.fail_count))
        for row in conn.execute(query)
    ]
