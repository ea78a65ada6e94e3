"""Reading and pruning the run history (``easy_job_task_detail``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa

from easyjob.core.records import HistoryRow
from easyjob.core.states import TERMINAL, RunStatus, Trigger, by_value
from easyjob.core.store_values import Backlog, is_pattern
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.schema import task_detail_table, task_table
from easyjob.store.successes import delete_runs

__all__ = ["Backlog", "HistoryStore", "is_pattern", "name_matches"]

d = task_detail_table
t = task_table


_GLOB = {"*": "%", "?": "_", "%": "!%", "_": "!_", "!": "!!"}


def name_matches(column: sa.ColumnElement[str], pattern: str) -> sa.ColumnElement[bool]:
    """*column* matches the shell-style *pattern*: ``*`` any text, ``?`` one character, any
    other character itself (SQL's ``%`` and ``_`` included); a name without ``*`` or ``?``
    matches itself only."""
    if not is_pattern(pattern):
        return column == pattern
    return column.like("".join(_GLOB.get(c, c) for c in pattern), escape="!")


class HistoryStore:
    """The run history: newest first, filtered by task and status; pruned in batches."""

    def __init__(self, db: Database) -> None:
        self._db = db

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
        """At most *limit* runs, newest fire first (ties: newest row first), of *task* (a
        name, or a pattern as :func:`name_matches` reads it), in *status*, held or run by
        *node*, and fired at or after *since* when given. With *started* True, only runs
        that started or ended (what happened); with *started* False, only the runs that
        neither started nor ended (what is planned: fires written ahead, waiting or held),
        soonest fire first."""

        def read(conn: sa.Connection) -> list[HistoryRow]:
            columns = [d.c[name] for name in _DETAIL]
            query = sa.select(*columns, t.c.name.label("task_name")).join_from(
                d, t, t.c.id == d.c.task_id
            )
            if task is not None:
                query = query.where(name_matches(t.c.name, task))
            if since is not None:
                query = query.where(d.c.fire_time >= since)
            if status is not None:
                query = query.where(d.c.status == str(status))
            if node is not None:
                query = query.where(d.c.node_id == node)
            if ids is not None:
                query = query.where(d.c.id.in_(ids))
            happened = sa.or_(d.c.start_time.is_not(None), d.c.end_time.is_not(None))
            if started is True:
                query = query.where(happened)
            if started is False:
                query = query.where(sa.not_(happened))
                query = query.order_by(d.c.fire_time, d.c.id).limit(limit)
            else:
                query = query.order_by(d.c.fire_time.desc(), d.c.id.desc()).limit(limit)
            return [_history(row) for row in conn.execute(query).mappings()]

        return self._db.read("history", read)

    def prune(
        self,
        older_than: timedelta,
        *,
        batch: int = 1000,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished runs whose ``end_time`` is older than *older_than* (database time),
        *batch* rows per transaction so no lock is held long; *progress* gets the running
        total after each batch. Runs still pending or held are never deleted. The SUCCESS
        rows deleted move into their tasks' ``pruned_success_count`` in the same transaction
        (see :mod:`easyjob.store.successes`): a task's success count does not change."""
        total = 0
        cutoff = self._db.now() - older_than
        while True:

            def write(conn: sa.Connection) -> tuple[int, int]:
                ids = list(
                    conn.scalars(
                        sa.select(d.c.id)
                        .where(d.c.end_time < cutoff, d.c.status.in_([str(s) for s in TERMINAL]))
                        .limit(batch)
                    )
                )
                return len(ids), delete_runs(conn, ids)

            # a full batch read means more may be left, even if another pruner deleted some
            found, deleted = self._db.write("prune", write)
            total += deleted
            if progress is not None:
                progress(total)
            if found < batch:
                return total

    def prune_batch(self, older_than: timedelta, batch: int) -> int:
        """One batch of :meth:`prune`: at most *batch* finished runs whose ``end_time`` is
        older than *older_than* (database time) deleted in one short transaction, their
        successes kept in their tasks' counts as :meth:`prune` does; returns how many. The
        oldest go first (index on ``end_time``)."""

        def write(conn: sa.Connection) -> int:
            cutoff = database_time(conn) - older_than
            ids = list(
                conn.scalars(
                    sa.select(d.c.id)
                    .where(d.c.end_time < cutoff, d.c.status.in_([str(s) for s in TERMINAL]))
                    .order_by(d.c.end_time)
                    .limit(batch)
                )
            )
            return delete_runs(conn, ids)

        return self._db.write("prune_batch", write)

    def failures(
        self,
        *,
        limit: int = 10,
        statuses: Sequence[RunStatus] = (RunStatus.FAILED, RunStatus.MISSED, RunStatus.ABANDONED),
    ) -> list[HistoryRow]:
        """At most *limit* runs that ended in one of *statuses* (by default every bad ending:
        failed, missed, abandoned by a dead node), the most recently ended first."""

        def read(conn: sa.Connection) -> list[HistoryRow]:
            columns = [d.c[name] for name in _DETAIL]
            query = (
                sa.select(*columns, t.c.name.label("task_name"))
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(d.c.status.in_([str(s) for s in statuses]))
                .order_by(d.c.end_time.desc(), d.c.id.desc())
                .limit(limit)
            )
            return [_history(row) for row in conn.execute(query).mappings()]

        return self._db.read("failures", read)

    def backlog(self, task_ids: Sequence[int] | None = None) -> tuple[datetime, dict[int, Backlog]]:
        """The database time and, by task id (of *task_ids* when given), the PENDING runs
        already due then (not yet claimed by any node): how many, and the oldest
        ``due_time``. Tasks with none are absent. Served by the index on (status, due_time)."""

        def read(conn: sa.Connection) -> tuple[datetime, dict[int, Backlog]]:
            now = database_time(conn)
            query = (
                sa.select(d.c.task_id, sa.func.count(), sa.func.min(d.c.due_time))
                .where(d.c.status == str(RunStatus.PENDING), d.c.due_time <= now)
                .group_by(d.c.task_id)
            )
            if task_ids is not None:
                query = query.where(d.c.task_id.in_(list(task_ids)))
            found = {int(row[0]): Backlog(int(row[1]), row[2]) for row in conn.execute(query)}
            return now, found

        return self._db.read("backlog", read)


_DETAIL = [
    "id",
    "task_id",
    "pid",
    "fire_time",
    "due_time",
    "node_id",
    "status",
    "triggered_by",
    "attempt",
    "claim_time",
    "start_time",
    "end_time",
    "error_msg",
    "version",
    "create_time",
    "recoveries",
    "missed_count",
    "last_fire_time",
    "missed_from",
    "result",
    "traceback",
    "shard",
    "shards",
    "target_node",
    "kwargs",
    "jitter_ms",
]


def _history(row: sa.RowMapping) -> HistoryRow:
    values = dict(row)
    values["status"] = by_value(RunStatus)[values["status"]]
    values["triggered_by"] = by_value(Trigger)[values["triggered_by"]]
    return HistoryRow(**values)
