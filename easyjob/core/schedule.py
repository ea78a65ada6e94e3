"""Schedules: what turns a task into fire instants, whichever kind it is (pure).

A :class:`Schedule` answers two questions, in aware UTC: the first fire strictly after an
instant (:meth:`~Schedule.next_after`) and every fire in a closed window
(:meth:`~Schedule.fires_between`). The planner and the loader use nothing else, so cron
expressions (:class:`~easyjob.core.cron.CronSchedule`), fixed intervals
(:class:`IntervalSchedule`) and bounded schedules (:class:`Bounded`) plan alike: the same
misfire and overlap policies, the same unique ``cron_key`` per fire.

Intervals are anchored: an interval of *every* with anchor *a* fires at ``a + k * every``
for every integer ``k >= 1``. easyjob anchors an interval at the moment (database time) its
schedule was set: registration, or a change of the interval; or at ``start`` when the task
has one (then the first fire is ``start`` itself).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from easyjob.errors import TaskDefinitionError

__all__ = ["Bounded", "IntervalSchedule", "Schedule", "build_schedule", "parse_every"]

_EPS = timedelta(microseconds=1)
_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_EVERY = re.compile(r"(\d+)(ms|d|h|m|s)")


class Schedule(Protocol):
    """Fire instants of a task; every argument and result is an aware datetime (UTC out)."""

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire strictly after *after*, or None when it never fires again."""

    def fires_between(
        self, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> list[datetime]:
        """The fires *t* with ``start <= t <= end``, ascending; the earliest *limit*."""


def parse_every(value: str | timedelta | int | float) -> timedelta:
    """An interval from a timedelta, seconds, or text such as ``"45s"``, ``"90m"``,
    ``"1h30m"``, ``"2d"``, ``"250ms"`` (units d, h, m, s, ms; at least 1 ms).

    Raises :class:`TaskDefinitionError` naming the bad value."""
    if isinstance(value, timedelta):
        every = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        every = timedelta(seconds=value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        parts = _EVERY.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise TaskDefinitionError(
                f"invalid interval {value!r}: expected a number and unit per part, "
                "e.g. '45s', '90m', '1h30m', '250ms' (units d, h, m, s, ms)"
            )
        every = timedelta(milliseconds=sum(int(n) * _UNITS[u] for n, u in parts))
    else:
        raise TaskDefinitionError(
            f"invalid interval {value!r}: a timedelta, seconds or text like '45s'"
        )
    if every < timedelta(milliseconds=1) or every % timedelta(milliseconds=1):
        raise TaskDefinitionError(
            f"invalid interval {value!r}: must be a positive whole number of milliseconds"
        )
    return every


def every_text(every: timedelta) -> str:
    """*every* written the way :func:`parse_every` reads it, largest units first."""
    ms = every // timedelta(milliseconds=1)
    out = ""
    for unit, size in _UNITS.items():
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    return out


def _utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {value!r}")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class IntervalSchedule:
    """Fires at ``anchor + k * every`` for k = 1, 2, ...: never at the anchor itself."""

    every: timedelta
    anchor: datetime

    def __post_init__(self) -> None:
        parse_every(self.every)
        object.__setattr__(self, "anchor", _utc(self.anchor, "anchor"))

    def _index_after(self, after: datetime) -> int:
        """The smallest k >= 1 with ``anchor + k * every > after``."""
        if after < self.anchor + self.every:
            return 1
        return (after - self.anchor) // self.every + 1

    def next_after(self, after: datetime) -> datetime | None:
        try:
            return self.anchor + self._index_after(_utc(after, "after")) * self.every
        except OverflowError:
            return None

    def fires_between(
        self, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> list[datetime]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        start, end = _utc(start, "start"), _utc(end, "end")
        fires: list[datetime] = []
        fire = self.next_after(start - _EPS)
        while fire is not None and fire <= end and len(fires) < limit:
            fires.append(fire)
            try:
                fire = fire + self.every
            except OverflowError:
                break
        return fires


@dataclass(frozen=True)
class Bounded:
    """*inner*'s fires from *start* to *end* (each inclusive, None: unbounded)."""

    inner: Schedule
    start: datetime | None = None
    end: datetime | None = None

    def next_after(self, after: datetime) -> datetime | None:
        if self.start is not None and after < self.start:
            after = max(after, self.start - _EPS)
        fire = self.inner.next_after(after)
        return None if fire is None or (self.end is not None and fire > self.end) else fire

    def fires_between(
        self, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> list[datetime]:
        if self.start is not None:
            start = max(start, self.start)
        if self.end is not None:
            end = min(end, self.end)
        if end < start:
            return []
        return self.inner.fires_between(start, end, limit=limit)


def build_schedule(
    cron: str | None,
    tz: str,
    every_ms: int | None = None,
    anchor: datetime | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> Schedule | None:
    """The schedule of a task row (or spec): its cron or interval, within *start*..*end*.

    None for a task with neither (a child, or a manual-only task). An interval's anchor is
    *start* when given (its first fire is *start*), else *anchor* (its first fire is one
    interval later)."""
    inner: Schedule
    if every_ms is not None:
        every = timedelta(milliseconds=every_ms)
        if start is not None:
            inner = IntervalSchedule(every, start - every)
        elif anchor is not None:
            inner = IntervalSchedule(every, anchor)
        else:
            raise ValueError("an interval schedule needs an anchor or a start")
    elif cron is not None:
        from easyjob.core.cron import CronSchedule

        inner = CronSchedule.parse(cron, tz)
    else:
        return None
    if start is None and end is None:
        return inner
    return Bounded(inner, start, end)
