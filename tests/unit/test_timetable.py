"""The timetable alone: which claimed runs may start, and how much a node claims ahead."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from easyjob.core.records import Run
from easyjob.core.states import Misfire, Overlap, RunStatus, Trigger
from easyjob.node.timetable import Room, Timetable

T0 = datetime(2030, 1, 1, tzinfo=UTC)
GRACE = timedelta(seconds=1)
_ids = iter(range(1, 10_000))


def run(task: int, second: float, overlap: Overlap = Overlap.ALLOW) -> Run:
    at = T0 + timedelta(seconds=second)
    return Run(
        id=next(_ids),
        version=1,
        status=RunStatus.CLAIMED,
        node_id="n",
        task_id=task,
        task_name=f"t{task}",
        func=f"m:t{task}",
        kwargs={},
        fire_time=at,
        due_time=at,
        attempt=1,
        triggered_by=Trigger.CRON,
        pid=None,
        overlap=overlap,
        retries=0,
        retry_delay_ms=1000,
        timeout_ms=None,
        misfire=Misfire.FIRE_ONCE,
        misfire_grace_ms=60_000,
    )


def at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def ended(table: Timetable, run_id: int, seconds: float) -> None:
    """*run_id*'s function returned after *seconds* and its outcome was written."""
    table.returned(run_id, seconds)
    table.finished(run_id)


def test_runs_wait_without_a_worker_until_due_then_start_in_due_order() -> None:
    table = Timetable(workers=2)
    runs = [run(1, 3), run(2, 1), run(3, 2)]
    table.add(runs, T0)
    assert table.pop_due(at(0.9)) == [] and table.free_workers() == 2
    assert table.next_ready() == at(1)
    assert [r.task_id for r in table.pop_due(at(5))] == [2, 3]  # two workers
    assert table.free_workers() == 0 and table.waiting == 1
    ended(table, runs[1].id, 0.5)
    assert [r.task_id for r in table.pop_due(at(5))] == [1]


def test_an_exclusive_task_starts_one_run_at_a_time_in_fire_order() -> None:
    table = Timetable(workers=4)
    first, second, third = (run(7, s, Overlap.SERIAL) for s in (1, 2, 3))
    table.add([third, first, second], T0)
    assert table.pop_due(at(10)) == [first]
    assert table.pop_due(at(10)) == []  # the others wait behind it, holding no worker
    assert table.free_workers() == 3 and table.exclusive_tasks_waiting() == {7}
    table.blocked(first, retry_at=at(11))  # it runs elsewhere: first stays ahead
    assert table.pop_due(at(10.5)) == []
    assert table.pop_due(at(11)) == [first]
    table.started(first, 0.0)
    ended(table, first.id, 1.0)
    assert table.pop_due(at(11)) == [second]
    table.dropped(second)
    assert table.pop_due(at(11)) == [third]


def test_due_runs_without_a_worker_past_the_grace_are_handed_back() -> None:
    table = Timetable(workers=1)
    hog, waiting = run(1, 0), run(2, 1)
    table.add([hog, waiting], T0)
    assert table.pop_due(at(1)) == [hog]
    table.started(hog, 1.0)  # monotonic times here are the seconds of at()
    assert table.overdue(at(1.5), GRACE, 1.5) == []  # not yet past the grace
    assert table.overdue(at(2.5), GRACE, 2.5) == [waiting]
    assert table.waiting == 0
    late = run(2, 1)  # claimed late: the grace counts from its claim
    table.add([late], at(5))
    assert table.overdue(at(5.5), GRACE, 5.5) == []
    assert table.overdue(at(6.5), GRACE, 6.5) == [late]
    ended(table, hog.id, 2.5)
    assert table.overdue(at(9), GRACE, 9) == []
    quick, behind = run(3, 9), run(4, 9)
    table.add([quick, behind], at(9))
    assert table.pop_due(at(9)) == [quick]
    table.started(quick, 10.9)  # the worker was free a moment ago: a node only behind
    assert table.overdue(at(11), GRACE, 11) == []


def test_room_follows_what_the_workers_can_start_within_the_window() -> None:
    room = Room(lookahead_s=2.0, max_held=1000)
    table = Timetable(workers=4)
    assert table.room(room, now=0.0) == 1000  # nothing known: the cap
    table.add([run(1, 1)], T0)
    (r,) = table.pop_due(at(1))
    table.started(r, 0.0)
    ended(table, r.id, 0.5)  # runs take 0.5 s: 4 workers start 16 in 2 s, plus 4 free
    assert table.room(room, now=1.0) == 20
    table.add([run(2, 5) for _ in range(15)], T0)
    assert table.room(room, now=1.0) == 5
    hogs = [run(3, 0) for _ in range(4)]
    table.add(hogs, T0)
    for hog in table.pop_due(at(0.5)):
        table.started(hog, 1.0)
    assert table.free_workers() == 0
    assert table.room(room, now=11.0) == 0  # every worker busy for 10 s: claim nothing


def test_drain_hands_back_every_waiting_run() -> None:
    table = Timetable(workers=1)
    a, b = run(9, 1, Overlap.SERIAL), run(9, 2, Overlap.SERIAL)
    table.add([a, b], T0)
    assert table.pop_due(at(5)) == [a]
    assert table.pop_due(at(5)) == []
    assert table.drain() == [b]
    assert table.held_ids() == {a.id}
    ended(table, replace(a).id, 1.0)
    assert table.held_ids() == set()


def test_no_room_while_a_run_ready_a_poll_ago_has_not_started() -> None:
    room = Room(lookahead_s=2.0, max_held=1000)
    table = Timetable(workers=4)
    table.add([run(1, 1), run(2, 9)], T0)
    assert table.room(room, now=0.0, behind_before=at(1)) == 998  # ready at 1 s: not before
    assert table.room(room, now=0.0, behind_before=at(2)) == 0  # a second late, not started
    table.pop_due(at(2))
    assert table.room(room, now=0.0, behind_before=at(2)) == 998  # started: room again


def test_a_run_claimed_started_takes_its_worker_and_heads_its_serial_task() -> None:
    table = Timetable(workers=3)
    waiting = [run(1, 0), run(2, 5)]
    table.add(waiting, T0)
    assert table.startable(at(1)) == 2  # three free, one of them for the run already due
    begun = replace(run(3, 1, Overlap.SERIAL), status=RunStatus.RUNNING)
    later = run(3, 2, Overlap.SERIAL)
    table.begin(begun)
    table.add([later], T0)
    assert table.startable(at(1)) == 1 and table.tasks_held() == {1, 2, 3}
    table.started(begun, 0.0)
    assert table.pop_due(at(3)) == [waiting[0]]  # the serial run waits behind the begun one
    ended(table, begun.id, 1.0)
    assert table.pop_due(at(3)) == [later]
    assert table.startable(at(3)) == 1 and table.running == 2


def test_a_task_with_max_running_lets_that_many_out_at_once_in_fire_order() -> None:
    table = Timetable(workers=4)
    runs = [replace(run(7, s), max_running=2) for s in (1, 2, 3, 4)]
    table.add(list(reversed(runs)), T0)
    assert table.pop_due(at(10)) == runs[:2]
    assert table.pop_due(at(10)) == []  # two out: the others wait, holding no worker
    assert table.free_workers() == 2 and table.exclusive_tasks_waiting() == {7}
    table.blocked(runs[1], retry_at=at(11))  # the cluster is full: it keeps its place
    assert table.pop_due(at(10.5)) == []
    table.started(runs[0], 0.0)
    ended(table, runs[0].id, 1.0)
    assert table.pop_due(at(10.5)) == [runs[2]]  # one place freed
    assert table.pop_due(at(11)) == [runs[1]]


def test_the_node_holds_up_to_the_limit_of_waiting_runs_of_a_limited_task() -> None:
    table = Timetable(workers=1)
    table.add([replace(run(7, s), max_running=3) for s in (1, 2)], T0)
    assert table.exclusive_tasks_waiting() == set()  # room for a third
    table.add([replace(run(7, 3), max_running=3)], T0)
    assert table.exclusive_tasks_waiting() == {7}


def prio(task: int, second: float, priority: int) -> Run:
    return replace(run(task, second), priority=priority)


def test_more_runs_due_than_workers_free_start_by_priority() -> None:
    table = Timetable(workers=2)
    low_old, low, high, mid = prio(1, 0, 0), prio(2, 1, 0), prio(3, 2, 9), prio(4, 3, 4)
    table.add([low_old, low, high, mid], T0)
    assert table.pop_due(at(4)) == [high, mid]
    ended(table, high.id, 1.0)
    assert table.pop_due(at(4)) == [low_old]  # equal priority: due order
    ended(table, mid.id, 1.0)
    assert table.pop_due(at(4)) == [low]


def test_runs_that_all_fit_start_in_due_order_whatever_their_priority() -> None:
    table = Timetable(workers=3)
    runs = [prio(1, 0, 0), prio(2, 1, 9), prio(3, 2, 5)]
    table.add(runs, T0)
    assert table.pop_due(at(4)) == runs


def test_a_low_priority_run_aged_past_the_high_ones_starts_first() -> None:
    table = Timetable(workers=1)
    old = prio(1, 0, 0)
    fresh = prio(2, 60, 5)
    table.add([fresh, old], T0)
    assert table.pop_due(at(60)) == [old]  # due 60 s: six aging steps, above 5


def test_a_limited_task_behind_its_limit_leaves_the_worker_to_the_next_priority() -> None:
    table = Timetable(workers=2)
    out = replace(run(8, 0), max_running=1, status=RunStatus.RUNNING)
    table.begin(out)  # task 8 is at its limit here; one worker left
    gated, low = replace(run(8, 1), max_running=1, priority=9), prio(9, 1, 0)
    table.add([gated, low], T0)
    assert table.pop_due(at(2)) == [low]  # the high one waits behind its task's run
    table.started(out, 0.0)
    ended(table, out.id, 1.0)
    assert table.pop_due(at(2)) == [gated]


def test_a_returned_run_frees_its_worker_but_is_held_until_its_outcome_is_written() -> None:
    room = Room(lookahead_s=2.0, max_held=3)
    table = Timetable(workers=2)
    first, second = run(5, 1, Overlap.SERIAL), run(5, 2, Overlap.SERIAL)
    other = run(6, 1)
    table.add([first, second, other], T0)
    assert table.pop_due(at(3)) == [first, other]
    table.started(first, 0.0)
    table.started(other, 0.0)
    assert table.free_workers() == 0
    table.returned(first.id, 0.5)
    # the worker is free for the next run while the outcome is written ...
    assert table.free_workers() == 1 and table.running == 1
    # ... but the run is still the node's (RUNNING in the database) and its task's place
    assert first.id in table.held_ids() and 5 in table.tasks_held()
    assert table.room(room, now=1.0) == 0  # held: three of max_held
    assert table.pop_due(at(3)) == []  # the serial task's next run waits for the write
    table.finished(first.id)
    assert first.id not in table.held_ids()
    assert table.pop_due(at(3)) == [second]
