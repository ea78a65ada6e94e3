"""Calendars: named sets of excluded days (pure; the rows live in ``easy_job_calendar``).

A calendar is the set of its rows, each an inclusive range of days ``first_day ..
last_day`` with an optional note; it exists while it has a row. A task declared with
``exclude="NAME"`` skips its fires whose day, in the task's time zone, is in the calendar
(the rule: :func:`easyjob.core.admission.excluded_until`). Here: checking names, reading
``DAY`` and ``DAY..DAY`` as typed on the command line, and taking days out of ranges.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

__all__ = [
    "MAX_NAME",
    "CalendarDay",
    "check_calendar_name",
    "parse_days",
    "without",
]

MAX_NAME = 255
_ONE = timedelta(days=1)


@dataclass(frozen=True)
class CalendarDay:
    """A row of ``easy_job_calendar``: days *first_day* to *last_day* (inclusive) excluded
    by calendar *name*."""

    id: int
    name: str
    first_day: date
    last_day: date
    note: str | None
    create_time: datetime

    @property
    def days(self) -> int:
        """How many days the range holds."""
        return (self.last_day - self.first_day).days + 1


def check_calendar_name(name: object) -> str:
    """*name* when it is a usable calendar name (1 to 255 characters, no leading or
    trailing space: a name typed on a command line), else ValueError naming it."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or name != name.strip():
        raise ValueError(
            f"invalid calendar name {name!r}: 1-{MAX_NAME} characters, without leading or "
            "trailing spaces"
        )
    return name


def parse_days(text: str) -> tuple[date, date]:
    """``YYYY-MM-DD`` (one day) or ``YYYY-MM-DD..YYYY-MM-DD`` (inclusive) as (first, last);
    ValueError naming the bad text (not a date, or a range whose end is before its start)."""
    first_text, sep, last_text = text.strip().partition("..")
    first = _day(first_text, text)
    last = _day(last_text, text) if sep else first
    if last < first:
        raise ValueError(
            f"invalid day range {text!r}: it ends ({last.isoformat()}) before it starts "
            f"({first.isoformat()})"
        )
    return first, last


def _day(part: str, text: str) -> date:
    try:
        return date.fromisoformat(part.strip())
    except ValueError:
        raise ValueError(
            f"invalid day {part.strip()!r} in {text!r}: expected YYYY-MM-DD or "
            "YYYY-MM-DD..YYYY-MM-DD"
        ) from None


def without(kept: tuple[date, date], taken: tuple[date, date]) -> list[tuple[date, date]]:
    """What is left of range *kept* once the days of *taken* are removed: none, one or two
    ranges."""
    first, last = kept
    if taken[1] < first or taken[0] > last:
        return [kept]
    left = [(first, taken[0] - _ONE)] if taken[0] > first else []
    right = [(taken[1] + _ONE, last)] if taken[1] < last else []
    return left + right
