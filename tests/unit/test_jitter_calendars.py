"""Jitter and calendars, the pure rules: :func:`~easyjob.core.admission.jitter_of`,
:func:`~easyjob.core.admission.excluded_until`, the misfire rule measured from the jittered
due time, and what the planner writes for them (times are arguments)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from easyjob.core.admission import (
    RunFacts,
    Verdict,
    excluded_until,
    fire_verdict,
    jitter_of,
    misfire,
    start_deadline,
)
from easyjob.core.calendars import check_calendar_name, parse_days, without
from easyjob.core.cron import CronSchedule
from easyjob.core.planner import plan_advance, plan_behind
from easyjob.core.records import TaskRow, TaskSpec
from easyjob.core.states import Misfire, RunStatus, Trigger
from easyjob.errors import TaskDefinitionError
from tests.unit.test_planner import task

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


# -- jitter_of -----------------------------------------------------------------------------


def test_jitter_is_within_its_bounds_and_spread_over_them() -> None:
    fires = [T0 + i * timedelta(minutes=1) for i in range(2000)]
    drawn = [jitter_of(7, fire, 30_000) for fire in fires]
    assert all(timedelta(0) <= j < timedelta(seconds=30) for j in drawn)
    assert all(j % timedelta(milliseconds=1) == timedelta(0) for j in drawn)
    # spread: every 3 s slice of the range is drawn, none more than twice its share
    slices = [sum(1 for j in drawn if k * 3 * S <= j < (k + 1) * 3 * S) for k in range(10)]
    assert min(slices) > 0 and max(slices) < 2 * 2000 / 10


@pytest.mark.parametrize(
    ("task_id", "fire", "jitter_ms"),
    [(7, T0, 30_000), (8, T0, 30_000), (7, T0 + S, 30_000), (7, T0, 1)],
)
def test_jitter_is_the_same_for_every_node_that_computes_it(
    task_id: int, fire: datetime, jitter_ms: int
) -> None:
    # a node reads the fire back from the database in UTC, another wrote it in any zone
    local = fire.astimezone(ZoneInfo("Asia/Tokyo"))
    assert jitter_of(task_id, fire, jitter_ms) == jitter_of(task_id, local, jitter_ms)
    assert jitter_of(task_id, fire, jitter_ms) == jitter_of(task_id, fire, jitter_ms)


def test_jitter_differs_between_tasks_and_fires_and_is_zero_without() -> None:
    assert len({jitter_of(task_id, T0, 60_000) for task_id in range(50)}) > 40
    assert len({jitter_of(7, T0 + i * S, 60_000) for i in range(50)}) > 40
    assert jitter_of(7, T0, 0) == timedelta(0)
    assert jitter_of(7, T0, 1) == timedelta(0)  # [0, 1 ms): whole milliseconds


# -- the misfire rule, from the jittered due time ------------------------------------------

EVERY_MINUTE = CronSchedule.parse("* * * * *")


def jittered_run(policy: Misfire, jitter_ms: int = 50_000, grace: float = 5) -> RunFacts:
    fire = T0
    return RunFacts(
        fire_time=fire,
        due_time=fire + jitter_of(7, fire, jitter_ms),
        triggered_by=Trigger.CRON,
        misfire=policy,
        grace=grace * S,
        schedule=EVERY_MINUTE,
        task_id=7,
        jitter_ms=jitter_ms,
    )


def test_a_jittered_run_is_late_from_its_due_time_not_its_fire_time() -> None:
    run = jittered_run(Misfire.SKIP)
    jitter = run.due_time - run.fire_time
    assert jitter > 10 * S  # the fire chosen: its jitter is longer than the grace
    # past the grace counted from the fire time, within it counted from the due time
    assert misfire(run, run.due_time + 4 * S) is None
    missed = misfire(run, run.due_time + 6 * S)
    assert missed is not None and missed.verdict == Verdict.MISS
    assert "6.0s late" in str(missed.reason)
    assert start_deadline(run) == run.due_time + 5 * S


def test_a_jittered_fire_is_superseded_once_its_successor_is_due_not_fired() -> None:
    run = jittered_run(Misfire.FIRE_ONCE, jitter_ms=59_000)
    successor = T0 + timedelta(minutes=1)
    successor_due = successor + jitter_of(7, successor, 59_000)
    assert successor_due > successor  # this successor has a jitter
    assert misfire(run, successor_due - timedelta(milliseconds=1)) is None
    superseded = misfire(run, successor_due)
    assert superseded is not None and "later fire" in str(superseded.reason)
    assert start_deadline(run) == successor_due


def test_the_planners_verdict_takes_due_times() -> None:
    due = T0 + 20 * S  # fired at T0, due 20 s later (its jitter)
    assert fire_verdict(Misfire.SKIP, 5 * S, due, None, T0 + 24 * S) is None
    assert fire_verdict(Misfire.SKIP, 5 * S, due, None, T0 + 26 * S) is not None


# -- excluded_until --------------------------------------------------------------------------

XMAS = [(date(2030, 12, 24), date(2030, 12, 26))]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("days", "fire", "tz", "until"),
    [
        # a day in UTC: excluded to its end
        (XMAS, "2030-12-24T00:00:00+00:00", "UTC", "2030-12-27T00:00:00+00:00"),
        (XMAS, "2030-12-26T23:59:59.999999+00:00", "UTC", "2030-12-27T00:00:00+00:00"),
        (XMAS, "2030-12-23T23:59:59+00:00", "UTC", None),
        (XMAS, "2030-12-27T00:00:00+00:00", "UTC", None),
        # the day is the task's: 23:30 UTC on the 23rd is 00:30 on the 24th in Berlin
        (XMAS, "2030-12-23T23:30:00+00:00", "Europe/Berlin", "2030-12-26T23:00:00+00:00"),
        (XMAS, "2030-12-26T23:30:00+00:00", "Europe/Berlin", None),
        # and 03:00 UTC on the 27th is still the 26th in New York
        (XMAS, "2030-12-27T03:00:00+00:00", "America/New_York", "2030-12-27T05:00:00+00:00"),
        (XMAS, "2030-12-24T03:00:00+00:00", "America/New_York", None),
        # ranges that overlap or touch are one stretch; a day between two is not excluded
        (
            [(date(2030, 1, 1), date(2030, 1, 2)), (date(2030, 1, 3), date(2030, 1, 3))],
            "2030-01-01T10:00:00+00:00",
            "UTC",
            "2030-01-04T00:00:00+00:00",
        ),
        (
            [(date(2030, 1, 5), date(2030, 1, 9)), (date(2030, 1, 1), date(2030, 1, 6))],
            "2030-01-02T10:00:00+00:00",
            "UTC",
            "2030-01-10T00:00:00+00:00",
        ),
        (
            [(date(2030, 1, 1), date(2030, 1, 1)), (date(2030, 1, 3), date(2030, 1, 3))],
            "2030-01-01T10:00:00+00:00",
            "UTC",
            "2030-01-02T00:00:00+00:00",
        ),
        ([(date(2030, 1, 1), date(2030, 1, 1))], "2030-01-02T10:00:00+00:00", "UTC", None),
        # DST in Berlin: the spring day has 23 hours, the autumn day 25
        (
            [(date(2030, 3, 31), date(2030, 3, 31))],
            "2030-03-31T01:30:00+01:00",
            "Europe/Berlin",
            "2030-03-31T22:00:00+00:00",
        ),
        (
            [(date(2030, 3, 31), date(2030, 3, 31))],
            "2030-03-30T23:00:00+00:00",  # the first instant of the day (midnight, +01:00)
            "Europe/Berlin",
            "2030-03-31T22:00:00+00:00",
        ),
        (
            [(date(2030, 10, 27), date(2030, 10, 27))],
            "2030-10-27T02:30:00+01:00",  # the second 02:30 of the autumn day
            "Europe/Berlin",
            "2030-10-27T23:00:00+00:00",
        ),
        (
            [(date(2030, 10, 27), date(2030, 10, 27))],
            "2030-10-27T23:00:00+00:00",  # midnight after the 25-hour day
            "Europe/Berlin",
            None,
        ),
        # Santiago: midnight does not exist on 2030-09-08; the day starts at 01:00 (-03:00)
        (
            [(date(2030, 9, 7), date(2030, 9, 7))],
            "2030-09-07T23:59:00-04:00",
            "America/Santiago",
            "2030-09-08T04:00:00+00:00",
        ),
        (
            [(date(2030, 9, 7), date(2030, 9, 7))],
            "2030-09-08T04:00:00+00:00",
            "America/Santiago",
            None,
        ),
    ],
)
def test_excluded_until(
    days: list[tuple[date, date]], fire: str, tz: str, until: str | None
) -> None:
    expected = None if until is None else utc(until)
    assert excluded_until(days, utc(fire), tz) == expected


def test_no_days_exclude_nothing() -> None:
    assert excluded_until([], T0, "UTC") is None


# -- what the planner writes ---------------------------------------------------------------

HOURLY = CronSchedule.parse("0 * * * *", "Europe/Berlin")


def hourly(next_start: datetime, **changes: object) -> TaskRow:
    row = replace(task(next_start), cron_expr="0 * * * *", tz="Europe/Berlin")
    return replace(row, **changes)  # type: ignore[arg-type]


def test_the_fires_of_an_excluded_day_are_one_skipped_row_and_the_cursor_jumps_past_it() -> None:
    # Berlin: 2030-12-24 starts at 23:00 UTC on the 23rd; the planner looks 2 h ahead from
    # 22:00 UTC, so it sees the day's first fire and records the whole day at once
    now = utc("2030-12-23T22:00:00+00:00")
    row = hourly(now, exclude_calendar="holidays")
    advance, more = plan_advance(row, HOURLY, now, now + 2 * timedelta(hours=1), excluded=XMAS)
    assert [f.status for f in advance.fires] == [RunStatus.PENDING, RunStatus.SKIPPED]
    skipped = advance.fires[1]
    assert skipped.fire_time == utc("2030-12-23T23:00:00+00:00")
    assert skipped.last_fire_time == utc("2030-12-26T22:00:00+00:00")
    assert skipped.missed_count == 72  # three days of hourly fires
    assert skipped.error_msg == (
        "skipped 72 fires from 2030-12-23T23:00:00Z to 2030-12-26T22:00:00Z: excluded by "
        "calendar 'holidays' (Europe/Berlin)"
    )
    assert advance.next_start_time == utc("2030-12-26T23:00:00+00:00")
    assert more is False


def test_an_excluded_stretch_within_the_planned_fires_ends_there() -> None:
    days = [(date(2030, 1, 2), date(2030, 1, 2))]
    schedule = CronSchedule.parse("0 0 * * *")  # daily at midnight UTC
    start = utc("2030-01-01T00:00:00+00:00")
    row = replace(task(start), cron_expr="0 0 * * *", exclude_calendar="c")
    advance, _ = plan_advance(row, schedule, start, start + timedelta(days=3), excluded=days)
    assert [(f.status, f.fire_time.day, f.missed_count) for f in advance.fires] == [
        (RunStatus.PENDING, 1, None),
        (RunStatus.SKIPPED, 2, 1),
        (RunStatus.PENDING, 3, None),
        (RunStatus.PENDING, 4, None),
    ]
    assert advance.fires[1].error_msg is not None
    assert "skipped 1 fire at 2030-01-02T00:00:00Z" in advance.fires[1].error_msg
    assert advance.next_start_time == utc("2030-01-05T00:00:00+00:00")


def test_a_long_excluded_stretch_is_one_row_not_counted_past_the_cap() -> None:
    every_second = CronSchedule.parse("* * * * * *")
    start = utc("2030-01-01T00:00:00+00:00")
    row = replace(task(start), exclude_calendar="c")
    days = [(date(2030, 1, 1), date(2030, 1, 1))]
    advance, _ = plan_advance(row, every_second, start, start + S, excluded=days, cap=100)
    (skipped,) = advance.fires
    assert skipped.status == RunStatus.SKIPPED and skipped.missed_count is None
    assert skipped.last_fire_time == utc("2030-01-01T23:59:59+00:00")
    assert advance.next_start_time == utc("2030-01-02T00:00:00+00:00")


def test_the_planner_writes_each_fire_due_at_its_jitter() -> None:
    every_second = CronSchedule.parse("* * * * * *")
    row = replace(task(T0), jitter_ms=700)
    advance, _ = plan_advance(row, every_second, T0, T0 + 5 * S)
    assert [f.due_time - f.fire_time for f in advance.fires] == [
        jitter_of(7, f.fire_time, 700) for f in advance.fires
    ]
    assert {f.due_time > f.fire_time for f in advance.fires} == {True}  # no zero draw here
    plain, _ = plan_advance(task(T0), every_second, T0, T0 + 5 * S)
    assert {f.jitter for f in plain.fires} == {None}  # no jitter, not a jitter of 0


def test_a_late_skip_task_is_judged_by_the_due_time_of_its_fire() -> None:
    # the planner fell behind: the fire at T0 is 7 s old (past a 5 s grace from its fire
    # time) but its jitter puts its due time within the grace: it is written to run
    every_minute = CronSchedule.parse("* * * * *")
    row = replace(task(T0, Misfire.SKIP), cron_expr="* * * * *", jitter_ms=50_000)
    jitter = jitter_of(7, T0, 50_000)
    assert jitter > 3 * S
    now = T0 + jitter + 3 * S
    advance, _ = plan_advance(row, every_minute, now, now + S)
    assert [f.status for f in advance.fires] == [RunStatus.PENDING]
    assert advance.fires[0].due_time == T0 + jitter
    later = T0 + jitter + 6 * S  # now past the grace from its due time: missed
    advance, _ = plan_advance(row, every_minute, later, later + S)
    assert [f.status for f in advance.fires] == [RunStatus.MISSED]


# -- declarations and days as typed ----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"jitter": timedelta(seconds=-1)}, "jitter must be seconds >= 0"),
        ({"jitter": timedelta(microseconds=1500)}, "whole number of milliseconds"),
        ({"cron": None, "parent": "p", "jitter": S}, "jitter needs a cron or an interval"),
        ({"cron": None, "exclude": "h"}, "exclude needs a cron or an interval"),
        ({"cron": None, "every": timedelta(seconds=10), "jitter": 10 * S}, "shorter than"),
        ({"exclude": ""}, "invalid calendar name ''"),
        ({"exclude": " h"}, "invalid calendar name ' h'"),
    ],
)
def test_bad_jitter_or_calendar_is_refused_at_declaration(
    changes: dict[str, object], message: str
) -> None:
    values: dict[str, object] = {"name": "t", "func": "m:f", "cron": "* * * * *", **changes}
    with pytest.raises(TaskDefinitionError, match=message):
        TaskSpec(**values)  # type: ignore[arg-type]


def test_jitter_and_calendar_are_stored_columns() -> None:
    spec = TaskSpec("t", "m:f", cron="* * * * *", jitter=timedelta(seconds=30), exclude="h")
    assert (spec.columns()["jitter_ms"], spec.columns()["exclude_calendar"]) == (30_000, "h")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-12-24", (date(2030, 12, 24), date(2030, 12, 24))),
        ("2030-12-24..2030-12-26", (date(2030, 12, 24), date(2030, 12, 26))),
        (" 2030-12-24 .. 2030-12-24 ", (date(2030, 12, 24), date(2030, 12, 24))),
    ],
)
def test_days_as_typed(text: str, expected: tuple[date, date]) -> None:
    assert parse_days(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2030-13-01", "invalid day '2030-13-01' in '2030-13-01'"),
        ("24.12.2030", "invalid day '24.12.2030'"),
        ("2030-12-24..", "invalid day '' in '2030-12-24..'"),
        ("2030-12-26..2030-12-24", "ends \\(2030-12-24\\) before it starts \\(2030-12-26\\)"),
    ],
)
def test_bad_days_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_days(text)


D = date(2030, 1, 10)


@pytest.mark.parametrize(
    ("taken", "left"),
    [
        (
            (D, D),
            [
                (D - 5 * timedelta(days=1), D - timedelta(days=1)),
                (D + timedelta(1), D + timedelta(5)),
            ],
        ),
        ((D - timedelta(9), D + timedelta(9)), []),
        ((D - timedelta(5), D), [(D + timedelta(1), D + timedelta(5))]),
        ((D + timedelta(5), D + timedelta(8)), [(D - timedelta(5), D + timedelta(4))]),
        ((D + timedelta(6), D + timedelta(8)), [(D - timedelta(5), D + timedelta(5))]),
    ],
)
def test_taking_days_out_of_a_range(
    taken: tuple[date, date], left: list[tuple[date, date]]
) -> None:
    assert without((D - timedelta(5), D + timedelta(5)), taken) == left


@pytest.mark.parametrize("name", ["", " x", "x ", "x" * 256, 3, None])
def test_bad_calendar_names(name: object) -> None:
    with pytest.raises(ValueError, match="invalid calendar name"):
        check_calendar_name(name)


def _job() -> None:
    pass


def test_the_decorator_takes_jitter_in_seconds_and_a_calendar_name() -> None:
    from easyjob import scheduled
    from easyjob.registry import Registry

    registry = Registry()
    scheduled("0 9 * * *", name="spread", jitter=2.5, exclude="holidays", registry=registry)(_job)
    (spec,) = registry.resolved()
    assert (spec.jitter, spec.exclude) == (timedelta(seconds=2.5), "holidays")
    with pytest.raises(
        TaskDefinitionError, match="jitter must be seconds or a timedelta, got '5s'"
    ):
        scheduled("0 9 * * *", name="bad", jitter="5s", registry=Registry())(_job)  # type: ignore[arg-type]
    with pytest.raises(
        TaskDefinitionError, match=r"@scheduled on .*_job: .*jitter 10s must be shorter"
    ):
        scheduled(every=10, name="bad", jitter=10, registry=Registry())(_job)


def test_a_planner_that_is_behind_skips_an_excluded_day_and_jitters_what_it_writes() -> None:
    """:func:`plan_behind` (a planner whose cluster is behind) asks the same rules: its one
    fire to run, on an excluded day, is SKIPPED with its whole stretch; on another day it
    is due its jitter after its fire time."""
    now = utc("2030-12-24T10:30:00+00:00")  # Christmas Eve in Berlin, 11:30
    row = hourly(now - timedelta(minutes=30), exclude_calendar="holidays")
    advance, _ = plan_behind(row, HOURLY, now, timedelta(seconds=1), excluded=XMAS)
    assert RunStatus.PENDING not in [f.status for f in advance.fires]
    skipped = advance.fires[-1]
    assert skipped.status == RunStatus.SKIPPED and "calendar 'holidays'" in (
        skipped.error_msg or ""
    )
    assert advance.next_start_time == utc("2030-12-26T23:00:00+00:00")
    after = utc("2030-12-27T10:00:00+00:00")
    jittered = hourly(after, jitter_ms=30_000)
    advance, _ = plan_behind(jittered, HOURLY, after, timedelta(seconds=1), excluded=XMAS)
    (fire,) = advance.fires
    assert fire.status == RunStatus.PENDING and fire.fire_time == after
    assert fire.jitter == jitter_of(jittered.id, after, 30_000) > timedelta(0)
