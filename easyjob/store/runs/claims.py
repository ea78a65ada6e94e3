"""Claims: PENDING runs won by a node, by a version-checked UPDATE or (PostgreSQL's
``skip_locked`` mode) by rows locked with ``FOR UPDATE SKIP LOCKED``; and the overlap check
that a start of a ``serial`` run makes in the same transaction."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.admission import Slot, held_back, run_limit
from easyjob.core.records import Candidate, Run
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.store.database import Database, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import in_named, named_list, not_in_list
from easyjob.store.runs.fencing import at_read, batch, holder, in_time, moved, timed
from easyjob.store.runs.reads import claimable_by, read_runs, returned_runs, won_runs
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunClaims", "busy_ids", "running_slots", "starts_at"]

d = task_detail_table
t = task_table


class RunClaims:
    """The run store's claims: PENDING -> CLAIMED (or straight to RUNNING)."""

    _db: Database

    def claim(self, node_id: str, candidates: Sequence[Candidate]) -> list[Run]:
        """Claim a batch of PENDING runs for *node_id* with one version-checked UPDATE.

        Returns exactly the runs this call won (CLAIMED, version + 1), in due order; a
        candidate whose version moved (another node claimed it) is silently not returned.
        """
        return self._claim(node_id, candidates, RunStatus.CLAIMED, (), {}, "claim_runs")

    def claim_started(
        self,
        node_id: str,
        candidates: Sequence[Candidate],
        *,
        exclusive: Collection[int] = (),
        deadlines: Mapping[int, datetime] | None = None,
    ) -> list[Run]:
        """Claim and start a batch of PENDING runs due now (or within moments) for *node_id*
        in one version-checked UPDATE: PENDING -> RUNNING, version + 1, ``claim_time`` set
        to database time and ``start_time`` to it or, for a run not due yet, to its due
        time (the node calls the function then). One row write where :meth:`claim` then
        :meth:`start_many` make two: the loader's way for runs a free worker of its node
        will start at their time.

        Returns exactly the runs this call won, RUNNING, in due order. A candidate whose
        version moved (another node claimed it) is not returned; nor is one whose id is in
        *exclusive* (a limited task: ``serial``, ``skip`` or ``max_running``) while its
        task's limit of RUNNING runs is reached (the check of :meth:`start_many`,
        :func:`busy_ids`, in the same transaction; the candidates take the places in their
        order): it stays PENDING, to be claimed once a run has ended. Nor is
        one whose *deadlines* entry (``id -> instant``) has come, in database time, when the
        write lands (see :func:`~easyjob.store.runs.fencing.in_time`): it stays PENDING."""
        return self._claim(
            node_id,
            candidates,
            RunStatus.RUNNING,
            exclusive,
            deadlines or {},
            "claim_started_runs",
        )

    def _claim(
        self,
        node_id: str,
        candidates: Sequence[Candidate],
        status: RunStatus,
        exclusive: Collection[int],
        deadlines: Mapping[int, datetime],
        what: str,
    ) -> list[Run]:
        """PENDING -> *status* (CLAIMED, or RUNNING with ``start_time``) for *node_id*, of
        the *candidates* still at the version read (and, for ids in *exclusive*, whose task
        has no other run RUNNING), in one version-checked UPDATE; returns the runs won, in
        due order."""
        if not candidates:
            return []
        expected = {c.id: c.version for c in candidates}

        def write(conn: sa.Connection) -> list[Run]:
            busy = busy_ids(self._db, conn, candidates, exclusive)
            free = {i: v for i, v in expected.items() if i not in busy}
            if not free:
                return []
            stmt = _claim_update(status, timed(free, deadlines))
            return won_runs(self._db, conn, stmt, free, batch(free, node_id, deadlines))

        def landed(conn: sa.Connection) -> list[Run] | None:
            won = moved(conn, expected, status, node_id)
            return read_runs(conn, won) if won else None

        return self._db.write(what, write, landed=landed)

    def claim_next(
        self, node_id: str, horizon: datetime, limit: int, exclude: Collection[int] = ()
    ) -> list[Run]:
        """Claim for *node_id* at most *limit* PENDING runs due by *horizon*, earliest first,
        of tasks not PAUSED (and not in *exclude*, task ids), skipping rows
        another transaction holds locked: the ``skip_locked`` claim mode, PostgreSQL only
        (see :attr:`Database.skip_locked`).

        One UPDATE over a ``SELECT ... ORDER BY due_time, id LIMIT n FOR UPDATE SKIP LOCKED``
        (PostgreSQL locks only the rows that select returns), returning the runs won with
        their task's columns (no read of them after it).
        Nodes claiming at the same moment lock different rows instead of waiting for each
        other's or losing races over them. Every row locked is this transaction's alone until
        it commits, so every row updated was won.

        If the COMMIT's reply is lost, the runs won are not known here: they stay CLAIMED by
        this node, and its recovery sweep takes them back as orphans (like any run the
        database says a node holds and the node does not know of).
        """
        if limit <= 0:
            return []
        claimable = sa.select(t.c.id).where(t.c.status != str(TaskStatus.PAUSED))
        if exclude:
            claimable = claimable.where(not_in_list(t.c.id, exclude))
        due = (
            sa.select(d.c.id)
            .where(
                d.c.status == str(RunStatus.PENDING),
                d.c.due_time <= horizon,
                d.c.task_id.in_(claimable.scalar_subquery()),
                claimable_by(node_id),
            )
            .order_by(d.c.due_time)  # not id as well: see RunReads.pending
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        claim = (
            d.update()
            .where(d.c.id.in_(due.scalar_subquery()))
            .values(
                status=str(RunStatus.CLAIMED),
                node_id=node_id,
                version=d.c.version + 1,
                claim_time=db_now(),
            )
        )

        def write(conn: sa.Connection) -> list[Run]:
            return returned_runs(conn, claim)

        self._db.require_skip_locked()
        return self._db.write("claim_next_runs", write)


def busy_ids(
    db: Database, conn: sa.Connection, runs: Sequence[Run | Candidate], exclusive: Collection[int]
) -> set[int]:
    """Of *runs*, the ids in *exclusive* (limited: overlap ``serial`` or ``skip``, or a
    ``max_running``) that may not start because their task's limit of RUNNING runs
    (:func:`~easyjob.core.admission.run_limit`) would be passed: the admission rule's
    :func:`~easyjob.core.admission.held_back`, given the runs of the task RUNNING now and
    those of *runs* in their order (the shards of one fire run side by side; a later fire
    waits for them all).

    The rows of those runs' tasks are locked first, until commit (nothing on SQLite, which
    has one writer at a time), so two nodes' starts of one task take turns: on PostgreSQL
    and MariaDB (READ COMMITTED) each missed the other's uncommitted start and both ran (a
    CI run caught one). The read after the lock reads afresh, so the later start sees the
    earlier one. A read of its own, not a correlated subquery of the start's UPDATE: on
    MariaDB that subquery locked the rows it read and deadlocked, and a saturated bench of
    serial tasks ran at a third of the rate of one of ``allow`` tasks."""
    asked = [r for r in runs if r.id in exclusive]
    if not asked:
        return set()
    tasks = sorted({r.task_id for r in asked})
    db.lock_rows(conn, t, tasks)
    running = running_slots(conn, tasks)
    of_task: dict[int, list[Run | Candidate]] = {}
    for r in asked:
        of_task.setdefault(r.task_id, []).append(r)
    out: set[int] = set()
    for task_id, mine in of_task.items():
        limit = run_limit(mine[0].overlap, mine[0].max_running) or len(mine)
        slots = [(r.id, r.fire_time, r.shards) for r in mine]
        out |= held_back(limit, running.get(task_id, ()), slots)
    return out


def running_slots(conn: sa.Connection, task_ids: Collection[int]) -> dict[int, list[Slot]]:
    """The runs of *task_ids* RUNNING now, by task, as the limit counts them (read afresh:
    the caller has locked the task rows)."""
    rows = conn.execute(_running_of_tasks(), named_list("tasks", task_ids)).all()
    running: dict[int, list[Slot]] = {}
    for run_id, task_id, fire_time, shards in rows:
        running.setdefault(task_id, []).append((run_id, fire_time, shards))
    return running


@cache
def _claim_update(status: RunStatus, limited: bool) -> sa.Update:
    """The claim's version-checked UPDATE of a batch (see :func:`batch`) from PENDING to
    *status*, for the node ``holder``, before each run's deadline when *limited*: built
    once per shape, executed with the batch's parameters."""
    values: dict[str, Any] = {"claim_time": db_now()}
    if status == RunStatus.RUNNING:
        values["start_time"] = starts_at()
    where = [
        at_read(),
        status_is(d.c.status, str(RunStatus.PENDING)),
        claimable_by(holder()),
    ]
    if limited:
        where.append(in_time())
    return (
        d.update()
        .where(*where)
        .values(status=str(status), node_id=holder(), version=d.c.version + 1, **values)
    )


@cache
def _running_of_tasks() -> sa.Select[Any]:
    """The RUNNING runs of the task list ``tasks`` (:func:`running_slots`): built once."""
    return sa.select(d.c.id, d.c.task_id, d.c.fire_time, d.c.shards).where(
        in_named(d.c.task_id, "tasks"), d.c.status == str(RunStatus.RUNNING)
    )


def starts_at() -> sa.ColumnElement[datetime]:
    """``start_time`` of a start write: database time, or the run's due time when the write
    comes ahead of it (the node calls the function at that time)."""
    return sa.case((d.c.due_time > db_now(), d.c.due_time), else_=db_now())
