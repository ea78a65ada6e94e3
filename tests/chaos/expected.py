"""The fires the contract owes, computed without easyjob's cron module.

A scenario's *window* is where fires are counted: from the moment the first node was live
(exclusive: a fire at or before it may predate every node's registration) to the moment the
faults had stopped and the cluster had been left alone for the settle time (inclusive).
Fires outside it are not expected, and their runs are not counted: the edges of start-up and
shutdown are not faults. All times are database time, UTC.

Each instant of the window (every second for 6-field expressions, every minute for 5-field)
is tested with ``croniter.match`` on the task's local wall time, then the contract's DST
rules (docs/cron.md) are applied on top, independently of how easyjob implements them:

- a local time that occurs twice (fall back) fires at its first pass only;
- the local times skipped by a spring-forward gap that match fire once, at the transition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = ["Window", "cron_fires"]


@dataclass(frozen=True)
class Window:
    """Fires *f* with ``start < f <= end`` (aware UTC datetimes, database time)."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError(f"window bounds must be aware: {self!r}")
        if self.end < self.start:
            raise ValueError(f"window ends before it starts: {self!r}")

    def __contains__(self, when: object) -> bool:
        return isinstance(when, datetime) and self.start < when <= self.end

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def cron_fires(expr: str, tz: str, window: Window) -> list[datetime]:
    """Every fire of cron *expr* (5 fields, or 6 with seconds first) in *tz* inside
    *window*, in UTC, DST rules of the contract applied."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"expected 5 or 6 cron fields, got {expr!r}")
    six = len(fields) == 6
    pattern = " ".join(fields).replace("?", "*")
    step = timedelta(seconds=1 if six else 60)
    zone = ZoneInfo(tz)

    def match(wall: datetime) -> bool:
        return bool(croniter.match(pattern, wall, second_at_beginning=six))

    fires = []
    instant = _first_on_grid(window.start, step)
    while instant <= window.end:
        local = instant.astimezone(zone)
        before = (instant - step).astimezone(zone)
        wall = local.replace(tzinfo=None)
        if _second_pass(wall, local.fold, zone):
            pass  # already fired at the first pass of this wall time
        elif local.utcoffset() != before.utcoffset() and _gap(before, local):
            skipped = before.replace(tzinfo=None) + step
            in_gap = False
            while skipped < wall and not in_gap:
                in_gap = match(skipped)
                skipped += step
            if in_gap or match(wall):
                fires.append(instant)
        elif match(wall):
            fires.append(instant)
        instant += step
    return fires


def _first_on_grid(after: datetime, step: timedelta) -> datetime:
    base = after.astimezone(UTC).replace(microsecond=0)
    if step == timedelta(minutes=1):
        base = base.replace(second=0)
    while base <= after:
        base += step
    return base


def _second_pass(wall: datetime, fold: int, zone: ZoneInfo) -> bool:
    if fold != 1:
        return False
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return first != second


def _gap(before: datetime, local: datetime) -> bool:
    old, new = before.utcoffset(), local.utcoffset()
    return old is not None and new is not None and new > old
