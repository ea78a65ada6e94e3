"""easyjob.core.cron: expression forms, pinned errors, windows, time zones and DST policy."""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from easyjob.core import cron
from easyjob.core.cron import CronSchedule, parse_tz
from easyjob.errors import ConfigError, CronError, UnknownTimeZoneError

SECOND = timedelta(seconds=1)
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def walls(fires: list[datetime], zone: ZoneInfo) -> list[str]:
    """Fires as local wall times with their UTC offset, for readable assertions."""
    return [f.astimezone(zone).isoformat() for f in fires]


# --- errors -------------------------------------------------------------------------------

FORMS = (
    "expected 5 fields (minute hour day month weekday), "
    "6 (second minute hour day month weekday) or 7 (Quartz: ... weekday year)"
)
MACROS = "(supported: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
SYNTAX = "'*', ranges 'a-b', steps 'a/n' or '*/n', lists 'a,b')"
HASHED = "is not supported (hashed H and random R values)"


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("61 * * * *", "minute field '61' is out of range (0-59)"),
        ("0-60 * * * *", "minute field '0-60' is out of range (0-59)"),
        ("* 24 * * *", "hour field '24' is out of range (0-23)"),
        ("* * 0 * *", "day-of-month field '0' is out of range (1-31)"),
        ("* * * 13 *", "month field '13' is out of range (1-12)"),
        ("* * * * 8", "day-of-week field '8' is out of range (0-7)"),
        ("60 * * * * *", "second field '60' is out of range (0-59)"),
        ("0 0 0 32 * ?", "day-of-month field '32' is out of range (1-31)"),
        ("* * *", f"{FORMS}, got 3"),
        ("* * * * * * * *", f"{FORMS}, got 8"),
        ("0 0 12 * 1 ? 1969", "year field '1969' is out of range (1970-2099)"),
        ("", "it is empty"),
        ("  \t ", "it is empty"),
        ("@reboot", f"unsupported macro {MACROS}"),
        ("@every 5m", f"unsupported macro {MACROS}"),
        ("x * * * *", f"minute field 'x' is not valid (use 0-59, {SYNTAX}"),
        ("*/0 * * * *", "minute field '*/0' has a step of 0 (steps must be 1-59)"),
        ("1-2-3 * * * *", f"minute field '1-2-3' is not valid (use 0-59, {SYNTAX}"),
        ("* * * FOO *", f"month field 'FOO' is not valid (use 1-12, JAN-DEC, {SYNTAX}"),
        (
            "* * * * 1#6",
            "day-of-week field '1#6': the occurrence after '#' must be 1-5 "
            "(the 1st to 5th such weekday of the month), got '6'",
        ),
        (
            "? * * * *",
            "minute field '?' is not valid ('?' is only allowed in day-of-month and day-of-week)",
        ),
        ("R * * * *", f"minute field 'R' {HASHED}"),
        ("0 H/5 * * * *", f"minute field 'H/5' {HASHED}"),
    ],
)
def test_bad_expression_names_the_expression_and_the_field(expr: str, reason: str) -> None:
    message = f"invalid cron expression {expr!r}: {reason}"
    with pytest.raises(CronError, match=f"^{re.escape(message)}$"):
        CronSchedule.parse(expr)


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 0 30 2 ?"])
def test_never_firing_expression_is_refused_at_parse_time(expr: str) -> None:
    with pytest.raises(CronError, match=f"^{re.escape(f'cron expression {expr!r} never fires')}$"):
        CronSchedule.parse(expr)


def test_leap_day_is_not_never() -> None:
    assert CronSchedule.parse("0 0 29 2 *").next_after(utc(2026, 1, 1)) == utc(2028, 2, 29)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "invalid cron expression None: expected a string, got NoneType"),
        (5, "invalid cron expression 5: expected a string, got int"),
        (b"* * * * *", "invalid cron expression b'* * * * *': expected a string, got bytes"),
    ],
)
def test_non_string_expression_is_named(value: object, message: str) -> None:
    with pytest.raises(CronError, match=f"^{re.escape(message)}$"):
        CronSchedule(value, "UTC")  # type: ignore[arg-type]


def test_cron_error_is_a_config_error_and_a_value_error() -> None:
    with pytest.raises(CronError) as caught:
        CronSchedule("61 * * * *")
    assert isinstance(caught.value, ConfigError)
    assert isinstance(caught.value, ValueError)
    assert caught.value.__cause__ is not None  # croniter's own error is chained


@pytest.mark.parametrize("name", ["Mars/Olympus", "utc", "Europe", "localtime", "", "../etc", None])
def test_unknown_time_zone(name: object) -> None:
    message = f"unknown time zone {name!r}: not an IANA zone name (e.g. 'Europe/Berlin')"
    with pytest.raises(UnknownTimeZoneError, match=f"^{re.escape(message)}$") as caught:
        parse_tz(name)  # type: ignore[arg-type]
    assert isinstance(caught.value, LookupError)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(UnknownTimeZoneError, match=f"^{re.escape(message)}$"):
        CronSchedule("* * * * *", name)  # type: ignore[arg-type]


def test_parse_tz_returns_the_zone() -> None:
    assert parse_tz("Europe/Berlin") == BERLIN
    assert parse_tz("UTC") == ZoneInfo("UTC")


def test_constructor_validates_so_no_invalid_schedule_exists() -> None:
    schedule = CronSchedule("  0 * * * *\n", "Europe/Berlin")
    assert schedule.expr == "0 * * * *"
    assert schedule == CronSchedule.parse("0 * * * *", "Europe/Berlin")
    assert hash(schedule) == hash(CronSchedule.parse("0 * * * *", "Europe/Berlin"))
    assert repr(schedule) == "CronSchedule(expr='0 * * * *', tz='Europe/Berlin')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.expr = "61 * * * *"  # type: ignore[misc]
    with pytest.raises(UnknownTimeZoneError):
        dataclasses.replace(schedule, tz="Mars/Olympus")
    with pytest.raises(CronError):
        dataclasses.replace(schedule, expr="* * 32 * *")


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.next_after(datetime(2026, 1, 1)),
        lambda s: s.first_at_or_after(datetime(2026, 1, 1)),
        lambda s: s.fires_between(datetime(2026, 1, 1), utc(2026, 1, 2)),
    ],
)
def test_naive_datetimes_are_refused(call: Callable[[CronSchedule], object]) -> None:
    with pytest.raises(ValueError, match=r"must be an aware datetime, got datetime\.datetime\("):
        call(CronSchedule("* * * * *"))


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^limit must be at least 1, got 0$"):
        CronSchedule("* * * * *").fires_between(utc(2026, 1, 1), utc(2026, 1, 2), limit=0)


# --- expression forms ---------------------------------------------------------------------


def test_five_fields_fire_at_second_zero() -> None:
    schedule = CronSchedule.parse("*/20 9-10 * * mon-fri")
    # 2026-05-15 is a Friday; the weekend is skipped.
    assert schedule.fires_between(utc(2026, 5, 15, 10, 30), utc(2026, 5, 18, 9, 30)) == [
        utc(2026, 5, 15, 10, 40),
        utc(2026, 5, 18, 9, 0),
        utc(2026, 5, 18, 9, 20),
    ]


def test_six_fields_put_seconds_first() -> None:
    every_ten = CronSchedule.parse("0/10 * * * * ?")
    start = utc(2026, 5, 1, 12, 0, 0)
    assert every_ten.fires_between(start, start + 30 * SECOND) == [
        start + n * SECOND for n in (0, 10, 20, 30)
    ]
    # Seconds first: second 30 of minute 0 of hour 12 (seconds-last would mean 00:30 on the 12th).
    assert CronSchedule.parse("30 0 12 * * *").next_after(utc(2026, 5, 1)) == utc(
        2026, 5, 1, 12, 0, 30
    )


def test_question_mark_in_either_day_field() -> None:
    mondays = CronSchedule.parse("0 0 12 ? * MON")
    thirteenth = CronSchedule.parse("0 0 12 13 * ?")
    april = (utc(2026, 4, 1), utc(2026, 4, 30, 23))
    assert [f.day for f in mondays.fires_between(*april)] == [6, 13, 20, 27]
    assert thirteenth.fires_between(*april) == [utc(2026, 4, 13, 12)]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@monthly", utc(2026, 6, 1)),
        ("@weekly", utc(2026, 5, 17)),  # Sunday
        ("@daily", utc(2026, 5, 14)),
        ("@midnight", utc(2026, 5, 14)),
        ("@hourly", utc(2026, 5, 13, 11)),
        ("@DAILY", utc(2026, 5, 14)),
        (" @Hourly ", utc(2026, 5, 13, 11)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    schedule = CronSchedule.parse(macro)
    assert schedule.expr == macro.strip()
    assert schedule.next_after(utc(2026, 5, 13, 10, 20)) == expected


@pytest.mark.parametrize(
    ("expr", "days"),
    [
        # Both day fields restricted: either one matching is enough (OR). 2026-04-13 is a Monday.
        ("0 12 13 * 5", [3, 10, 13, 17, 24]),
        # Also when a field starts with '*': no Vixie-cron AND quirk for '*/10'.
        ("0 12 */10 * 5", [1, 3, 10, 11, 17, 21, 24]),
        # A full day-of-month range is still "restricted": every day.
        ("0 12 1-31 * 5", list(range(1, 31))),
        # One day field '*' or '?': only the other one counts (AND with "any").
        ("0 12 13 * *", [13]),
        ("0 12 * * 5", [3, 10, 17, 24]),
    ],
)
def test_day_of_month_and_day_of_week_are_ored(expr: str, days: list[int]) -> None:
    fires = CronSchedule.parse(expr).fires_between(utc(2026, 4, 1), utc(2026, 4, 30, 23))
    assert [f.day for f in fires] == days
    assert all(f.hour == 12 for f in fires)


def test_day_of_week_seven_is_sunday() -> None:
    window = (utc(2026, 5, 1), utc(2026, 5, 31))
    assert CronSchedule("0 0 * * 7").fires_between(*window) == CronSchedule(
        "0 0 * * 0"
    ).fires_between(*window)


@pytest.mark.parametrize(
    ("expr", "day"),
    [
        ("0 12 L * *", 30),  # last day of the month
        ("0 12 15W * *", 15),  # weekday nearest the 15th (a Wednesday)
        ("0 12 * * L5", 24),  # last Friday
        ("0 12 * * 2#3", 21),  # third Tuesday
    ],
)
def test_last_nearest_weekday_and_nth_forms(expr: str, day: int) -> None:
    april = (utc(2026, 4, 1), utc(2026, 4, 30, 23))
    assert CronSchedule.parse(expr).fires_between(*april) == [utc(2026, 4, day, 12)]


def test_impossible_day_is_fine_when_the_weekday_can_fire() -> None:
    # Feb 30 never exists, but under the OR rule every Monday in February fires.
    schedule = CronSchedule.parse("0 0 30 2 1")
    assert schedule.fires_between(utc(2026, 1, 1), utc(2026, 12, 31)) == [
        utc(2026, 2, d) for d in (2, 9, 16, 23)
    ]


# --- windows ------------------------------------------------------------------------------


def test_two_second_task_fires_every_time_in_a_five_second_window() -> None:
    schedule = CronSchedule.parse("*/2 * * * * *")
    t = utc(2026, 5, 1, 12, 0, 0)
    assert schedule.fires_between(t, t + 5 * SECOND) == [t, t + 2 * SECOND, t + 4 * SECOND]
    odd = t + SECOND
    assert schedule.fires_between(odd, odd + 5 * SECOND) == [
        t + 2 * SECOND,
        t + 4 * SECOND,
        t + 6 * SECOND,
    ]


def test_window_bounds_are_inclusive() -> None:
    schedule = CronSchedule.parse("*/5 * * * *")
    fire, following = utc(2026, 5, 1, 12, 5), utc(2026, 5, 1, 12, 10)
    assert schedule.fires_between(fire, fire) == [fire]
    assert schedule.fires_between(fire, following) == [fire, following]
    tiny = timedelta(microseconds=1)
    assert schedule.fires_between(fire + tiny, following - tiny) == []
    assert schedule.fires_between(following, fire) == []


def test_window_takes_the_first_fires_up_to_limit() -> None:
    schedule = CronSchedule.parse("* * * * * *")
    t = utc(2026, 5, 1)
    assert schedule.fires_between(t, t + timedelta(days=1), limit=3) == [
        t,
        t + SECOND,
        t + 2 * SECOND,
    ]


def test_bounds_in_any_zone_and_results_in_utc() -> None:
    schedule = CronSchedule.parse("0 * * * *", "Asia/Kolkata")  # +05:30: fires at xx:30 UTC
    start = datetime(2026, 5, 1, 14, 0, tzinfo=BERLIN)  # 12:00 UTC
    fires = schedule.fires_between(start, start + timedelta(hours=1))
    assert fires == [utc(2026, 5, 1, 12, 30)]
    assert fires[0].tzinfo is UTC


def test_next_after_is_strict_and_first_at_or_after_is_not() -> None:
    schedule = CronSchedule.parse("*/5 * * * *")
    fire = utc(2026, 5, 1, 12, 5)
    assert schedule.next_after(fire) == utc(2026, 5, 1, 12, 10)
    assert schedule.first_at_or_after(fire) == fire
    assert schedule.next_after(fire - timedelta(microseconds=1)) == fire
    assert schedule.first_at_or_after(fire + timedelta(microseconds=1)) == utc(2026, 5, 1, 12, 10)


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_no_fire_after_the_end_of_time(tz: str) -> None:
    schedule = CronSchedule.parse("0 0 1 1 *", tz)
    assert schedule.next_after(utc(9999, 12, 31, 12)) is None
    assert schedule.fires_between(utc(9999, 6, 1), utc(9999, 12, 31, 12)) == []


def test_shared_schedule_gives_the_same_answers_from_many_threads() -> None:
    schedule = CronSchedule.parse("*/3 * * * * *", "Europe/Berlin")
    base = utc(2026, 10, 25, 0, 50)
    windows = [(base + n * 7 * SECOND, base + (n * 7 + 20) * SECOND) for n in range(80)]
    expected = [CronSchedule.parse(schedule.expr, schedule.tz).fires_between(*w) for w in windows]
    results: dict[int, list[list[datetime]]] = {}

    def run(worker: int) -> None:
        results[worker] = [schedule.fires_between(*w) for w in windows]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(got == expected for got in results.values())


# --- time zones and DST -------------------------------------------------------------------


def test_expression_is_read_in_the_task_time_zone() -> None:
    schedule = CronSchedule.parse("0 9 * * *", "America/New_York")
    assert schedule.next_after(utc(2026, 1, 15)) == utc(2026, 1, 15, 14)  # EST, -05:00
    assert schedule.next_after(utc(2026, 7, 15)) == utc(2026, 7, 15, 13)  # EDT, -04:00


def test_berlin_spring_gap_fires_once_at_the_transition() -> None:
    schedule = CronSchedule.parse("30 2 * * *", "Europe/Berlin")
    fires = schedule.fires_between(utc(2026, 3, 28), utc(2026, 3, 31))
    assert fires == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]
    assert walls(fires, BERLIN) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist: the first instant after the gap
        "2026-03-30T02:30:00+02:00",
    ]


def test_berlin_repeated_hour_fires_once_at_the_first_pass() -> None:
    schedule = CronSchedule.parse("30 2 * * *", "Europe/Berlin")
    fires = schedule.fires_between(utc(2026, 10, 24), utc(2026, 10, 27))
    assert fires == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert walls(fires, BERLIN) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # first pass; 02:30+01:00 (01:30 UTC) does not fire
        "2026-10-26T02:30:00+01:00",
    ]
    # Asked from inside the second pass, the next fire is the next day's.
    assert schedule.next_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)
    assert schedule.first_at_or_after(utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 26, 1, 30)


def test_new_york_both_directions() -> None:
    at_230 = CronSchedule.parse("30 2 * * *", "America/New_York")
    spring = at_230.fires_between(utc(2026, 3, 7), utc(2026, 3, 10))
    assert walls(spring, NEW_YORK) == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",  # gap 02:00-03:00: fires at the transition, 07:00 UTC
        "2026-03-09T02:30:00-04:00",
    ]
    assert spring[1] == utc(2026, 3, 8, 7)
    # New York repeats 01:00-02:00, so 02:30 is an ordinary time on the autumn day.
    autumn = at_230.fires_between(utc(2026, 10, 31), utc(2026, 11, 3))
    assert autumn == [utc(2026, 10, 31, 6, 30), utc(2026, 11, 1, 7, 30), utc(2026, 11, 2, 7, 30)]
    at_130 = CronSchedule.parse("30 1 * * *", "America/New_York")
    repeated = at_130.fires_between(utc(2026, 10, 31), utc(2026, 11, 3))
    assert walls(repeated, NEW_YORK) == [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",  # first pass only, not 06:30 UTC as well
        "2026-11-02T01:30:00-05:00",
    ]


def test_seconds_level_spring_gap_collapses_into_one_fire() -> None:
    every_ten = CronSchedule.parse("*/10 * * * * *", "Europe/Berlin")
    fires = every_ten.fires_between(utc(2026, 3, 29, 0), utc(2026, 3, 29, 2))
    # Berlin's offset is whole hours, so the fires are the plain 10 s UTC grid: 360 before the
    # gap, the 360 nonexistent times and the scheduled 03:00:00 itself as one fire, then 360.
    assert fires == [utc(2026, 3, 29, 0) + 10 * n * SECOND for n in range(721)]
    assert walls(fires[359:362], BERLIN) == [
        "2026-03-29T01:59:50+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:00:10+02:00",
    ]
    assert not [f for f in fires if f.astimezone(BERLIN).hour == 2]

    only_in_gap = CronSchedule.parse("*/10 * 2 * * *", "Europe/Berlin")  # 360 times a day
    assert len(only_in_gap.fires_between(utc(2026, 3, 28, 0), utc(2026, 3, 28, 23))) == 360
    assert only_in_gap.fires_between(utc(2026, 3, 29, 0), utc(2026, 3, 29, 23)) == [
        utc(2026, 3, 29, 1, 0)
    ]


def test_seconds_level_repeated_hour_fires_each_wall_time_once() -> None:
    every_ten = CronSchedule.parse("*/10 * * * * *", "Europe/Berlin")
    fires = every_ten.fires_between(utc(2026, 10, 25, 0), utc(2026, 10, 25, 2))
    assert fires == [utc(2026, 10, 25, 0) + 10 * n * SECOND for n in range(360)] + [
        utc(2026, 10, 25, 2)
    ]
    local = [f.astimezone(BERLIN).replace(tzinfo=None) for f in fires]
    assert local == sorted(set(local))  # each wall time once, in order
    assert fires == sorted(set(fires))  # no UTC instant twice
    # From anywhere in the second pass the next fire is the first wall time after it.
    for after in (utc(2026, 10, 25, 1), utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 1, 59, 59)):
        assert every_ten.next_after(after) == utc(2026, 10, 25, 2)
    assert every_ten.next_after(utc(2026, 10, 25, 0, 59, 55)) == utc(2026, 10, 25, 2)
    assert every_ten.first_at_or_after(utc(2026, 10, 25, 1)) == utc(2026, 10, 25, 2)


@pytest.mark.parametrize(
    ("day", "fires"),
    [
        ((2026, 3, 28), 96),  # ordinary day, 24 hours
        ((2026, 3, 29), 92),  # 23 hours: 02:00-02:45 collapse into the scheduled 03:00
        ((2026, 10, 25), 96),  # 25 hours: the repeated 02:00-02:45 fire once
    ],
)
def test_quarter_hour_fires_per_local_day(day: tuple[int, int, int], fires: int) -> None:
    schedule = CronSchedule.parse("0 */15 * * * *", "Europe/Berlin")
    midnight = datetime(*day, tzinfo=BERLIN)
    following = (midnight + timedelta(hours=36)).replace(hour=0)
    got = schedule.fires_between(midnight, following - SECOND)
    assert len(got) == fires
    assert len({f.astimezone(BERLIN).replace(tzinfo=None) for f in got}) == fires


def test_lord_howe_half_hour_shift() -> None:
    # +10:30 standard, +11:00 summer. Gap 02:00-02:30 on 2026-10-04; 01:30-02:00 twice on
    # 2026-04-05.
    gap = CronSchedule.parse("15 2 * * *", "Australia/Lord_Howe")
    fires = gap.fires_between(utc(2026, 10, 2), utc(2026, 10, 5))
    assert walls(fires, LORD_HOWE) == [
        "2026-10-03T02:15:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:15:00+11:00",
    ]
    assert fires[1] == utc(2026, 10, 3, 15, 30)
    twice = CronSchedule.parse("45 1 * * *", "Australia/Lord_Howe")
    fires = twice.fires_between(utc(2026, 4, 3), utc(2026, 4, 6))
    assert walls(fires, LORD_HOWE) == [
        "2026-04-04T01:45:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
    ]
    every_ten = CronSchedule.parse("*/10 * * * * *", "Australia/Lord_Howe")
    around = every_ten.fires_between(utc(2026, 10, 3, 15, 29, 50), utc(2026, 10, 3, 15, 30, 10))
    assert walls(around, LORD_HOWE) == [
        "2026-10-04T01:59:50+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:30:10+11:00",
    ]
    assert every_ten.next_after(utc(2026, 4, 4, 15, 10)) == utc(2026, 4, 4, 15, 30)


def test_dst_edges_cost_a_few_croniter_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # White-box: the hot path must not walk a gap or a repeated hour second by second.
    steps: list[datetime] = []
    real_step = cron._step

    def counting_step(itr: object, cursor: datetime) -> datetime | None:
        steps.append(cursor)
        return real_step(itr, cursor)

    every_second = CronSchedule.parse("* * * * * *", "Europe/Berlin")
    monkeypatch.setattr(cron, "_step", counting_step)
    assert every_second.next_after(utc(2026, 10, 25, 1, 0, 1)) == utc(2026, 10, 25, 2)
    assert len(steps) == 1
    steps.clear()
    fires = every_second.fires_between(utc(2026, 3, 29, 0, 59, 59), utc(2026, 3, 29, 1, 0, 1))
    assert fires == [utc(2026, 3, 29, 0, 59, 59), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 0, 1)]
    assert len(steps) <= 5  # not 3600 nonexistent seconds


# --- property: agrees with an independent brute-force reading of the policy ---------------

ZONES = [  # the first and the last have no transitions
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute shift
    "Europe/Dublin",  # negative DST in the tz database
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",
]


@cache
def transitions(tz: str) -> tuple[datetime, ...]:
    """Offset changes of *tz* in 2026, found by a plain quarter-hour scan."""
    zone, found = ZoneInfo(tz), []
    t = utc(2026, 1, 1)
    while t.year == 2026:
        if (t + timedelta(minutes=15)).astimezone(zone).utcoffset() != t.astimezone(
            zone
        ).utcoffset():
            found.append(t + timedelta(minutes=15))
        t += timedelta(minutes=15)
    return tuple(found) or (utc(2026, 6, 1),)


def oracle(expr: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """The DST policy read literally, one resolution step at a time.

    Walk UTC instants u in steps of the resolution; u fires iff some matching wall time L
    lies in (highest wall time seen before u, wall time of u]. An ordinary step covers one
    wall time, a gap covers all of it and its end, a second pass covers nothing new.
    """
    fields = expr.split()
    expanded = croniter.expand(expr, second_at_beginning=len(fields) == 6)[0]
    minute, hour, dom, month, dow = expanded[:5]
    second = expanded[5] if len(fields) == 6 else [0]
    ored = dom != ["*"] and dow != ["*"]

    def ok(values: list[object], value: int) -> bool:
        return values == ["*"] or value in values

    def matches(w: datetime) -> bool:
        if not (ok(second, w.second) and ok(minute, w.minute) and ok(hour, w.hour)):
            return False
        if not ok(month, w.month):
            return False
        by_dom, by_dow = ok(dom, w.day), ok(dow, w.isoweekday() % 7)
        return (by_dom or by_dow) if ored else (by_dom and by_dow)

    zone, step = ZoneInfo(tz), (1 if len(fields) == 6 else 60)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    first, last = -((epoch - start) // SECOND), (end - epoch) // SECOND  # whole seconds
    lo = first - 65 * 60  # further back than any repeated period is long
    lo -= lo % step
    high_water = datetime.fromtimestamp(lo, zone).replace(tzinfo=None)
    fires = []
    for ts in range(lo + step, last + 1, step):
        wall = datetime.fromtimestamp(ts, zone).replace(tzinfo=None)
        if wall <= high_water:
            continue
        if ts >= first:
            span = int((wall - high_water).total_seconds()) // step
            if any(matches(wall - n * step * SECOND) for n in range(span)):
                fires.append(datetime.fromtimestamp(ts, UTC))
        high_water = wall
    return fires


def grammar(anchor: datetime, zone: ZoneInfo, *, targeted: bool) -> dict[str, list[str]]:
    """Field values for expressions around the transition *anchor*.

    Targeted grammars only use values that match the transition's local day and the hours
    of its gap or repeated period, so most of their examples cross the transition with
    fires; the others also use values that may not fire near it at all.
    """
    gap_start = (anchor - SECOND).astimezone(zone) + SECOND  # wall-clock arithmetic
    local = anchor.astimezone(zone)
    hours = [str(gap_start.hour), str(local.hour), f"{gap_start.hour},{local.hour}", "*"]
    dom = ["*", "?", str(local.day), f"{max(local.day - 1, 1)}-{local.day}"]
    month = ["*", str(local.month)]
    dow = ["*", "?", str(local.isoweekday() % 7)]
    if not targeted:
        hours += ["*/6", "0,12", "1-3"]
        dom += ["1", "*/4"]
        month += ["*/2", "3,4,9,10,11"]
        dow += ["1-5", "SUN", "6,0"]
    seconds = ["0", "*/10", "15,45", "0-20/10", "*"]
    minutes = ["*", "0", "*/15", "30", "5-10", "0,30", "59", "*/7", "45"]
    return {
        "second": seconds,
        "minute": minutes,
        "hour": hours,
        "dom": dom,
        "month": month,
        "dow": dow,
    }


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    targeted = draw(st.booleans())
    tz = draw(st.sampled_from(ZONES[1:-1] if targeted else ZONES))
    anchor = draw(st.sampled_from(transitions(tz)))
    fields = grammar(anchor, ZoneInfo(tz), targeted=targeted)
    names = ["minute", "hour", "dom", "month", "dow"]
    seconds = draw(st.booleans())
    if seconds:
        names.insert(0, "second")
    expr = " ".join(draw(st.sampled_from(fields[name])) for name in names)
    # Windows start before the transition or a little after it (inside a repeated period).
    before, after, longest = (1800, 600, 2400) if seconds else (3 * 3600, 1800, 5 * 3600)
    start = anchor + timedelta(
        seconds=draw(st.integers(-before, after)),
        microseconds=draw(st.sampled_from([0, 1, 500_000])),
    )
    length = timedelta(seconds=draw(st.integers(longest // 4, longest)))
    return expr, tz, start, start + length


@settings(max_examples=120, deadline=None)
@given(cases())
def test_fires_match_the_policy_and_next_after_chains(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expr, tz, start, end = case
    fires = CronSchedule.parse(expr, tz, "unix").fires_between(start, end)
    assert fires == oracle(expr, tz, start, end)
    assert all(f.tzinfo is UTC and start <= f <= end for f in fires)
    assert all(a < b for a, b in itertools.pairwise(fires))

    chained = CronSchedule.parse(expr, tz, "unix")  # a fresh instance: nothing cached
    first = chained.first_at_or_after(start)
    if fires:
        assert first == fires[0]
    else:
        assert first is None or first > end
    walked, cursor = [], start - timedelta(microseconds=1)
    while (following := chained.next_after(cursor)) is not None and following <= end:
        walked.append(following)
        cursor = following
    assert walked == fires
    assert following is None or following > end


CLOCK_FIELDS = {
    "second": ["0", "*", "*/10", "15,45", "59", "5-20/7"],
    "minute": ["0", "*", "*/15", "59", "0,30", "7-9"],
    "hour": ["0", "*", "23", "*/6", "9-17", "0,12"],
}


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries({name: st.sampled_from(v) for name, v in CLOCK_FIELDS.items()}),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)),
)
def test_times_of_day_are_the_ones_croniter_walks(fields: dict[str, str], cursor: datetime) -> None:
    # easyjob bisects the expanded time-of-day lists itself (croniter's walk is the slow
    # part); on naive wall times, with every day matching, both must give the same answer.
    clock = f"{fields['second']} {fields['minute']} {fields['hour']} * * *"
    theirs = croniter(clock, cursor, second_at_beginning=True)
    expected = [theirs.get_next(datetime) for _ in range(3)]
    calendar = cron._compiled(clock, "unix")[1]
    got, wall = [], cursor
    for _ in range(3):
        wall = calendar.get_next(wall)
        got.append(wall)
    assert got == expected
