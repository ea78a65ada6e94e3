"""A task's success count, with no write of the task row per run.

Finishing a run writes only its own row. A task's count of runs recorded SUCCESS, ever, is
``easy_job_task.pruned_success_count`` (the successes whose rows the pruner deleted, folded in
by :func:`delete_runs` in the transaction that deletes them) plus the task's SUCCESS rows still
in ``easy_job_task_detail``. Read in one statement (:func:`success_total`), the two parts come
from one snapshot on every database, so a prune between them cannot count a run twice or not
at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import sqlalchemy as sa

from easyjob.core.states import TERMINAL, RunStatus
from easyjob.store.expressions import PRIMARY_KEY_HINT, in_list, per_id
from easyjob.store.schema import task_detail_table, task_table

__all__ = ["counted_tasks", "delete_runs", "success_total"]

d = task_detail_table
t = task_table


def success_total(task: sa.Table | sa.Alias = t) -> sa.Label[int]:
    """The runs of *task* (a row of ``easy_job_task``) recorded SUCCESS, ever, labelled
    ``success_count``: its pruned successes plus its SUCCESS rows in the history, counted
    through the index on (task_id, status). The count costs a probe of that index per
    SUCCESS row kept (the retention bounds it): for what people read, not for a node's loops."""
    kept = (
        sa.select(sa.func.count())
        .select_from(d)
        .where(d.c.task_id == task.c.id, d.c.status == str(RunStatus.SUCCESS))
        .scalar_subquery()
    )
    return (task.c.pruned_success_count + kept).label("success_count")


def counted_tasks() -> sa.Select[tuple[object, ...]]:
    """``SELECT`` every column of ``easy_job_task`` and :func:`success_total`."""
    return sa.select(t, success_total())


def delete_runs(conn: sa.Connection, ids: Sequence[int]) -> int:
    """Delete the finished runs *ids* (read by the caller in this transaction) and add the
    SUCCESS ones to their tasks' ``pruned_success_count``, in this transaction; returns how
    many rows went.

    The rows are locked first (``FOR UPDATE``; SQLite has one writer at a time), so of two
    pruners that read the same batch only the one that deletes a row counts it: the other,
    once the first commits, no longer finds the row. Finished rows never change status, so
    what is locked is what is deleted."""
    if not ids:
        return 0
    locked = (
        sa.select(d.c.id, d.c.task_id, d.c.status)
        .where(in_list(d.c.id, ids), d.c.status.in_([str(s) for s in TERMINAL]))
        .order_by(d.c.id)
        .with_hint(d, PRIMARY_KEY_HINT, "mysql")
        .with_for_update()
    )
    rows = conn.execute(locked).all()
    if not rows:
        return 0
    successes = Counter(row.task_id for row in rows if row.status == str(RunStatus.SUCCESS))
    if successes:
        conn.execute(
            t.update()
            .where(t.c.id.in_(sorted(successes)))
            .values(pruned_success_count=t.c.pruned_success_count + per_id(t, successes))
        )
    conn.execute(d.delete().where(in_list(d.c.id, [row.id for row in rows])))
    return len(rows)
