"""What the live nodes' code allows: the ``@runnable`` functions each node published when it
started (``easy_job_node_runnable``). A schedule added at run time names a function by its
import path; it can run only if some live node's code allowed that function."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from easyjob.core.states import NodeStatus
from easyjob.store.database import Database
from easyjob.store.schema import node_runnable_table, node_table

__all__ = ["CodeStore"]

r = node_runnable_table
n = node_table


class CodeStore:
    """The ``@runnable`` functions of each node incarnation."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def publish(self, node_id: str, funcs: Iterable[str]) -> None:
        """Record that node *node_id* (registered already) allows *funcs*; rows of nodes
        that are no longer RUNNING are deleted in the same transaction."""
        rows = [{"node_id": node_id, "func": func} for func in sorted(set(funcs))]

        def write(conn: sa.Connection) -> None:
            running = sa.select(n.c.node_id).where(n.c.status == str(NodeStatus.RUNNING))
            conn.execute(r.delete().where(r.c.node_id.not_in(running.scalar_subquery())))
            conn.execute(r.delete().where(r.c.node_id == node_id))
            if rows:
                conn.execute(r.insert(), rows)

        self._db.write("publish_runnable", write)

    def runnable(self, node_ids: Iterable[str]) -> frozenset[str]:
        """The functions that at least one node of *node_ids* allows."""
        ids = sorted(set(node_ids))
        if not ids:
            return frozenset()

        def read(conn: sa.Connection) -> frozenset[str]:
            query = sa.select(r.c.func).where(r.c.node_id.in_(ids)).distinct()
            return frozenset(conn.scalars(query))

        return self._db.read("read_runnable", read)
