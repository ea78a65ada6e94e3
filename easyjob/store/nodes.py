"""Statements on ``easy_job_node``: registration, heartbeats and liveness in database time."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.admission import Catalog
from easyjob.core.records import NodeRow
from easyjob.core.states import HELD, NodeStatus, RunStatus, by_value
from easyjob.core.store_values import Heartbeat, Members
from easyjob.errors import NodeIdInUseError
from easyjob.store.database import Database
from easyjob.store.engine import database_time, db_now
from easyjob.store.schema import catalog_table, node_table, task_detail_table

__all__ = ["Heartbeat", "NodeStore"]

n = node_table
c = catalog_table
d = task_detail_table

#: The statuses of a node that heartbeats: one silent for the dead threshold is dead.
_ALIVE = (str(NodeStatus.RUNNING), str(NodeStatus.STOPPING))


class NodeStore:
    """Nodes: one row per node incarnation, never reused by a restarted process."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def register(
        self,
        node_id: str,
        *,
        host: str,
        pid: int,
        weight: int,
        strategy: str,
        workers: int,
        dead_after: timedelta | None = None,
        clock_offset_ms: int = 0,
        broadcast_tasks: Sequence[str] = (),
        catalog: Catalog | None = None,
    ) -> None:
        """Insert this node's row, RUNNING, heartbeat now (database time).

        A node id that exists already (a restart under a configured id) is taken over only if
        that row is STOPPED or DEAD, or its heartbeat is older than *dead_after* (when given):
        the predecessor crashed. Otherwise NodeIdInUseError: a live node has this id.
        *broadcast_tasks*: the names of the broadcast tasks this node's code declares (each
        fire of one of them is planned as a run for every RUNNING node that lists it).
        *catalog*: what its code declares, stored once per distinct catalog (see
        :meth:`catalogs`) and named by the row's ``catalog`` column."""

        def write(conn: sa.Connection) -> None:
            now = database_time(conn)
            if catalog is not None:
                self._store_catalog(conn, catalog, now)
            stale = sa.false() if dead_after is None else n.c.heartbeat_at < now - dead_after
            values = dict(
                host=host,
                pid=pid,
                weight=weight,
                strategy=strategy,
                workers=workers,
                status=str(NodeStatus.RUNNING),
                started_at=now,
                heartbeat_at=now,
                stopped_at=None,
                clock_offset_ms=clock_offset_ms,
                claimed_count=0,
                completed_count=0,
                broadcast_tasks=sorted(broadcast_tasks) or None,
                catalog=catalog.digest if catalog is not None else None,
            )
            reused = conn.execute(
                n.update()
                .where(
                    n.c.node_id == node_id,
                    sa.or_(
                        n.c.status.in_([str(NodeStatus.STOPPED), str(NodeStatus.DEAD)]),
                        stale,
                    ),
                )
                .values(**values, version=n.c.version + 1)
            )
            if reused.rowcount == 1:
                return
            exists = conn.scalar(sa.select(n.c.node_id).where(n.c.node_id == node_id))
            if exists is not None:
                raise NodeIdInUseError(
                    f"node id {node_id!r} is in use by a live node (its heartbeat is fresh); "
                    "give each node its own id, or leave --node-id out to generate one"
                )
            conn.execute(n.insert().values(node_id=node_id, version=0, **values))

        self._db.write("register_node", write)

    def _store_catalog(self, conn: sa.Connection, catalog: Catalog, now: datetime) -> None:
        digest = catalog.digest
        if conn.scalar(sa.select(c.c.catalog).where(c.c.catalog == digest)) is None:
            row = {"catalog": digest, "body": catalog.body(), "create_time": now}
            conn.execute(self._db.backend.insert_ignore(c, ["catalog"]), [row])

    def catalogs(self, digests: Collection[str]) -> dict[str, Catalog]:
        """The catalogs stored under *digests* (those found), by digest."""
        if not digests:
            return {}

        def read(conn: sa.Connection) -> dict[str, Catalog]:
            rows = conn.execute(
                sa.select(c.c.catalog, c.c.body).where(c.c.catalog.in_(sorted(digests)))
            )
            return {digest: Catalog.from_body(body) for digest, body in rows}

        return self._db.read("read_catalogs", read)

    def heartbeat(
        self,
        node_id: str,
        *,
        clock_offset_ms: int,
        claimed: int,
        completed: int,
        stuck: int = 0,
        health: str | None = None,
    ) -> Heartbeat:
        """Stamp ``heartbeat_at`` with database time and record this node's clock offset and
        counters. A row marked DEAD by a peer comes back to RUNNING (``revived``); a STOPPED
        or missing row is not touched (``accepted`` False)."""

        params = {
            "node": node_id,
            "clock_offset_ms": clock_offset_ms,
            "claimed_count": claimed,
            "completed_count": completed,
            "stuck_count": stuck,
            "health": health[:1000] if health else None,
        }

        def write(conn: sa.Connection) -> Heartbeat:
            now = database_time(conn)
            done = conn.execute(_heartbeat(), {**params, "now": now})
            if done.rowcount == 1:
                return Heartbeat(True, False, now)
            revived = conn.execute(_revival(), {**params, "now": now})
            return Heartbeat(revived.rowcount == 1, revived.rowcount == 1, now)

        return self._db.write("heartbeat", write)

    def set_status(self, node_id: str, status: NodeStatus) -> None:
        """Mark this node STOPPING or STOPPED (STOPPED also stamps ``stopped_at``)."""
        values: dict[str, object] = {"status": str(status), "version": n.c.version + 1}
        if status == NodeStatus.STOPPED:
            values["stopped_at"] = db_now()

        def write(conn: sa.Connection) -> None:
            conn.execute(n.update().where(n.c.node_id == node_id).values(**values))
            if status == NodeStatus.STOPPED:
                _close_targeted(conn, [node_id], "stopped")

        self._db.write("set_node_status", write)

    def mark_dead(self, dead_after: timedelta, *, now: datetime | None = None) -> int:
        """Mark RUNNING/STOPPING nodes whose heartbeat is older than *dead_after* DEAD, judged
        at database time *now* (read from the database when not given); returns how many.
        Served by the index on (status, heartbeat_at). A node marked DEAD that heartbeats
        again comes back (see :meth:`heartbeat`). Usually nobody is dead: a read finds that,
        and only a find is written (on SQLite every write transaction takes the one write
        lock)."""

        def stale(conn: sa.Connection) -> sa.ColumnElement[bool]:
            cutoff = (now or database_time(conn)) - dead_after
            return sa.and_(n.c.status.in_(_ALIVE), n.c.heartbeat_at < cutoff)

        def found(conn: sa.Connection) -> bool:
            return bool(conn.scalar(sa.select(sa.exists().where(stale(conn)))))

        def write(conn: sa.Connection) -> int:
            where = stale(conn)
            dead = list(conn.scalars(sa.select(n.c.node_id).where(where)))
            done = conn.execute(
                n.update()
                .where(where, n.c.node_id.in_(dead))
                .values(status=str(NodeStatus.DEAD), version=n.c.version + 1)
            )
            _close_targeted(conn, dead, "was declared dead")
            return int(done.rowcount)

        if not self._db.read("stale_nodes", found):
            return 0
        return self._db.write("mark_dead", write)

    def prune(self, older_than: timedelta) -> int:
        """Delete the rows of nodes STOPPED or DEAD whose last heartbeat is older than
        *older_than* (database time) and that hold no run; returns how many."""

        def write(conn: sa.Connection) -> int:
            cutoff = database_time(conn) - older_than
            holds = sa.exists().where(
                d.c.node_id == n.c.node_id, d.c.status.in_([str(s) for s in HELD])
            )
            done = conn.execute(
                n.delete().where(
                    n.c.status.in_([str(NodeStatus.STOPPED), str(NodeStatus.DEAD)]),
                    n.c.heartbeat_at < cutoff,
                    ~holds,
                )
            )
            return int(done.rowcount)

        return self._db.write("prune_nodes", write)

    def all(self) -> tuple[datetime, list[NodeRow]]:
        """The database time and every node row with its heartbeat age in database time.

        Ages come from the database clock alone: a node whose own clock is off is judged
        by when the database saw its last heartbeat."""
        return self._read()

    def _read(self, statuses: tuple[str, ...] = ()) -> tuple[datetime, list[NodeRow]]:
        """The node rows of *statuses* (every row when empty), with the database time."""
        query = _nodes_read(statuses)

        def read(conn: sa.Connection) -> tuple[datetime, list[NodeRow]]:
            rows = list(conn.execute(query).mappings())
            now = rows[0]["db_time"] if rows else database_time(conn)
            nodes = []
            for row in rows:
                values = {k: v for k, v in row.items() if k != "db_time"}
                values["status"] = by_value(NodeStatus)[values["status"]]
                nodes.append(NodeRow(**values, age=now - values["heartbeat_at"]))
            return now, nodes

        return self._db.read("list_nodes", read)

    def live(self, dead_after: timedelta) -> tuple[datetime, list[NodeRow]]:
        """Nodes RUNNING whose heartbeat age (database time) is within *dead_after*, ranked by
        node id: the membership strategies rank over. Reads only RUNNING rows."""
        now, nodes = self._read((str(NodeStatus.RUNNING),))
        return now, [node for node in nodes if node.age <= dead_after]

    def members(self, dead_after: timedelta) -> Members:
        """:meth:`live`, and the RUNNING or STOPPING nodes silent for longer than
        *dead_after* (as :meth:`mark_dead` judges them), from one read of the RUNNING and
        STOPPING rows (served by the ``(status, heartbeat_at)`` index)."""
        now, nodes = self._read(_ALIVE)
        return Members(
            db_time=now,
            live=[x for x in nodes if x.status == NodeStatus.RUNNING and x.age <= dead_after],
            stale=[x.node_id for x in nodes if x.age > dead_after],
        )


@cache
def _nodes_read(statuses: tuple[str, ...]) -> sa.Select[Any]:
    """Every column of the node rows whose status is one of *statuses* (all rows when
    empty), by node id, and the database time (``db_time``): built once per set."""
    query = sa.select(n, db_now().label("db_time")).order_by(n.c.node_id)
    return query.where(n.c.status.in_(statuses)) if statuses else query


#: What a heartbeat writes besides its time (``now``) and the row's next version.
_BEAT = ("clock_offset_ms", "claimed_count", "completed_count", "stuck_count", "health")


@cache
def _heartbeat() -> sa.Update:
    """A heartbeat of the live node ``node`` (RUNNING or STOPPING), stamped ``now``: built
    once (an idle node's heartbeat cost 2.5 ms of CPU on SQLite, most of it in building
    its statements)."""
    return _beat(n.c.status.in_(_ALIVE))


@cache
def _revival() -> sa.Update:
    """:func:`_heartbeat` of the node ``node`` marked DEAD by a peer, back to RUNNING."""
    return _beat(n.c.status == str(NodeStatus.DEAD)).values(status=str(NodeStatus.RUNNING))


def _beat(status: sa.ColumnElement[bool]) -> sa.Update:
    values: dict[str, Any] = {name: sa.bindparam(name, type_=n.c[name].type) for name in _BEAT}
    return (
        n.update()
        .where(n.c.node_id == sa.bindparam("node", type_=n.c.node_id.type), status)
        .values(
            heartbeat_at=sa.bindparam("now", type_=n.c.heartbeat_at.type),
            version=n.c.version + 1,
            **values,
        )
    )


def _close_targeted(conn: sa.Connection, node_ids: Sequence[str], what: str) -> None:
    """SKIPPED, with the reason, for the PENDING broadcast runs of *node_ids*: a broadcast
    run belongs to its node and is never run by another."""
    if not node_ids:
        return
    conn.execute(
        d.update()
        .where(d.c.status == str(RunStatus.PENDING), d.c.target_node.in_(list(node_ids)))
        .values(
            status=str(RunStatus.SKIPPED),
            version=d.c.version + 1,
            end_time=db_now(),
            error_msg=sa.literal("broadcast run not started: its node ")
            + d.c.target_node
            + sa.literal(f" {what}"),
        )
    )
