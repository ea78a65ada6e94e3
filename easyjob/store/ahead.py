"""Forgetting the fires a task's schedule wrote ahead (see ``docs/concepts.md``, "Planning
ahead").

An advance writes a task's fires up to ``plan_ahead`` fires ahead, so a change that decides
which fires a task has (its schedule, shards, broadcast or ``max_runs`` changed, a pause, a
resume, a removal) must first forget the fires written for the old state. Forgetting
*deletes* them: a cron fire's row holds the unique ``cron_key`` of its (task, fire time),
so a row kept as SKIPPED would make the advance that plans the same fire time again skip it
silently (the insert ignores a fire that has a row), and a resumed task would not run.

Only cron fires not yet due are forgotten: PENDING, attempt 1, fire time after now. A fire
already due, or CLAIMED by a node (within its look-ahead), keeps the treatment each change
gives it, as it did before fires were written ahead. So does a fire that carries a gap
(``missed_from``: a planner that is behind may write the fire due within half a poll as
the one to run): deleting it would lose the record of the fires missed before it.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from easyjob.core.states import RunStatus
from easyjob.store.schema import UTCDateTime, task_detail_table, task_table

__all__ = ["forget_ahead"]

d = task_detail_table
t = task_table


def forget_ahead(conn: sa.Connection, task_id: int, now: datetime, *, rewind: bool = False) -> int:
    """Delete the cron fires of task *task_id* written ahead and not yet due at *now*, and
    take them back from its ``fire_count`` (a ``max_runs`` task gets them planned again).
    With *rewind*, move its ``next_start_time`` back to the first of them when it was
    later, so that its schedule plans them again. Returns how many fires were forgotten.

    Call it after the statement that changes the task row, in the same transaction: that
    row's lock keeps a concurrent advance (version-checked) from writing fires meanwhile."""
    # cron_key is set on attempt 1 of a cron fire only: retries and manual runs stay
    ahead = (
        d.c.task_id == task_id,
        d.c.status == str(RunStatus.PENDING),
        d.c.cron_key > now,
        d.c.missed_from.is_(None),  # a gap's record is kept with its fire (docstring)
    )
    rows = conn.execute(sa.select(d.c.id, d.c.fire_time).where(*ahead)).all()
    if not rows:
        return 0
    ids = [row.id for row in rows]
    deleted = conn.execute(d.delete().where(d.c.id.in_(ids), d.c.status == str(RunStatus.PENDING)))
    if deleted.rowcount != len(rows):  # a node claimed some meanwhile: they stay and run
        kept = set(conn.scalars(sa.select(d.c.id).where(d.c.id.in_(ids))))
        rows = [row for row in rows if row.id not in kept]
    if not rows:
        return 0
    fires = {row.fire_time for row in rows}  # a sharded fire is one row per shard
    count = len(fires)
    values: dict[str, object] = {
        "fire_count": sa.case((t.c.fire_count > count, t.c.fire_count - count), else_=0)
    }
    if rewind:
        first = min(fires)
        values["next_start_time"] = sa.case(
            (t.c.next_start_time > first, sa.literal(first, UTCDateTime())),
            else_=t.c.next_start_time,
        )
    conn.execute(t.update().where(t.c.id == task_id).values(**values))
    return count
