"""Interval and bounded schedules, and max_runs in the planner (pure)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from easyjob.core.cron import CronSchedule
from easyjob.core.planner import plan_advance
from easyjob.core.records import TaskRow
from easyjob.core.schedule import (
    Bounded,
    IntervalSchedule,
    build_schedule,
    every_text,
    parse_every,
)
from easyjob.core.states import Misfire, Overlap, RunStatus, TaskStatus
from easyjob.errors import TaskDefinitionError

T0 = datetime(2030, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("90m", 5400), ("1h30m", 5400), ("2d", 172_800), ("250ms", 0.25), (" 1H ", 3600)],
)
def test_intervals_parse_from_text(text: str, seconds: float) -> None:
    assert parse_every(text) == timedelta(seconds=seconds)
    assert parse_every(every_text(parse_every(text))) == parse_every(text)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("45", "invalid interval '45': expected a number and unit"),
        ("45x", "invalid interval '45x'"),
        ("", "invalid interval ''"),
        ("1h-5m", "invalid interval '1h-5m'"),
        ("0s", "invalid interval '0s': must be a positive"),
        (timedelta(microseconds=10), "must be a positive whole number of milliseconds"),
        (-5, "invalid interval -5"),
        ([45], "invalid interval [45]"),
    ],
)
def test_bad_intervals_are_refused_naming_the_value(value: object, message: str) -> None:
    with pytest.raises(TaskDefinitionError, match=re.escape(message)):
        parse_every(value)  # type: ignore[arg-type]


def test_interval_fires_one_interval_after_the_anchor_and_every_interval_after() -> None:
    every = IntervalSchedule(timedelta(seconds=45), T0)
    assert every.next_after(T0 - timedelta(days=1)) == T0 + 45 * S  # never at the anchor
    assert every.next_after(T0) == T0 + 45 * S
    assert every.next_after(T0 + 45 * S) == T0 + 90 * S
    assert every.next_after(T0 + 46 * S) == T0 + 90 * S
    fires = every.fires_between(T0 + 45 * S, T0 + 180 * S)
    assert fires == [T0 + k * 45 * S for k in (1, 2, 3, 4)]  # both bounds inclusive
    assert every.fires_between(T0, T0 + 10 * 3600 * S, limit=3) == fires[:3]
    assert every.fires_between(T0 + 50 * S, T0 + 60 * S) == []


def test_bounds_clip_fires_and_end_the_schedule() -> None:
    cron = CronSchedule.parse("*/10 * * * * *")
    bounded = Bounded(cron, start=T0 + 25 * S, end=T0 + 50 * S)
    assert bounded.next_after(T0) == T0 + 30 * S
    assert bounded.fires_between(T0, T0 + 100 * S) == [T0 + s * S for s in (30, 40, 50)]
    assert bounded.next_after(T0 + 50 * S) is None  # past its end: never again


def test_an_interval_with_a_start_fires_first_at_the_start() -> None:
    schedule = build_schedule(None, "UTC", 90_000, T0, T0 + 600 * S, None)
    assert schedule is not None
    assert schedule.next_after(T0) == T0 + 600 * S
    assert schedule.next_after(T0 + 600 * S) == T0 + 690 * S
    assert build_schedule(None, "UTC") is None  # manual-only or child


def _task(**values: object) -> TaskRow:
    row = TaskRow(
        id=1,
        name="t",
        func="m:f",
        cron_expr=None,
        tz="UTC",
        pid=None,
        status=TaskStatus.ACTIVE,
        next_start_time=T0 + 45 * S,
        version=0,
        node_id=None,
        misfire=Misfire.FIRE_ONCE,
        misfire_grace_ms=60_000,
        overlap=Overlap.SERIAL,
        retries=0,
        retry_delay_ms=1000,
        timeout_ms=None,
        kwargs={},
        pruned_success_count=0,
        fail_count=0,
        create_time=T0,
        update_time=T0,
        seen_time=T0,
        every_ms=45_000,
        anchor_time=T0,
    )
    return replace(row, **values)  # type: ignore[arg-type]


def test_max_runs_finishes_the_task_with_its_last_fire() -> None:
    task = _task(max_runs=3, fire_count=1)
    assert task.schedule is not None
    advance, _ = plan_advance(task, task.schedule, T0, T0 + 1000 * S)
    assert [f.fire_time for f in advance.fires] == [T0 + 45 * S, T0 + 90 * S]
    assert advance.next_start_time is None  # the store marks it FINISHED
    done = _task(max_runs=3, fire_count=3)
    assert done.schedule is not None
    advance, _ = plan_advance(done, done.schedule, T0, T0 + 1000 * S)
    assert (advance.fires, advance.next_start_time) == ((), None)


def test_late_interval_fires_follow_the_misfire_policy() -> None:
    task = _task()  # next fire T0+45s, but now is an hour later: fires 1-80 are due
    assert task.schedule is not None
    now = T0 + 3600 * S
    advance, _ = plan_advance(task, task.schedule, now, now + 2 * S)
    (once,) = advance.fires  # fire 81 is beyond the horizon
    # each fire but the latest was superseded by its successor; fire 80 (due now) runs once,
    # its row carrying the gap of fires 1 to 79
    assert (once.status, once.fire_time) == (RunStatus.PENDING, T0 + 80 * 45 * S)
    assert (once.missed_from, once.missed_count) == (T0 + 45 * S, 79)
    assert advance.next_start_time == T0 + 81 * 45 * S
    # max_runs counts the fires that run, not the missed ones
    bounded = _task(max_runs=1)
    assert bounded.schedule is not None
    advance, _ = plan_advance(bounded, bounded.schedule, now, now + 2 * S)
    assert [f.status for f in advance.fires] == [RunStatus.PENDING]
    assert advance.fires[0].fire_time == T0 + 80 * 45 * S
    assert advance.fires[0].gap == (T0 + 45 * S, 79)
    assert advance.next_start_time is None
