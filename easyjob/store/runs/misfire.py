"""The misfire policy applied to PENDING runs in the database: late runs marked MISSED,
superseded cron fires marked MISSED, and a task's unstarted runs closed SKIPPED."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa

from easyjob.clock import utc
from easyjob.core.planner import superseded
from easyjob.core.records import Missed
from easyjob.core.states import Misfire, RunStatus, Trigger
from easyjob.store.database import Database, at_versions, per_id, per_key, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import in_list
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunMisfires", "skip_unstarted"]

d = task_detail_table
t = task_table


class RunMisfires:
    """The run store's misfire writes on PENDING runs."""

    _db: Database

    def miss_late(self, cutoffs: Mapping[int, tuple[Misfire, datetime]]) -> int:
        """Apply the misfire policy to PENDING runs, per task id ``-> (policy, late
        before)``: under ``skip`` every PENDING run due before that time becomes MISSED;
        under ``fire_once`` too, except the latest of them, which stays to run once, now.
        Returns how many were marked. One statement per policy, by the index on
        (task_id, status); a run claimed meanwhile is not PENDING and is left alone."""
        cutoffs = {k: v for k, v in cutoffs.items() if v[0] != Misfire.CATCH_UP}
        if not cutoffs:
            return 0

        def write(conn: sa.Connection) -> int:
            before = {task: at for task, (_, at) in cutoffs.items()}
            once = [task for task, (policy, _) in cutoffs.items() if policy == Misfire.FIRE_ONCE]
            if once:
                latest = (
                    sa.select(d.c.task_id, sa.func.max(d.c.due_time))
                    .where(
                        in_list(d.c.task_id, once),
                        d.c.status == str(RunStatus.PENDING),
                        d.c.due_time
                        < per_key(d.c.task_id, {k: before[k] for k in once}, d.c.due_time.type),
                    )
                    .group_by(d.c.task_id)
                )
                for task, due in conn.execute(latest):
                    before[task] = utc(due)  # the latest late run stays, to run once
            reason = "missed: not started within its misfire grace (policy {})"
            marked = 0
            for policy in (Misfire.FIRE_ONCE, Misfire.SKIP):
                tasks = {k: v for k, v in before.items() if cutoffs[k][0] == policy}
                if not tasks:
                    continue
                done = conn.execute(
                    d.update()
                    .where(
                        in_list(d.c.task_id, tasks),
                        d.c.status == str(RunStatus.PENDING),
                        d.c.due_time < per_key(d.c.task_id, tasks, d.c.due_time.type),
                    )
                    .values(
                        status=str(RunStatus.MISSED),
                        version=d.c.version + 1,
                        end_time=db_now(),
                        error_msg=reason.format(policy.value),
                    )
                )
                marked += done.rowcount
            return marked

        return self._db.write("miss_late_runs", write)

    def supersede(self, now: datetime, limit: int = 5000) -> dict[str, Missed]:
        """Mark MISSED every PENDING cron fire (of a ``fire_once`` or ``skip`` task) due
        before *now* whose task has a later cron fire due by *now* (same shard and target
        node) that is not itself MISSED or SKIPPED: it was superseded, so it must not start
        after its successor (see :mod:`easyjob.core.planner`). At most *limit* per call.

        Returns what was marked, by task name. Two statements (a
        read of the superseded runs, then a version-checked UPDATE of them by id: MySQL
        refuses an UPDATE that reads its own table); the read is driven by the index on
        (status, due_time), so it costs per due PENDING run, and the policy keeps those
        few. A run claimed meanwhile has moved on and is left alone."""
        later = d.alias("later")
        successor = sa.exists().where(
            later.c.task_id == d.c.task_id,
            later.c.fire_time > d.c.fire_time,
            later.c.due_time <= now,
            later.c.triggered_by == str(Trigger.CRON),
            later.c.shard == d.c.shard,
            sa.func.coalesce(later.c.target_node, "") == sa.func.coalesce(d.c.target_node, ""),
            later.c.status.not_in([str(RunStatus.MISSED), str(RunStatus.SKIPPED)]),
        )
        query = (
            sa.select(d.c.id, d.c.version, d.c.fire_time, t.c.name, t.c.misfire)
            .join_from(d, t, t.c.id == d.c.task_id)
            .where(
                d.c.status == str(RunStatus.PENDING),
                d.c.due_time < now,
                d.c.triggered_by == str(Trigger.CRON),
                t.c.misfire != str(Misfire.CATCH_UP),
                successor,
            )
            .limit(limit)
        )

        def write(conn: sa.Connection) -> dict[str, Missed]:
            rows = conn.execute(query).all()
            if not rows:
                return {}
            expected = {row.id: row.version for row in rows}
            reasons = {row.id: superseded(Misfire(row.misfire)) for row in rows}
            stmt = (
                d.update()
                .where(at_versions(d, expected), status_is(d.c.status, str(RunStatus.PENDING)))
                .values(
                    status=str(RunStatus.MISSED),
                    version=d.c.version + 1,
                    end_time=db_now(),
                    error_msg=per_id(d, reasons, d.c.error_msg.type),
                )
            )
            won = set(self._db.winners(conn, stmt, d, expected))
            marked: dict[str, Missed] = {}
            for row in rows:
                if row.id in won:
                    fire, seen = utc(row.fire_time), marked.get(row.name)
                    if seen is not None:
                        fire, count = min(fire, seen.first_fire), seen.count + 1
                    else:
                        count = 1
                    marked[row.name] = Missed(count, fire, Misfire(row.misfire))
            return marked

        return self._db.write("supersede_runs", write)


def skip_unstarted(conn: sa.Connection, task_id: int, reason: str, now: datetime) -> None:
    """Close every run of task *task_id* that has not started (PENDING, or CLAIMED by a node:
    its version moves, so that node's start is fenced) as SKIPPED with *reason*."""
    conn.execute(
        d.update()
        .where(
            d.c.task_id == task_id,
            d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)]),
        )
        .values(
            status=str(RunStatus.SKIPPED), version=d.c.version + 1, end_time=now, error_msg=reason
        )
    )
