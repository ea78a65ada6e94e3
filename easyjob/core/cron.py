"""Cron expressions read in a time zone, turned into UTC fire instants.

Pure: nothing here reads a clock; every "now" is an argument and every result is an
aware UTC datetime.

Forms: 5 fields (``minute hour day-of-month month day-of-week``, fires at second 0),
6 fields with seconds FIRST as in Spring and Quartz (``0/10 * * * * ?``), and the
macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.

The expression is read in the wall time of its IANA zone. croniter enumerates NAIVE
wall times (it is only trusted with calendar arithmetic, not with time zones) and this
module maps each wall time to UTC itself. DST policy:

- a wall time that does not exist (spring-forward gap) fires once, at the transition
  instant, the first valid instant after the gap; every scheduled time in one gap, and
  the gap's end if it is scheduled too, collapses into that one fire;
- a wall time that occurs twice (fall back) fires once, at its first occurrence; the
  second pass of the repeated period fires nothing that already fired.

So the fire instants are strictly increasing and never repeat. See ``docs/cron.md``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterError, croniter

from easyjob.errors import CronError, UnknownTimeZoneError

__all__ = ["CronSchedule", "parse_tz"]

_EPS = timedelta(microseconds=1)
# Where the "does it ever fire?" probe starts; any fixed instant keeps parsing pure.
_REFERENCE = datetime(2000, 1, 1)
# croniter splits on ASCII whitespace only; splitting the same way keeps its view and ours equal.
_FIELDS_RE = re.compile(r"\S+", re.ASCII)
# croniter's H (needs a hash id) and R (random: every node would compute other fire times).
_HASHED_RE = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FORMS = (
    "expected 5 fields (minute hour day month weekday) "
    "or 6 fields (second minute hour day month weekday)"
)
# Names that resolve, but to whatever zone each host is configured with.
_HOST_ZONES = frozenset({"localtime", "posixrules"})
_UTC_KEYS = frozenset({"UTC", "Etc/UTC"})


@dataclass(frozen=True)
class _Field:
    name: str
    bounds: str
    allowed: str


_SECOND = _Field("second", "0-59", "0-59")
_MINUTE = _Field("minute", "0-59", "0-59")
_HOUR = _Field("hour", "0-23", "0-23")
_DOM = _Field("day-of-month", "1-31", "1-31, 'L', 'nW', '?'")
_MONTH = _Field("month", "1-12", "1-12, JAN-DEC")
_DOW = _Field("day-of-week", "0-7", "0-7, SUN-SAT, 'n#k', 'Ln', '?'")
_UNIX_FIELDS = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)
_SECONDS_FIELDS = (_SECOND, *_UNIX_FIELDS)


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
    """

    expr: str
    tz: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _proto: Any = field(init=False, repr=False, compare=False)
    _is_utc: bool = field(init=False, repr=False, compare=False)
    _hint: tuple[datetime, datetime] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        text, proto = _compiled(self.expr) if isinstance(self.expr, str) else _compile(self.expr)
        zone = parse_tz(self.tz)
        object.__setattr__(self, "expr", text)
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_proto", proto)
        object.__setattr__(self, "_is_utc", self.tz in _UTC_KEYS)

    @classmethod
    def parse(cls, expr: str, tz: str = "UTC") -> CronSchedule:
        """Validate *expr* (stripped) in zone *tz* and return the schedule."""
        return cls(expr, tz)

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire strictly after *after* (aware, any zone), as aware UTC.

        ``None`` if the schedule never fires again: nothing within croniter's 50-year
        search horizon, or nothing before the end of ``datetime``'s range.
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
        for fire in walk(self._fresh_croniter(), self._zone, after):
            # A fact about the schedule, true for every caller: the first fire after
            # `after` is `fire`. The scheduler's next poll window usually starts inside
            # it, so that poll costs no croniter step. Assignment is atomic.
            object.__setattr__(self, "_hint", (after, fire))
            yield fire
            after = fire

    def _fresh_croniter(self) -> Any:
        """A private copy of the prototype: croniter objects are stateful."""
        itr = copy.copy(self._proto)
        if itr.nth_weekday_of_month:
            # croniter updates these sets in place; keep copies used by other threads apart.
            itr.nth_weekday_of_month = {k: set(v) for k, v in itr.nth_weekday_of_month.items()}
        return itr


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


def _walk_utc(itr: Any, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    cursor = after.replace(tzinfo=None)
    while (wall := _step(itr, cursor)) is not None:
        yield wall.replace(tzinfo=UTC)
        cursor = wall


def _walk_zone(itr: Any, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    try:
        cursor = _wall_cursor(zone, after)
        last = after
        while (wall := _step(itr, cursor)) is not None:
            fire, cursor = _resolve(zone, wall)
            if fire > last:
                yield fire
                last = fire
    except OverflowError:
        # The wall time or the instant left datetime's range (year 9999): no more fires.
        return


def _step(itr: Any, cursor: datetime) -> datetime | None:
    """The first scheduled naive wall time strictly after the naive *cursor*, or None."""
    try:
        wall: datetime = itr.get_next(datetime, start_time=cursor)
    except (ValueError, OverflowError):
        # CroniterBadDateError (a ValueError): nothing within the search horizon;
        # ValueError/OverflowError from datetime: the search ran past year 9999.
        return None
    return wall


def _wall_cursor(zone: ZoneInfo, after: datetime) -> datetime:
    """The naive wall time from which croniter should look for fires after *after*."""
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


def _resolve(zone: ZoneInfo, wall: datetime) -> tuple[datetime, datetime]:
    """Map the naive wall time *wall* to its fire instant (UTC) and the next cursor.

    An ambiguous wall time takes its first occurrence (``fold=0``). A nonexistent one
    fires at the transition and the cursor skips to the gap's end, so a seconds-level
    expression does not walk through the whole gap.
    """
    fire = wall.replace(tzinfo=zone).astimezone(UTC)
    if fire.astimezone(zone).replace(tzinfo=None) == wall:
        return fire, wall
    # In a gap, fold=0 reads the wall time with the offset before the transition (a
    # later instant) and fold=1 with the offset after it (an earlier one).
    early = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    transition = _transition(zone, early, fire)
    gap_end = transition.astimezone(zone).replace(tzinfo=None)
    return transition, gap_end - _EPS


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
def _compiled(expr: str) -> tuple[str, Any]:
    """:func:`_compile`, remembered: thousands of tasks mostly share a few expressions, and
    the prototype is only ever copied, never changed."""
    return _compile(expr)


def _compile(expr: object) -> tuple[str, Any]:
    """Validate *expr*; return it stripped and a prototype croniter over naive wall time."""
    if not isinstance(expr, str):
        raise CronError(
            f"invalid cron expression {expr!r}: expected a string, got {type(expr).__name__}"
        )
    text = expr.strip()
    if not text:
        raise CronError(f"invalid cron expression {expr!r}: it is empty")
    source = text
    if text.startswith("@"):
        source = _MACROS.get(text.lower(), "")
        if not source:
            raise CronError(
                f"invalid cron expression {text!r}: unsupported macro "
                f"(supported: {', '.join(_MACROS)})"
            )
    fields = _FIELDS_RE.findall(source)
    if len(fields) == 7:
        raise CronError(
            f"invalid cron expression {text!r}: a 7th (year) field is not supported; {_FORMS}"
        )
    if len(fields) not in (5, 6):
        raise CronError(f"invalid cron expression {text!r}: {_FORMS}, got {len(fields)}")
    for index in range(len(fields)):
        _check_field(text, fields, index)
    seconds_first = len(fields) == 6
    try:
        proto = croniter(
            " ".join(fields), _REFERENCE, ret_type=datetime, second_at_beginning=seconds_first
        )
    except CroniterError as err:
        raise CronError(f"invalid cron expression {text!r}: {err}") from err
    if _step(copy.copy(proto), _REFERENCE) is None:
        raise CronError(f"cron expression {text!r} never fires")
    return text, proto


def _check_field(text: str, fields: list[str], index: int) -> None:
    """Validate one field alone (croniter's messages do not say which field is bad)."""
    spec = (_SECONDS_FIELDS if len(fields) == 6 else _UNIX_FIELDS)[index]
    value = fields[index]
    prefix = f"invalid cron expression {text!r}: {spec.name} field {value!r}"
    if _HASHED_RE.fullmatch(value):
        raise CronError(f"{prefix} is not supported (hashed H and random R values)")
    probe = ["*"] * len(fields)
    probe[index] = value
    try:
        croniter.expand(" ".join(probe), second_at_beginning=len(fields) == 6)
    except CroniterError as err:
        reason = str(err)
        if "out of range" in reason or "out of bands" in reason:
            raise CronError(f"{prefix} is out of range ({spec.bounds})") from err
        if "?" in value and spec not in (_DOM, _DOW):
            raise CronError(
                f"{prefix} is not valid ('?' is only allowed in day-of-month and day-of-week)"
            ) from err
        raise CronError(
            f"{prefix} is not valid (use {spec.allowed}, '*', "
            "ranges 'a-b', steps 'a/n' or '*/n', lists 'a,b')"
        ) from err
