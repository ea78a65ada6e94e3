"""Statements on ``easy_job_task``: registration, due polling, and advancing schedules."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from easyjob.core.records import (
    ORIGIN_CODE,
    Advance,
    Advanced,
    PlannedFire,
    PlanningRow,
    Run,
    TaskRow,
    TaskSpec,
)
from easyjob.core.schedule import build_schedule
from easyjob.core.states import Misfire, NodeStatus, RunStatus, TaskStatus, Trigger
from easyjob.errors import TaskDefinitionError, TaskNotFoundError, shown
from easyjob.store.ahead import forget_ahead
from easyjob.store.caller import CallerConnections
from easyjob.store.database import Database, status_is
from easyjob.store.engine import database_time, db_now
from easyjob.store.expressions import (
    at_named_versions,
    named_list,
    named_values,
    named_versions,
    not_in_named,
    ordinal_of,
    per_named,
    unindexed,
)
from easyjob.store.parents import parents_of, write_parents
from easyjob.store.retry import first_line, is_transient
from easyjob.store.runs import skip_unstarted
from easyjob.store.runs.reads import read_started
from easyjob.store.runs.started import start_rows
from easyjob.store.schema import UTCDateTime, node_table, task_detail_table, task_table
from easyjob.store.successes import counted_tasks
from easyjob.store.triggers import TriggerRequest, TriggerTarget

__all__ = ["SEEN_REFRESH", "TaskStore"]

t = task_table
d = task_detail_table
n = node_table
log = logging.getLogger("easyjob.store")

#: The columns a planner's due read selects: those of a PlanningRow, not the whole row.
_NAMES = [f.name for f in dataclasses.fields(PlanningRow)]
_PLANNING = [t.c[name] for name in _NAMES]


#: Tasks read per lock-free read of a registration (and well under every backend's limit
#: of bound parameters per statement, whatever the number of tasks).
_UPSERT_CHUNK = 2000

#: Tasks written per write transaction of a registration on a database with one writer
#: (:attr:`Dialect.one_writer <easyjob.store.dialects.base.Dialect.one_writer>`, SQLite): a
#: short hold of its write lock. Inserting 2,000 held it a few hundred ms while the nodes'
#: claims waited (4 nodes x 6,000 every-second tasks starting on empty tables: the fires of
#: a whole second missed, and half the nodes' first runs came over 2 s after their start).
#: Elsewhere a chunk is written in one transaction (in 500s, a first registration of
#: 100,000 tasks took 16-38 % longer on PostgreSQL, and nothing waited for it).
_WRITE_CHUNK = 500

#: The first chunk registered is smaller: its tasks exist, and plan their fires, sooner.
_FIRST_CHUNK = 250


def _chunks(count: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each chunk of *count* tasks: :data:`_FIRST_CHUNK`, then
    :data:`_UPSERT_CHUNK` each."""
    start, size = 0, _FIRST_CHUNK
    while start < count:
        yield start, min(count, start + size)
        start, size = start + size, _UPSERT_CHUNK


#: How old a task's ``seen_time`` may be before registering it unchanged refreshes it: a node
#: that restarts within this writes no row of its unchanged tasks (docs/schema.md).
SEEN_REFRESH = timedelta(hours=1)


class TaskStore:
    """Tasks: one row per name. Every schedule change bumps ``version``, which fences a
    loader that read the row before the change."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._callers = CallerConnections(db)

    def upsert(self, specs: Sequence[TaskSpec]) -> list[TaskRow]:
        """Insert or update the tasks *specs* declare, by name; returns their rows.

        Safe when several nodes register the same tasks at once: the name is UNIQUE and
        inserts that lose the race become updates. A changed cron or time zone recomputes
        ``next_start_time`` (the first fire after now, database time); other changes keep it.
        A changed schedule, ``shards``, ``broadcast`` or ``max_runs``, and a pause, forget
        the task's fires written ahead and not yet due (see
        :func:`~easyjob.store.ahead.forget_ahead`): the new definition plans them again.
        Parents are resolved by name among *specs* and the tasks already stored; an unknown
        parent raises TaskDefinitionError.

        Only what changed is written (see :meth:`register`): a task whose row already says
        what its spec declares is read, not written, and its row is returned as read.
        """
        rows: dict[str, TaskRow] = {}

        def keep(ids: dict[str, int]) -> None:
            rows.update(self._db.read("get_tasks", lambda conn: self._by_names(conn, list(ids))))

        self._register(specs, keep)
        return [rows[spec.name] for spec in specs]

    def register(
        self,
        specs: Sequence[TaskSpec],
        on_chunk: Callable[[dict[str, int]], None] | None = None,
    ) -> int:
        """:meth:`upsert` for a node's catalogue, keeping no rows: *on_chunk* is called with
        the ids (by name) of each chunk of tasks once they are stored. Returns how many task
        rows this call wrote (not those another node wrote meanwhile).

        Each chunk of ``_UPSERT_CHUNK`` tasks (the first smaller) is first read (the columns
        a spec sets, no lock held: SQLite's write lock is not taken, so a node registering
        does not hold up the others' claims), and only the tasks that are missing, differ
        from their spec, or were last seen more than :data:`SEEN_REFRESH` ago are written,
        in a transaction (``_WRITE_CHUNK`` a transaction on SQLite) that compares them
        again as narrowly (another node may have written them meanwhile) and reads whole
        only those it writes. Registering an unchanged catalogue writes nothing."""
        return self._register(specs, on_chunk or (lambda ids: None))

    def _register(self, specs: Sequence[TaskSpec], each: Callable[[dict[str, int]], None]) -> int:
        counts = Counter(spec.name for spec in specs)
        if dup := sorted(name for name, count in counts.items() if count > 1):
            raise TaskDefinitionError(f"duplicate task name(s): {', '.join(map(repr, dup))}")
        ordered = _parents_first(specs)
        # the ids of the tasks being registered, by name: a chunk's, and those of the
        # parents among earlier chunks' (their children's rows name them); the others are
        # dropped once their chunk is done (kept, 100,000 ids made one by one in among each
        # chunk's rows left 12-14 MB of the node's memory held once registered)
        parents = {parent for spec in ordered for parent in spec.parents}
        ids: dict[str, int] = {}
        written = 0
        for start, end in _chunks(len(ordered)):
            chunk = ordered[start:end]

            def read(conn: sa.Connection, chunk: Sequence[TaskSpec] = chunk) -> list[TaskSpec]:
                return _unwritten(conn, chunk, ids)

            stale = self._db.read("read_tasks", read)
            size = _WRITE_CHUNK if self._db.backend.one_writer else _UPSERT_CHUNK
            for at in range(0, len(stale), size):

                def write(
                    conn: sa.Connection, part: Sequence[TaskSpec] = stale[at : at + size]
                ) -> int:
                    # compared again, as narrowly: nodes starting together read the same
                    # missing tasks, the first inserts them, the others find them here
                    # without reading whole rows under the write lock
                    still = _unwritten(conn, part, ids)
                    if still:
                        self._upsert(conn, still, ids)
                    return len(still)

                written += self._db.write("upsert_tasks", write)
            each({spec.name: ids[spec.name] for spec in chunk})
            for spec in chunk:
                if spec.name not in parents:
                    del ids[spec.name]
        return written

    def _upsert(self, conn: sa.Connection, specs: Sequence[TaskSpec], ids: dict[str, int]) -> None:
        """Write one chunk's tasks; *ids* holds the ids of tasks of earlier chunks (parents)
        and gets this chunk's. ``seen_time`` becomes now for each.

        The rows found are compared in full and updated where they differ. The missing ones
        are inserted, then compared as :func:`_unwritten` compares (a few columns, no row
        object): only those it finds differing (a child, whose parent's id is written after
        the insert, or a row another node inserted meanwhile from other code) are read and
        updated like the rows found."""
        now = database_time(conn)
        names = [spec.name for spec in specs]
        rows = self._by_names(conn, names)
        missing = [spec for spec in specs if spec.name not in rows]
        if missing:
            first = _FirstFires(now)
            rows_to_insert = [self._new_row(s, now, first) for s in missing]
            self._db.backend.insert_rows(conn, self._insert_missing(), rows_to_insert)
            differ = _unwritten(conn, missing, ids)
            rows.update(self._by_names(conn, [spec.name for spec in differ]))
        ids.update((name, row.id) for name, row in rows.items())
        parents = {spec.name: self._parent_ids(conn, spec, ids) for spec in specs}
        changed = [
            spec.name
            for spec in specs
            if spec.name in rows
            and self._update_if_changed(
                conn, rows[spec.name], spec, next(iter(parents[spec.name]), None), now
            )
        ]
        write_parents(conn, {ids[name]: found for name, found in parents.items()})
        # not a row another node wrote or saw meanwhile (nodes starting together read the
        # same missing rows; the first inserts them, the others find them here); a row
        # inserted here was seen now
        cutoff = now - SEEN_REFRESH
        seen = [name for name in rows if name in changed or rows[name].seen_time < cutoff]
        if seen:
            conn.execute(t.update().where(t.c.name.in_(seen)).values(seen_time=now))

    def _insert_missing(self) -> sa.Insert:
        return self._db.backend.insert_ignore(t, ["name"])

    @staticmethod
    def _new_row(spec: TaskSpec, now: datetime, first: _FirstFires) -> dict[str, Any]:
        status = TaskStatus.ACTIVE if spec.enabled else TaskStatus.PAUSED
        columns = {**spec.columns(), "anchor_time": now if spec.every is not None else None}
        next_time = first(columns)
        if (spec.cron is not None or spec.every is not None) and next_time is None:
            status = TaskStatus.FINISHED
        return {
            "name": spec.name,
            **columns,
            "declared": declared(spec),
            "pid": None,
            "status": str(status),
            "next_start_time": next_time,
            "version": 0,
            "create_time": now,
            "update_time": now,
            "seen_time": now,
        }

    def _parent_ids(self, conn: sa.Connection, spec: TaskSpec, ids: dict[str, int]) -> list[int]:
        """The ids of *spec*'s parents, in order (stored, or in *ids*)."""
        found = []
        for parent in spec.parents:
            if parent not in ids:
                stored = conn.scalar(sa.select(t.c.id).where(t.c.name == parent))
                if stored is None:
                    raise TaskDefinitionError(f"task {spec.name!r}: unknown parent task {parent!r}")
                ids[parent] = int(stored)
            found.append(ids[parent])
        return found

    def _update_if_changed(
        self, conn: sa.Connection, row: TaskRow, spec: TaskSpec, pid: int | None, now: datetime
    ) -> bool:
        changes = _declared_changes(row, spec, pid)
        if _SCHEDULE.intersection(changes):
            merged = {name: changes.get(name, getattr(row, name)) for name in _SCHEDULE}
            if merged["every_ms"] is not None:
                merged["anchor_time"] = changes["anchor_time"] = now
            # A fire already due but not written yet is not skipped: a changed cron starts
            # from the row's next_start_time when that has passed (a rolling deploy).
            since = now
            cron_only = merged["every_ms"] is None
            if cron_only and row.next_start_time is not None and row.next_start_time <= now:
                since = row.next_start_time - timedelta(microseconds=1)
            next_time = first_fire(merged, since)
            changes["next_start_time"] = next_time
            scheduled = merged["cron_expr"] is not None or merged["every_ms"] is not None
            if scheduled and next_time is None:
                changes["status"] = str(TaskStatus.FINISHED)
            elif row.status == TaskStatus.FINISHED:
                changes["status"] = str(TaskStatus.ACTIVE)
        if not changes:
            return False
        conn.execute(
            t.update()
            .where(t.c.id == row.id)
            .values(**changes, version=t.c.version + 1, node_id=None, update_time=now)
        )
        if _SCHEDULE.intersection(changes):
            forget_ahead(conn, row.id, now)  # the new schedule plans from next_start_time
        elif changes.get("status") == str(TaskStatus.PAUSED) or (
            _FIRES.intersection(changes) and row.status != TaskStatus.FINISHED
        ):
            forget_ahead(conn, row.id, now, rewind=True)
        return True

    def _by_names(self, conn: sa.Connection, names: Sequence[str]) -> dict[str, TaskRow]:
        rows = conn.execute(sa.select(t).where(t.c.name.in_(names))).mappings()
        return {row["name"]: TaskRow.from_row(row) for row in rows}

    def get(self, name: str) -> TaskRow:
        """The task called *name*, with its ``success_count`` (see
        :mod:`easyjob.store.successes`); raises TaskNotFoundError."""

        def read(conn: sa.Connection) -> TaskRow | None:
            row = conn.execute(counted_tasks().where(t.c.name == name)).mappings().first()
            return TaskRow.from_row(row) if row is not None else None

        found = self._db.read("get_task", read)
        if found is None:
            raise TaskNotFoundError(f"no task named {shown(name)}")
        return found

    def all(self) -> list[TaskRow]:
        """Every task, by name, with its ``success_count``."""

        def read(conn: sa.Connection) -> list[TaskRow]:
            rows = conn.execute(counted_tasks().order_by(t.c.name)).mappings()
            return [TaskRow.from_row(row) for row in rows]

        return self._db.read("list_tasks", read)

    def set_status(self, name: str, status: TaskStatus) -> TaskRow:
        """Pause or resume a task (version bumped: fences a loader mid-advance).

        A FINISHED task cannot be paused or resumed (TaskDefinitionError).
        Pausing closes, in the same transaction, every run of the task that has not
        started: its cron fires written ahead and not yet due are deleted (see
        :func:`~easyjob.store.ahead.forget_ahead`), and the others (due PENDING runs, or
        CLAIMED by a node: its version moves, so the node's start is fenced) become SKIPPED
        with the reason "task paused before it started": once the pause is committed, no
        run of the task starts. Runs already RUNNING go on to their end. While PAUSED no
        fires are written and its runs are not claimed (a manual trigger waits PENDING for
        the resume). Resuming moves ``next_start_time`` to the first fire after now (and
        forgets fires written ahead, if any): the fires of the paused time were not missed,
        they were not wanted, so they leave no rows."""

        def write(conn: sa.Connection) -> None:
            query = sa.select(t.c.id, t.c.status, *(t.c[c] for c in _SCHEDULE_ROW)).where(
                t.c.name == name
            )
            row = conn.execute(query).first()
            if row is None:
                raise TaskNotFoundError(f"no task named {shown(name)}")
            if row.status == str(TaskStatus.FINISHED):
                raise TaskDefinitionError(
                    f"task {name!r} is FINISHED: its schedule will never fire again"
                )
            now = database_time(conn)
            values: dict[str, Any] = {"status": str(status), "update_time": now}
            if status == TaskStatus.ACTIVE:
                values["next_start_time"] = first_fire(dict(row._mapping), now)
            conn.execute(
                t.update().where(t.c.name == name).values(**values, version=t.c.version + 1)
            )
            if status == TaskStatus.ACTIVE:
                forget_ahead(conn, row.id, now)  # planned again from next_start_time
            elif row.status != str(TaskStatus.PAUSED):
                forget_ahead(conn, row.id, now)
                skip_unstarted(conn, row.id, "task paused before it started", now, paused=True)

        self._db.write("set_task_status", write)
        return self.get(name)

    def due(
        self,
        horizon: datetime,
        limit: int,
        exclude: Collection[int] = (),
        *,
        share: tuple[int, int] | None = None,
        overdue_before: datetime | None = None,
        behind_before: datetime | None = None,
        behind_since: datetime | None = None,
    ) -> list[PlanningRow]:
        """At most *limit* ACTIVE tasks whose ``next_start_time`` <= *horizon*, earliest first,
        but those in *exclude* (task ids: a node advances only the tasks its code has, so
        tasks no live node has never pile up runs nobody can take; it learns which are not
        its own from what this returns, and the list stays short).

        With *share* ``(rank, size)`` only the tasks with ``id mod size == rank`` (the id's
        ordinal, ids ``Database.id_step`` apart: :mod:`easyjob.core.ids`), plus any
        whose ``next_start_time`` is before *overdue_before*: live nodes split the advancing
        between them instead of all racing for every task, and a task whose owner is gone is
        still advanced by someone once it is overdue. Tasks whose id is in *exclude* (set
        aside by the loader: they could not be planned) are left out.

        With *behind_before*, a ``fire_once`` or ``skip`` task whose cron fire due before
        it has not started yet (PENDING or CLAIMED) is *behind* and left out: the cluster
        runs fewer of its fires than it is offered, so writing more would only write rows
        to miss. Once that run starts (or is MISSED), the task is planned again, and the
        fires due meanwhile are the gap the next fire's row carries (see
        :mod:`easyjob.core.planner`): under overload a node writes rows per run it starts,
        not per fire it is offered. With *behind_since* too, only a fire due since then
        counts (the node's start: the fires an outage left PENDING say nothing of what the
        cluster runs now, and they are superseded by the fire the planner writes, see
        :func:`easyjob.core.admission.overtakes`).

        Cost is O(rows returned): served by the index on (status, next_start_time), and,
        with *behind_before*, one probe per row of the index on (task_id, status).
        """

        query = _due_read(
            bool(exclude),
            behind_before is not None,
            behind_before is not None and behind_since is not None,
            self._db.dialect == "postgresql",
            share is not None,
            share is not None and overdue_before is not None,
        )
        params: dict[str, Any] = {"horizon": horizon, "limit": limit}
        if exclude:
            params.update(named_list("exclude", exclude))
        if behind_before is not None:
            params.update(behind_before=behind_before, behind_since=behind_since)
        if share is not None:
            params.update(rank=share[0], size=share[1], step=self._db.id_step)
            params["overdue_before"] = overdue_before

        def read(conn: sa.Connection) -> list[PlanningRow]:
            # rows as tuples, named here: a RowMapping's dict() costs more than the row's read
            rows = conn.execute(query, params)
            return [PlanningRow.from_row(dict(zip(_NAMES, row, strict=True))) for row in rows]

        return self._db.read("due_tasks", read)

    def advance(
        self,
        node_id: str,
        advances: Sequence[Advance],
        *,
        on_error: Callable[[int, str], None] | None = None,
    ) -> list[int]:
        """Move each task's ``next_start_time`` forward from the version read, and write the
        fires it passed over as run rows (PENDING to be claimed, or MISSED), in one
        transaction. Returns the ids of the tasks advanced; a task whose version changed
        meanwhile (another node advanced it, or it was edited) is left alone.

        Idempotent per fire: a fire that already has a row (unique ``cron_key``: the schedule
        was changed or moved back, or an older node wrote it) is skipped, not an error.
        Isolated per task: when the batch fails for a reason that is not transient, each
        task is written alone, and a task that still fails is left as it is and reported to
        *on_error* ``(task_id, message)`` (else logged): the others advance."""
        return self.advance_and_start(node_id, advances, on_error=on_error).won

    def advance_and_start(
        self,
        node_id: str,
        advances: Sequence[Advance],
        start: Mapping[int, int | None] | None = None,
        *,
        on_error: Callable[[int, str], None] | None = None,
    ) -> Advanced:
        """:meth:`advance`, writing the PENDING fire of each task of *start* (task id -> its
        run limit, :func:`~easyjob.core.admission.run_limit`) already RUNNING for *node_id*
        unless its task is at its limit (:func:`easyjob.store.runs.started.start_rows`).
        Returns the tasks advanced and the runs so started, which *node_id* must run (if
        the COMMIT's reply is lost, they are not known here: its recovery sweep takes them
        back as orphans)."""
        if not advances:
            return Advanced([], [])
        limits = start or {}
        try:
            return self._db.write(
                "advance_tasks", lambda conn: self._advance(conn, node_id, advances, limits)
            )
        except sa_exc.DBAPIError as err:
            if is_transient(err):  # outlasted the retries: the loader's next poll tries again
                raise
            if len(advances) == 1:
                self._report(advances[0].task_id, err, on_error)
                return Advanced([], [])
        won: list[int] = []
        started: list[Run] = []
        for one in advances:

            def write(conn: sa.Connection, one: Advance = one) -> Advanced:
                return self._advance(conn, node_id, [one], limits)

            try:
                done = self._db.write("advance_task", write)
            except sa_exc.DBAPIError as err:
                if is_transient(err):
                    raise
                self._report(one.task_id, err, on_error)
                continue
            won += done.won
            started += done.started
        return Advanced(won, started)

    @staticmethod
    def _report(
        task_id: int, err: sa_exc.DBAPIError, on_error: Callable[[int, str], None] | None
    ) -> None:
        message = first_line(err.orig or err)
        if on_error is not None:
            on_error(task_id, message)
        else:
            log.error("task id %d cannot be advanced: %s", task_id, message)

    def _advance(
        self,
        conn: sa.Connection,
        node_id: str,
        advances: Sequence[Advance],
        limits: Mapping[int, int | None],
    ) -> Advanced:
        by_id = {a.task_id: a for a in advances}
        expected = {a.task_id: a.version for a in advances}
        # every value per task of the batch, so the statement has one list size (see
        # easyjob.store.expressions): no time (None) ends the schedule
        times = {a.task_id: a.next_start_time for a in advances}
        ended = str(TaskStatus.FINISHED), str(TaskStatus.ACTIVE)
        status = {a.task_id: ended[a.next_start_time is not None] for a in advances}
        counts = {a.task_id: sum(f.status == RunStatus.PENDING for f in a.fires) for a in advances}
        params = {
            **named_versions("tasks", expected),
            **named_values("times", times),
            **named_values("statuses", status),
            **named_values("counts", counts),
            "planner": node_id,
        }
        won = self._db.winners(conn, _advance_update(), t, expected, params)
        now = database_time(conn)
        targets = _broadcast_targets(conn, [i for i in won if by_id[i].broadcast])
        rows = [
            row
            for task_id in won
            for fire in by_id[task_id].fires
            for row in _fire_rows(task_id, fire, by_id[task_id].shards, targets.get(task_id), now)
        ]
        # in due order, each instant's fires together: they take consecutive ids (ordinals,
        # see easyjob.core.ids), so ``default``'s homes spread each instant over the nodes
        # (written task by task, 10 fires each, half of 4 nodes had every second's runs)
        rows.sort(key=_written_order)
        begun = start_rows(conn, node_id, rows, limits, now) if limits else []
        # one INSERT per set of columns: fires to claim, fires started (RUNNING: only
        # start_rows makes a fire row so), each carrying a gap or not
        for started in (False, True):
            part = [row for row in rows if (row["status"] == str(RunStatus.RUNNING)) == started]
            plain = [row for row in part if row["missed_from"] is None]
            if plain:
                self._db.backend.insert_rows(conn, self._insert_fires, plain)
            if carrying := [row for row in part if row["missed_from"] is not None]:
                self._db.backend.insert_rows(conn, self._insert_carrying, carrying)
        if not begun:
            return Advanced(won, [])
        fires = [(row["task_id"], row["fire_time"]) for row in begun]
        return Advanced(won, read_started(conn, node_id, fires, now))

    @cached_property
    def _insert_fires(self) -> sa.Insert:
        """An INSERT of run rows that skips a row whose cron fire already has one (see
        :meth:`Dialect.insert_ignore <easyjob.store.dialects.base.Dialect.insert_ignore>`);
        built once."""
        return self._db.backend.insert_ignore(d)

    @cached_property
    def _insert_carrying(self) -> sa.Insert:
        """An INSERT of fires that carry a gap (see :mod:`easyjob.core.planner`): a fire
        that already has a row (its task's cursor was moved back over it) gives that row
        the gap, unless it carries one already, so the gap is not lost with the skipped
        insert. Built once."""
        return self._db.backend.insert_or_fill(d, _CRON_FIRE, ["missed_from", "missed_count"])

    def trigger(
        self,
        name: str,
        *,
        at: datetime | None = None,
        kwargs: Mapping[str, Any] | None = None,
        connection: sa.Connection | None = None,
        priority: int | None = None,
    ) -> int:
        """Create a manual fire of task *name*, due *at* (default: now, database time), with
        the trigger arguments *kwargs* and the *priority* (None: its task's, as it is when
        the run is claimed; see :func:`easyjob.core.admission.start_order`); any node whose
        code declares the task may take it.
        Returns its run id (a sharded task's fire is one run per shard, and a broadcast
        task's one per node that declares it: the id of the first).

        *kwargs* must be JSON and name only arguments the task accepts (``accepts=`` of
        ``@scheduled``, stored in ``easy_job_task.accepts``), else TaskDefinitionError
        naming them; so must *at* not be earlier than now less the task's misfire grace
        (the run would be missed at once). TaskNotFoundError for an unknown task.

        With *connection* (a SQLAlchemy Connection inside the caller's transaction, on this
        store's database) the run is written in that transaction: it exists if and only if
        the caller commits, and nodes see it from the commit on. Nothing is retried or
        committed then, and database errors reach the caller as they are; a connection
        that cannot be used so is refused with ConfigError saying why (see
        :mod:`easyjob.store.caller`). "Now" is read through it."""
        request = TriggerRequest.of(name, at, kwargs, priority)
        if connection is not None:
            conn, now = self._callers.check(connection, f"trigger of {name!r}")
            return self._trigger(conn, request, now)

        def write(conn: sa.Connection) -> int:
            return self._trigger(conn, request, database_time(conn))

        return self._db.write("trigger_task", write)

    @staticmethod
    def _trigger(conn: sa.Connection, request: TriggerRequest, now: datetime) -> int:
        """Insert the run(s) of *request* with *conn*, in its transaction."""
        query = sa.select(
            t.c.id, t.c.accepts, t.c.misfire_grace_ms, t.c.shards, t.c.broadcast
        ).where(t.c.name == request.name)
        row = conn.execute(query).first()
        target = TriggerTarget(*row) if row is not None else None
        due = request.due(target, now)
        assert target is not None  # due() refused a missing task
        targets = _broadcast_targets(conn, [target.id]).get(target.id) if target.broadcast else None
        first = None
        for values in _fire_rows(target.id, PlannedFire(due), target.shards, targets, now):
            values.update(
                triggered_by=str(Trigger.MANUAL), kwargs=request.kwargs, priority=request.priority
            )
            result = conn.execute(d.insert().values(values))
            first = first or int(result.inserted_primary_key[0])  # type: ignore[index]
        assert first is not None
        return first


@cache
def _due_read(
    excluding: bool, behind: bool, since: bool, fenced: bool, shared: bool, overdue: bool
) -> sa.Select[Any]:
    """The planner's due read (see :meth:`TaskStore.due`) in one of its shapes, built once:
    executed with ``horizon`` and ``limit``; when *excluding*, the task list ``exclude``;
    with *behind*, ``behind_before``, and with *since*, ``behind_since`` (*fenced*: see
    :func:`_behind`); when *shared*, the share ``rank`` of ``size`` over ids ``step`` apart,
    and with *overdue*, any task due before ``overdue_before`` too. (Built at each read, its
    expressions cost more CPU than the read itself: 1.7 ms a poll of an idle SQLite node's
    planner, two thirds of it building.)"""
    query = (
        sa.select(*_PLANNING)
        .where(
            t.c.status == str(TaskStatus.ACTIVE),
            t.c.next_start_time <= sa.bindparam("horizon", type_=t.c.next_start_time.type),
        )
        .order_by(t.c.next_start_time)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )
    if excluding:
        query = query.where(not_in_named(t.c.id, "exclude"))
    if behind:
        late = _behind(
            sa.bindparam("behind_before", type_=d.c.due_time.type),
            sa.bindparam("behind_since", type_=d.c.due_time.type) if since else None,
            fenced,
        )
        query = query.where(sa.or_(t.c.misfire == str(Misfire.CATCH_UP), ~late))
    if shared:
        size, rank = (
            sa.bindparam("size", type_=sa.Integer()),
            sa.bindparam("rank", type_=sa.Integer()),
        )
        mine = ordinal_of(t.c.id, sa.bindparam("step", type_=sa.Integer())) % size == rank
        if overdue:
            before = sa.bindparam("overdue_before", type_=t.c.next_start_time.type)
            mine = sa.or_(mine, t.c.next_start_time < before)
        query = query.where(mine)
    return query


def _behind(
    before: sa.BindParameter[datetime], since: sa.BindParameter[datetime] | None, fenced: bool
) -> sa.Exists:
    """Whether the task row has a cron fire due before *before* (and since *since*) that has
    not started: a probe of the index on (task_id, status) per task row. Both other
    databases would rather range over every due run of every task, per task: MariaDB is
    told the index (and its ``exists_to_in`` is off for the same reason, see
    :func:`easyjob.store.engine.create_engine`); SQLite is kept off the index on
    (status, due_time) by :func:`~easyjob.store.expressions.unindexed` (with 100,000
    pending runs that plan took 10 s a read, this one 2 ms: docs/performance.md). PostgreSQL
    may plan it as a "hashed SubPlan": one sequential scan of the run table per read, chosen
    when it expects many task rows or dear index reads (150 ms at 150,000 pending runs);
    *fenced* adds ``OFFSET 0``, which keeps it from turning the probe into that (a subquery
    with an OFFSET is not simplified into a hashed or joined form)."""
    due = unindexed(d.c.due_time)
    probe = (
        sa.select(d.c.id)
        .where(
            d.c.task_id == t.c.id,
            d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)]),
            due < before if since is None else sa.and_(due < before, due >= since),
            d.c.triggered_by == str(Trigger.CRON),
        )
        .with_hint(d, "FORCE INDEX (ix_easy_job_task_detail_task_status)", "mysql")
    )
    return (probe.offset(0) if fenced else probe).exists()


@cache
def _advance_update() -> sa.Update:
    """A planner's version-checked advance of the ACTIVE task rows ``tasks``: each one's
    next start time (``times``; none ends its schedule), its status (``statuses``) and the
    fires it counts (``counts``), by the node ``planner``. Built once (see
    :mod:`easyjob.store.expressions`)."""
    return (
        t.update()
        .where(at_named_versions(t, "tasks"), status_is(t.c.status, str(TaskStatus.ACTIVE)))
        .values(
            next_start_time=per_named(t.c.id, "times", UTCDateTime()),
            status=per_named(t.c.id, "statuses", t.c.status.type),
            version=t.c.version + 1,
            node_id=sa.bindparam("planner", type_=t.c.node_id.type),
            update_time=db_now(),
            fire_count=t.c.fire_count + per_named(t.c.id, "counts", sa.BigInteger()),
        )
    )


def _broadcast_targets(conn: sa.Connection, task_ids: Sequence[int]) -> dict[int, list[str]]:
    """For each task of *task_ids* (broadcast tasks), the RUNNING nodes whose code declares
    it (their ``broadcast_tasks`` name it), by node id."""
    if not task_ids:
        return {}
    names = conn.execute(sa.select(t.c.id, t.c.name).where(t.c.id.in_(list(task_ids)))).all()
    running = conn.execute(
        sa.select(n.c.node_id, n.c.broadcast_tasks).where(
            n.c.status == str(NodeStatus.RUNNING), n.c.broadcast_tasks.is_not(None)
        )
    ).all()
    return {
        int(task_id): sorted(node for node, declared in running if name in (declared or ()))
        for task_id, name in names
    }


def _written_order(row: Mapping[str, Any]) -> tuple[datetime, int, int]:
    """The order in which an advance inserts its fire rows: due time, task, shard."""
    return row["due_time"], row["task_id"], row["shard"]


def _fire_rows(
    task_id: int, fire: PlannedFire, shards: int, targets: list[str] | None, now: datetime
) -> list[dict[str, Any]]:
    """The run rows of one planned fire: one per shard, or for a broadcast task (*targets*
    not None) one per target node (numbered as shards), a MISSED summary of a broadcast
    task's gap too (each node's row names it); a fire with no target node is one SKIPPED row
    saying so, and a MISSED fire of another task one row."""
    # a PENDING row's error_msg is its run's own: the reason of a gap the fire carries is
    # told by the missed event, not stored
    status = fire.status
    reason = fire.error_msg if status != RunStatus.PENDING else None
    if status == RunStatus.PENDING and targets is not None and not targets:
        status = RunStatus.SKIPPED
        reason = "broadcast fire: no RUNNING node declares this task"
    if targets:  # a broadcast fire, or gap, is one row per node: each names its node
        parts: list[tuple[int, str | None]] = list(enumerate(targets))
        shards = len(targets)
    elif status == RunStatus.PENDING:
        parts = [(shard, None) for shard in range(shards)]
    else:
        parts = [(0, None)]
    return [
        {
            "task_id": task_id,
            "fire_time": fire.fire_time,
            "due_time": fire.due_time,
            "jitter_ms": None if fire.jitter is None else fire.jitter // timedelta(milliseconds=1),
            "status": str(status),
            "triggered_by": str(Trigger.CRON),
            "attempt": 1,
            "error_msg": reason,
            "end_time": now if status != RunStatus.PENDING else None,
            "create_time": now,
            "missed_count": fire.missed_count,
            "last_fire_time": fire.last_fire_time,
            "missed_from": fire.missed_from,
            "shard": shard,
            "shards": shards,
            "target_node": target,
        }
        for shard, target in parts
    ]


def _parents_first(specs: Sequence[TaskSpec]) -> list[TaskSpec]:
    """*specs* reordered (stably) so that a parent among them comes before its children:
    each chunk of an upsert then finds its parents stored. A cycle (refused earlier by the
    registry) just keeps its order."""
    by_name = {spec.name: spec for spec in specs}
    depth: dict[str, int] = {}

    def depth_of(spec: TaskSpec, seen: frozenset[str] = frozenset()) -> int:
        if spec.name not in depth:
            parents = [by_name[p] for p in spec.parents if p in by_name and p not in seen]
            depth[spec.name] = max(
                (depth_of(parent, seen | {spec.name}) + 1 for parent in parents), default=0
            )
        return depth[spec.name]

    return sorted(specs, key=depth_of)


#: The unique key of a cron fire's run rows (``uq_easy_job_task_detail_cron_fire``).
_CRON_FIRE = ["task_id", "cron_key", "shard"]
#: The columns of a task's schedule the code declares: a runtime change of them stands until
#: the code's declaration of them changes (see ``declared``).
_DECLARED = ("cron_expr", "tz", "every_ms")
#: Every column the fire times depend on.
_SCHEDULE = frozenset({*_DECLARED, "starts_at", "ends_at"})
#: The other columns the fires written ahead depend on (their runs, how many of them).
_FIRES = frozenset({"shards", "broadcast", "max_runs", "jitter_ms", "exclude_calendar"})
_SCHEDULE_ROW = (*_DECLARED, "starts_at", "ends_at", "anchor_time")


def _unwritten(
    conn: sa.Connection, specs: Sequence[TaskSpec], ids: dict[str, int]
) -> list[TaskSpec]:
    """The specs of *specs* that registering must write: missing, not seen for
    :data:`SEEN_REFRESH`, a schedule added at run time (refused when written), or with a
    column that differs (as :func:`_declared_changes` compares: its parent's id, the
    schedule it declared, every other column it sets, a pause). The ids of the rows found
    are added to *ids*. Reads only the columns a spec sets, compared as tuples."""
    keys = [key for key in specs[0].columns() if key not in _DECLARED]
    cutoff = database_time(conn) - SEEN_REFRESH
    query = sa.select(
        t.c.id,
        t.c.name,
        t.c.origin,
        t.c.declared,
        t.c.pid,
        t.c.status,
        sa.case((t.c.seen_time < cutoff, 1), else_=0).label("unseen"),
        *(t.c[key] for key in keys),
    ).where(t.c.name.in_([spec.name for spec in specs]))
    rows = {row[1]: tuple(row) for row in conn.execute(query)}
    ids.update((name, int(row[0])) for name, row in rows.items())
    active = str(TaskStatus.ACTIVE)
    stale = []
    for spec in specs:
        row = rows.get(spec.name)
        pid = None if spec.parent is None else ids.get(spec.parent, -1)
        if (
            row is None
            or row[2:7] != (str(ORIGIN_CODE), declared(spec), pid, row[5], 0)
            or (not spec.enabled and row[5] == active)
            or row[7:] != _set_by(spec, keys)
        ):
            stale.append(spec)
    joins = {ids[s.name]: s for s in specs if len(s.parents) > 1 and s not in stale}
    if joins:  # a child of several parents: its other parents are in easy_job_task_parent
        stored = parents_of(conn, joins)
        for task_id, spec in joins.items():
            if stored.get(task_id) != [ids.get(parent, -1) for parent in spec.parents]:
                stale.append(spec)
    return stale


def _set_by(spec: TaskSpec, keys: Sequence[str]) -> tuple[Any, ...]:
    columns = spec.columns()
    return tuple(columns[key] for key in keys)


def _declared_changes(row: TaskRow, spec: TaskSpec, pid: int | None) -> dict[str, Any]:
    """The columns of *row* that registering *spec* (its parent's id *pid*) changes, before
    the schedule's consequences (next fire, status) are worked out: empty when the row
    already says what the code declares. TaskDefinitionError when the row is a schedule
    added at run time."""
    if row.runtime:
        raise TaskDefinitionError(
            f"task {spec.name!r} exists as a schedule added at run time (function "
            f"{row.func}); remove it (easyjob schedule remove) or rename the code's task"
        )
    wanted = {**spec.columns(), "pid": pid}
    key = declared(spec)
    if row.declared == key:
        # The code's schedule did not change since it was last registered: the row's
        # schedule stands, even where it was changed at run time (easyjob schedule set).
        for name in _DECLARED:
            del wanted[name]
    else:
        wanted["declared"] = key
    changes = {k: v for k, v in wanted.items() if getattr(row, k) != v}
    if not spec.enabled and row.status == TaskStatus.ACTIVE:
        changes["status"] = str(TaskStatus.PAUSED)
    return changes


def declared(spec: TaskSpec) -> str:
    """``easy_job_task.declared``: the schedule the code declared, as last registered."""
    return f"{spec.cron_text or ''}|{spec.tz}|{spec.every_ms or ''}"


class _FirstFires:
    """The first fire after *now* per schedule: tasks mostly share a few schedules."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._seen: dict[tuple[Any, ...], datetime | None] = {}

    def __call__(self, columns: Mapping[str, Any]) -> datetime | None:
        key = tuple(columns.get(name) for name in _SCHEDULE_ROW)
        if key not in self._seen:
            self._seen[key] = first_fire(columns, self._now)
        return self._seen[key]


def first_fire(columns: Mapping[str, Any], now: datetime) -> datetime | None:
    """The first fire after *now* of the schedule in *columns* (task column names)."""
    schedule = build_schedule(
        columns["cron_expr"],
        columns["tz"],
        columns["every_ms"],
        columns.get("anchor_time"),
        columns["starts_at"],
        columns["ends_at"],
    )
    return None if schedule is None else schedule.next_after(now)
