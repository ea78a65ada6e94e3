"""The run pipeline of one node, stepped under a fake clock on real SQLite (see conftest)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import sqlalchemy as sa

from easyjob import scheduled
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.registry import Registry
from easyjob.store.schema import task_detail_table as d
from tests.node.conftest import START, Rig, task


def test_a_slow_serial_task_does_not_starve_a_trivial_one(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "slow")  # every second, serial (the default), takes 2.5 s
    task(registry, "quick")
    node = rig(workers=2)
    started: dict[int, float] = {}

    def keep(name: str) -> bool:
        if name != "slow":
            return False
        for run in node.store.history.runs(task="slow", status=RunStatus.RUNNING):
            started.setdefault(run.id, node.clock.monotonic())
            return node.clock.monotonic() - started[run.id] < 2.5
        return False

    node.keep = keep
    node.run_for(40)
    quick = node.statuses("quick")
    assert quick.get(RunStatus.SUCCESS, 0) >= 39 and set(quick) <= {
        RunStatus.SUCCESS,
        RunStatus.CLAIMED,
        RunStatus.PENDING,
    }
    late = sorted(node.lateness_ms("quick"))
    assert late[int(len(late) * 0.99) - 1] < 1000, late[-5:]
    slow = node.history("slow")
    ran = [r for r in slow if r.status == RunStatus.SUCCESS]
    assert 14 <= len(ran) <= 17  # one every 2.5 s
    starts = [r.start_time for r in ran]
    assert starts == sorted(starts) and [r.fire_time for r in ran] == sorted(
        r.fire_time for r in ran
    ), "serial fires start in fire order"
    assert node.node.dispatcher.counts()["waiting"] <= 2  # one waiting run per serial task


def test_waiting_runs_take_no_worker_slot(rig: Callable[..., Rig], registry: Registry) -> None:
    for i in range(50):
        task(registry, f"t{i}", overlap="skip")  # claimed ahead, one waiting run per task
    task(registry, "serial")
    node = rig(workers=2, lookahead=3.0)
    node.tick()
    counts = node.node.dispatcher.counts()
    assert counts["waiting"] == 50 and counts["running"] == 0  # 2 workers
    held = node.store.history.runs(task="serial", status=RunStatus.CLAIMED)
    # its one fire read is claimed and started at its time, in one write: none held ahead
    assert held == [] and set(node.statuses("serial")) == {RunStatus.PENDING}
    node.run_for(5)
    for name in [f"t{i}" for i in range(50)] + ["serial"]:
        assert node.statuses(name).get(RunStatus.SUCCESS, 0) >= 4


def test_a_run_never_starts_before_its_fire_time(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """Whichever way a run is claimed (ahead, or claimed and started in one write just
    before its time), its function is called at its fire time on the node's clock, and
    not before (the worker's wait for it moves the fake clock)."""
    calls: list[datetime] = []

    for name, overlap in (("t", "serial"), ("s", "skip")):  # "skip" runs are claimed ahead

        def job() -> None:
            calls.append(node.clock.now())

        job.__qualname__ = name
        scheduled("* * * * * *", name=name, registry=registry, overlap=overlap)(job)
    node = rig()
    node.tick()  # nothing due: the fires at 00:00:01 wait (PENDING, or claimed ahead)
    node.tick(0.497)  # 3 ms before the fire: claimed and started, handed to its worker
    assert calls == [node.clock.now()] * 2  # whose wait moved the clock to the fire time
    node.run_for(3)
    fires = sorted(
        r.fire_time
        for name in ("t", "s")
        for r in node.history(name)
        if r.status == RunStatus.SUCCESS
    )
    assert len(calls) == len(fires) >= 6
    assert sorted(calls) == fires  # each called at its fire time exactly
    assert all(ms >= 0 for ms in node.lateness_ms("t") + node.lateness_ms("s"))


def test_a_restart_after_a_backlog_runs_a_fire_once_task_once_and_misses_the_rest(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "once", "*/5 * * * * *", misfire_grace=1)
    task(registry, "skipper", "*/5 * * * * *", misfire="skip", misfire_grace=1)
    task(registry, "all", "*/5 * * * * *", misfire="catch_up", misfire_grace=1, overlap="allow")
    node = rig(lookahead=60.0)
    node.tick()  # fires for the next minute written and claimed...
    node.node.dispatcher.close(0)  # ...then the node dies with them in hand
    node.sql("UPDATE easy_job_task_detail SET status = 'PENDING', node_id = NULL")
    node.age_pending(120, cursors=True)  # two minutes later, the next incarnation finds it
    # ...with the first one long dead (its heartbeat two minutes old): not a live peer
    node.sql("UPDATE easy_job_node SET status = 'DEAD' WHERE node_id = 'n1'")
    node = rig(node_id="n2", lookahead=2.0)
    node.tick()  # the stale fires are MISSED, by the schedule: their successors are due
    node.tick()  # the planner writes the gap and the latest due fire, which runs once
    once = node.statuses("once")
    assert once[RunStatus.SUCCESS] == 1 and once[RunStatus.MISSED] >= 10
    skipper = node.statuses("skipper")
    # the fire due at the restart's moment is on time: skip runs it; the stale ones it misses
    assert skipper[RunStatus.SUCCESS] == 1 and skipper[RunStatus.MISSED] >= 11
    assert node.statuses("all")[RunStatus.SUCCESS] >= 12  # every late fire, oldest first
    missed = [r for r in node.history("once") if r.status == RunStatus.MISSED]
    assert missed[0].error_msg == (
        "missed: not started before a later fire of the task was due (policy fire_once)"
    )


def test_a_cluster_behind_within_the_grace_runs_only_the_latest_due_fire(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """A backlog of fires all within the (default, 60 s) grace: under ``fire_once`` and
    ``skip`` a fire whose successor is due was superseded, so one run starts per task, not a
    burst of late ones oldest first; ``catch_up`` runs them all."""
    task(registry, "once")
    task(registry, "skipper", misfire="skip")
    task(registry, "all", misfire="catch_up", overlap="allow")
    node = rig(lookahead=10.0)
    node.tick()  # fires for the next ten seconds written and claimed...
    node.node.dispatcher.close(0)  # ...then the node dies with them in hand
    node.sql("UPDATE easy_job_task_detail SET status = 'PENDING', node_id = NULL")
    node.age_pending(8)  # eight seconds behind: fires due 8 s ago .. now, all in the grace
    node = rig(node_id="n2", lookahead=1.0)
    node.tick()
    for name in ("once", "skipper"):
        rows = node.history(name)
        ran = [r for r in rows if r.status == RunStatus.SUCCESS]
        missed = [r for r in rows if r.status == RunStatus.MISSED]
        assert len(ran) == 1 and len(missed) >= 7, name
        assert all(r.fire_time < ran[0].fire_time for r in missed)  # the latest due ran
        assert {r.error_msg for r in missed} == {
            f"missed: not started before a later fire of the task was due "
            f"(policy {'fire_once' if name == 'once' else 'skip'})"
        }
    assert node.statuses("all")[RunStatus.SUCCESS] >= 8  # every fire, late or not
    assert node.node.loader.missed >= 14


def test_a_task_allowed_to_overlap_runs_only_the_latest_of_its_due_fires_held(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """A backlog of due fires (a node stopped while its fires came due): the latest runs,
    the ones before it are MISSED as superseded (by the loader, or by the dispatcher when
    they were claimed together)."""
    task(registry, "quick", overlap="allow")
    node = rig(lookahead=5.0)
    node.tick()  # the next fires are written (PENDING: claimed and started at their time)
    node.clock.advance(3.5)  # the node was stopped (SIGSTOP) for 3.5 s
    node.tick(0)
    rows = node.history("quick")
    ran = [r.fire_time for r in rows if r.status == RunStatus.SUCCESS]
    missed = [r.fire_time for r in rows if r.status == RunStatus.MISSED]
    assert len(ran) == 1 and len(missed) >= 2 and max(missed) < ran[0]


def test_a_pause_stops_runs_already_claimed(rig: Callable[..., Rig], registry: Registry) -> None:
    task(registry, "p", overlap="skip")  # claimed ahead: its next run waits here
    node = rig(lookahead=3.0)
    node.tick()
    assert node.node.dispatcher.counts()["waiting"] == 1
    node.store.tasks.set_status("p", TaskStatus.PAUSED)
    node.run_for(3)
    rows = node.history("p")
    assert [r.status for r in rows if r.start_time is not None] == []
    assert {r.status for r in rows} == {RunStatus.SKIPPED}
    assert {r.error_msg for r in rows} == {"task paused before it started"}
    assert node.node.dispatcher.counts()["waiting"] == 0


def test_a_permanent_write_error_is_given_up_and_the_run_recovered(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "t", "0 0 * * * *")  # hourly: one fire in the test
    node = rig()
    node.sql(
        "CREATE TRIGGER no_success BEFORE UPDATE OF status ON easy_job_task_detail "
        "WHEN NEW.status = 'SUCCESS' BEGIN SELECT RAISE(ABORT, 'injected permanent error'); END"
    )
    node.clock.advance(3599.5)
    node.tick()
    node.tick(0.5)
    assert node.node.dispatcher.counts() == {
        "waiting": 0,
        "running": 0,
        "ending": 0,
        "stuck": 0,
        "given_up": 1,
    }
    assert [r.status for r in node.history("t")] == [RunStatus.RUNNING]
    node.sql("DROP TRIGGER no_success")
    recovery = node.node.recovery
    assert recovery.sweep_orphans() == 0  # seen once: a suspect
    assert recovery.sweep_orphans() == 1  # seen again at the same version: taken back
    node.tick(0.1)
    assert [r.status for r in node.history("t")] == [RunStatus.ABANDONED, RunStatus.SUCCESS]


def test_runs_no_worker_can_take_within_the_grace_are_handed_back(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "hog", "1 0 0 * * *")  # at 00:00:01
    task(registry, "t", "2-59 * * * * *", overlap="allow")
    node = rig(workers=1, overdue_grace=1.0)
    node.keep = lambda name: name == "hog"
    node.tick()
    node.tick(0.5)  # hog starts and keeps the only worker
    node.run_for(3)
    released = node.statuses("t")
    assert RunStatus.SUCCESS not in released and released.get(RunStatus.PENDING, 0) >= 2
    node.keep = lambda name: False
    node.tick(0.1)
    assert node.statuses("hog") == {RunStatus.SUCCESS: 1}


def test_a_timed_out_job_is_failed_and_counted_stuck_until_it_returns(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "hang", "0 0 * * * *", timeout=2)
    node = rig()
    node.keep = lambda name: name == "hang"
    node.clock.advance(3599.5)
    node.tick()
    node.tick(0.5)
    node.tick(2.0)
    assert node.node.dispatcher.counts()["stuck"] == 1
    node.tick()  # a heartbeat: `easyjob nodes` shows it
    _, (me,) = node.store.nodes.all()
    assert me.stuck_count == 1
    (row,) = node.history("hang")
    assert row.status == RunStatus.FAILED and row.error_msg == "timed out after 2s"
    node.keep = lambda name: False
    node.tick(0.1)
    assert node.node.dispatcher.counts()["stuck"] == 0
    assert [r.status for r in node.history("hang")] == [RunStatus.FAILED]


def _versions(node: Rig, status: RunStatus) -> list[int]:
    """The versions of the run rows in *status*: each write of a run row after its insert
    moves its version on by one."""
    query = sa.select(d.c.version).where(d.c.status == str(status))
    return list(node.store.db.read("test", lambda conn: conn.scalars(query).all()))


def test_a_run_due_when_claimed_is_claimed_and_started_in_one_write(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "manual", "0 0 0 1 6 *", overlap="allow")  # no fire in the test
    node = rig()
    node.tick()
    run_id = node.store.tasks.trigger("manual")
    (fresh,) = _versions(node, RunStatus.PENDING)
    node.tick()
    (row,) = node.history("manual")
    assert (row.id, row.status) == (run_id, RunStatus.SUCCESS)
    assert _versions(node, RunStatus.SUCCESS) == [fresh + 2]  # claimed+started, then ended


def test_runs_claimed_at_their_fire_time_take_three_run_row_writes_each(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """Claimed no earlier than due (a lookahead of 1 ms): each run of an every-second task,
    serial (the default) or not, is claimed and started in one write, then ended: with its
    fire, three writes of its row (a run claimed ahead takes one more: claim, then start)."""
    task(registry, "a")
    task(registry, "b", overlap="allow")
    node = rig(lookahead=0.001)
    fresh = 0  # a run row is inserted at version 0
    node.run_for(10)
    assert node.statuses("a").get(RunStatus.SUCCESS, 0) >= 9
    assert node.statuses("b").get(RunStatus.SUCCESS, 0) >= 9
    assert set(_versions(node, RunStatus.SUCCESS)) == {fresh + 2}
    assert all(ms >= 0 for ms in node.lateness_ms("a") + node.lateness_ms("b"))


def test_a_start_is_written_ahead_and_the_function_called_at_the_due_time(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """The start write is off the start's path: made up to LEAD before the fire (the row
    says RUNNING, started at the fire time), the call waits for the fire time itself."""
    task(registry, "t")
    node = rig()
    node.tick()  # claimed ahead: the fire at 00:00:01 waits
    node.keep = lambda name: True  # calls stay on the pool, to be seen
    node.tick(0.49)  # 10 ms before the fire
    (row,) = [r for r in node.history("t") if r.status == RunStatus.RUNNING]
    assert row.start_time == row.fire_time
    assert node.pool.running() == []  # written, not called
    node.tick(0.01)
    assert node.pool.running() == ["t"]


def test_the_next_fire_of_a_busy_serial_task_is_not_claimed_ahead(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """The loader reads a serial task's next fire (default look-ahead) while its current
    run is still running here. That fire is left PENDING, to be claimed and started in one
    write at its time: claimed ahead to wait its turn, it would cost a write more (a bench
    of 10 no-op serial tasks found a third of its runs so, read just after the previous
    fire while its outcome was not written yet)."""
    task(registry, "a")
    node = rig()
    node.keep = lambda name: True  # the run at 00:00:01 keeps running
    node.tick(0.5)
    assert node.pool.running() == ["a"]
    node.tick(0.1)  # the loader reads again: the fire at 00:00:02 is read, its task busy
    waiting = [r for r in node.history("a") if r.status != RunStatus.RUNNING]
    assert waiting and {r.status for r in waiting} == {RunStatus.PENDING}
    node.keep = lambda name: False
    node.run_for(3)
    assert node.statuses("a").get(RunStatus.SUCCESS, 0) >= 3
    assert set(_versions(node, RunStatus.SUCCESS)) == {2}


def test_a_task_with_max_running_runs_that_many_at_once_and_a_run_missed_waiting_says_why(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """Every second a fire of a 3.5 s job limited to two at once, on a node of four
    workers: two run side by side, never three; the fires that waited for a place and were
    superseded meanwhile end MISSED naming the limit."""
    task(registry, "capped", overlap="allow", max_running=2)
    node = rig(workers=4)
    started: dict[int, float] = {}

    def keep(name: str) -> bool:  # the jobs go on while one started under 3.5 s ago
        for run in node.store.history.runs(task="capped", status=RunStatus.RUNNING):
            started.setdefault(run.id, node.clock.monotonic())
        return any(node.clock.monotonic() - at < 3.5 for at in started.values())

    node.keep = keep
    node.run_for(30)
    ran = [r for r in node.history("capped") if r.start_time is not None and r.end_time]
    edges = sorted([(r.start_time, 1) for r in ran] + [(r.end_time, -1) for r in ran])  # type: ignore[misc]
    at_once = most = 0
    for _, step in edges:
        at_once += step
        most = max(most, at_once)
    assert most == 2, edges
    missed = [r for r in node.history("capped") if r.status == RunStatus.MISSED]
    assert missed and any(
        (r.error_msg or "").endswith("it waits: 2 run(s) of its task are running (max_running 2)")
        for r in missed
    ), [r.error_msg for r in missed]


def test_a_worker_is_free_for_the_next_run_while_the_last_outcome_is_written(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """A job that returned frees its worker at once: the loader claims and starts the next
    due run on it before the dispatcher has written the outcome (a node's starts no longer
    wait on the commit of each outcome: in a 20,000-task minute burst on 3 PostgreSQL
    nodes of 64 workers, a run's slot was held about 20 ms past its return). The run that
    returned stays the node's until its outcome is written."""
    task(registry, "a", cron="* * * * *")
    task(registry, "b", cron="* * * * *")
    node = rig(workers=1)
    node.keep = lambda name: True  # the job runs until the test lets it return
    node.run_for(60.0, step=1.0)  # the minute: both due, one worker
    minute = START.replace(minute=1, second=0, microsecond=0)

    def fired(name: str) -> list[RunStatus]:
        return [r.status for r in node.history(name) if r.fire_time == minute]

    (first,) = node.pool.running()
    second = "b" if first == "a" else "a"
    assert fired(second) == [RunStatus.PENDING]  # left for want of a worker
    node.pool.finish()  # the first returns; its outcome is not written yet
    node.node.loader.step()
    assert fired(first) == [RunStatus.RUNNING]
    assert fired(second) == [RunStatus.RUNNING]  # started on the freed worker
    (returned,) = node.store.history.runs(task=first, status=RunStatus.RUNNING)
    assert returned.id in node.node.dispatcher.held_ids()  # still the node's meanwhile
    node.keep = lambda name: False
    node.tick()
    assert fired(first) == fired(second) == [RunStatus.SUCCESS]
