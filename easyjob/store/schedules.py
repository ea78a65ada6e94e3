"""Schedules changed while nodes run: tasks added, rescheduled and removed at run time.

Nodes plan every poll from the task rows, so a change here takes effect at the next poll of
every node, without a restart. It never gives code to a node: a task added here names a
function by its import path, and a node runs it only if its own code allowed that function
with ``@runnable`` (see ``docs/concepts.md``, "Who may run what").

How code and run time meet (``docs/concepts.md``, "Changing schedules at run time"):

- a task added at run time has ``origin = 'runtime'``: no node's registration touches it,
  and a node whose code declares a task of the same name refuses to start;
- a code-declared task whose cron or interval is changed here keeps that change across node
  restarts until the code's own declaration of it changes (``declared`` holds what the
  code declared when it was last registered); then the code's new schedule wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import ORIGIN_RUNTIME, TaskRow, TaskSpec
from easyjob.core.states import Misfire, Overlap, TaskStatus
from easyjob.errors import TaskDefinitionError, TaskNotFoundError, shown
from easyjob.store.ahead import forget_ahead
from easyjob.store.database import Database
from easyjob.store.engine import database_time
from easyjob.store.runs import skip_unstarted
from easyjob.store.schema import task_detail_table, task_table
from easyjob.store.tasks import first_fire

__all__ = ["ScheduleStore"]

t = task_table
d = task_detail_table

#: The error_msg of the runs not yet started of a task removed at run time.
REMOVED = "schedule removed before it started"


class ScheduleStore:
    """Add, change and remove schedules in the database; see the module docstring."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(
        self,
        name: str,
        func: str,
        *,
        cron: str | None = None,
        every: timedelta | str | float | None = None,
        tz: str = "UTC",
        start: datetime | None = None,
        end: datetime | None = None,
        max_runs: int | None = None,
        misfire: Misfire | str = Misfire.FIRE_ONCE,
        overlap: Overlap | str = Overlap.SERIAL,
        accepts: Sequence[str] = (),
        max_running: int | None = None,
        priority: int = 0,
    ) -> TaskRow:
        """Add task *name* calling *func* (``module:qualname``) on *cron* or *every* (or
        neither: triggered only). It runs on the nodes whose code allowed *func* with
        ``@runnable``, passing only trigger arguments that both *accepts* and the code's
        ``@runnable(accepts=...)`` name. A name taken by a task is refused
        (TaskDefinitionError), unless that task was added at run time and removed.
        *overlap*, *max_running* and *priority* are those of ``@scheduled``."""
        spec = TaskSpec(
            name=name,
            func=func,
            cron=cron,
            every=every,  # type: ignore[arg-type]
            tz=tz,
            start=start,
            end=end,
            max_runs=max_runs,
            misfire=misfire,  # type: ignore[arg-type]
            overlap=overlap,  # type: ignore[arg-type]
            accepts=tuple(accepts),
            max_running=max_running,
            priority=priority,
        )
        if ":" not in func:
            raise TaskDefinitionError(
                f"task {name!r}: function {func!r} must be an import path 'module:qualname'"
            )

        def write(conn: sa.Connection) -> None:
            now = database_time(conn)
            row = conn.execute(sa.select(t.c.origin, t.c.status).where(t.c.name == name)).first()
            columns = {**spec.columns(), "anchor_time": now if spec.every is not None else None}
            next_time = first_fire(columns, now)
            status = TaskStatus.ACTIVE
            if (spec.cron is not None or spec.every is not None) and next_time is None:
                status = TaskStatus.FINISHED
            values: dict[str, Any] = {
                **columns,
                "origin": ORIGIN_RUNTIME,
                "declared": None,
                "pid": None,
                "status": str(status),
                "next_start_time": next_time,
                "fire_count": 0,
                "update_time": now,
                "seen_time": now,
                "node_id": None,
            }
            if row is None:
                conn.execute(t.insert().values(name=name, version=0, create_time=now, **values))
                return
            if row.origin != ORIGIN_RUNTIME or row.status != str(TaskStatus.FINISHED):
                how = "added at run time" if row.origin == ORIGIN_RUNTIME else "declared by code"
                raise TaskDefinitionError(f"task {name!r} exists already ({how})")
            conn.execute(
                t.update().where(t.c.name == name).values(**values, version=t.c.version + 1)
            )

        self._db.write("add_schedule", write)
        return self._get(name)

    def set(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: timedelta | str | float | None = None,
        tz: str | None = None,
    ) -> TaskRow:
        """Give task *name* the schedule *cron* or *every* (exactly one) from now on: its
        next fire is the first of the new schedule after now (an interval is anchored now).
        Fires already due, or claimed by a node, stay and run; fires the old schedule wrote
        ahead and not yet due are deleted (see :func:`~easyjob.store.ahead.forget_ahead`):
        the new schedule plans its own. A child task (it runs after its parent) is
        refused. A PAUSED task stays paused; a FINISHED one becomes ACTIVE again if the new
        schedule fires."""
        if (cron is None) == (every is None):
            raise TaskDefinitionError(f"task {name!r}: give a new cron or a new interval")

        def write(conn: sa.Connection) -> None:
            row = conn.execute(sa.select(t).where(t.c.name == name)).mappings().first()
            if row is None:
                raise TaskNotFoundError(f"no task named {shown(name)}")
            if row["pid"] is not None:
                raise TaskDefinitionError(
                    f"task {name!r} runs after its parent: it has no schedule to change"
                )
            zone = tz if tz is not None else row["tz"]
            spec = TaskSpec(name=name, func=row["func"], cron=cron, every=every, tz=zone)  # type: ignore[arg-type]
            now = database_time(conn)
            columns = {
                "cron_expr": spec.cron_text,
                "every_ms": spec.every_ms,
                "tz": zone,
                "anchor_time": now if spec.every is not None else None,
                "starts_at": row["starts_at"],
                "ends_at": row["ends_at"],
            }
            next_time = first_fire(columns, now)
            status = row["status"]
            if next_time is None:
                status = str(TaskStatus.FINISHED)
            elif status == str(TaskStatus.FINISHED):
                status = str(TaskStatus.ACTIVE)
            conn.execute(
                t.update()
                .where(t.c.id == row["id"])
                .values(
                    **columns,
                    next_start_time=next_time,
                    status=status,
                    version=t.c.version + 1,
                    node_id=None,
                    update_time=now,
                )
            )
            forget_ahead(conn, row["id"], now)

        self._db.write("set_schedule", write)
        return self._get(name)

    def remove(self, name: str) -> TaskRow:
        """Remove task *name*, added at run time: it fires no more (FINISHED, no next fire)
        and its runs not yet started are closed, in one transaction (its fires written ahead
        and not yet due are deleted, so that a task added again under its name fires at
        those times; the others become SKIPPED); runs already
        RUNNING go on to their end; its history stays. A task declared by code is refused
        (pause it, or remove it from the code)."""

        def write(conn: sa.Connection) -> None:
            row = conn.execute(sa.select(t.c.id, t.c.origin).where(t.c.name == name)).first()
            if row is None:
                raise TaskNotFoundError(f"no task named {shown(name)}")
            if row.origin != ORIGIN_RUNTIME:
                raise TaskDefinitionError(
                    f"task {name!r} is declared by code: pause it (easyjob pause) or remove it "
                    "from the code"
                )
            now = database_time(conn)
            conn.execute(
                t.update()
                .where(t.c.id == row.id)
                .values(
                    status=str(TaskStatus.FINISHED),
                    next_start_time=None,
                    version=t.c.version + 1,
                    update_time=now,
                )
            )
            forget_ahead(conn, row.id, now)
            skip_unstarted(conn, row.id, REMOVED, now)

        self._db.write("remove_schedule", write)
        return self._get(name)

    def _get(self, name: str) -> TaskRow:
        def read(conn: sa.Connection) -> TaskRow:
            return TaskRow.from_row(
                conn.execute(sa.select(t).where(t.c.name == name)).mappings().one()
            )

        return self._db.read("get_task", read)
