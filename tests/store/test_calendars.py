"""Calendars and jitter in the database, on each real database: the calendar rows and their
version, a task's jitter and calendar columns, and the fires the planner writes for them."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from easyjob.core.admission import jitter_of
from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.core.states import RunStatus
from easyjob.errors import CalendarNotFoundError, ConfigError
from easyjob.store import Store
from easyjob.store.schema import calendar_table

FUNC = "tests.jobs:noop"
D = date(2030, 12, 24)
ONE = timedelta(days=1)


def ranges(store: Store, name: str) -> list[tuple[date, date, str | None]]:
    return [(r.first_day, r.last_day, r.note) for r in store.calendars.list(name)]


def test_days_are_added_listed_and_read_back_as_dates(store: Store) -> None:
    before = store.calendars.version()
    row = store.calendars.add("holidays", D, D + 2 * ONE, "xmas")
    assert (row.name, row.first_day, row.last_day, row.note, row.days) == (
        "holidays",
        D,
        D + 2 * ONE,
        "xmas",
        3,
    )
    store.calendars.add("holidays", D + 7 * ONE, D + 7 * ONE)
    store.calendars.add("other", D, D)
    assert ranges(store, "holidays") == [(D, D + 2 * ONE, "xmas"), (D + 7 * ONE, D + 7 * ONE, None)]
    assert [r.name for r in store.calendars.list()] == ["holidays", "holidays", "other"]
    assert store.calendars.days({"holidays", "missing"}) == {
        "holidays": ((D, D + 2 * ONE), (D + 7 * ONE, D + 7 * ONE))
    }
    assert store.calendars.version() != before


def test_removing_days_cuts_ranges_and_keeps_their_note(store: Store) -> None:
    store.calendars.add("h", D, D + 4 * ONE, "week")
    version = store.calendars.version()
    assert store.calendars.remove("h", (D + ONE, D + ONE)) == 1
    assert ranges(store, "h") == [(D, D, "week"), (D + 2 * ONE, D + 4 * ONE, "week")]
    assert store.calendars.version() != version
    version = store.calendars.version()
    assert store.calendars.remove("h", (D - 9 * ONE, D + 2 * ONE)) == 2  # D and D+2
    assert ranges(store, "h") == [(D + 3 * ONE, D + 4 * ONE, "week")]
    assert store.calendars.version() != version
    assert store.calendars.remove("h") == 2
    with pytest.raises(CalendarNotFoundError, match="no calendar named 'h'"):
        store.calendars.list("h")


def test_bad_input_names_what_is_wrong_and_changes_nothing(store: Store) -> None:
    store.calendars.add("h", D, D)
    version = store.calendars.version()
    with pytest.raises(ConfigError, match=r"the range 2030-12-24..2030-12-23 ends before"):
        store.calendars.add("h", D, D - ONE)
    with pytest.raises(ConfigError, match="invalid calendar name ''"):
        store.calendars.add("", D, D)
    with pytest.raises(CalendarNotFoundError, match="no calendar named 'nope'"):
        store.calendars.remove("nope")
    with pytest.raises(CalendarNotFoundError, match="excludes none of the days 2031-01-01"):
        store.calendars.remove("h", (date(2031, 1, 1), date(2031, 1, 1)))
    assert store.calendars.version() == version
    assert ranges(store, "h") == [(D, D, None)]


def test_a_task_stores_its_jitter_and_calendar(store: Store) -> None:
    spec = TaskSpec("j", FUNC, cron="* * * * * *", jitter=timedelta(seconds=2), exclude="h")
    (row,) = store.tasks.upsert([spec])
    assert (row.jitter_ms, row.exclude_calendar) == (2000, "h")
    (row,) = store.tasks.upsert([TaskSpec("j", FUNC, cron="* * * * * *")])
    assert (row.jitter_ms, row.exclude_calendar) == (0, None)


def test_a_jittered_fire_is_written_due_at_its_jitter_and_read_back_with_it(store: Store) -> None:
    spec = TaskSpec("j", FUNC, cron="* * * * * *", jitter=timedelta(seconds=30))
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    fire = task.next_start_time
    jitter = jitter_of(task.id, fire, 30_000)
    planned = PlannedFire(fire, jitter=jitter)
    advance = Advance(task.id, task.version, fire + timedelta(seconds=1), (planned,))
    assert store.tasks.advance("planner", [advance]) == [task.id]
    (candidate,) = [
        c for c in store.runs.pending(fire + timedelta(minutes=1), 10) if c.task_id == task.id
    ]
    assert (candidate.fire_time, candidate.due_time) == (fire, fire + jitter)
    assert candidate.jitter_ms == 30_000  # the task's, for the successor's due time
    assert store.runs.pending(fire + jitter - timedelta(milliseconds=1), 10) == []
    (row,) = store.history.runs(task="j")
    assert (row.due_time - row.fire_time, row.jitter_ms) == (jitter, jitter // (ONE / 86_400_000))


def test_an_excluded_stretch_is_one_skipped_row(store: Store) -> None:
    (task,) = store.tasks.upsert([TaskSpec("x", FUNC, cron="* * * * * *", exclude="h")])
    assert task.next_start_time is not None
    first = task.next_start_time
    last = first + timedelta(seconds=99)
    skipped = PlannedFire(first, RunStatus.SKIPPED, "skipped 100 fires", 100, last)
    advance = Advance(task.id, task.version, last + timedelta(seconds=1), (skipped,))
    assert store.tasks.advance("planner", [advance]) == [task.id]
    (row,) = store.history.runs(task="x")
    assert (row.status, row.missed_count, row.fire_time, row.last_fire_time) == (
        RunStatus.SKIPPED,
        100,
        first,
        last,
    )
    assert row.jitter_ms is None and row.end_time is not None


def test_a_calendars_days_are_read_through_its_index(store: Store) -> None:
    """The read of changed calendars (planners, once per change) goes by the name index;
    the change marker (every planning poll with a calendar task) reads no row but the
    index or the small table itself: 1-7 ms with 10,000 ranges, a few hundred times more
    than any calendar holds (docs/schema.md, easy_job_calendar)."""
    from tests.store.test_plans import _plan, _statements

    now = store.now()
    rows = [
        {
            "name": f"cal{i % 50}",
            "first_day": D + timedelta(days=i),
            "last_day": D + timedelta(days=i),
            "note": None,
            "create_time": now,
        }
        for i in range(2000)
    ]
    store.db.write("fill", lambda conn: conn.execute(calendar_table.insert(), rows))
    ((statement, params),) = _statements(store, lambda: store.calendars.days({"cal1", "cal2"}))
    plan = _plan(store, statement, params)
    assert "ix_easy_job_calendar_name" in plan, plan
    assert len(store.calendars.days({"cal1", "cal2"})["cal1"]) == 40


def test_a_time_is_not_a_day(store: Store) -> None:
    from datetime import datetime

    with pytest.raises(ConfigError, match="days must be dates, got datetime"):
        store.calendars.add("h", datetime(2030, 1, 1), date(2030, 1, 1))
    assert store.calendars.version() == (0, 0)
