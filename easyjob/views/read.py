"""The reads behind both faces: the CLI's ``tasks``, ``nodes`` and ``history`` and the
dashboard's pages ask these for their rows and only render them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from easyjob.core.records import HistoryRow, TaskRow
from easyjob.core.states import RunStatus
from easyjob.store.contract import Store
from easyjob.views.code import live_code
from easyjob.views.rows import Row, node_rows, run_rows, task_rows

__all__ = ["failures", "nodes", "run", "runs", "tasks"]

#: The backlog is read for just the listed tasks up to this many (bound parameters).
_LISTED_BACKLOG = 1000


def tasks(
    store: Store, found: Sequence[TaskRow], *, outcomes: bool = False
) -> tuple[datetime, list[Row]]:
    """The database time and the rows of the tasks *found* (see
    :func:`~easyjob.views.rows.task_rows`); with *outcomes*, each row's ``last`` is its last
    ended run (:class:`~easyjob.core.store_values.LastOutcome`, or None)."""
    ids = [task.id for task in found]
    db_now, backlog = store.history.backlog(ids if len(ids) <= _LISTED_BACKLOG else None)
    rows = task_rows(
        found,
        db_now,
        backlog,
        live_code(store),
        store.views.next_fires(ids),
        store.views.parents([task.id for task in found if task.pid is not None]),
    )
    if outcomes:
        last = store.views.last_outcomes(ids)
        for row in rows:
            row["last"] = last.get(row["id"])
    return db_now, rows


def nodes(store: Store) -> tuple[datetime, list[Row]]:
    """The database time and every node's row (see :func:`~easyjob.views.rows.node_rows`)."""
    db_now, found = store.nodes.all()
    return db_now, node_rows(found, store.runs.held_counts())


def runs(
    store: Store,
    *,
    task: str | None = None,
    status: RunStatus | None = None,
    node: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
    upcoming: bool = False,
) -> list[Row]:
    """Run rows, newest fire first. By default only runs that started or ended (what
    happened); with *upcoming*, only the planned ones (fires written ahead, due and waiting,
    or held but not started), soonest first. A *status* filter shows that status whichever
    it is (``PENDING`` lists planned runs)."""
    started = None if status is not None else not upcoming
    found = store.history.runs(
        task=task, status=status, node=node, since=since, limit=limit, started=started
    )
    return _with_takeovers(store, found)


def run(store: Store, run_id: int) -> Row | None:
    """The row of run *run_id* (as in :func:`runs`), or None when there is no such run."""
    found = store.history.runs(ids=[run_id], limit=1)
    return _with_takeovers(store, found)[0] if found else None


def failures(store: Store, *, limit: int) -> list[Row]:
    """The runs that ended badly (FAILED, MISSED, ABANDONED), most recently ended first."""
    return _with_takeovers(store, store.history.failures(limit=limit))


def _with_takeovers(store: Store, found: Sequence[HistoryRow]) -> list[Row]:
    abandoned = [run.id for run in found if run.status == RunStatus.ABANDONED]
    return run_rows(found, store.views.takeovers(abandoned))
