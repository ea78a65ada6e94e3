"""Values written for people, the same on every face: durations, schedules and what a
cancel did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from easyjob.core.records import TaskRow
from easyjob.core.schedule import every_text
from easyjob.core.states import RunStatus
from easyjob.core.store_values import Cancelled

__all__ = ["cancel_text", "schedule_text", "seconds", "stamp"]


def seconds(value: float | None) -> str:
    """A duration in seconds for people: ``0.4s``, ``12m03s``, ``3h02m``, ``2d04h``."""
    if value is None:
        return "-"
    sign, left = ("-" if value < 0 else ""), abs(value)
    if left < 60:
        return f"{sign}{left:.1f}s"
    minutes, secs = divmod(int(left), 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours:02d}h"


def stamp(value: datetime) -> str:
    """*value* in UTC to the second: ``2030-01-02 03:04:05Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def schedule_text(task: TaskRow, parent: str | None = None) -> str:
    """What makes *task* fire, as it is: ``cron 0 */5 * * * (Europe/Berlin)``, ``every 45s``,
    ``once at 2030-01-02 03:04:05Z``, ``after PARENT``, or ``manual (trigger only)``; with its
    start, end, run limit, jitter and calendar when it has them."""
    if task.every_ms is not None and task.max_runs == 1:
        when = task.starts_at or task.next_start_time
        return f"once at {stamp(when)}" if when is not None else "once"
    if task.every_ms is not None:
        text = f"every {every_text(timedelta(milliseconds=task.every_ms))}"
    elif task.cron_expr is not None:
        text = f"cron {task.cron_expr}" + ("" if task.tz == "UTC" else f" ({task.tz})")
    elif parent is not None:
        return f"after {parent}"
    else:
        return "manual (trigger only)"
    if task.starts_at is not None:
        text += f", from {stamp(task.starts_at)}"
    if task.ends_at is not None:
        text += f", until {stamp(task.ends_at)}"
    if task.max_runs is not None:
        text += f", at most {task.max_runs} run{'' if task.max_runs == 1 else 's'}"
    if task.jitter_ms:
        text += f", jitter {every_text(timedelta(milliseconds=task.jitter_ms))}"
    if task.exclude_calendar is not None:
        text += f", except calendar {task.exclude_calendar!r}"
    return text


def cancel_text(found: Cancelled) -> str:
    """What a cancel request did to run ``found.run_id``, as ``easyjob cancel`` and the
    dashboard say it."""
    run, was = found.run_id, found.was.value
    if not found.cancelled:
        return f"run {run} had ended {was}: not cancelled"
    if found.was == RunStatus.RUNNING:
        node = found.node_id
        return f"run {run} CANCELLED (was RUNNING on node {node}: it stops the job within a poll)"
    return f"run {run} CANCELLED (was {was}: it never starts)"
