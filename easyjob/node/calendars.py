"""The planner's copy of the calendars its tasks name (``exclude=``).

Calendars change rarely and are read at every poll that plans a task with one, so the days
are kept and read again only when :meth:`~easyjob.store.contract.CalendarStore.version`
changed (one read of the calendar table's primary key per such poll, none per fire), or a
task names a calendar not asked for before.

A task may name a calendar that does not exist (yet): it excludes nothing, so the task's
fires run, and a WARNING says so once per task and calendar until the calendar appears. A
deploy may so come before the calendar, and removing a calendar never stops its tasks.
"""

from __future__ import annotations

import logging
from datetime import date

from easyjob.core.admission import Days
from easyjob.core.records import PlanningRow
from easyjob.store.contract import Store

__all__ = ["Calendars"]


class Calendars:
    """See the module docstring. Used by the planner's thread only."""

    def __init__(self, store: Store, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._store = store
        self._log = log
        self._version: tuple[int, int] | None = None
        self._asked: set[str] = set()
        self._days: dict[str, tuple[tuple[date, date], ...]] = {}
        self._warned: set[tuple[str, str]] = set()

    def refresh(self, tasks: list[PlanningRow]) -> None:
        """Read the calendars *tasks* name again if any changed since the last read."""
        names = {task.exclude_calendar for task in tasks if task.exclude_calendar}
        if not names:
            return
        version = self._store.calendars.version()
        if version == self._version and names <= self._asked:
            return
        self._asked |= names
        self._days = dict(self._store.calendars.days(self._asked))
        self._version = version

    def days(self, task: PlanningRow) -> Days | None:
        """The days *task*'s calendar excludes; None when it names none, or one that does
        not exist (warned about once per task and calendar, until it exists)."""
        name = task.exclude_calendar
        if name is None:
            return None
        found = self._days.get(name)
        key = (task.name, name)
        if found is None:
            if key not in self._warned:
                self._warned.add(key)
                self._log.warning(
                    "task %r excludes the days of calendar %r, which does not exist: its "
                    "fires run until it does (easyjob calendar add %s DAY)",
                    task.name,
                    name,
                    name,
                )
            return None
        self._warned.discard(key)
        return found
