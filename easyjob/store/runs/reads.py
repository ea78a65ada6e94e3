"""Reads of ``easy_job_task_detail`` shared by the run store: the claimable PENDING runs, the
runs each node holds, how many runs the cluster ended and missed lately, and the mapping of a
run's row to its record."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from easyjob.core.pacing import Fates
from easyjob.core.records import Candidate, Run, from_values
from easyjob.core.states import HELD, Misfire, Overlap, RunStatus, TaskStatus, Trigger, by_value
from easyjob.core.strategies import ReadScope
from easyjob.store.database import Database
from easyjob.store.expressions import count_where, in_named, named_list, not_in_named, ordinal_of
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["RunReads", "claimable_by", "read_runs", "read_started", "returned_runs", "won_runs"]

d = task_detail_table
t = task_table

#: A run's task schedule, for the admission rule (see ``Candidate.schedule_key``).
_SCHEDULE_COLUMNS = (
    t.c.cron_expr,
    t.c.tz,
    t.c.every_ms,
    t.c.anchor_time,
    t.c.starts_at,
    t.c.ends_at,
    t.c.jitter_ms,
)

#: A run's limit and priority, for the admission rule (a trigger's priority, else its task's).
_LIMIT_COLUMNS = (
    t.c.max_running,
    d.c.shards,
    sa.func.coalesce(d.c.priority, t.c.priority).label("priority"),
)

#: A run's task: the join of a run row to its task row.
_TASK_OF_RUN = t.c.id == d.c.task_id

#: The columns of a :class:`Run`, each named as its field (see :data:`_run`).
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
    d.c.target_node,
    d.c.priority.label("trigger_priority"),
    *_SCHEDULE_COLUMNS,
    *_LIMIT_COLUMNS,
)

#: The columns of a :class:`Candidate`, each named as its field (see :data:`_candidate`).
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
    d.c.triggered_by,
    *_SCHEDULE_COLUMNS,
    *_LIMIT_COLUMNS,
)


class RunReads:
    """The run store's plain reads: what may be claimed, and what each node holds."""

    _db: Database

    def pending(
        self,
        horizon: datetime,
        limit: int,
        exclude: Collection[int] = (),
        *,
        node_id: str | None = None,
        scope: ReadScope | None = None,
        newest: bool = False,
    ) -> list[Candidate]:
        """At most *limit* PENDING runs due by *horizon*, earliest first, of tasks not
        PAUSED and not in *exclude* (task ids: the loader's small set of tasks that are
        not its code's); with *node_id*, less the broadcast runs of other nodes; with a
        *scope* that has a share, only its home runs and those due by its ``others_by``
        (see :func:`easyjob.core.strategies.read_scope`). Served by the index on (status,
        due_time) and the task's primary key, the share a filter on that range: the cost is
        per row returned (and per index entry of the range), whatever the backlog or the
        number of tasks.

        The database orders by due time alone, so that it can stop after *limit* rows of
        the index: ordered by (due_time, id) as well, PostgreSQL read, joined and sorted
        every run due at one instant before keeping *limit* (its index breaks ties by row
        position, not id: 212 ms a read, against 0.7, with 20,000 minute tasks due on one
        minute, issue 25). The rows returned are then put in (due_time, id) order here. On
        SQLite and MariaDB the index's ties are in id order already (it holds the primary
        key), so the same rows come back; on PostgreSQL, which of several runs due at the
        same instant are cut by *limit* follows their place in the table (in practice the
        order they were written in).

        With *newest*, the *limit* runs due last by *horizon* (still returned earliest
        first): the present ahead of a backlog (see
        :func:`easyjob.core.admission.overtakes`), the same index read backwards."""

        share = scope.share if scope is not None else None
        others_by = scope.others_by if scope is not None else None
        query = _pending_read(
            bool(exclude),
            node_id is not None,
            None if share is None else share.by_task,
            others_by is not None,
            newest,
        )
        params: dict[str, Any] = {"horizon": horizon, "limit": limit, "reader": node_id}
        if exclude:
            params.update(named_list("exclude", exclude))
        if share is not None:
            params.update(nodes=share.nodes, rank=share.rank, step=share.step, others_by=others_by)

        def read(conn: sa.Connection) -> list[Candidate]:
            found = [_candidate(row) for row in conn.execute(query, params)]
            found.sort(key=_due_order)
            return found

        return self._db.read("pending_runs", read)

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

    def fates(self, since: datetime, until: datetime, due_since: datetime | None) -> Fates:
        """How many runs the cluster (every node) ended from *since* to *until* (database
        time, by ``end_time``): run (SUCCESS or FAILED), and MISSED after they were written
        (a version past the insert's: a summary row of a gap, written MISSED, is not one),
        of those due from *due_since* on (all with None; see
        :class:`~easyjob.core.pacing.Fates`). One range of the ``end_time`` index: the
        statuses and due times are counted, not searched (see :func:`_fates_read`)."""
        query = _fates_read(due_since is not None)
        params = {"since": since, "until": until, "due_since": due_since}

        def read(conn: sa.Connection) -> Fates:
            counts = {row[0]: int(row[1]) for row in conn.execute(query, params)}
            missed = counts.get(str(RunStatus.MISSED), 0)
            return Fates(ran=sum(counts.get(status, 0) for status in _RAN), missed=missed)

        return self._db.read("run_fates", read)


#: The statuses of a run that ran (see :meth:`RunReads.fates`).
_RAN = (str(RunStatus.SUCCESS), str(RunStatus.FAILED))


@cache
def _fates_read(due_bound: bool) -> sa.Select[Any]:
    """The runs ended from ``since`` to ``until`` and written before (version past the
    insert's), counted by status (only those due from ``due_since`` on, when *due_bound*):
    built once (a planner reads it about once a poll).

    Only the range of ``end_time`` is in the WHERE: the statuses are told apart by the
    GROUP BY and the due bound is counted (:func:`~easyjob.store.expressions.count_where`),
    so no database can take the read for a range of ``(status, due_time)``. With the
    status and due bound searched, SQLite (and PostgreSQL before its first statistics) went
    by that index: every run ended since the node started, at every read, growing with the
    node's uptime (issue 25)."""
    end_time = d.c.end_time
    counted: sa.ColumnElement[Any] = sa.func.count()
    if due_bound:
        counted = count_where(d.c.due_time >= sa.bindparam("due_since", type_=d.c.due_time.type))
    return (
        sa.select(d.c.status, counted)
        .where(
            end_time >= sa.bindparam("since", type_=end_time.type),
            end_time < sa.bindparam("until", type_=end_time.type),
            d.c.version > 0,
        )
        .group_by(d.c.status)
    )


def _due_order(run: Candidate | Run) -> tuple[datetime, int]:
    """The order runs are due in (the reads' ``ORDER BY due_time, id``)."""
    return run.due_time, run.id


def won_runs(
    db: Database,
    conn: sa.Connection,
    stmt: sa.Update,
    expected: Mapping[int, int],
    params: Mapping[str, Any],
) -> list[Run]:
    """The runs the batch version-checked UPDATE *stmt* of run rows ``id -> version read``
    won, as written, with their task's columns, in due order: in the UPDATE's reply where
    the database returns a joined table's columns (PostgreSQL; one round trip a claim
    fewer), else its winners read afresh."""
    rows = db.winning_rows(conn, stmt, d, params, _TASK_OF_RUN, _RUN_COLUMNS)
    if rows is not None:
        return sorted(map(_run, rows), key=_due_order)
    won = db.winners(conn, stmt, d, expected, params)
    return read_runs(conn, won) if won else []


def returned_runs(conn: sa.Connection, stmt: sa.Update) -> list[Run]:
    """The runs the UPDATE of run rows *stmt* wrote, as written, with their task's columns,
    in due order, from its reply: the task row joined (``UPDATE ... FROM task ...
    RETURNING``; PostgreSQL, as :meth:`Dialect.winning_rows
    <easyjob.store.dialects.base.Dialect.winning_rows>`): no read of them after it."""
    returning = stmt.where(_TASK_OF_RUN).returning(*_RUN_COLUMNS)
    return sorted(map(_run, conn.execute(returning)), key=_due_order)


def read_runs(conn: sa.Connection, ids: Collection[int]) -> list[Run]:
    """The runs of *ids*, read afresh with their task's columns, in due order."""
    return [_run(row) for row in conn.execute(_runs_by_id(), named_list("runs", ids))]


@cache
def _runs_by_id() -> sa.Select[Any]:
    """The runs of the list ``runs`` with their task's columns, in due order: built once."""
    return (
        sa.select(*_RUN_COLUMNS)
        .join_from(d, t, _TASK_OF_RUN)
        .where(in_named(d.c.id, "runs"))
        .order_by(d.c.due_time, d.c.id)
    )


def read_started(
    conn: sa.Connection, node_id: str, fires: Collection[tuple[int, datetime]], at: datetime
) -> list[Run]:
    """The runs of *fires* (task id, fire time) that *node_id* inserted RUNNING in this
    transaction, whose database time is *at* (see :mod:`easyjob.store.runs.started`): a
    fire that already had a row (another node wrote it) is not among them. One probe of
    the index on (task_id, status)."""
    params = {
        **named_list("tasks", sorted({task_id for task_id, _ in fires})),
        "node": node_id,
        "at": at,
    }
    wanted = set(fires)
    rows = conn.execute(_started_by_node(), params)
    return [run for run in map(_run, rows) if (run.task_id, run.fire_time) in wanted]


@cache
def _started_by_node() -> sa.Select[Any]:
    """The RUNNING runs of the task list ``tasks`` that node ``node`` inserted at database
    time ``at``, with their task's columns, in due order: built once (building it at every
    advance was a fifth of :func:`read_started`'s CPU at saturation, 2026-11-29)."""
    return (
        sa.select(*_RUN_COLUMNS)
        .join_from(d, t, _TASK_OF_RUN)
        .where(
            in_named(d.c.task_id, "tasks"),
            d.c.status == str(RunStatus.RUNNING),
            d.c.node_id == sa.bindparam("node", type_=d.c.node_id.type),
            d.c.create_time == sa.bindparam("at", type_=d.c.create_time.type),
        )
        .order_by(d.c.due_time, d.c.id)
    )


@cache
def _pending_read(
    excluding: bool, reader: bool, by_task: bool | None, others: bool, newest: bool = False
) -> sa.Select[Any]:
    """The pending read (see :meth:`RunReads.pending`) in one of its shapes, built once:
    executed with ``horizon`` and ``limit``; when *excluding*, the task list ``exclude``;
    with a *reader*, its node ``reader``; with a share (*by_task* not None), its ``nodes``
    and ``rank``, and with *others*, ``others_by``; *newest*: the last due first."""
    query = (
        sa.select(*_CANDIDATE_COLUMNS)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(
            d.c.status == str(RunStatus.PENDING),
            d.c.due_time <= sa.bindparam("horizon", type_=d.c.due_time.type),
            t.c.status != str(TaskStatus.PAUSED),
        )
        .order_by(d.c.due_time.desc() if newest else d.c.due_time)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )
    if excluding:
        query = query.where(not_in_named(d.c.task_id, "exclude"))
    if reader:
        query = query.where(claimable_by(sa.bindparam("reader", type_=d.c.node_id.type)))
    if by_task is not None:
        query = query.where(_in_scope(by_task, others))
    return query


def _in_scope(by_task: bool, others: bool) -> sa.ColumnElement[bool]:
    """A home run of the share ``nodes``, ``rank``, ids ``step`` apart (by task and shard, or
    by run id: :func:`easyjob.core.ids.dealt`), or, with *others*, any run due by
    ``others_by``."""
    nodes, rank = (
        sa.bindparam("nodes", type_=sa.Integer()),
        sa.bindparam("rank", type_=sa.Integer()),
    )
    step = sa.bindparam("step", type_=sa.Integer())
    key = ordinal_of(d.c.task_id, step) + d.c.shard if by_task else ordinal_of(d.c.id, step)
    home = (key % nodes) == rank
    if not others:
        return home
    return sa.or_(home, d.c.due_time <= sa.bindparam("others_by", type_=d.c.due_time.type))


def claimable_by(node_id: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]:
    """Runs *node_id* (a name, or a parameter holding it) may claim: any but another node's
    broadcast run."""
    return sa.or_(d.c.target_node.is_(None), d.c.target_node == node_id)


#: The enumeration each column of these names is read as.
_ENUMS: dict[str, Mapping[str, Any]] = {
    "status": by_value(RunStatus),
    "triggered_by": by_value(Trigger),
    "overlap": by_value(Overlap),
    "misfire": by_value(Misfire),
}


class _Maker:
    """Makes the record *cls* of a row of *columns*: each column's value is the field of
    its name (an enumeration's member where :data:`_ENUMS` names the column), set without
    the dataclass's ``__init__`` (:func:`~easyjob.core.records.from_values`: the pending
    read is the node's most frequent, and every run is made once at least)."""

    def __init__(self, cls: type[Any], columns: Sequence[sa.ColumnElement[Any]]) -> None:
        self._cls = cls
        self._keys = tuple(str(column.key) for column in columns)
        self._enums = tuple((key, _ENUMS[key]) for key in self._keys if key in _ENUMS)

    def __call__(self, row: Sequence[Any]) -> Any:
        values = dict(zip(self._keys, row, strict=True))
        for key, members in self._enums:
            values[key] = members[values[key]]
        return from_values(self._cls, values)


#: The :class:`Run` of a row of :data:`_RUN_COLUMNS`.
_run: Callable[[Sequence[Any]], Run] = _Maker(Run, _RUN_COLUMNS)
#: The :class:`Candidate` of a row of :data:`_CANDIDATE_COLUMNS`.
_candidate: Callable[[Sequence[Any]], Candidate] = _Maker(Candidate, _CANDIDATE_COLUMNS)
