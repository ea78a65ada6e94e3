"""Turning a due task into the fires it owes: the misfire policy lives here (pure).

A task's ``next_start_time`` is the first fire not yet written as a run row. When a loader
finds it due, it writes every fire up to its look-ahead horizon and moves
``next_start_time`` past them (one version-checked write: see ``TaskStore.advance``). Fires
older than the task's misfire grace (every node was down, or the task was paused) are
*late*; what happens to them depends on the policy:

- ``fire_once`` (default): the latest late fire runs once, now; the others are MISSED.
- ``skip``: every late fire is MISSED; the schedule resumes with the next on-time fire.
- ``catch_up``: every late fire runs, oldest first.

Late fires are never dropped silently: each one is a row, MISSED or run. A long backlog is
written in chunks of at most ``cap`` fires per advance, oldest first.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from easyjob.core.cron import CronSchedule
from easyjob.core.records import Advance, PlannedFire, TaskRow
from easyjob.core.states import Misfire, RunStatus

__all__ = ["plan_advance"]


def plan_advance(
    task: TaskRow, schedule: CronSchedule, now: datetime, horizon: datetime, *, cap: int = 5000
) -> tuple[Advance, bool]:
    """The advance of *task* at database time *now* up to *horizon*, and whether fires beyond
    *cap* remain (the caller should plan again soon rather than wait for its next poll)."""
    start = task.next_start_time
    if start is None:
        raise ValueError(f"task {task.name!r} has no next_start_time to advance from")
    fires = schedule.fires_between(start, horizon, limit=cap + 1)
    more = len(fires) > cap
    if more:
        next_time: datetime | None = fires[cap]
        fires = fires[:cap]
    else:
        next_time = schedule.next_after(max(horizon, fires[-1]) if fires else horizon)
    grace = timedelta(milliseconds=task.misfire_grace_ms)
    late_before = now - grace
    late = [f for f in fires if f < late_before]
    backlog_done = next_time is None or next_time >= late_before
    runs_once = late[-1] if late and backlog_done and task.misfire == Misfire.FIRE_ONCE else None
    reason = (
        f"missed: not started within its misfire grace of {grace.total_seconds():g}s "
        f"(policy {task.misfire.value})"
    )
    planned = []
    for fire in fires:
        if fire >= late_before or task.misfire == Misfire.CATCH_UP or fire == runs_once:
            planned.append(PlannedFire(fire))
        else:
            planned.append(PlannedFire(fire, RunStatus.MISSED, reason))
    return Advance(task.id, task.version, next_time, tuple(planned)), more
