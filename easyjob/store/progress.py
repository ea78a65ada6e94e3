"""Whether nodes do the work they hold: runs held CLAIMED well past their due time, neither
started nor handed back (a node's ``/readyz`` and ``easyjob status``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.states import RunStatus
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.schema import task_detail_table

__all__ = ["HELD_DUE_AFTER", "ProgressStore"]

d = task_detail_table

#: A run CLAIMED this long past its due time is one its node neither runs nor leaves to
#: others (a healthy node starts it at its due time, or hands it back within its overdue
#: grace, about a second).
HELD_DUE_AFTER = timedelta(seconds=10)


class ProgressStore:
    """Reads of progress (read-only transactions)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def held_due(
        self,
        by: timedelta = HELD_DUE_AFTER,
        node_id: str | None = None,
        *,
        now: datetime | None = None,
    ) -> dict[str, int]:
        """How many runs each node (or just *node_id*) holds CLAIMED more than *by* past
        their due time (database time, *now* when the caller knows it, as a node does to
        well within a second: one statement; else read first), not counting those that wait
        for a RUNNING run of their task (``overlap="serial"``: waiting is their policy).
        Served by the ``(status, node_id)`` index; one row per node."""
        query = _held_due_read(node_id is not None)

        def read(conn: sa.Connection) -> dict[str, int]:
            before = (now if now is not None else database_time(conn)) - by
            rows = conn.execute(query, {"before": before, "node": node_id})
            return {str(node): int(count) for node, count in rows}

        return self._db.read("held_due", read)


@cache
def _held_due_read(one_node: bool) -> sa.Select[Any]:
    """The count per node of runs CLAIMED with a due time before ``before`` and no RUNNING
    run of their task (only the node ``node``'s when *one_node*): built once (built at
    each read, its aliases' column collections cost about half of its CPU, which every
    node pays once per heartbeat)."""
    held, other = d.alias("held"), d.alias("other")
    running = sa.exists().where(
        other.c.task_id == held.c.task_id, other.c.status == str(RunStatus.RUNNING)
    )
    query = (
        sa.select(held.c.node_id, sa.func.count())
        .where(
            held.c.status == str(RunStatus.CLAIMED),
            held.c.due_time < sa.bindparam("before", type_=d.c.due_time.type),
            ~running,
        )
        .group_by(held.c.node_id)
    )
    if one_node:
        query = query.where(held.c.node_id == sa.bindparam("node", type_=d.c.node_id.type))
    return query
