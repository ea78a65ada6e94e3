"""Chains: the runs of child tasks (``pid``) made when a fire completes or finally fails,
with parent cycles refused at run time, and the join of a child of several parents (made
once per fire time, when the last parent succeeds)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.admission import JoinFacts, Verdict, join
from easyjob.core.records import HeldRun, Run
from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.store.database import Database, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import count_where, in_list, in_named, named_list
from easyjob.store.parents import parents_of
from easyjob.store.schema import task_detail_table, task_parent_table, task_table

__all__ = ["children_of", "completing_runs"]

d = task_detail_table
t = task_table
p = task_parent_table

#: A SUCCESS row: counted, not searched, by the reads of one fire's successes (see
#: :func:`_shards_succeeded`).
_SUCCESS = d.c.status == str(RunStatus.SUCCESS)


def completing_runs(db: Database, conn: sa.Connection, succeeded: Sequence[Run]) -> list[Run]:
    """Of runs that just succeeded (written SUCCESS in this transaction), those whose
    success completes their fire: every unsharded run, and for the shards of one fire
    (task, ``fire_time``) one run, once exactly one SUCCESS row of each shard exists.

    Finishers of one task's shards take turns: the rows of the sharded runs' tasks are
    locked first (``SELECT ... FOR UPDATE``, in id order, until commit, on PostgreSQL and
    MariaDB; SQLite has one writer at a time), and each count after that is a statement of
    its own, which under READ COMMITTED sees what the finisher before committed. So the
    last shard to finish sees every other's SUCCESS and only it makes the children. A batch
    of unsharded runs locks nothing."""
    done = [r for r in succeeded if r.shards == 1]
    fires = {(r.task_id, r.fire_time): r for r in succeeded if r.shards > 1}
    db.lock_rows(conn, t, {task_id for task_id, _ in fires})
    for (task_id, fire_time), run in fires.items():
        shards, rows = conn.execute(
            sa.select(_shards_succeeded(), count_where(_SUCCESS)).where(
                d.c.task_id == task_id, d.c.fire_time == fire_time
            )
        ).one()
        if shards == rows == run.shards:
            done.append(
                max(
                    (r for r in succeeded if (r.task_id, r.fire_time) == (task_id, fire_time)),
                    key=lambda r: r.id,
                )
            )
    return done


def children_of(
    db: Database,
    conn: sa.Connection,
    parents: Sequence[Run | HeldRun],
    status: RunStatus = RunStatus.PENDING,
    reason: str | None = None,
) -> None:
    """A run of each ACTIVE child task of each run of *parents*: PENDING after a success,
    or written SKIPPED with *reason* after a final failure. A child of several parents (a
    join) gets its run (or SKIPPED row) once per fire time, see :func:`_join`.

    A parent cycle in the table (``pid`` written by hand: a task its own parent, or a -> b
    -> a) is refused here, at run time: a child that is also an ancestor of its parent's
    task gets a SKIPPED row naming the cycle instead of a run, so a cycle costs one row per
    success instead of a chain of runs that grows until a restart."""
    tasks = named_list("tasks", {run.task_id for run in parents})
    found = conn.execute(_children(), tasks).all()
    if not found:
        return
    joining = {(task_id, child) for task_id, child, _, joined in found if joined}
    children: dict[int, list[tuple[int, bool]]] = {}
    for task_id, child, child_status, joined in found:
        if joined or (child_status == str(TaskStatus.ACTIVE) and (task_id, child) not in joining):
            children.setdefault(task_id, []).append((child, bool(joined)))
    mine = [
        (run, child, joined) for run in parents for child, joined in children.get(run.task_id, ())
    ]
    pairs = [(run.id, run.task_id, child) for run, child, joined in mine if not joined]
    joins = [(run.id, child, run.fire_time) for run, child, joined in mine if joined]
    if joins:
        _join(db, conn, joins, status, reason)
    if not pairs:
        return
    ancestors = _ancestors(conn, {row[1] for row in pairs})
    refused = [(run_id, child) for run_id, task_id, child in pairs if child in ancestors[task_id]]
    if len(refused) < len(pairs):
        wanted = [(run_id, child) for run_id, _, child in pairs if (run_id, child) not in refused]
        _insert_children(conn, wanted, status, reason)
    if refused:
        why = (
            "refused: a parent cycle in easy_job_task.pid (this task is an ancestor of its parent)"
        )
        _insert_children(conn, refused, RunStatus.SKIPPED, why)


@cache
def _children() -> sa.CompoundSelect[Any]:
    """(parent task id, child task id, the child's status, whether the child joins several
    parents) for each child task of the tasks :func:`named_list` ``tasks``: the children by
    ``pid`` (with their status), then the children of several parents by every parent
    (their first, the ``pid``, too; status NULL: :func:`_join` makes their runs of ACTIVE
    ones only). Built once: every finish asks it.

    Each part reads one index (``pid``, or the join's ``parent_id``) by the tasks listed, and
    the child's status is a column to test, not a condition. Joined to the parent runs by
    their ids, with the status tested through coalesce() (see
    :func:`~easyjob.store.expressions.status_is`), it read the whole task table on every
    finish: PostgreSQL without statistics took an ACTIVE task for a rare one (3,000 tasks:
    4-21 ms a finish, 38 % of a saturated server's statement time) and MariaDB with
    statistics drove it from the task table."""
    by_pid = sa.select(t.c.pid, t.c.id, t.c.status, sa.false()).where(in_named(t.c.pid, "tasks"))
    by_parents = sa.select(
        p.c.parent_id, p.c.task_id, sa.null().cast(t.c.status.type), sa.true()
    ).where(in_named(p.c.parent_id, "tasks"))
    return sa.union_all(by_pid, by_parents)


def _join(
    db: Database,
    conn: sa.Connection,
    joins: Sequence[tuple[int, int, datetime]],
    status: RunStatus,
    reason: str | None,
) -> None:
    """The runs of children of several parents, from *joins* (parent run id, child task id,
    fire time): for each child and fire time, what :func:`~easyjob.core.admission.join`
    says, asked once the child's task row is locked (in id order, until commit; SQLite has
    one writer at a time). Every finisher of a parent of that child takes its turn there,
    and each read after the lock is a statement of its own, which under READ COMMITTED sees
    what the finisher before committed: of two parents finishing at once on two nodes, the
    second sees the first's success and makes the one run (or sees the run, and makes
    none). A final failure (*status* SKIPPED) asks with ``failed`` set."""
    groups: dict[tuple[int, datetime], list[int]] = {}
    for run_id, child, fire in joins:
        groups.setdefault((child, fire), []).append(run_id)
    db.lock_rows(conn, t, {child for child, _ in groups})
    parents = parents_of(conn, {child for child, _ in groups})
    make: dict[tuple[RunStatus, str | None], list[tuple[int, int]]] = {}
    for (child, fire), run_ids in sorted(groups.items()):
        facts = JoinFacts(
            parents=tuple(parents.get(child, ())),
            succeeded=_succeeded(conn, parents.get(child, ()), fire),
            failed=min(run_ids) if status == RunStatus.SKIPPED else None,
            made=_made(conn, child, fire),
        )
        decision = join(facts)
        if decision is None or decision.verdict == Verdict.WAIT:
            continue
        written = RunStatus.PENDING if decision.verdict == Verdict.START else RunStatus.SKIPPED
        text = reason if written == RunStatus.PENDING else decision.reason
        make.setdefault((written, text), []).append((max(run_ids), child))
    for (written, text), wanted in make.items():
        _insert_children(conn, wanted, written, text)


def _succeeded(conn: sa.Connection, parents: Sequence[int], fire: datetime) -> frozenset[int]:
    """Of *parents* (task ids), those with a SUCCESS row of every shard for *fire*."""
    if not parents:
        return frozenset()
    rows = conn.execute(
        sa.select(d.c.task_id, _shards_succeeded(), sa.func.max(d.c.shards))
        .where(in_list(d.c.task_id, parents), d.c.fire_time == fire)
        .group_by(d.c.task_id)
    ).all()
    return frozenset(int(task_id) for task_id, done, shards in rows if done >= shards)


def _shards_succeeded() -> sa.ColumnElement[int]:
    """The count of the distinct shards with a SUCCESS row: the reads of one fire's
    successes search the fire, ``(task_id, fire_time)``, and count its successes. With the
    status searched too, SQLite went by ``(task_id, status)`` instead: every SUCCESS row the
    task ever had, at each finish of a sharded fire or of a parent of a join, growing with
    the history."""
    return sa.func.count(sa.distinct(sa.case((_SUCCESS, d.c.shard))))


def _made(conn: sa.Connection, child: int, fire: datetime) -> bool:
    """Whether the child task *child* has a row made after its parents for *fire*."""
    query = sa.select(d.c.id).where(
        d.c.task_id == child,
        d.c.fire_time == fire,
        d.c.triggered_by == str(Trigger.PARENT),
    )
    return conn.execute(query.limit(1)).first() is not None


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
    pairs: Sequence[tuple[int, int]],
    status: RunStatus,
    reason: str | None,
) -> None:
    """For each (parent run id, child task id) of *pairs*: a run of the child (each of its
    shards, when PENDING) with the parent run's ``fire_time``, ``pid`` that run, *status*
    and *reason*."""
    parent = d.alias("parent")
    runs = sorted({run_id for run_id, _ in pairs})
    tasks = sorted({child for _, child in pairs})
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
        .join_from(parent, t, in_list(t.c.id, tasks))
        .where(in_list(parent.c.id, runs), status_is(t.c.status, str(TaskStatus.ACTIVE)))
    )
    if len(runs) * len(tasks) > len(pairs):
        select = select.where(sa.tuple_(parent.c.id, t.c.id).in_(sorted(set(pairs))))
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
