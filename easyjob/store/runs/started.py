"""Fires written already started: a behind planner's fires that its own node runs (see
:func:`easyjob.core.admission.starts_when_written`), inserted RUNNING in the transaction
of their task's advance. One row written per run where an insert, then a claim and start,
make two; with the run's end, a run then costs its task row's advance, its insert and its
end (issue 25, goal 3: at most 3 rows per run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.admission import held_back
from easyjob.core.states import RunStatus
from easyjob.store.runs.claims import running_slots

__all__ = ["start_rows"]


def start_rows(
    conn: sa.Connection,
    node_id: str,
    rows: Sequence[dict[str, Any]],
    limits: Mapping[int, int | None],
    now: datetime,
) -> list[dict[str, Any]]:
    """Make RUNNING for *node_id* the PENDING rows of *rows* (run rows of fires about to be
    inserted) whose task is in *limits* (task id -> its run limit,
    :func:`~easyjob.core.admission.run_limit`; None: no limit), each claimed at database
    time *now* and started then or at its due time if later, as a claim-and-start writes
    them; returns those rows (changed in place). Their ``version`` stays 0: a run row's
    version counts the writes after its insert.

    A task at its limit of RUNNING runs (:func:`~easyjob.core.admission.held_back`) keeps
    its fire PENDING, to be claimed once a run has ended. Its RUNNING runs are read afresh
    under the lock of its task row, which the advance's version-checked UPDATE of the same
    transaction holds (SQLite has one writer at a time): two nodes' starts of one task take
    turns, as :func:`~easyjob.store.runs.claims.busy_ids` makes them for claims."""
    asked = [
        row for row in rows if row["task_id"] in limits and row["status"] == str(RunStatus.PENDING)
    ]
    limited = sorted({row["task_id"] for row in asked if limits[row["task_id"]] is not None})
    running = running_slots(conn, limited) if limited else {}
    started = []
    for row in asked:
        limit = limits[row["task_id"]]
        if limit is not None:
            slot = (0, row["fire_time"], row["shards"])
            if held_back(limit, running.get(row["task_id"], ()), [slot]):
                continue
        row.update(
            status=str(RunStatus.RUNNING),
            node_id=node_id,
            claim_time=now,
            start_time=max(row["due_time"], now),
        )
        started.append(row)
    return started
