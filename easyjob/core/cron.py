"""Cron expressions read in a time zone, turned into UTC fire instants.

Pure: nothing here reads a clock; every "now" is an argument and every result is an
aware UTC datetime.

Forms and dialects (``unix``, ``spring``, ``quartz``) are read by
:mod:`easyjob.core.cron_syntax`; the days an expression fires on are
:mod:`easyjob.core.cron_days`, and its times of day are sorted lists walked here.

The expression is read in the wall time of its IANA zone. The calendar enumerates NAIVE
wall times (time zones are not left to a cron library) and this module maps each wall
time to UTC itself. DST policy:

- a wall time that does not exist (spring-forward gap) fires once, at the transition
  instant, the first valid instant after the gap; every scheduled time in one gap, and
  the gap's end if it is scheduled too, collapses into that one fire; only times of
  the local date on which the gap ends collapse: a gap that removes whole local dates
  (Pacific/Apia skipped 2011-12-30) fires nothing for them, so no local date fires a
  daily job twice;
- a wall time that occurs twice (fall back) fires once, at its first occurrence; the
  second pass of the repeated period fires nothing that already fired.

So the fire instants are strictly increasing and never repeat. See ``docs/cron.md``.
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from functools import cache, lru_cache
from zoneinfo import ZoneInfo, available_timezones

from easyjob.core.cron_syntax import DIALECTS, Parsed, parse
from easyjob.errors import CronDialectWarning, CronError, UnknownTimeZoneError

__all__ = ["DIALECTS", "CronSchedule", "parse_tz"]

_EPS = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)
# Where the "does it ever fire?" probe starts (Quartz's first year); any fixed instant
# keeps parsing pure.
_REFERENCE = datetime(1970, 1, 1)
# Names that resolve, but to whatever zone each host is configured with.
_HOST_ZONES = frozenset({"localtime", "posixrules"})
_UTC_KEYS = frozenset({"UTC", "Etc/UTC"})


def parse_tz(name: str) -> ZoneInfo:
    """Return the IANA zone *name*; raise :class:`UnknownTimeZoneError` if it is not one.

    Host-dependent aliases such as ``localtime`` are refused: in a cluster they would
    mean a different zone on each node.
    """
    if not isinstance(name, str) or name in _HOST_ZONES or name not in _zone_names():
        raise UnknownTimeZoneError(
            f"unknown time zone {name!r}: not an IANA zone name (e.g. 'Europe/Berlin')"
        )
    return ZoneInfo(name)


@cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression in an IANA time zone; an invalid one cannot exist.

    Construction (or :meth:`parse`) raises :class:`CronError` for a malformed or
    never-firing expression and :class:`UnknownTimeZoneError` for an unknown zone.
    Instances are immutable, hashable and safe to share between threads. Each one
    remembers the last pair of consecutive fires it computed, which makes the next poll
    of a moving window cheap; that memo changes no result.

    *dialect* (``'unix'``, ``'spring'``, ``'quartz'`` or ``None``: by field count) may
    also be written in *expr* as a marker (``'quartz: 0 0 12 ? * 2-6'``); ``expr`` keeps
    the text without it and :attr:`text` gives it back with it, as stored. An expression
    whose meaning differs between dialects and has none warns with
    :class:`~easyjob.errors.CronDialectWarning`.
    """

    expr: str
    tz: str = "UTC"
    dialect: str | None = None
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _calendar: _Calendar = field(init=False, repr=False, compare=False)
    _is_utc: bool = field(init=False, repr=False, compare=False)
    _hint: tuple[datetime, datetime] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        cacheable = isinstance(self.expr, str) and (
            self.dialect is None or self.dialect in DIALECTS
        )
        compile_ = _compiled if cacheable else _compile
        parsed, calendar = compile_(self.expr, self.dialect)
        zone = parse_tz(self.tz)
        for message in parsed.warnings:
            warnings.warn(message, CronDialectWarning, stacklevel=3)
        object.__setattr__(self, "expr", parsed.body)
        object.__setattr__(self, "dialect", parsed.dialect)
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_calendar", calendar)
        object.__setattr__(self, "_is_utc", self.tz in _UTC_KEYS)

    def __repr__(self) -> str:
        dialect = "" if self.dialect is None else f", dialect={self.dialect!r}"
        return f"CronSchedule(expr={self.expr!r}, tz={self.tz!r}{dialect})"

    @classmethod
    def parse(cls, expr: str, tz: str = "UTC", dialect: str | None = None) -> CronSchedule:
        """Validate *expr* (stripped) in zone *tz* and *dialect*; return the schedule."""
        return cls(expr, tz, dialect)

    @property
    def text(self) -> str:
        """The expression as stored: with its dialect marker when one was chosen."""
        return self.expr if self.dialect is None else f"{self.dialect}: {self.expr}"

    @property
    def reading(self) -> str:
        """The dialect the expression is read in (``'unix'``, ``'spring'`` or ``'quartz'``)."""
        return _compiled(self.text, None)[0].reading

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire strictly after *after* (aware, any zone), as aware UTC.

        ``None`` if the schedule never fires again: no matching day within 400 years
        (the Gregorian cycle: then none ever), or nothing before the end of
        ``datetime``'s range.
        """
        return _next_after(self, _as_utc(after, "after"))

    def first_at_or_after(self, when: datetime) -> datetime | None:
        """The first fire at or after *when* (aware, any zone), as aware UTC, or ``None``."""
        return next(self._fires_after(_as_utc(when, "when") - _EPS), None)

    def fires_between(
        self, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> list[datetime]:
        """Every fire *t* with ``start <= t <= end``, ascending, aware UTC.

        Both bounds are inclusive; at most *limit* fires (the earliest ones) are
        returned, so a caller can bound the work of a long window.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        start_utc, end_utc = _as_utc(start, "start"), _as_utc(end, "end")
        if end_utc < start_utc:
            return []
        return list(_between(self, start_utc, end_utc, limit))

    def _between(self, start_utc: datetime, end_utc: datetime, limit: int) -> tuple[datetime, ...]:
        fires: list[datetime] = []
        for fire in self._fires_after(start_utc - _EPS):
            if fire > end_utc:
                break
            fires.append(fire)
            if len(fires) >= limit:
                break
        return tuple(fires)

    def _fires_after(self, after: datetime) -> Iterator[datetime]:
        """Yield the fires strictly after the aware UTC instant *after*, ascending."""
        hint = self._hint
        if hint is not None and hint[0] <= after < hint[1]:
            yield hint[1]
            after = hint[1]
        walk = _walk_utc if self._is_utc else _walk_zone
        for fire in walk(self._calendar, self._zone, after):
            # A fact about the schedule, true for every caller: the first fire after
            # `after` is `fire`. The scheduler's next poll window usually starts inside
            # it, so that poll costs no calendar step. Assignment is atomic.
            object.__setattr__(self, "_hint", (after, fire))
            yield fire
            after = fire


class _Calendar:
    """Naive wall times of one expression: its days (a ``DaySpec``) at its times of day.

    Stateless, so one instance serves every caller and thread. The times of day are found
    by bisection in the sorted second, minute and hour lists (croniter's own walk would
    cost several times more per fire for the same answer).
    """

    __slots__ = ("_days", "_first", "_hours", "_minutes", "_seconds")

    def __init__(self, parsed: Parsed) -> None:
        self._days = parsed.days
        self._seconds, self._minutes, self._hours = parsed.seconds, parsed.minutes, parsed.hours
        self._first = time(self._hours[0], self._minutes[0], self._seconds[0])

    def get_next(self, cursor: datetime) -> datetime:
        """The first scheduled wall time strictly after *cursor*; ValueError if none."""
        day = cursor.date()
        if self._days.matches(day):
            later = self._later_today(cursor.hour, cursor.minute, cursor.second)
            if later is not None:
                return datetime.combine(day, later)
        following = self._days.next_day(day)
        if following is None:
            raise ValueError("no matching day")
        return datetime.combine(following, self._first)

    def _later_today(self, hour: int, minute: int, second: int) -> time | None:
        """The first time of day strictly after hour:minute:second (any fraction), or None."""
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        if hour in hours:
            if minute in minutes:
                i = bisect_right(seconds, second)
                if i < len(seconds):
                    return time(hour, minute, seconds[i])
            i = bisect_right(minutes, minute)
            if i < len(minutes):
                return time(hour, minutes[i], seconds[0])
        i = bisect_right(hours, hour)
        if i < len(hours):
            return time(hours[i], minutes[0], seconds[0])
        return None


@lru_cache(maxsize=1024)
def _next_after(schedule: CronSchedule, after_utc: datetime) -> datetime | None:
    """:meth:`CronSchedule.next_after`, remembered (see :func:`_between`)."""
    return next(schedule._fires_after(after_utc), None)


@lru_cache(maxsize=1024)
def _between(
    schedule: CronSchedule, start_utc: datetime, end_utc: datetime, limit: int
) -> tuple[datetime, ...]:
    """:meth:`CronSchedule.fires_between`, remembered: in one poll thousands of tasks on the
    same schedule ask for the same window (results are facts about the schedule)."""
    return schedule._between(start_utc, end_utc, limit)


def _walk_utc(itr: _Calendar, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    cursor = after.replace(tzinfo=None)
    while (wall := _step(itr, cursor)) is not None:
        yield wall.replace(tzinfo=UTC)
        cursor = wall


def _walk_zone(itr: _Calendar, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    try:
        cursor = _wall_cursor(zone, after)
        last = after
        while (wall := _step(itr, cursor)) is not None:
            fire, cursor = _resolve(zone, wall)
            if fire is not None and fire > last:
                yield fire
                last = fire
    except OverflowError:
        # The wall time or the instant left datetime's range (year 9999): no more fires.
        return


def _step(itr: _Calendar, cursor: datetime) -> datetime | None:
    """The first scheduled naive wall time strictly after the naive *cursor*, or None."""
    try:
        wall: datetime = itr.get_next(cursor)
    except (ValueError, OverflowError):
        # No matching day within the horizon, or the search ran past year 9999.
        return None
    return wall


def _wall_cursor(zone: ZoneInfo, after: datetime) -> datetime:
    """The naive wall time from which the calendar looks for fires after *after*."""
    local = after.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first_offset = local.replace(fold=0).utcoffset()
    if local.fold == 1 and first_offset != local.utcoffset():
        # *after* lies in the second pass of a repeated period: every wall time up to
        # the period's end already fired during the first pass, so resume at that end.
        first_pass = local.replace(fold=0).astimezone(UTC)
        transition = _transition(zone, first_pass, after)
        repeated_start = transition.astimezone(zone).replace(tzinfo=None)
        repeated_end = repeated_start + (after - first_pass)
        return max(wall, repeated_end - _EPS)
    return wall


def _resolve(zone: ZoneInfo, wall: datetime) -> tuple[datetime | None, datetime]:
    """Map the naive wall time *wall* to its fire instant (UTC) and the next cursor.

    An ambiguous wall time takes its first occurrence (``fold=0``). A nonexistent one
    fires at the transition and the cursor skips to the gap's end, so a seconds-level
    expression does not walk through the whole gap. A nonexistent one on a local date
    that the gap removes whole (no moment of it exists) does not fire: the cursor skips
    to the first moment of the gap end's date.
    """
    fire = wall.replace(tzinfo=zone).astimezone(UTC)
    if fire.astimezone(zone).replace(tzinfo=None) == wall:
        return fire, wall
    # In a gap, fold=0 reads the wall time with the offset before the transition (a
    # later instant) and fold=1 with the offset after it (an earlier one).
    early = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    transition = _transition(zone, early, fire)
    gap_end = transition.astimezone(zone).replace(tzinfo=None)
    midnight = datetime.combine(wall.date(), time())
    if wall.date() != gap_end.date() and _gap_start(zone, transition) <= midnight:
        return None, datetime.combine(gap_end.date(), time()) - _EPS
    return transition, gap_end - _EPS


def _gap_start(zone: ZoneInfo, transition: datetime) -> datetime:
    """The first naive wall time that a gap starting at *transition* (UTC) removes."""
    return (transition - _SECOND).astimezone(zone).replace(tzinfo=None) + _SECOND


def _transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first whole-second instant in (before, after] with the UTC offset of *after*.

    *before* and *after* are UTC instants on either side of one offset change (tz
    database transitions fall on whole seconds); bisection finds it in about a dozen
    steps for any gap or fold of a few hours, whatever the size of the shift.
    """
    target = after.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == target:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def _as_utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {value!r}")
    return value.astimezone(UTC)


@lru_cache(maxsize=4096)
def _compiled(expr: str, dialect: str | None) -> tuple[Parsed, _Calendar]:
    """:func:`_compile`, remembered: thousands of tasks mostly share a few expressions, and
    the calendar is stateless."""
    return _compile(expr, dialect)


def _compile(expr: object, dialect: object) -> tuple[Parsed, _Calendar]:
    """Validate *expr*; return its reading and its calendar over naive wall time."""
    parsed = parse(expr, dialect)
    text = parsed.body if parsed.dialect is None else f"{parsed.dialect}: {parsed.body}"
    if parsed.days.next_day(_REFERENCE.date() - timedelta(days=1)) is None:
        raise CronError(f"cron expression {text!r} never fires")
    return parsed, _Calendar(parsed)
