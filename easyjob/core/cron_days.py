"""Which calendar days a cron expression fires on: its day-of-month, day-of-week, month
and year fields under one dialect's rules.

Pure calendar arithmetic, no clock and no time zone. croniter cannot express these rules
(`#`, `L` or `W` together with a restricted day of month, the Spring AND rule, a year
field), so the days are computed here, one month at a time, and remembered.
"""

from __future__ import annotations

import calendar
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import date

__all__ = ["DaySpec"]

# The Gregorian calendar repeats every 400 years: a day rule that matches nothing in
# 400 years never matches.
_HORIZON_MONTHS = 400 * 12 + 1
_CACHE_LIMIT = 8192


@dataclass(frozen=True)
class DaySpec:
    """The day rule of one expression. Weekdays are numbered 0 = Sunday to 6 = Saturday.

    ``dom_all``/``dow_all`` mark a field that restricts nothing (``*`` or ``?``). With
    ``either`` (Unix), a day matches when either restricted field matches; otherwise
    (Spring, Quartz) when both do. ``w_spring`` keeps Spring's reading of ``nW`` at a
    Sunday month end (no fire that month) instead of Quartz's (the Friday before).
    """

    months: frozenset[int]
    years: frozenset[int] | None = None
    dom_all: bool = True
    dom: frozenset[int] = frozenset()
    dom_last: frozenset[int] = frozenset()  # L-n: offsets n (0 for L)
    dom_nearest: frozenset[int] = frozenset()  # nW: days n
    dom_last_nearest: frozenset[int] = frozenset()  # L-nW: offsets n
    dow_all: bool = True
    dow: frozenset[int] = frozenset()
    dow_nth: frozenset[tuple[int, int]] = frozenset()  # (weekday, k): k-th in the month
    dow_last: frozenset[int] = frozenset()  # weekdays: the last one in the month
    either: bool = True
    w_spring: bool = False
    _days: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _sets: dict[tuple[int, int], frozenset[int]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def matches(self, day: date) -> bool:
        """Whether the expression fires on *day* (at some time of that day)."""
        key = (day.year, day.month)
        days = self._sets.get(key)
        if days is None:
            days = frozenset(self.month_days(*key))
            if len(self._sets) > _CACHE_LIMIT:
                self._sets.clear()
            self._sets[key] = days
        return day.day in days

    def next_day(self, after: date) -> date | None:
        """The first matching day strictly after *after*, or ``None`` within 400 years."""
        year, month, day = after.year, after.month, after.day
        years = self.years
        for _ in range(_HORIZON_MONTHS):
            days = self.month_days(year, month)
            if days and days[-1] > day:
                return date(year, month, days[bisect_right(days, day)])
            day, month = 0, month + 1
            if month > 12:
                year, month = year + 1, 1
                if years is not None:
                    later = [y for y in years if y >= year]
                    if not later:
                        return None
                    year = min(later)
            if year > 9999:
                return None
        return None

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of one month, ascending (remembered)."""
        key = (year, month)
        days = self._days.get(key)
        if days is None:
            days = self._compute(year, month)
            if len(self._days) > _CACHE_LIMIT:
                self._days.clear()
            self._days[key] = days
        return days

    def _compute(self, year: int, month: int) -> tuple[int, ...]:
        if month not in self.months or (self.years is not None and year not in self.years):
            return ()
        first_weekday, length = calendar.monthrange(year, month)
        first = (first_weekday + 1) % 7  # Sunday = 0
        every = set(range(1, length + 1))
        by_dom = every if self.dom_all else self._dom_days(year, month, length)
        by_dow = every if self.dow_all else self._dow_days(first, length)
        if self.either and not self.dom_all and not self.dow_all:
            return tuple(sorted(by_dom | by_dow))
        return tuple(sorted(by_dom & by_dow))

    def _dom_days(self, year: int, month: int, length: int) -> set[int]:
        days = {d for d in self.dom if d <= length}
        days |= {length - n for n in self.dom_last if length - n >= 1}
        targets = [(d, self.w_spring) for d in self.dom_nearest if d <= length]
        # 'LW' is the last weekday in Spring too: a Sunday month end gives the Friday.
        targets += [(length - n, False) for n in self.dom_last_nearest if length - n >= 1]
        for target, spring in targets:
            nearest = _nearest_weekday(year, month, target, length, spring)
            if nearest is not None:
                days.add(nearest)
        return days

    def _dow_days(self, first: int, length: int) -> set[int]:
        days: set[int] = set()
        for weekday in self.dow:
            days.update(range(1 + (weekday - first) % 7, length + 1, 7))
        for weekday, k in self.dow_nth:
            day = 1 + (weekday - first) % 7 + 7 * (k - 1)
            if day <= length:
                days.add(day)
        for weekday in self.dow_last:
            first_of = 1 + (weekday - first) % 7
            days.add(first_of + 7 * ((length - first_of) // 7))
        return days


def _nearest_weekday(year: int, month: int, target: int, length: int, spring: bool) -> int | None:
    """Monday-Friday nearest to *target*, never leaving the month (Quartz's ``W``).

    A Sunday month end gives the Friday before, except in Spring (*spring*), where
    ``nW`` then does not fire that month.
    """
    weekday = calendar.weekday(year, month, target)  # Monday = 0
    if weekday == 5:  # Saturday: the Friday before, or Monday the 3rd for the 1st
        return 3 if target == 1 else target - 1
    if weekday == 6:  # Sunday: the Monday after, or the Friday before at the month's end
        if target < length:
            return target + 1
        return None if spring else target - 2
    return target
