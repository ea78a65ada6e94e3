"""Transitions of held runs, each fenced by the version the caller holds: start, release,
close unstarted, finish (with the children of a completed fire) and fail (with its retry)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.core.states import RunStatus, Trigger
from easyjob.core.store_values import BLOCKED, Blocked, Starts
from easyjob.store.database import Database
from easyjob.store.engine import database_time, db_now
from easyjob.store.expressions import named_values, per_named
from easyjob.store.runs.attempts import new_attempt
from easyjob.store.runs.chains import children_of, completing_runs
from easyjob.store.runs.claims import busy_ids, starts_at
from easyjob.store.runs.fencing import (
    batch,
    fenced_update,
    held_at,
    in_time,
    landed_one,
    moved,
    one_node,
    timed,
    unchanged,
)
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunTransitions"]

d = task_detail_table
t = task_table

_MAX_ERROR = 4000


class RunTransitions:
    """The run store's transitions of CLAIMED and RUNNING runs by the node that holds them."""

    _db: Database

    def start(self, run: Run, *, exclusive: bool = False) -> Run | Blocked | None:
        """CLAIMED -> RUNNING, setting ``start_time`` (database time): :meth:`start_many`
        for one run. Returns the running run, :data:`BLOCKED`, or None if fenced."""
        started = self.start_many([run], exclusive={run.id} if exclusive else set())
        return started.get(run.id)

    def start_many(
        self,
        runs: Sequence[Run],
        *,
        exclusive: Collection[int],
        deadlines: Mapping[int, datetime] | None = None,
    ) -> Starts:
        """Start a batch of CLAIMED runs of one node with one version-checked UPDATE.
        ``start_time`` is database time, or the run's due time when the write comes ahead
        of it (the node writes starts a little early and calls the function at that time).

        Returns, per run id, the RUNNING run (version + 1), :data:`BLOCKED`, or None when
        fenced (taken over meanwhile). A run whose id is in *exclusive* (a limited task:
        ``serial``, ``skip`` or ``max_running``) only starts if its task's limit of RUNNING
        runs is not reached (the runs take the places in their order), else it is BLOCKED.
        The check is a read in the same
        transaction, after the rows of those runs' tasks are locked (see :func:`busy_ids`): of
        two nodes starting runs of one task at once, the second sees the first's start.
        A run whose *deadlines* entry (``id -> instant``) has come, in database time, when
        the write lands is not started either, and is BLOCKED: the caller asks the admission
        rule again (see :func:`~easyjob.store.runs.fencing.in_time`).
        """
        if not runs:
            return {}
        node = one_node(runs, RunStatus.RUNNING)
        expected = {r.id: r.version for r in runs}
        deadlines = deadlines or {}

        def write(conn: sa.Connection) -> Starts:
            busy = busy_ids(self._db, conn, runs, exclusive)
            free = {i: v for i, v in expected.items() if i not in busy}
            if not free:
                return outcome(conn, set())
            stmt = _start_update(timed(free, deadlines))
            won = self._db.winners(conn, stmt, d, free, batch(free, node, deadlines))
            return outcome(conn, set(won))

        def outcome(conn: sa.Connection, won: set[int]) -> Starts:
            result: Starts = {r.id: r.bumped(RunStatus.RUNNING) for r in runs if r.id in won}
            waiting = [
                r for r in runs if r.id not in won and (r.id in exclusive or r.id in deadlines)
            ]
            blocked = set(unchanged(conn, waiting)) if waiting else set()
            for r in runs:
                if r.id not in won:
                    result[r.id] = BLOCKED if r.id in blocked else None
            return result

        def landed(conn: sa.Connection) -> Starts | None:
            won = set(moved(conn, expected, RunStatus.RUNNING, node))
            return outcome(conn, won) if won else None

        return self._db.write("runs_running", write, landed=landed)

    def release(self, run: Run) -> bool:
        """Hand a CLAIMED run back: PENDING again, claimable by any node. False if fenced."""
        return bool(self.release_many([run]))

    def release_many(self, runs: Sequence[Run]) -> set[int]:
        """Hand a batch of one node's CLAIMED runs back (PENDING, claimable by any node) with
        one version-checked UPDATE; returns the ids released (the others were fenced)."""
        if not runs:
            return set()
        node = one_node(runs, RunStatus.PENDING)
        expected = {r.id: r.version for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            params = batch(expected, node)
            return set(self._db.winners(conn, _release_update(), d, expected, params))

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(moved(conn, expected, RunStatus.PENDING, None)) or None

        return self._db.write("runs_released", write, landed=landed)

    def close_unstarted(self, run: Run, status: RunStatus, reason: str) -> bool:
        """CLAIMED -> MISSED or SKIPPED (misfire or overlap policy) with *reason*."""
        return bool(self.close_many([run], status, {run.id: reason}))

    def close_many(
        self, runs: Sequence[Run], status: RunStatus, reasons: Mapping[int, str]
    ) -> set[int]:
        """CLAIMED -> MISSED or SKIPPED for a batch of one node's runs, each with its reason
        (run id -> text), in one version-checked UPDATE; returns the ids closed (the others
        were fenced: taken over or paused meanwhile)."""
        if status not in (RunStatus.MISSED, RunStatus.SKIPPED):
            raise ValueError(f"a claimed run cannot be closed as {status}")
        if not runs:
            return set()
        node = one_node(runs, status)
        expected = {r.id: r.version for r in runs}
        texts = {r.id: reasons[r.id][:_MAX_ERROR] for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            params = {**batch(expected, node), **named_values("reasons", texts)}
            return set(self._db.winners(conn, _close_update(status), d, expected, params))

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(moved(conn, expected, status, node)) or None

        return self._db.write(f"close_{status.lower()}", write, landed=landed)

    def finish(self, run: Run) -> bool:
        """RUNNING -> SUCCESS: :meth:`finish_many` for one run. False if fenced."""
        return bool(self.finish_many([run]))

    def finish_many(
        self,
        runs: Sequence[Run],
        results: Mapping[int, Any] | None = None,
        notes: Mapping[int, str] | None = None,
    ) -> set[int]:
        """RUNNING -> SUCCESS for a batch of one node's runs, in one transaction with a
        PENDING run for each ACTIVE child task of each run that succeeded (``pid`` = that
        run, same ``fire_time``). Returns the ids written; a fenced run (taken over, or timed
        out meanwhile) is left alone and its children not made. The task rows are not
        written: a task's success count is read from the history (see
        :mod:`easyjob.store.successes`); only a batch with shards of a sharded fire locks
        its tasks' rows (see :func:`completing_runs`).

        *results* (run id -> a JSON value, checked and capped by the caller; see
        :mod:`easyjob.core.outcome`) go to ``result`` and *notes* (run id -> why a value was
        not stored) to ``error_msg``, of the runs written, by one more statement when any."""
        if not runs:
            return set()
        extras = _extras(results or {}, notes or {})
        node = one_node(runs, RunStatus.SUCCESS)
        expected = {r.id: r.version for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            params = batch(expected, node)
            won = set(self._db.winners(conn, _success_update(), d, expected, params))
            if won:
                if completing := completing_runs(self._db, conn, [r for r in runs if r.id in won]):
                    children_of(self._db, conn, completing)
                _write_extras(conn, [row for row in extras if row["rid"] in won])
            return won

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(moved(conn, expected, RunStatus.SUCCESS, node)) or None

        return self._db.write("runs_success", write, landed=landed)

    def fail(
        self,
        run: Run,
        error: str,
        *,
        retry_in: timedelta | None,
        traceback: str | None = None,
    ) -> bool:
        """RUNNING -> FAILED with *error* (and the *traceback*, if any); in the same
        transaction, either a new PENDING attempt due *retry_in* from now (database time),
        or, when no retry is given, a SKIPPED row for each child task. False (and nothing
        written) if fenced."""

        def write(conn: sa.Connection) -> bool:
            values = {"end_time": db_now(), "error_msg": error[:_MAX_ERROR]}
            if traceback is not None:
                values["traceback"] = traceback
            if not fenced_update(conn, run, RunStatus.FAILED, values):
                return False
            conn.execute(
                t.update().where(t.c.id == run.task_id).values(fail_count=t.c.fail_count + 1)
            )
            if retry_in is None:
                why = f"parent run {run.id} failed"
                children_of(self._db, conn, [run], RunStatus.SKIPPED, why)
            else:
                now = database_time(conn)
                new_attempt(
                    conn,
                    run.task_id,
                    run.pid,
                    run.fire_time,
                    run.attempt + 1,
                    Trigger.RETRY,
                    now + retry_in,
                    now,
                    kwargs=run.trigger_kwargs,
                    shard=run.shard,
                    shards=run.shards,
                    target_node=run.target_node,
                    priority=run.trigger_priority,
                )
            return True

        return self._db.write("run_failed", write, landed=landed_one(run, RunStatus.FAILED))


# The batch transitions' version-checked UPDATEs, each built once per shape and executed
# with its batch's parameters (see easyjob.store.runs.fencing.batch).


@cache
def _start_update(limited: bool) -> sa.Update:
    """CLAIMED -> RUNNING (before each run's deadline when *limited*)."""
    where = [held_at(RunStatus.CLAIMED), *([in_time()] if limited else [])]
    return (
        d.update()
        .where(*where)
        .values(status=str(RunStatus.RUNNING), version=d.c.version + 1, start_time=starts_at())
    )


@cache
def _release_update() -> sa.Update:
    """CLAIMED -> PENDING, held by nobody."""
    return (
        d.update()
        .where(held_at(RunStatus.CLAIMED))
        .values(
            status=str(RunStatus.PENDING), version=d.c.version + 1, node_id=None, claim_time=None
        )
    )


@cache
def _close_update(status: RunStatus) -> sa.Update:
    """CLAIMED -> *status* (MISSED or SKIPPED), each run with its reason (``reasons``)."""
    return (
        d.update()
        .where(held_at(RunStatus.CLAIMED))
        .values(
            status=str(status),
            version=d.c.version + 1,
            end_time=db_now(),
            error_msg=per_named(d.c.id, "reasons", d.c.error_msg.type),
        )
    )


@cache
def _success_update() -> sa.Update:
    """RUNNING -> SUCCESS."""
    return (
        d.update()
        .where(held_at(RunStatus.RUNNING))
        .values(status=str(RunStatus.SUCCESS), version=d.c.version + 1, end_time=db_now())
    )


def _extras(results: Mapping[int, Any], notes: Mapping[int, str]) -> list[dict[str, Any]]:
    """Rows for :func:`_write_extras`: one per run with a result or a note."""
    return [
        {"rid": rid, "res": results.get(rid), "msg": notes.get(rid)}
        for rid in sorted({*(k for k, v in results.items() if v is not None), *notes})
    ]


def _write_extras(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """Set ``result`` and ``error_msg`` of runs just written SUCCESS in this transaction."""
    if not rows:
        return
    stmt = (
        d.update()
        .where(d.c.id == sa.bindparam("rid"))
        .values(
            result=sa.bindparam("res", type_=d.c.result.type),
            error_msg=sa.bindparam("msg", type_=d.c.error_msg.type),
        )
    )
    conn.execute(stmt, rows)
