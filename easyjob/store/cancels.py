"""Cancelling runs on request (``easyjob cancel``), from any host, through the database.

A cancel is one version-checked transition, like every other: a run not started yet
(PENDING, or CLAIMED and waiting on a node) and a RUNNING one end CANCELLED at once; a
node that then tries to start the waiting one, or to write the running one's outcome, is
fenced. The node holding a RUNNING run reads, once per poll, which of its running runs were
cancelled (:meth:`CancelStore.cancelled`) and stops their jobs. A CANCELLED run is final:
recovery takes back only CLAIMED and RUNNING runs, so it is never run again.
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa

from easyjob.core.states import CANCELLABLE, RunStatus, by_value
from easyjob.core.store_values import Cancelled
from easyjob.errors import RunNotFoundError
from easyjob.store.database import Database
from easyjob.store.engine import db_now
from easyjob.store.schema import task_detail_table

__all__ = ["CANCELLABLE", "CancelStore", "Cancelled"]

d = task_detail_table


class CancelStore:
    """Cancel requests and the nodes' reads of them."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def cancel(self, run_id: int, reason: str = "cancelled on request") -> Cancelled:
        """End run *run_id* CANCELLED if it has not ended (one version-checked UPDATE; a
        run that changed meanwhile is read again). RunNotFoundError for an unknown id."""

        def write(conn: sa.Connection) -> Cancelled:
            while True:
                row = conn.execute(
                    sa.select(d.c.status, d.c.version, d.c.node_id).where(d.c.id == run_id)
                ).one_or_none()
                if row is None:
                    raise RunNotFoundError(f"no run with id {run_id!r}")
                status = by_value(RunStatus)[row.status]
                if status not in CANCELLABLE:
                    return Cancelled(run_id, status, row.node_id, cancelled=False)
                done = conn.execute(
                    d.update()
                    .where(d.c.id == run_id, d.c.version == row.version, d.c.status == row.status)
                    .values(
                        status=str(RunStatus.CANCELLED),
                        version=d.c.version + 1,
                        end_time=db_now(),
                        error_msg=f"{reason} (was {status})",
                    )
                )
                if done.rowcount == 1:
                    return Cancelled(run_id, status, row.node_id, cancelled=True)

        return self._db.write("cancel_run", write)

    def cancelled(self, run_ids: Collection[int]) -> set[int]:
        """Which of *run_ids* (the runs a node is running) are CANCELLED now."""
        if not run_ids:
            return set()

        def read(conn: sa.Connection) -> set[int]:
            query = sa.select(d.c.id).where(
                d.c.id.in_(sorted(run_ids)), d.c.status == str(RunStatus.CANCELLED)
            )
            return {int(i) for i in conn.scalars(query)}

        return self._db.read("cancelled_runs", read)
