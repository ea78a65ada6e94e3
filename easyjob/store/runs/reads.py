"""Reads of ``easy_job_task_detail`` shared by the run store: the claimable PENDING runs, the
runs each node holds, and the mapping of a run's row to its record."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import Candidate, Run
from easyjob.core.states import HELD, Misfire, Overlap, RunStatus, TaskStatus, Trigger
from easyjob.store.database import Database
from easyjob.store.expressions import in_list, not_in_list
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunReads", "claimable_by", "read_runs"]

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
    ) -> list[Candidate]:
        """At most *limit* PENDING runs due by *horizon*, earliest first, of tasks not
        PAUSED and not in *exclude* (task ids: the loader's small set of tasks that are
        not its code's); with *node_id*, less the broadcast runs of other nodes. Served by
        the index on (status, due_time) and the task's primary key: the cost is per row
        returned, whatever the backlog or the number of tasks."""

        def read(conn: sa.Connection) -> list[Candidate]:
            query = (
                sa.select(*_CANDIDATE_COLUMNS)
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(
                    d.c.status == str(RunStatus.PENDING),
                    d.c.due_time <= horizon,
                    t.c.status != str(TaskStatus.PAUSED),
                )
                .order_by(d.c.due_time, d.c.id)
                .limit(limit)
            )
            if exclude:
                query = query.where(not_in_list(d.c.task_id, exclude))
            if node_id is not None:
                query = query.where(claimable_by(node_id))
            return [_candidate(row) for row in conn.execute(query).mappings()]

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


def read_runs(conn: sa.Connection, ids: Collection[int]) -> list[Run]:
    """The runs of *ids*, read afresh with their task's columns, in due order."""
    query = (
        sa.select(*_RUN_COLUMNS)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(in_list(d.c.id, ids))
        .order_by(d.c.due_time, d.c.id)
    )
    return [_run(row) for row in conn.execute(query).mappings()]


def claimable_by(node_id: str) -> sa.ColumnElement[bool]:
    """Runs *node_id* may claim: any but another node's broadcast run."""
    return sa.or_(d.c.target_node.is_(None), d.c.target_node == node_id)


def _run(row: Any) -> Run:
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    values["triggered_by"] = Trigger(values["triggered_by"])
    values["overlap"] = Overlap(values["overlap"])
    values["misfire"] = Misfire(values["misfire"])
    return Run(**values)


def _candidate(row: Any) -> Candidate:
    values = dict(row)
    values["triggered_by"] = Trigger(values["triggered_by"])
    values["overlap"] = Overlap(values["overlap"])
    values["misfire"] = Misfire(values["misfire"])
    return Candidate(**values)
