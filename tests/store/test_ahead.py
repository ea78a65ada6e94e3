"""Fires written ahead (plan_ahead) on each real database: one advance writes many fires
with one write of the task row, and every change that decides a task's fires forgets those
not yet due, by deleting them, so that the fires planned again run.

The tasks here start an hour after the database's now (``start``), so every fire is ahead
of now for the whole test, however long a statement takes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.planner import plan_advance
from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t

FUNC = "tests.jobs:noop"
M = timedelta(minutes=1)
WINDOW = timedelta(minutes=10)


@pytest.fixture
def start(store: Store) -> datetime:
    """A time about an hour ahead of the database's now, on a multiple of 6 minutes: the
    first fire of both ``*/2`` and ``*/3``."""
    later = store.now() + timedelta(hours=1)
    return later.replace(minute=later.minute - later.minute % 6, second=0, microsecond=0)


def spec(start: datetime, cron: str = "*/2 * * * *", **options: Any) -> TaskSpec:
    return TaskSpec(name="job", func=FUNC, cron=cron, start=start, **options)


def plan(store: Store, name: str = "job", ahead: int = 10) -> Advance:
    """One advance of task *name* as the planner makes it when its next fire enters the
    look-ahead (now: that fire less a second; look-ahead 2 s; window 10 minutes)."""
    task = store.tasks.get(name)
    assert task.next_start_time is not None and task.schedule is not None
    now = task.next_start_time - timedelta(seconds=1)
    horizon = now + timedelta(seconds=2)
    advance, more = plan_advance(task, task.schedule, now, horizon, ahead=ahead, until=now + WINDOW)
    assert not more
    assert store.tasks.advance("planner", [advance]) == [task.id]
    return advance


def runs(store: Store, name: str = "job") -> list[tuple[datetime, str]]:
    query = (
        sa.select(d.c.fire_time, d.c.status)
        .join_from(d, t, t.c.id == d.c.task_id)
        .where(t.c.name == name)
        .order_by(d.c.fire_time, d.c.shard)
    )
    return [(row.fire_time, row.status) for row in store.db.read("t", lambda c: c.execute(query))]


def pending(store: Store, name: str = "job") -> list[datetime]:
    return [when for when, status in runs(store, name) if status == RunStatus.PENDING]


@pytest.fixture
def task_writes(store: Store) -> Iterator[list[str]]:
    """The statements that write ``easy_job_task`` rows, as sent."""
    seen: list[str] = []

    def watch(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if re.search(r"\bUPDATE easy_job_task\b", statement):  # maybe after a WITH (PostgreSQL)
            seen.append(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", watch)
    yield seen
    sa.event.remove(store.db.engine, "before_cursor_execute", watch)


def test_one_advance_writes_the_fires_ahead_with_one_task_row_write(
    store: Store, start: datetime, task_writes: list[str]
) -> None:
    (row,) = store.tasks.upsert([spec(start, "* * * * *")])
    first = row.next_start_time
    assert first is not None
    task_writes.clear()
    advance = plan(store)
    assert len(task_writes) == 1  # one UPDATE of one task row for ten fires
    assert pending(store) == [first + i * M for i in range(10)]
    after = store.tasks.get("job")
    assert (after.version, after.fire_count) == (row.version + 1, 10)
    assert after.next_start_time == advance.next_start_time == first + 10 * M  # the cursor


def test_a_cron_changed_at_registration_forgets_the_fires_written_ahead(
    store: Store, start: datetime
) -> None:
    (row,) = store.tasks.upsert([spec(start)])  # every 2 minutes
    first = row.next_start_time
    assert first is not None
    plan(store)
    assert pending(store) == [first + 2 * i * M for i in range(5)]  # within 10 minutes
    (changed,) = store.tasks.upsert([spec(start, "*/3 * * * *")])
    # deleted, not SKIPPED: no row of the old schedule is left to hold a fire time
    assert runs(store) == []
    assert (changed.fire_count, changed.next_start_time) == (0, first)
    plan(store)
    # the new schedule's fires, among them `first` and first + 6 minutes that both share
    assert pending(store) == [first + 3 * i * M for i in range(4)]
    assert store.tasks.get("job").fire_count == 4


def test_a_schedule_set_at_run_time_forgets_the_fires_written_ahead(
    store: Store, start: datetime
) -> None:
    (row,) = store.tasks.upsert([spec(start)])
    first = row.next_start_time
    assert first is not None
    plan(store)
    changed = store.schedules.set("job", cron="*/3 * * * *")
    assert runs(store) == []
    assert (changed.fire_count, changed.next_start_time) == (0, first)
    plan(store)
    assert pending(store) == [first + 3 * i * M for i in range(4)]


def test_shards_changed_at_registration_plan_the_same_fires_again(
    store: Store, start: datetime
) -> None:
    (row,) = store.tasks.upsert([spec(start)])
    first = row.next_start_time
    assert first is not None
    plan(store)
    (changed,) = store.tasks.upsert([spec(start, shards=2)])
    assert runs(store) == []
    assert (changed.fire_count, changed.next_start_time) == (0, first)  # rewound
    plan(store)
    assert pending(store) == [first + 2 * i * M for i in range(5) for _ in range(2)]


def test_pause_then_resume_within_the_window_plans_the_same_fires_again(
    store: Store, start: datetime
) -> None:
    (row,) = store.tasks.upsert([spec(start, max_runs=12)])
    first = row.next_start_time
    assert first is not None
    plan(store)
    assert len(pending(store)) == 5
    paused = store.tasks.set_status("job", TaskStatus.PAUSED)
    assert runs(store) == []  # not yet due: deleted, so none is left SKIPPED
    assert paused.fire_count == 0  # given back: a max_runs task loses no run to a pause
    resumed = store.tasks.set_status("job", TaskStatus.ACTIVE)
    assert resumed.next_start_time == first
    plan(store)
    assert pending(store) == [first + 2 * i * M for i in range(5)]  # none silently dropped
    assert store.tasks.get("job").fire_count == 5


def test_a_removed_schedule_added_again_fires_at_the_same_times(
    store: Store, start: datetime
) -> None:
    store.schedules.add("rt", "jobs:report", cron="*/2 * * * *", start=start)
    plan(store, "rt")
    assert len(pending(store, "rt")) == 5
    store.schedules.remove("rt")
    assert runs(store, "rt") == []
    store.schedules.add("rt", "jobs:report", cron="*/2 * * * *", start=start)
    plan(store, "rt")
    assert pending(store, "rt") == [start + 2 * i * M for i in range(5)]


def test_fires_due_or_claimed_keep_their_treatment(store: Store, start: datetime) -> None:
    store.tasks.upsert([spec(start)])
    plan(store)
    horizon = store.now() + timedelta(days=1)
    (claimed,) = store.runs.claim("n1", store.runs.pending(horizon, 1))  # the first fire
    paused = store.tasks.set_status("job", TaskStatus.PAUSED)
    # the claimed fire is SKIPPED as before (its node's start is fenced); the rest deleted
    assert runs(store) == [(claimed.fire_time, RunStatus.SKIPPED)]
    assert paused.fire_count == 1


def test_a_fire_carrying_a_gap_is_not_forgotten_with_the_fires_ahead(
    store: Store, start: datetime
) -> None:
    """A planner that is behind may write the fire due within half a poll, carrying the gap
    before it: a pause closes it like a due fire, and the gap stays recorded."""
    (task,) = store.tasks.upsert([spec(start)])
    assert task.next_start_time is not None
    first = task.next_start_time
    fire = PlannedFire(first + 2 * M, missed_count=1, missed_from=first)
    advance = Advance(task.id, task.version, first + 4 * M, (fire,))
    assert store.tasks.advance("planner", [advance]) == [task.id]
    store.tasks.set_status("job", TaskStatus.PAUSED)
    (row,) = store.history.runs(task="job")
    assert (row.fire_time, row.status) == (first + 2 * M, RunStatus.SKIPPED)
    assert (row.missed_from, row.missed_count) == (first, 1)


def test_a_broadcast_task_plans_only_to_the_lookahead(store: Store, start: datetime) -> None:
    store.tasks.upsert([spec(start, "* * * * *", broadcast=True)])
    advance = plan(store)
    assert len(advance.fires) == 1
    first = advance.fires[0].fire_time
    assert store.tasks.get("job").next_start_time == first + M


def test_a_fire_claimed_while_it_is_forgotten_stays_and_is_not_given_back(
    store: Store, start: datetime, db_backend: str
) -> None:
    if db_backend == "sqlite":
        pytest.skip("SQLite: the pause holds the write lock from its first write, no claim lands")
    store.tasks.upsert([spec(start)])
    plan(store)
    horizon = store.now() + timedelta(days=1)
    first = store.runs.pending(horizon, 1)
    claims: list[int] = []

    def claim_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # another node claims the first fire after the pause read it, before it deletes
        if statement.lstrip().upper().startswith("DELETE FROM EASY_JOB_TASK_DETAIL") and not claims:
            claims.extend(run.id for run in store.runs.claim("n1", first))

    sa.event.listen(store.db.engine, "before_cursor_execute", claim_first)
    try:
        paused = store.tasks.set_status("job", TaskStatus.PAUSED)
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", claim_first)
    assert claims == [first[0].id]
    # the claimed fire was not deleted (it is SKIPPED by the pause, its node fenced), and
    # stays counted in fire_count; the four others were deleted and given back
    assert runs(store) == [(first[0].fire_time, RunStatus.SKIPPED)]
    assert paused.fire_count == 1
