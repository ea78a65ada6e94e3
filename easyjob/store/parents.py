"""``easy_job_task_parent``: the parents of each task of several parents (a join).

``easy_job_task.pid`` holds a task's first parent, as it always did (nodes of versions 4 and 5
read only that); a task of several parents also has one row here per parent, in declared
order, the first being ``pid``. A task of one parent (or none) has no row here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import sqlalchemy as sa

from easyjob.store.expressions import in_list
from easyjob.store.schema import task_parent_table

__all__ = ["parents_of", "write_parents"]

p = task_parent_table


def parents_of(conn: sa.Connection, task_ids: Collection[int]) -> dict[int, list[int]]:
    """The parents (ids, in declared order) of each task of *task_ids* that has several."""
    if not task_ids:
        return {}
    rows = conn.execute(
        sa.select(p.c.task_id, p.c.parent_id)
        .where(in_list(p.c.task_id, sorted(set(task_ids))))
        .order_by(p.c.task_id, p.c.position)
    ).all()
    found: dict[int, list[int]] = {}
    for task_id, parent_id in rows:
        found.setdefault(int(task_id), []).append(int(parent_id))
    return found


def write_parents(conn: sa.Connection, wanted: Mapping[int, Sequence[int]]) -> None:
    """Make the rows of each task of *wanted* (task id -> its parents' ids, in order) say
    what it holds: one row per parent for a task of several, none otherwise. Tasks whose
    rows already say it are not written."""
    stored = parents_of(conn, wanted)
    changed = [
        task_id
        for task_id, ids in wanted.items()
        if stored.get(task_id, []) != (list(ids) if len(ids) > 1 else [])
    ]
    if not changed:
        return
    conn.execute(p.delete().where(in_list(p.c.task_id, changed)))
    rows = [
        {"task_id": task_id, "parent_id": parent_id, "position": position}
        for task_id in changed
        if len(wanted[task_id]) > 1
        for position, parent_id in enumerate(wanted[task_id])
    ]
    if rows:
        conn.execute(p.insert(), rows)
