"""Chains: the runs of child tasks (``pid``) made when a fire completes or finally fails,
with parent cycles refused at run time."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.store.database import Database, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import in_list
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["children_of", "completing_ids"]

d = task_detail_table
t = task_table


def completing_ids(db: Database, conn: sa.Connection, succeeded: Sequence[Run]) -> list[int]:
    """Of runs that just succeeded (written SUCCESS in this transaction), the ids whose
    success completes their fire: every unsharded run, and for the shards of one fire
    (task, ``fire_time``) one run, once exactly one SUCCESS row of each shard exists.

    Finishers of one task's shards take turns: the rows of the sharded runs' tasks are
    locked first (``SELECT ... FOR UPDATE``, in id order, until commit, on PostgreSQL and
    MariaDB; SQLite has one writer at a time), and each count after that is a statement of
    its own, which under READ COMMITTED sees what the finisher before committed. So the
    last shard to finish sees every other's SUCCESS and only it makes the children. A batch
    of unsharded runs locks nothing."""
    done = [r.id for r in succeeded if r.shards == 1]
    fires = {(r.task_id, r.fire_time): r for r in succeeded if r.shards > 1}
    db.lock_rows(conn, t, {task_id for task_id, _ in fires})
    for (task_id, fire_time), run in fires.items():
        shards, rows = conn.execute(
            sa.select(sa.func.count(sa.distinct(d.c.shard)), sa.func.count()).where(
                d.c.task_id == task_id,
                d.c.fire_time == fire_time,
                d.c.status == str(RunStatus.SUCCESS),
            )
        ).one()
        if shards == rows == run.shards:
            done.append(
                max(r.id for r in succeeded if (r.task_id, r.fire_time) == (task_id, fire_time))
            )
    return done


def children_of(
    conn: sa.Connection,
    parent_ids: Collection[int],
    status: RunStatus = RunStatus.PENDING,
    reason: str | None = None,
) -> None:
    """A run of each ACTIVE child task of each parent run in *parent_ids*: PENDING after a
    success, or written SKIPPED with *reason* after a final failure.

    A parent cycle in the table (``pid`` written by hand: a task its own parent, or a -> b
    -> a) is refused here, at run time: a child that is also an ancestor of its parent's
    task gets a SKIPPED row naming the cycle instead of a run, so a cycle costs one row per
    success instead of a chain of runs that grows until a restart."""
    parent = d.alias("parent")
    pairs = conn.execute(
        sa.select(parent.c.id, parent.c.task_id, t.c.id)
        .join_from(parent, t, t.c.pid == parent.c.task_id)
        # from the parent runs' ids, not from the index on the tasks' status (see status_is)
        .where(in_list(parent.c.id, parent_ids), status_is(t.c.status, str(TaskStatus.ACTIVE)))
    ).all()
    if not pairs:
        return
    ancestors = _ancestors(conn, {row[1] for row in pairs})
    refused = [(run_id, child) for run_id, task_id, child in pairs if child in ancestors[task_id]]
    if len(refused) < len(pairs):
        _insert_children(conn, parent_ids, refused, False, status, reason)
    if refused:
        why = (
            "refused: a parent cycle in easy_job_task.pid (this task is an ancestor of its parent)"
        )
        _insert_children(conn, parent_ids, refused, True, RunStatus.SKIPPED, why)


def _ancestors(
    conn: sa.Connection, task_ids: Collection[int], depth: int = 64
) -> dict[int, set[int]]:
    """Each task of *task_ids* with the set of itself and its ancestors (``pid`` followed up,
    at most *depth* levels)."""
    parents: dict[int, int | None] = {}
    frontier = set(task_ids)
    for _ in range(depth):
        if not frontier:
            break
        rows = conn.execute(sa.select(t.c.id, t.c.pid).where(t.c.id.in_(list(frontier)))).all()
        parents.update({row[0]: row[1] for row in rows})
        frontier = {row[1] for row in rows if row[1] is not None and row[1] not in parents}
    result = {}
    for task_id in task_ids:
        seen = {task_id}
        cursor = parents.get(task_id)
        while cursor is not None and cursor not in seen:
            seen.add(cursor)
            cursor = parents.get(cursor)
        result[task_id] = seen
    return result


def _insert_children(
    conn: sa.Connection,
    parent_ids: Collection[int],
    refused: Sequence[tuple[int, int]],
    only_refused: bool,
    status: RunStatus,
    reason: str | None,
) -> None:
    parent = d.alias("parent")
    now = db_now()
    select = (
        sa.select(
            t.c.id,
            parent.c.id,
            parent.c.fire_time,
            now,
            sa.literal(str(status)),
            sa.literal(str(Trigger.PARENT)),
            sa.literal(1),
            sa.literal(reason, d.c.error_msg.type),
            now if status != RunStatus.PENDING else sa.null(),
            now,
            t.c.shards,
        )
        .join_from(parent, t, t.c.pid == parent.c.task_id)
        .where(
            in_list(parent.c.id, parent_ids),
            status_is(t.c.status, str(TaskStatus.ACTIVE)),
        )
    )
    most = 1
    if status == RunStatus.PENDING:  # a sharded child runs as one run per shard
        most = conn.scalar(select.with_only_columns(sa.func.max(t.c.shards))) or 1
    if most > 1:
        numbers = sa.union_all(
            *(sa.select(sa.literal(i, sa.Integer).label("n")) for i in range(most))
        ).subquery("shard_numbers")
        select = select.add_columns(numbers.c.n).join(numbers, numbers.c.n < t.c.shards)
    else:
        select = select.add_columns(sa.literal(0, sa.Integer))
    if refused:
        pair = sa.tuple_(parent.c.id, t.c.id)
        select = select.where(pair.in_(refused) if only_refused else pair.not_in(refused))
    columns = [
        "task_id",
        "pid",
        "fire_time",
        "due_time",
        "status",
        "triggered_by",
        "attempt",
        "error_msg",
        "end_time",
        "create_time",
        "shards",
        "shard",
    ]
    conn.execute(d.insert().from_select(columns, select))
