"""Recovery: the runs held by dead nodes (or by a node's crashed predecessor), taken back as
new attempts, or ended FAILED once a run has killed its node too often."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import HeldRun
from easyjob.core.states import HELD, RunStatus, Trigger, by_value
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.runs.attempts import new_attempt
from easyjob.store.runs.chains import children_of
from easyjob.store.schema import node_table, task_detail_table, task_table

__all__ = ["RunRecovery"]

d = task_detail_table
t = task_table
n = node_table

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
    d.c.priority,
)


@cache
def _held_by_dead() -> sa.Select[Any]:
    """At most ``limit`` runs held by a node whose heartbeat is before ``cutoff`` or that
    has no row: built once (recovery reads it every few seconds on every node)."""
    silent = sa.or_(
        n.c.node_id.is_(None),
        n.c.heartbeat_at < sa.bindparam("cutoff", type_=n.c.heartbeat_at.type),
    )
    return _held_runs(d.join(n, n.c.node_id == d.c.node_id, isouter=True), silent)


@cache
def _held_by() -> sa.Select[Any]:
    """At most ``limit`` runs held by the node ``node``: built once (a node's orphan sweep
    reads it every few seconds)."""
    return _held_runs(d, d.c.node_id == sa.bindparam("node", type_=d.c.node_id.type))


def _held_runs(runs: sa.FromClause, which: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """At most ``limit`` runs held (CLAIMED or RUNNING) of *runs* that match *which*, with
    their task's name, by id."""
    return (
        sa.select(*_HELD_COLUMNS)
        .select_from(runs.join(t, t.c.id == d.c.task_id))
        .where(d.c.status.in_([str(s) for s in HELD]), which)
        .order_by(d.c.id)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )


class RunRecovery:
    """The run store's recovery of runs whose holder is gone."""

    _db: Database

    def held_by_dead(
        self, dead_after: timedelta, limit: int, *, now: datetime | None = None
    ) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs whose node's heartbeat is older than
        *dead_after* at database time *now* (read from the database when not given), or
        whose node has no row at all. A STOPPED node's runs (left when its shutdown grace
        ran out) are judged by its heartbeat like any other's."""

        def read(conn: sa.Connection) -> list[HeldRun]:
            cutoff = (now or database_time(conn)) - dead_after
            rows = conn.execute(_held_by_dead(), {"cutoff": cutoff, "limit": limit})
            return [_held(row) for row in rows.mappings()]

        return self._db.read("held_by_dead", read)

    def held_by(self, node_id: str, limit: int) -> list[HeldRun]:
        """At most *limit* CLAIMED/RUNNING runs of *node_id*: at start, a node taking over a
        configured id recovers what its crashed predecessor held."""

        def read(conn: sa.Connection) -> list[HeldRun]:
            rows = conn.execute(_held_by(), {"node": node_id, "limit": limit})
            return [_held(row) for row in rows.mappings()]

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
            now = database_time(conn)
            created = []
            ended = []
            for run in runs:
                crashes = run.recoveries
                if max_recoveries is not None and run.status == RunStatus.RUNNING:
                    crashes += 1
                if max_recoveries is not None and crashes > max_recoveries:
                    if _give_up(self._db, conn, run, crashes, max_recoveries, now):
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
                        new_id := new_attempt(
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
                            priority=run.priority,
                        )
                    )
                    if recovered is not None:
                        recovered.append((run, new_id))
            if gave_up is not None:
                gave_up.extend(ended)
            return created

        return self._db.write("recover_runs", write)


def _give_up(
    db: Database, conn: sa.Connection, run: HeldRun, crashes: int, limit: int, now: datetime
) -> bool:
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
    children_of(db, conn, [run], RunStatus.SKIPPED, f"parent run {run.id} failed")
    return True


def _held(row: Any) -> HeldRun:
    values = dict(row)
    values["status"] = by_value(RunStatus)[values["status"]]
    return HeldRun(**values)
