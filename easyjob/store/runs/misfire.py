"""Runs closed before they start: PENDING runs the admission rule says are MISSED, and a
paused task's unstarted runs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache

import sqlalchemy as sa

from easyjob.core.states import RunStatus, Trigger
from easyjob.store.database import Database, at_versions, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import named_values, per_named
from easyjob.store.runs.fencing import at_read, batch
from easyjob.store.schema import task_detail_table

__all__ = ["RunMisfires", "skip_unstarted"]

d = task_detail_table

_MAX_ERROR = 4000


class RunMisfires:
    """The run store's write of misses decided by :mod:`easyjob.core.admission`."""

    _db: Database

    def miss_pending(self, runs: Mapping[int, tuple[int, str]]) -> set[int]:
        """PENDING -> MISSED for *runs* (``id -> (version read, reason)``), each with its
        reason, in one version-checked UPDATE; returns the ids written (a run claimed or
        changed meanwhile has moved on and is left alone)."""
        if not runs:
            return set()
        expected = {run_id: version for run_id, (version, _) in runs.items()}
        reasons = {run_id: why[:_MAX_ERROR] for run_id, (_, why) in runs.items()}

        def write(conn: sa.Connection) -> set[int]:
            params = {**batch(expected), **named_values("reasons", reasons)}
            return set(self._db.winners(conn, _miss_update(), d, expected, params))

        def landed(conn: sa.Connection) -> set[int] | None:
            moved = conn.scalars(
                sa.select(d.c.id).where(
                    at_versions(d, {i: v + 1 for i, v in expected.items()}),
                    status_is(d.c.status, str(RunStatus.MISSED)),
                )
            )
            return set(moved) or None

        return self._db.write("miss_pending", write, landed=landed)


@cache
def _miss_update() -> sa.Update:
    """PENDING -> MISSED for the runs ``runs`` still at the version read, each with its
    reason (``reasons``): built once (see :mod:`easyjob.store.expressions`)."""
    return (
        d.update()
        .where(at_read(), status_is(d.c.status, str(RunStatus.PENDING)))
        .values(
            status=str(RunStatus.MISSED),
            version=d.c.version + 1,
            end_time=db_now(),
            error_msg=per_named(d.c.id, "reasons", d.c.error_msg.type),
        )
    )


def skip_unstarted(
    conn: sa.Connection, task_id: int, reason: str, now: datetime, *, paused: bool = False
) -> None:
    """Close every run of task *task_id* that has not started (PENDING, or CLAIMED by a node:
    its version moves, so that node's start is fenced) as SKIPPED with *reason*.

    With *paused* (a pause, not a removal), a manual run (a trigger) is not closed: it waits
    for the resume, PENDING (one a node had CLAIMED is handed back, fencing that node's
    start), and runs then, or at its time if that is later."""
    unstarted = d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)])
    closing = [d.c.task_id == task_id, unstarted]
    if paused:
        manual = d.c.triggered_by == str(Trigger.MANUAL)
        closing.append(~manual)
        conn.execute(
            d.update()
            .where(d.c.task_id == task_id, d.c.status == str(RunStatus.CLAIMED), manual)
            .values(
                status=str(RunStatus.PENDING),
                version=d.c.version + 1,
                node_id=None,
                claim_time=None,
            )
        )
    conn.execute(
        d.update()
        .where(*closing)
        .values(
            status=str(RunStatus.SKIPPED), version=d.c.version + 1, end_time=now, error_msg=reason
        )
    )
