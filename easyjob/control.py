"""Controlling a running cluster from Python: triggers, cancels, pauses and schedules
changed at run time.

Each function writes to the database only; the nodes see the change at their next poll,
without a restart. The same operations are ``easyjob trigger``, ``pause``, ``resume`` and
``schedule``, and the dashboard's actions (``docs/monitoring.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from easyjob.core.records import TaskRow
from easyjob.core.states import TaskStatus
from easyjob.errors import ConfigError
from easyjob.store.contract import Cancelled, Store
from easyjob.views.code import require_runnable, require_task_runnable

__all__ = [
    "add_schedule",
    "cancel",
    "pause",
    "remove_schedule",
    "rerun",
    "resume",
    "set_schedule",
    "trigger",
]


def trigger(
    store: Store,
    name: str,
    *,
    at: datetime | None = None,
    kwargs: Mapping[str, Any] | None = None,
    priority: int | None = None,
) -> int:
    """Run task *name* once, at *at* (an aware datetime; default now, database time), with
    the trigger arguments *kwargs* (only those the task accepts) and *priority* (None: its
    task's). Returns the run's id. See :meth:`easyjob.store.contract.TaskStore.trigger`."""
    return store.tasks.trigger(name, at=at, kwargs=kwargs, priority=priority)


def cancel(store: Store, run_id: int) -> Cancelled:
    """Cancel run *run_id*: a run not started yet never starts, a RUNNING one ends CANCELLED
    at once and the node running it stops its job within a poll (a thread's job sees
    ``ctx.cancelled``; a child process is killed). A cancelled run is never run again.
    ``cancelled`` is False for a run that had ended (``was`` says how); RunNotFoundError
    for an unknown id. See :mod:`easyjob.store.cancels`."""
    return store.cancels.cancel(run_id)


def rerun(store: Store, run_id: int) -> int:
    """Run again the task of run *run_id*, now, with the trigger arguments that run had: a
    new manual run (the old run's row is not changed). Returns the new run's id;
    ConfigError when there is no such run."""
    found = store.history.runs(ids=[run_id], limit=1)
    if not found:
        raise ConfigError(f"no run with id {run_id!r}")
    return store.tasks.trigger(found[0].task_name, kwargs=found[0].kwargs or None)


def pause(store: Store, name: str) -> TaskRow:
    """Pause task *name*: no new fire is made or started until it is resumed."""
    return store.tasks.set_status(name, TaskStatus.PAUSED)


def resume(store: Store, name: str) -> TaskRow:
    """Resume task *name* after :func:`pause`."""
    return store.tasks.set_status(name, TaskStatus.ACTIVE)


def add_schedule(
    store: Store,
    name: str,
    func: str,
    *,
    cron: str | None = None,
    every: timedelta | str | float | None = None,
    tz: str = "UTC",
    start: datetime | None = None,
    end: datetime | None = None,
    max_runs: int | None = None,
    accepts: Sequence[str] = (),
    force: bool = False,
) -> TaskRow:
    """Add task *name* calling *func* (``module:qualname``, a ``@runnable`` function of the
    nodes' code) on *cron* or *every*; with neither it runs only when triggered.
    NotRunnableError unless a live node allowed *func* with ``@runnable``; *force* adds it
    anyway (ahead of a deploy). See :meth:`easyjob.store.contract.ScheduleStore.add`."""
    if not force:
        require_runnable(store, func)
    return store.schedules.add(
        name,
        func,
        cron=cron,
        every=every,
        tz=tz,
        start=start,
        end=end,
        max_runs=max_runs,
        accepts=accepts,
    )


def set_schedule(
    store: Store,
    name: str,
    *,
    cron: str | None = None,
    every: timedelta | str | float | None = None,
    tz: str | None = None,
    force: bool = False,
) -> TaskRow:
    """Give task *name* a new cron or interval from now on. NotRunnableError unless a live
    node can run it; *force* changes it anyway.
    See :meth:`easyjob.store.contract.ScheduleStore.set`."""
    if not force:
        require_task_runnable(store, name)
    return store.schedules.set(name, cron=cron, every=every, tz=tz)


def remove_schedule(store: Store, name: str) -> TaskRow:
    """Remove task *name*, added at run time. See
    :meth:`easyjob.store.contract.ScheduleStore.remove`."""
    return store.schedules.remove(name)
