"""Controlling a running cluster from Python: triggers, cancels, pauses, schedules
changed at run time, and calendars of excluded days.

Each function writes to the database only; the nodes see the change at their next poll,
without a restart. The same operations are ``easyjob trigger``, ``pause``, ``resume``,
``schedule`` and ``calendar``, and the dashboard's actions (``docs/monitoring.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from easyjob.core.calendars import CalendarDay
from easyjob.core.records import TaskRow
from easyjob.core.states import TaskStatus
from easyjob.errors import ConfigError
from easyjob.store.contract import Cancelled, Store
from easyjob.views.code import require_runnable, require_task_runnable

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "add_calendar_days",
    "add_schedule",
    "cancel",
    "list_calendars",
    "pause",
    "remove_calendar_days",
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
    connection: sa.Connection | None = None,
    priority: int | None = None,
) -> int:
    """Run task *name* once, at *at* (an aware datetime; default now, database time), with
    the trigger arguments *kwargs* (only those the task accepts) and *priority* (None: its
    task's). Returns the run's id.

    With *connection*, a SQLAlchemy Connection inside your own transaction on the store's
    database (``with engine.begin() as conn:``; from an ORM Session,
    ``session.connection()``), the run is written in that transaction: it exists, and runs,
    if and only if you commit. easyjob neither retries nor commits there; database errors
    reach you as they are, and a connection that cannot be used so (closed, not in a
    transaction, autocommit, another database) is refused with ConfigError before anything
    is written. See :meth:`easyjob.store.contract.TaskStore.trigger` and
    ``docs/embedding.md``."""
    return store.tasks.trigger(name, at=at, kwargs=kwargs, connection=connection, priority=priority)


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


def add_calendar_days(
    store: Store, name: str, first: date, last: date | None = None, *, note: str | None = None
) -> CalendarDay:
    """Exclude the days *first* to *last* (inclusive; default *first* alone) in calendar
    *name*, created by its first days. Tasks declared with ``exclude=name`` skip their fires
    on those days (in their own time zone) from their next fire planned. ConfigError for a
    bad name or a range that ends before it starts: nothing is written."""
    return store.calendars.add(name, first, first if last is None else last, note)


def remove_calendar_days(store: Store, name: str, days: tuple[date, date] | None = None) -> int:
    """Remove calendar *name*, or only the days *days* (first, last) from it; returns how
    many days it no longer excludes. CalendarNotFoundError when there is no such calendar,
    or it excludes none of *days*: nothing is changed."""
    return store.calendars.remove(name, days)


def list_calendars(store: Store, name: str | None = None) -> list[CalendarDay]:
    """The ranges of days calendar *name* excludes (every calendar's when None), by name
    and first day; CalendarNotFoundError for an unknown *name*."""
    return store.calendars.list(name)
