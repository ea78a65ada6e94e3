"""Controlling a running cluster from Python: triggers, cancels, and schedules changed at
run time.

Each function writes to the database only; the nodes see the change at their next poll,
without a restart. The same operations are ``easyjob trigger`` and ``easyjob schedule``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from easyjob.core.records import TaskRow
from easyjob.store.contract import Cancelled, Store

__all__ = ["add_schedule", "cancel", "remove_schedule", "set_schedule", "trigger"]


def trigger(
    store: Store,
    name: str,
    *,
    at: datetime | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> int:
    """Run task *name* once, at *at* (an aware datetime; default now, database time), with
    the trigger arguments *kwargs* (only those the task accepts). Returns the run's id.
    See :meth:`easyjob.store.contract.TaskStore.trigger`."""
    return store.tasks.trigger(name, at=at, kwargs=kwargs)


def cancel(store: Store, run_id: int) -> Cancelled:
    """Cancel run *run_id*: a run not started yet never starts, a RUNNING one ends CANCELLED
    at once and the node running it stops its job within a poll (a thread's job sees
    ``ctx.cancelled``; a child process is killed). A cancelled run is never run again.
    ``cancelled`` is False for a run that had ended (``was`` says how); RunNotFoundError
    for an unknown id. See :mod:`easyjob.store.cancels`."""
    return store.cancels.cancel(run_id)


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
) -> TaskRow:
    """Add task *name* calling *func* (``module:qualname``, a ``@runnable`` function of the
    nodes' code) on *cron* or *every*; with neither it runs only when triggered.
    See :meth:`easyjob.store.contract.ScheduleStore.add`."""
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
) -> TaskRow:
    """Give task *name* a new cron or interval from now on.
    See :meth:`easyjob.store.contract.ScheduleStore.set`."""
    return store.schedules.set(name, cron=cron, every=every, tz=tz)


def remove_schedule(store: Store, name: str) -> TaskRow:
    """Remove task *name*, added at run time. See
    :meth:`easyjob.store.contract.ScheduleStore.remove`."""
    return store.schedules.remove(name)
