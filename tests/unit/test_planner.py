"""Misfire policies when a due task is advanced (pure: times are arguments)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from easyjob.core.cron import CronSchedule
from easyjob.core.planner import plan_advance
from easyjob.core.records import Advance, TaskRow
from easyjob.core.schedule import Bounded, IntervalSchedule, Schedule
from easyjob.core.states import Misfire, Overlap, TaskStatus

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
EVERY_SECOND = CronSchedule.parse("* * * * * *")


def task(
    next_start: datetime, misfire: Misfire = Misfire.FIRE_ONCE, grace_ms: int = 5000
) -> TaskRow:
    return TaskRow(
        id=7,
        name="t",
        func="m:f",
        cron_expr="* * * * * *",
        tz="UTC",
        pid=None,
        status=TaskStatus.ACTIVE,
        next_start_time=next_start,
        version=3,
        node_id=None,
        misfire=misfire,
        misfire_grace_ms=grace_ms,
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
    )


def statuses(fires: tuple[object, ...]) -> list[str]:
    return [f.status.value[0] for f in fires]  # type: ignore[attr-defined]


def test_on_time_fires_in_the_window_are_all_pending() -> None:
    advance, more = plan_advance(task(T0), EVERY_SECOND, T0, T0 + timedelta(seconds=2))
    assert [f.fire_time for f in advance.fires] == [T0 + timedelta(seconds=i) for i in range(3)]
    assert statuses(advance.fires) == ["P", "P", "P"]
    assert (advance.task_id, advance.version, more) == (7, 3, False)
    assert advance.next_start_time == T0 + timedelta(seconds=3)


def test_fire_once_runs_the_latest_due_fire_and_records_the_rest_on_its_row() -> None:
    now = T0 + timedelta(seconds=10)
    advance, _ = plan_advance(task(T0), EVERY_SECOND, now, now + timedelta(seconds=1))
    # due: T0 .. T0+10; each but the latest was superseded by its successor, so T0+10 runs
    # once (though T0+5 .. T0+9 are within the 5 s grace); T0+11 is planned once it started
    assert statuses(advance.fires) == ["P"]
    assert advance.next_start_time == now + timedelta(seconds=1)
    (fire,) = advance.fires
    # the gap is carried by the fire's own row: no summary row of its own
    assert (fire.fire_time, fire.missed_from, fire.missed_count) == (now, T0, 10)
    assert fire.last_fire_time is None and fire.gap == (T0, 10)
    assert fire.error_msg == (  # told by the missed event, not stored with the run
        "missed 10 fires from 2030-01-01T12:00:00Z to 2030-01-01T12:00:09Z: not started "
        "before a later fire of the task was due (policy fire_once)"
    )


def test_a_sharded_or_broadcast_task_keeps_its_gap_on_a_summary_row() -> None:
    """Their fire is several rows: the gap stays one row of its own."""
    now = T0 + timedelta(seconds=10)
    for variant in (replace(task(T0), shards=2), replace(task(T0), broadcast=True)):
        advance, _ = plan_advance(variant, EVERY_SECOND, now, now)
        assert statuses(advance.fires) == ["M", "P"]
        missed, fire = advance.fires
        assert (missed.fire_time, missed.last_fire_time, missed.missed_count) == (
            T0,
            T0 + timedelta(seconds=9),
            10,
        )
        assert fire.missed_from is None


def test_a_planner_one_fire_behind_writes_it_as_it_is() -> None:
    now = T0 + timedelta(milliseconds=400)  # T0 is due, its successor is not: not late
    advance, _ = plan_advance(task(T0), EVERY_SECOND, now, now + timedelta(seconds=1))
    assert statuses(advance.fires) == ["P", "P"]


def test_skip_runs_the_latest_due_fire_only_within_the_grace() -> None:
    now = T0 + timedelta(seconds=10)
    advance, _ = plan_advance(task(T0, Misfire.SKIP), EVERY_SECOND, now, now)
    assert statuses(advance.fires) == ["P"]  # T0 .. T0+9 superseded; T0+10 on time
    assert advance.fires[0].gap == (T0, 10)
    daily = CronSchedule.parse("0 0 12 * * *")  # a period longer than the grace
    now = T0 + timedelta(seconds=30)  # T0's fire is 30 s late, past the 5 s grace
    skipped, _ = plan_advance(task(T0, Misfire.SKIP), daily, now, now)
    assert statuses(skipped.fires) == ["M"]
    assert skipped.fires[0].error_msg == (
        "missed 1 fire at 2030-01-01T12:00:00Z: not started within its misfire grace of 5s "
        "(policy skip)"
    )
    once, _ = plan_advance(task(T0), daily, now, now)
    assert statuses(once.fires) == ["P"]  # fire_once: the late fire runs once, now


def test_catch_up_runs_every_late_fire() -> None:
    now = T0 + timedelta(seconds=10)
    advance, _ = plan_advance(task(T0, Misfire.CATCH_UP), EVERY_SECOND, now, now)
    assert statuses(advance.fires) == ["P"] * 11


def test_a_day_long_gap_is_one_row_planned_at_once() -> None:
    now = T0 + timedelta(days=1)
    advance, more = plan_advance(task(T0), EVERY_SECOND, now, now, cap=1000)
    assert not more
    assert statuses(advance.fires) == ["P"]  # the fire due now, once, carrying the gap
    (once,) = advance.fires
    # too many to count in one walk: the row names the gap and leaves the count NULL
    assert (once.fire_time, once.missed_from, once.missed_count) == (now, T0, None)
    assert "too many to count" in (once.error_msg or "")
    assert advance.next_start_time == now + timedelta(seconds=1)


def test_a_gap_a_little_shorter_than_the_cap_is_counted() -> None:
    now = T0 + timedelta(seconds=998)
    advance, more = plan_advance(task(T0, Misfire.SKIP), EVERY_SECOND, now, now, cap=1000)
    assert not more and advance.fires[0].missed_count == 998 and advance.fires[0].missed_from


def test_catch_up_of_a_long_gap_is_written_in_chunks() -> None:
    now = T0 + timedelta(hours=1)
    first, more = plan_advance(task(T0, Misfire.CATCH_UP), EVERY_SECOND, now, now, cap=1000)
    assert more and len(first.fires) == 1000
    assert set(statuses(first.fires)) == {"P"}
    assert first.next_start_time == T0 + timedelta(seconds=1000)


def test_a_schedule_that_ends_finishes_the_task() -> None:
    once = CronSchedule.parse("0 0 1 1 *")  # yearly, first fire T0 + ... never within a day
    advance, more = plan_advance(task(T0), once, T0, T0 + timedelta(seconds=1))
    assert advance.fires == () and not more
    assert advance.next_start_time == datetime(2031, 1, 1, tzinfo=UTC)


# Planning ahead: one advance (one write of the task row) covers up to `ahead` fires.

MINUTELY = CronSchedule.parse("0 * * * * *")
TEN_MIN = timedelta(minutes=10)
LOOKAHEAD = timedelta(seconds=2)


def ahead_of(
    row: TaskRow, schedule: Schedule, now: datetime, *, ahead: int = 10
) -> tuple[Advance, bool]:
    return plan_advance(row, schedule, now, now + LOOKAHEAD, ahead=ahead, until=now + TEN_MIN)


def test_an_on_time_advance_writes_ahead_up_to_the_count() -> None:
    now = T0 - timedelta(seconds=1)  # the minutely fire at T0 entered the look-ahead
    advance, more = ahead_of(task(T0), MINUTELY, now)
    assert [f.fire_time for f in advance.fires] == [T0 + timedelta(minutes=i) for i in range(10)]
    assert statuses(advance.fires) == ["P"] * 10 and not more
    assert advance.next_start_time == T0 + timedelta(minutes=10)  # the planning cursor
    # and the next advance, once the cursor enters the look-ahead, goes on from there
    later = T0 + timedelta(minutes=10) - timedelta(seconds=1)
    again, _ = ahead_of(task(advance.next_start_time), MINUTELY, later)
    assert again.fires[0].fire_time == T0 + timedelta(minutes=10)


def test_the_window_bounds_how_far_ahead() -> None:
    every_5m = CronSchedule.parse("0 */5 * * * *")
    now = T0 - timedelta(seconds=1)
    advance, _ = ahead_of(task(T0), every_5m, now)
    # T0, +5m; +10m is past now + 10 min
    assert [f.fire_time for f in advance.fires] == [T0, T0 + timedelta(minutes=5)]
    assert advance.next_start_time == T0 + timedelta(minutes=10)


def test_every_fire_of_the_lookahead_is_written_whatever_the_count() -> None:
    fast = IntervalSchedule(timedelta(milliseconds=100), T0 - timedelta(seconds=1))
    advance, _ = ahead_of(task(T0), fast, T0, ahead=5)
    assert len(advance.fires) == 21  # T0 .. T0 + 2 s, every 100 ms
    assert advance.next_start_time == T0 + timedelta(milliseconds=2100)


def test_ahead_of_one_or_no_window_plans_to_the_lookahead_only() -> None:
    now = T0 - timedelta(seconds=1)
    for one in (
        plan_advance(task(T0), MINUTELY, now, now + LOOKAHEAD, ahead=1, until=now + TEN_MIN),
        plan_advance(task(T0), MINUTELY, now, now + LOOKAHEAD, ahead=10),
        plan_advance(task(T0), MINUTELY, now, now + LOOKAHEAD, ahead=10, until=now),
    ):
        advance, _ = one
        assert [f.fire_time for f in advance.fires] == [T0]
        assert advance.next_start_time == T0 + timedelta(minutes=1)


def test_a_broadcast_task_plans_only_to_the_lookahead() -> None:
    # its fires are one run per node running at plan time: a node that joins later would
    # miss every fire written before it did
    now = T0 - timedelta(seconds=1)
    advance, _ = ahead_of(replace(task(T0), broadcast=True), MINUTELY, now)
    assert [f.fire_time for f in advance.fires] == [T0]
    assert advance.next_start_time == T0 + timedelta(minutes=1)


def test_a_task_behind_writes_nothing_ahead() -> None:
    now = T0 + timedelta(minutes=3, seconds=1)  # T0 .. T0+3m due: the task fell behind
    advance, _ = ahead_of(task(T0), MINUTELY, now)
    assert statuses(advance.fires) == ["P"] and advance.fires[0].gap == (T0, 3)
    assert advance.next_start_time == T0 + timedelta(minutes=4)  # the next fire, as before
    caught, more = ahead_of(task(T0, Misfire.CATCH_UP), MINUTELY, now)
    assert [f.fire_time for f in caught.fires] == [T0 + timedelta(minutes=i) for i in range(4)]
    assert caught.next_start_time == T0 + timedelta(minutes=4) and not more


def test_a_task_one_fire_due_within_its_grace_is_on_time_and_plans_ahead() -> None:
    now = T0 + timedelta(seconds=1)  # T0 due for 1 s, within the 5 s grace
    for policy in Misfire:
        advance, _ = ahead_of(task(T0, policy), MINUTELY, now)
        assert len(advance.fires) == 10, policy
        assert advance.next_start_time == T0 + timedelta(minutes=10)


def test_planning_ahead_never_finishes_a_task() -> None:
    # FINISHED keeps meaning "the last fire is within the look-ahead": a max_runs task
    # whose last fires would be written ahead plans them one look-ahead at a time
    now = T0 - timedelta(seconds=1)
    bounded = replace(task(T0), max_runs=25, fire_count=10)
    advance, _ = ahead_of(bounded, MINUTELY, now)
    assert len(advance.fires) == 10 and advance.next_start_time is not None
    last = replace(bounded, fire_count=20)  # 5 left: writing 10 ahead would finish it
    advance, _ = ahead_of(last, MINUTELY, now)
    assert [f.fire_time for f in advance.fires] == [T0]
    assert advance.next_start_time == T0 + timedelta(minutes=1)
    ending = Bounded(MINUTELY, end=T0 + timedelta(minutes=4))
    advance, _ = ahead_of(task(T0), ending, now)
    assert [f.fire_time for f in advance.fires] == [T0]
    final, _ = ahead_of(task(T0 + timedelta(minutes=4)), ending, now + timedelta(minutes=4))
    assert [f.fire_time for f in final.fires] == [T0 + timedelta(minutes=4)]
    assert final.next_start_time is None  # finished with its last fire in the look-ahead
