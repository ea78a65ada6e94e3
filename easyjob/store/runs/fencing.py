"""The fencing checks of run transitions: the WHERE of a version-checked write, and the reads
that tell a write whose COMMIT reply was lost (it landed) from one that was fenced."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.core.states import RUN_TRANSITIONS, RunStatus
from easyjob.store.database import at_versions, per_id, status_is
from easyjob.store.engine import db_now
from easyjob.store.schema import UTCDateTime, task_detail_table

__all__ = [
    "fenced_update",
    "held_at",
    "in_time",
    "landed_one",
    "moved",
    "one_node",
    "unchanged",
]

d = task_detail_table

#: The deadline of a run that has none (a far date every database stores).
_NEVER = datetime(9999, 1, 1, tzinfo=UTC)


def in_time(ids: Collection[int], deadlines: Mapping[int, datetime]) -> sa.ColumnElement[bool]:
    """The WHERE that lets a start (or a claim and start) of runs *ids* land only before each
    one's deadline (``id -> instant``, from :func:`easyjob.core.admission.start_deadline`), in
    database time, when the write commits: a write decided in time but retried through an
    outage does not start a run that its successor has superseded meanwhile."""
    if not any(i in deadlines for i in ids):
        return sa.true()
    every = {i: deadlines.get(i, _NEVER) for i in ids}
    return db_now() < per_id(d, every, UTCDateTime())


def held_at(expected: Mapping[int, int], status: RunStatus, node: str) -> sa.ColumnElement[bool]:
    """The WHERE of a batch transition of runs *node* holds: each row ``id -> version``
    still at the version read (its fencing token), in *status*, held by *node*."""
    holder = d.c.node_id == node
    return sa.and_(at_versions(d, expected), status_is(d.c.status, str(status)), holder)


def fenced_update(
    conn: sa.Connection,
    run: Run,
    status: RunStatus,
    values: dict[str, Any],
    *extra: sa.ColumnElement[bool],
) -> bool:
    """Move one *run* to *status* with *values*, if its row still holds the run's version,
    status and node (and the *extra* conditions); False if fenced."""
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


def moved(
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


def landed_one(run: Run, status: RunStatus) -> Callable[[sa.Connection], bool | None]:
    """The *landed* check of a one-run transition to *status* (see :meth:`Database.write`)."""
    holder = None if status == RunStatus.PENDING else run.node_id

    def landed(conn: sa.Connection) -> bool | None:
        return True if moved(conn, {run.id: run.version}, status, holder) else None

    return landed


def one_node(runs: Sequence[Run], status: RunStatus) -> str:
    """The node that holds every run of a batch, all allowed to become *status*."""
    for run in runs:
        if status not in RUN_TRANSITIONS[run.status]:
            raise ValueError(f"a {run.status} run cannot become {status}")
    nodes = {r.node_id for r in runs}
    if len(nodes) != 1:
        raise ValueError(f"a batch must hold runs of one node, got {sorted(nodes)}")
    return nodes.pop()


def unchanged(conn: sa.Connection, runs: Sequence[Run]) -> list[int]:
    """Ids of *runs* whose rows still hold the version, status and node the runs carry."""
    return _rows_at(conn, {r.id: r.version for r in runs}, runs[0].status, runs[0].node_id)
