"""Statements on ``easy_job_task_detail``: claiming runs and every later transition.

Implements :class:`easyjob.store.contract.RunStore`; the fencing protocol (what a claim
returns, what a version check fences, what a retried write that may have landed reports) is
specified there.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from easyjob.clock import utc
from easyjob.core.planner import superseded
from easyjob.core.records import Candidate, HeldRun, Missed, Run
from easyjob.core.states import (
    HELD,
    RUN_TRANSITIONS,
    Misfire,
    Overlap,
    RunStatus,
    TaskStatus,
    Trigger,
)
from easyjob.core.store_values import BLOCKED, Blocked, Starts
from easyjob.store.database import Database, at_versions, per_id, per_key, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import in_list, not_in_list
from easyjob.store.schema import node_table, task_detail_table, task_table

__all__ = ["BLOCKED", "Blocked", "RunStore", "skip_unstarted"]

d = task_detail_table
t = task_table
n = node_table

_MAX_ERROR = 4000
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
    d.c.shards,
    d.c.target_node,
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
)

_HELD_COLUMNS = (
    d.c.id,
    d.c.version,
    d.c.status,
    d.c.node_id,
    d.c.task_id,
    d.c.pid,
    d.c.fire_time,
    d.c.attempt,
    d.c.recoveries,
    d.c.kwargs,
    t.c.name.label("task_name"),
    d.c.shard,
    d.c.shards,
    d.c.target_node,
)


class RunStore:
    """Runs: claimable PENDING rows, held CLAIMED/RUNNING rows, and finished history."""

    def __init__(self, db: Database) -> None:
        self._db = db

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
                query = query.where(_claimable_by(node_id))
            return [_candidate(row) for row in conn.execute(query).mappings()]

        return self._db.read("pending_runs", read)

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

    def claim(self, node_id: str, candidates: Sequence[Candidate]) -> list[Run]:
        """Claim a batch of PENDING runs for *node_id* with one version-checked UPDATE.

        Returns exactly the runs this call won (CLAIMED, version + 1), in due order; a
        candidate whose version moved (another node claimed it) is silently not returned.
        """
        return self._claim(node_id, candidates, RunStatus.CLAIMED, (), "claim_runs")

    def claim_started(
        self, node_id: str, candidates: Sequence[Candidate], *, exclusive: Collection[int] = ()
    ) -> list[Run]:
        """Claim and start a batch of PENDING runs due now (or within moments) for *node_id*
        in one version-checked UPDATE: PENDING -> RUNNING, version + 1, ``claim_time`` set
        to database time and ``start_time`` to it or, for a run not due yet, to its due
        time (the node calls the function then). One row write where :meth:`claim` then
        :meth:`start_many` make two: the loader's way for runs a free worker of its node
        will start at their time.

        Returns exactly the runs this call won, RUNNING, in due order. A candidate whose
        version moved (another node claimed it) is not returned; nor is one whose id is in
        *exclusive* (overlap ``serial``) while another run of its task is RUNNING (the check
        of :meth:`start_many`, :func:`_busy`, in the same transaction): it stays PENDING,
        to be claimed once that run has ended. Give at most one run per task of those."""
        return self._claim(node_id, candidates, RunStatus.RUNNING, exclusive, "claim_started_runs")

    def _claim(
        self,
        node_id: str,
        candidates: Sequence[Candidate],
        status: RunStatus,
        exclusive: Collection[int],
        what: str,
    ) -> list[Run]:
        """PENDING -> *status* (CLAIMED, or RUNNING with ``start_time``) for *node_id*, of
        the *candidates* still at the version read (and, for ids in *exclusive*, whose task
        has no other run RUNNING), in one version-checked UPDATE; returns the runs won, in
        due order."""
        if not candidates:
            return []
        expected = {c.id: c.version for c in candidates}
        values: dict[str, Any] = {"claim_time": db_now()}
        if status == RunStatus.RUNNING:
            values["start_time"] = _start_time()

        def write(conn: sa.Connection) -> list[Run]:
            busy = _busy(self._db, conn, candidates, exclusive)
            free = {i: v for i, v in expected.items() if i not in busy}
            if not free:
                return []
            stmt = (
                d.update()
                .where(
                    at_versions(d, free),
                    status_is(d.c.status, str(RunStatus.PENDING)),
                    _claimable_by(node_id),
                )
                .values(status=str(status), node_id=node_id, version=d.c.version + 1, **values)
            )
            won = self._db.winners(conn, stmt, d, free)
            return self._runs(conn, won) if won else []

        def landed(conn: sa.Connection) -> list[Run] | None:
            won = _moved(conn, expected, status, node_id)
            return self._runs(conn, won) if won else None

        return self._db.write(what, write, landed=landed)

    def claim_next(
        self, node_id: str, horizon: datetime, limit: int, exclude: Collection[int] = ()
    ) -> list[Run]:
        """Claim for *node_id* at most *limit* PENDING runs due by *horizon*, earliest first,
        of tasks not PAUSED (and not in *exclude*, task ids), skipping rows
        another transaction holds locked: the ``skip_locked`` claim mode, PostgreSQL only
        (see :attr:`Database.skip_locked`).

        One UPDATE over a ``SELECT ... ORDER BY due_time, id LIMIT n FOR UPDATE SKIP LOCKED``
        (PostgreSQL locks only the rows that select returns), then one read of the runs won.
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
                _claimable_by(node_id),
            )
            .order_by(d.c.due_time, d.c.id)
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
            .returning(d.c.id)
        )

        def write(conn: sa.Connection) -> list[Run]:
            won = [row[0] for row in conn.execute(claim)]
            return self._runs(conn, won) if won else []

        self._db.require_skip_locked()
        return self._db.write("claim_next_runs", write)

    @staticmethod
    def _runs(conn: sa.Connection, ids: Collection[int]) -> list[Run]:
        query = (
            sa.select(*_RUN_COLUMNS)
            .join_from(d, t, t.c.id == d.c.task_id)
            .where(in_list(d.c.id, ids))
            .order_by(d.c.due_time, d.c.id)
        )
        return [_run(row) for row in conn.execute(query).mappings()]

    def start(self, run: Run, *, exclusive: bool = False) -> Run | Blocked | None:
        """CLAIMED -> RUNNING, setting ``start_time`` (database time): :meth:`start_many`
        for one run. Returns the running run, :data:`BLOCKED`, or None if fenced."""
        started = self.start_many([run], exclusive={run.id} if exclusive else set())
        return started.get(run.id)

    def start_many(self, runs: Sequence[Run], *, exclusive: Collection[int]) -> Starts:
        """Start a batch of CLAIMED runs of one node with one version-checked UPDATE.
        ``start_time`` is database time, or the run's due time when the write comes ahead
        of it (the node writes starts a little early and calls the function at that time).

        Returns, per run id, the RUNNING run (version + 1), :data:`BLOCKED`, or None when
        fenced (taken over meanwhile). A run whose id is in *exclusive* (overlap ``serial``
        or ``skip``) only starts if no other run of its task is RUNNING, else it is BLOCKED;
        give at most one run per task of those. The check is a read in the same
        transaction, after the rows of those runs' tasks are locked (see :func:`_busy`): of
        two nodes starting runs of one task at once, the second sees the first's start.
        """
        if not runs:
            return {}
        node = _one_node(runs, RunStatus.RUNNING)
        expected = {r.id: r.version for r in runs}

        def write(conn: sa.Connection) -> Starts:
            busy = _busy(self._db, conn, runs, exclusive)
            free = {i: v for i, v in expected.items() if i not in busy}
            if not free:
                return outcome(conn, set())
            stmt = (
                d.update()
                .where(_held_at(free, RunStatus.CLAIMED, node))
                .values(
                    status=str(RunStatus.RUNNING),
                    version=d.c.version + 1,
                    start_time=_start_time(),
                )
            )
            return outcome(conn, set(self._db.winners(conn, stmt, d, free)))

        def outcome(conn: sa.Connection, won: set[int]) -> Starts:
            result: Starts = {r.id: r.bumped(RunStatus.RUNNING) for r in runs if r.id in won}
            waiting = [r for r in runs if r.id not in won and r.id in exclusive]
            blocked = set(_unchanged(conn, waiting)) if waiting else set()
            for r in runs:
                if r.id not in won:
                    result[r.id] = BLOCKED if r.id in blocked else None
            return result

        def landed(conn: sa.Connection) -> Starts | None:
            won = set(_moved(conn, expected, RunStatus.RUNNING, node))
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
        node = _one_node(runs, RunStatus.PENDING)
        expected = {r.id: r.version for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            stmt = (
                d.update()
                .where(_held_at(expected, RunStatus.CLAIMED, node))
                .values(
                    status=str(RunStatus.PENDING),
                    version=d.c.version + 1,
                    node_id=None,
                    claim_time=None,
                )
            )
            return set(self._db.winners(conn, stmt, d, expected))

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(_moved(conn, expected, RunStatus.PENDING, None)) or None

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
        node = _one_node(runs, status)
        expected = {r.id: r.version for r in runs}
        texts = {r.id: reasons[r.id][:_MAX_ERROR] for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            stmt = (
                d.update()
                .where(_held_at(expected, RunStatus.CLAIMED, node))
                .values(
                    status=str(status),
                    version=d.c.version + 1,
                    end_time=db_now(),
                    error_msg=per_id(d, texts, d.c.error_msg.type),
                )
            )
            return set(self._db.winners(conn, stmt, d, expected))

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(_moved(conn, expected, status, node)) or None

        return self._db.write(f"runs_{status.lower()}", write, landed=landed)

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
        its tasks' rows (see :func:`_completing`).

        *results* (run id -> a JSON value, checked and capped by the caller; see
        :mod:`easyjob.core.outcome`) go to ``result`` and *notes* (run id -> why a value was
        not stored) to ``error_msg``, of the runs written, by one more statement when any."""
        if not runs:
            return set()
        extras = _extras(results or {}, notes or {})
        node = _one_node(runs, RunStatus.SUCCESS)
        expected = {r.id: r.version for r in runs}

        def write(conn: sa.Connection) -> set[int]:
            stmt = (
                d.update()
                .where(_held_at(expected, RunStatus.RUNNING, node))
                .values(status=str(RunStatus.SUCCESS), version=d.c.version + 1, end_time=db_now())
            )
            won = set(self._db.winners(conn, stmt, d, expected))
            if won:
                if completing := _completing(self._db, conn, [r for r in runs if r.id in won]):
                    _children_of(conn, completing)
                _write_extras(conn, [row for row in extras if row["rid"] in won])
            return won

        def landed(conn: sa.Connection) -> set[int] | None:
            return set(_moved(conn, expected, RunStatus.SUCCESS, node)) or None

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
            if not _fenced_update(conn, run, RunStatus.FAILED, values):
                return False
            conn.execute(
                t.update().where(t.c.id == run.task_id).values(fail_count=t.c.fail_count + 1)
            )
            if retry_in is None:
                _children_of(conn, [run.id], RunStatus.SKIPPED, f"parent run {run.id} failed")
            else:
                now = conn.scalar(sa.select(db_now()))
                _new_attempt(
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
                )
            return True

        return self._db.write("run_failed", write, landed=_landed_one(run, RunStatus.FAILED))

    # -- recovery ---------------------------------------------------------------------------

    def held_by_dead(
        self, dead_after: timedelta, limit: int, *, now: datetime | None = None
    ) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs whose node's heartbeat is older than
        *dead_after* at database time *now* (read from the database when not given), or
        whose node has no row at all. A STOPPED node's runs (left when its shutdown grace
        ran out) are judged by its heartbeat like any other's."""

        def read(conn: sa.Connection) -> list[HeldRun]:
            cutoff = (now or conn.scalar(sa.select(db_now()))) - dead_after
            query = (
                sa.select(*_HELD_COLUMNS)
                .join_from(d, n, n.c.node_id == d.c.node_id, isouter=True)
                .join(t, t.c.id == d.c.task_id)
                .where(
                    d.c.status.in_([str(s) for s in HELD]),
                    sa.or_(n.c.node_id.is_(None), n.c.heartbeat_at < cutoff),
                )
                .order_by(d.c.id)
                .limit(limit)
            )
            return [_held(row) for row in conn.execute(query).mappings()]

        return self._db.read("held_by_dead", read)

    def held_by(self, node_id: str, limit: int) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs of *node_id*: at start, a node taking over a
        configured id recovers what its crashed predecessor held."""

        def read(conn: sa.Connection) -> list[HeldRun]:
            query = (
                sa.select(*_HELD_COLUMNS)
                .join_from(d, t, t.c.id == d.c.task_id)
                .where(d.c.status.in_([str(s) for s in HELD]), d.c.node_id == node_id)
                .order_by(d.c.id)
                .limit(limit)
            )
            return [_held(row) for row in conn.execute(query).mappings()]

        return self._db.read("held_by", read)

    def recover(
        self,
        runs: Sequence[HeldRun],
        by_node: str,
        *,
        reason: str | None = None,
        max_recoveries: int | None = None,
        gave_up: list[int] | None = None,
        recovered: list[tuple[HeldRun, int]] | None = None,
    ) -> list[int]:
        """Take back *runs* of dead nodes: each goes ABANDONED (version-checked) and a new
        PENDING attempt (``attempt`` + 1, ``triggered_by`` = recovery) is made claimable now.
        Returns the ids of the new attempts; a run that changed meanwhile is left alone. A
        broadcast run of another node than *by_node* ends ABANDONED with no new attempt: it
        belongs to its node, which is gone.
        *reason* (default: the holder was declared dead) is written to the abandoned row.

        With *max_recoveries*, a crash is not contagious: a RUNNING run counts one more
        recovery (``recoveries``, carried on the new attempt; a CLAIMED run never started, so
        its count is carried unchanged), and a run whose count would pass *max_recoveries*
        is not run again: it ends FAILED, naming the cause, its task's ``fail_count`` grows
        and its child tasks get SKIPPED rows; its id is appended to *gave_up*. Without it
        (the orphan sweep: a run whose function never ran) nothing is counted. Each run
        taken back is appended to *recovered* with the id of its new attempt."""

        def write(conn: sa.Connection) -> list[int]:
            now = conn.scalar(sa.select(db_now()))
            created = []
            ended = []
            for run in runs:
                crashes = run.recoveries
                if max_recoveries is not None and run.status == RunStatus.RUNNING:
                    crashes += 1
                if max_recoveries is not None and crashes > max_recoveries:
                    if _give_up(conn, run, crashes, max_recoveries, now):
                        ended.append(run.id)
                    continue
                why = reason or f"node {run.node_id} declared dead; taken over by {by_node}"
                elsewhere = run.target_node not in (None, by_node)
                if elsewhere:  # a broadcast run belongs to its node
                    why = f"broadcast run of node {run.target_node}, gone: not run elsewhere"
                done = conn.execute(
                    d.update()
                    .where(
                        d.c.id == run.id, d.c.version == run.version, d.c.status == str(run.status)
                    )
                    .values(
                        status=str(RunStatus.ABANDONED),
                        version=d.c.version + 1,
                        end_time=now,
                        error_msg=why,
                    )
                )
                if done.rowcount == 1 and not elsewhere:
                    created.append(
                        new_id := _new_attempt(
                            conn,
                            run.task_id,
                            run.pid,
                            run.fire_time,
                            run.attempt + 1,
                            Trigger.RECOVERY,
                            now,
                            now,
                            recoveries=crashes,
                            kwargs=run.kwargs,
                            shard=run.shard,
                            shards=run.shards,
                            target_node=run.target_node,
                        )
                    )
                    if recovered is not None:
                        recovered.append((run, new_id))
            if gave_up is not None:
                gave_up.extend(ended)
            return created

        return self._db.write("recover_runs", write)

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


def _held_at(expected: Mapping[int, int], status: RunStatus, node: str) -> sa.ColumnElement[bool]:
    """The WHERE of a batch transition of runs *node* holds: each row ``id -> version``
    still at the version read (its fencing token), in *status*, held by *node*."""
    holder = d.c.node_id == node
    return sa.and_(at_versions(d, expected), status_is(d.c.status, str(status)), holder)


def _fenced_update(
    conn: sa.Connection,
    run: Run,
    status: RunStatus,
    values: dict[str, Any],
    *extra: sa.ColumnElement[bool],
) -> bool:
    if status not in RUN_TRANSITIONS[run.status]:
        raise ValueError(f"a {run.status} run cannot become {status}")
    done = conn.execute(
        d.update()
        .where(
            d.c.id == run.id,
            d.c.version == run.version,
            d.c.status == str(run.status),
            d.c.node_id == run.node_id,
            *extra,
        )
        .values(status=str(status), version=d.c.version + 1, **values)
    )
    return done.rowcount == 1


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


def _moved(
    conn: sa.Connection, expected: Mapping[int, int], status: RunStatus, node_id: str | None
) -> list[int]:
    """Ids of rows ``id -> version read`` that are now one version on, in *status*, held by
    *node_id*: the rows an earlier attempt of the same write moved, when its COMMIT was
    applied but its reply lost. Within one node one thread makes each transition (a run's
    failure and its timeout race for the same FAILED, and both mean the same outcome), so no
    other call of this node can have left a row so."""
    return _rows_at(conn, {i: v + 1 for i, v in expected.items()}, status, node_id)


def _rows_at(
    conn: sa.Connection, versions: Mapping[int, int], status: RunStatus, node_id: str | None
) -> list[int]:
    """Ids of rows ``id -> version`` at exactly that version, in *status*, held by *node_id*
    (None: held by nobody)."""
    holder = d.c.node_id.is_(None) if node_id is None else d.c.node_id == node_id
    query = sa.select(d.c.id).where(
        at_versions(d, versions), status_is(d.c.status, str(status)), holder
    )
    return list(conn.scalars(query))


def _landed_one(run: Run, status: RunStatus) -> Callable[[sa.Connection], bool | None]:
    """The *landed* check of a one-run transition to *status* (see :meth:`Database.write`)."""
    holder = None if status == RunStatus.PENDING else run.node_id

    def landed(conn: sa.Connection) -> bool | None:
        return True if _moved(conn, {run.id: run.version}, status, holder) else None

    return landed


def _one_node(runs: Sequence[Run], status: RunStatus) -> str:
    """The node that holds every run of a batch, all allowed to become *status*."""
    for run in runs:
        if status not in RUN_TRANSITIONS[run.status]:
            raise ValueError(f"a {run.status} run cannot become {status}")
    nodes = {r.node_id for r in runs}
    if len(nodes) != 1:
        raise ValueError(f"a batch must hold runs of one node, got {sorted(nodes)}")
    return nodes.pop()


def _unchanged(conn: sa.Connection, runs: Sequence[Run]) -> list[int]:
    """Ids of *runs* whose rows still hold the version, status and node the runs carry."""
    return _rows_at(conn, {r.id: r.version for r in runs}, runs[0].status, runs[0].node_id)


def _busy(
    db: Database, conn: sa.Connection, runs: Sequence[Run | Candidate], exclusive: Collection[int]
) -> set[int]:
    """Of *runs*, the ids in *exclusive* (overlap ``serial`` or ``skip``) whose task has
    another run RUNNING: they may not start (the shards of one fire run side by side; a
    later fire waits for them all).

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
    rows = conn.execute(
        sa.select(d.c.id, d.c.task_id, d.c.fire_time, d.c.shards).where(
            in_list(d.c.task_id, tasks), d.c.status == str(RunStatus.RUNNING)
        )
    ).all()
    running: dict[int, list[tuple[int, datetime, int]]] = {}
    for run_id, task_id, fire_time, shards in rows:
        running.setdefault(task_id, []).append((run_id, fire_time, shards))
    return {
        r.id
        for r in asked
        if any(
            other != r.id and (shards == 1 or fire_time != r.fire_time)
            for other, fire_time, shards in running.get(r.task_id, ())
        )
    }


def _start_time() -> sa.ColumnElement[datetime]:
    """``start_time`` of a start write: database time, or the run's due time when the write
    comes ahead of it (the node calls the function at that time)."""
    return sa.case((d.c.due_time > db_now(), d.c.due_time), else_=db_now())


def _claimable_by(node_id: str) -> sa.ColumnElement[bool]:
    """Runs *node_id* may claim: any but another node's broadcast run."""
    return sa.or_(d.c.target_node.is_(None), d.c.target_node == node_id)


def _completing(db: Database, conn: sa.Connection, succeeded: Sequence[Run]) -> list[int]:
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


def _children_of(
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


def _new_attempt(
    conn: sa.Connection,
    task_id: int,
    pid: int | None,
    fire_time: datetime,
    attempt: int,
    trigger: Trigger,
    due: datetime,
    now: datetime,
    *,
    recoveries: int = 0,
    kwargs: dict[str, Any] | None = None,
    shard: int = 0,
    shards: int = 1,
    target_node: str | None = None,
) -> int:
    result = conn.execute(
        d.insert().values(
            kwargs=kwargs,
            recoveries=recoveries,
            shard=shard,
            shards=shards,
            target_node=target_node,
            task_id=task_id,
            pid=pid,
            fire_time=fire_time,
            due_time=due,
            status=str(RunStatus.PENDING),
            triggered_by=str(trigger),
            attempt=attempt,
            create_time=now,
        )
    )
    return int(result.inserted_primary_key[0])  # type: ignore[index]


def _give_up(conn: sa.Connection, run: HeldRun, crashes: int, limit: int, now: datetime) -> bool:
    """End a RUNNING run whose node died while running it once too often: FAILED, with its
    task's fail count and its children's SKIPPED rows. False if it changed meanwhile."""
    times = "once" if crashes == 1 else f"{crashes} times"
    why = (
        f"its node died while running it {times} (last: {run.node_id}); not run again "
        f"(max_recoveries {limit}): the job may be killing its process"
    )
    done = conn.execute(
        d.update()
        .where(d.c.id == run.id, d.c.version == run.version, d.c.status == str(run.status))
        .values(
            status=str(RunStatus.FAILED),
            version=d.c.version + 1,
            end_time=now,
            error_msg=why,
            recoveries=crashes,
        )
    )
    if done.rowcount != 1:
        return False
    conn.execute(t.update().where(t.c.id == run.task_id).values(fail_count=t.c.fail_count + 1))
    _children_of(conn, [run.id], RunStatus.SKIPPED, f"parent run {run.id} failed")
    return True


def _run(row: Any) -> Run:
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    values["triggered_by"] = Trigger(values["triggered_by"])
    values["overlap"] = Overlap(values["overlap"])
    values["misfire"] = Misfire(values["misfire"])
    return Run(**values)


def _candidate(row: Any) -> Candidate:
    values = dict(row)
    values["overlap"] = Overlap(values["overlap"])
    values["misfire"] = Misfire(values["misfire"])
    return Candidate(**values)


def _held(row: Any) -> HeldRun:
    values = dict(row)
    values["status"] = RunStatus(values["status"])
    return HeldRun(**values)
