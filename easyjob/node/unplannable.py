"""Tasks the loader could not plan: set aside, reported once per change, and looked at again.

A row that no schedule can be made of (a cron or zone edited by hand into nonsense, a task no
node's code declares under that function, a write the database refuses) must not cost the
other tasks their planning, nor fill the log with one line per poll. The loader reports it
once per change of the row, leaves it out of its due reads, and tries it again every
:data:`RECHECK_S` seconds of database time, so a row fixed by hand is planned again soon.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from datetime import datetime, timedelta

from easyjob.core.records import PlanningRow

__all__ = ["RECHECK_S", "Unplannable"]

#: How long a task that could not be planned is left out of the due reads.
RECHECK_S = 10.0
#: At most this many ids are left out of one due read (a bound on the statement's size).
_MAX_EXCLUDED = 1000


class Unplannable:
    """The tasks one loader set aside (thread-confined to the loader)."""

    def __init__(self, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._log = log
        self._reported: dict[int, Hashable] = {}
        self._until: dict[int, datetime] = {}
        self._now: datetime | None = None

    def add(self, task: PlanningRow, now: datetime, why: str, level: int) -> None:
        """Set *task* aside; report *why* unless this very row was reported already."""
        key = (task.version, task.func, task.cron_expr, task.tz, why)
        self._set_aside(task.id, now, key, level, f"task {_cut(task.name)!r} is not planned: {why}")

    def failed_write(self, task_id: int, message: str) -> None:
        """The database refused to advance task *task_id* (see ``TaskStore.advance``)."""
        now = self._now
        if now is not None:
            text = f"task id {task_id} cannot be advanced: {message}"
            self._set_aside(task_id, now, message, logging.ERROR, text)

    def _set_aside(self, task_id: int, now: datetime, key: Hashable, level: int, text: str) -> None:
        self._until[task_id] = now + timedelta(seconds=RECHECK_S)
        if self._reported.get(task_id) != key:
            self._reported[task_id] = key
            self._log.log(level, "%s (reported once; looked at again every %gs)", text, RECHECK_S)

    def ids(self, now: datetime) -> list[int]:
        """The ids to leave out of the due read at *now*; those whose time is up come back."""
        self._now = now
        for task_id in [i for i, until in self._until.items() if until <= now]:
            del self._until[task_id]
        return sorted(self._until)[:_MAX_EXCLUDED]


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
