"""The fencing checks of run transitions: the WHERE of a version-checked write, and the reads
that tell a write whose COMMIT reply was lost (it landed) from one that was fenced."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.core.states import RUN_TRANSITIONS, RunStatus
from easyjob.store.database import at_versions, status_is
from easyjob.store.engine import db_now
from easyjob.store.expressions import (
    at_named_versions,
    named_values,
    named_versions,
    per_named,
)
from easyjob.store.schema import UTCDateTime, task_detail_table

__all__ = [
    "at_read",
    "batch",
    "fenced_update",
    "held_at",
    "holder",
    "in_time",
    "landed_one",
    "moved",
    "one_node",
    "timed",
    "unchanged",
]

d = task_detail_table

#: The deadline of a run that has none (a far date every database stores).
_NEVER = datetime(9999, 1, 1, tzinfo=UTC)

#: The parameter names of a batch transition (see :func:`batch`).
_RUNS, _HOLDER, _DEADLINES = "runs", "holder", "deadlines"


def in_time() -> sa.ColumnElement[bool]:
    """The WHERE that lets a start (or a claim and start) of a batch's runs land only before
    each one's deadline (the ``deadlines`` of :func:`batch`, from
    :func:`easyjob.core.admission.start_deadline`), in database time, when the write
    commits: a write decided in time but retried through an outage does not start a run
    that its successor has superseded meanwhile."""
    return db_now() < per_named(d.c.id, _DEADLINES, UTCDateTime())


def at_read() -> sa.ColumnElement[bool]:
    """Each row of a batch (``id -> version``, the ``runs`` of :func:`batch`) still at the
    version read: its fencing token."""
    return at_named_versions(d, _RUNS)


def held_at(status: RunStatus) -> sa.ColumnElement[bool]:
    """The WHERE of a batch transition of runs one node holds: each row of the batch still
    at the version read (:func:`at_read`), in *status*, held by the node (the parameters of
    :func:`batch`)."""
    return sa.and_(at_read(), status_is(d.c.status, str(status)), d.c.node_id == holder())


def holder() -> sa.BindParameter[str]:
    """The node of a batch transition (the ``holder`` of :func:`batch`)."""
    return sa.bindparam(_HOLDER, type_=d.c.node_id.type)


def timed(ids: Collection[int], deadlines: Mapping[int, datetime]) -> bool:
    """Whether a batch of runs *ids* needs :func:`in_time`: one of them has a deadline."""
    return any(i in deadlines for i in ids)


def batch(
    expected: Mapping[int, int],
    node: str | None = None,
    deadlines: Mapping[int, datetime] | None = None,
) -> dict[str, Any]:
    """The execution parameters of a batch transition's statement, built once (its WHERE
    from :func:`at_read` or :func:`held_at`, :func:`holder` and, when :func:`timed`,
    :func:`in_time`): the rows ``id -> version read``, the node, and each row's deadline
    (far off for one that has none)."""
    params = named_versions(_RUNS, expected)
    if node is not None:
        params[_HOLDER] = node
    if deadlines and timed(expected, deadlines):
        every = {i: deadlines.get(i, _NEVER) for i in expected}
        params.update(named_values(_DEADLINES, every))
    return params


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
