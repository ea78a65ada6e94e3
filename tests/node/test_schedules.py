"""Intervals, bounds, max_runs, triggers with arguments and schedules changed at run time,
with one node's parts stepped under a fake clock on real SQLite (see conftest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from easyjob import runnable, scheduled
from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.errors import TaskDefinitionError
from easyjob.registry import Registry
from tests.node.conftest import START, Rig, task

S = timedelta(seconds=1)
CALLS: list[tuple[str, dict[str, Any]]] = []


def greet(*, greeting: str, user_id: int = 0) -> None:
    CALLS.append(("greet", {"greeting": greeting, "user_id": user_id}))


def report(*, n: int = 1) -> None:
    CALLS.append(("report", {"n": n}))


def flaky(*, user_id: int = 0) -> None:
    CALLS.append(("flaky", {"user_id": user_id}))
    if len(CALLS) == 1:
        raise RuntimeError("first attempt fails")


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def fires(node: Rig, name: str, status: RunStatus = RunStatus.SUCCESS) -> list[datetime]:
    return [r.fire_time for r in node.history(name) if r.status == status]


def test_an_interval_fires_every_45s_from_registration_exactly_once(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "every45", None, every=timedelta(seconds=45))  # type: ignore[arg-type]
    task(registry, "every90m", None, every="90m")  # type: ignore[arg-type]
    node = rig()
    node.run_for(200, step=0.5)
    assert fires(node, "every45") == [START + k * 45 * S for k in (1, 2, 3, 4)]
    assert all(ms >= 0 for ms in node.lateness_ms("every45"))
    # the advances wrote ahead (plan_ahead 10 fires within 10 minutes): the next six wait
    assert fires(node, "every45", RunStatus.PENDING) == [START + k * 45 * S for k in range(5, 11)]
    assert len(node.history("every45")) == 10  # nothing else was written
    assert node.store.tasks.get("every45").next_start_time == START + 11 * 45 * S
    row = node.store.tasks.get("every90m")
    assert (row.every_ms, row.anchor_time) == (5_400_000, START)
    assert row.next_start_time == START + 90 * 60 * S
    again = rig(node_id="n2")  # a node that restarts does not move the anchor
    again.tick(90 * 60)
    assert fires(again, "every90m") == [START + 90 * 60 * S]


def test_late_interval_fires_follow_the_misfire_policy(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "once", None, every="45s")  # type: ignore[arg-type]
    task(registry, "skipper", None, every="45s", misfire="skip")  # type: ignore[arg-type]
    node = rig()
    node.clock.advance(600)  # every node was down for ten minutes: fires 1-13 are due
    node.tick()
    once = node.history("once")
    # fires 1-12 were superseded (1-11 are past the grace too); 13, due now, runs once, its
    # row carrying the gap
    assert once[0].status == RunStatus.SUCCESS
    assert (once[0].fire_time, once[0].missed_count) == (START + 13 * 45 * S, 12)
    assert once[0].missed_from == START + 45 * S and once[0].missed_fires == 12
    assert all(r.fire_time > START + 13 * 45 * S for r in once[1:])
    assert RunStatus.MISSED not in {r.status for r in once}
    skipper = node.history("skipper")
    assert (skipper[0].missed_from, skipper[0].missed_count) == (START + 45 * S, 12)
    assert fires(node, "skipper")[0] == START + 13 * 45 * S  # 15 s late: within the grace


def test_bounded_schedules_fire_only_between_start_and_end_and_then_finish(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    start, end = START.replace(microsecond=0) + 5 * S, START.replace(microsecond=0) + 10 * S
    task(registry, "window", start=start, end=end)
    task(registry, "thrice", None, every="2s", max_runs=3)  # type: ignore[arg-type]
    node = rig()
    node.run_for(15, step=0.5)
    assert fires(node, "window") == [start + k * S for k in range(6)]
    assert fires(node, "thrice") == [START + k * 2 * S for k in (1, 2, 3)]
    for name in ("window", "thrice"):
        row = node.store.tasks.get(name)
        assert (row.status, row.next_start_time) == (TaskStatus.FINISHED, None)
    assert node.store.tasks.get("thrice").fire_count == 3


def test_a_manual_task_runs_when_triggered_with_accepted_arguments_at_a_time(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(name="greet", registry=registry, kwargs={"greeting": "hi"}, accepts=["user_id"])(
        greet
    )
    node = rig()
    node.run_for(5, step=0.5)
    assert node.history("greet") == [] and node.store.tasks.get("greet").next_start_time is None
    at = START + 10 * S
    run_id = node.store.tasks.trigger("greet", at=at, kwargs={"user_id": 7})
    with pytest.raises(TaskDefinitionError, match=r"does not accept trigger argument.*'evil'"):
        node.store.tasks.trigger("greet", kwargs={"evil": 1})
    node.run_for(4.5, step=0.5)
    assert CALLS == []  # not before its time
    node.run_for(1, step=0.5)
    assert CALLS == [("greet", {"greeting": "hi", "user_id": 7})]
    (row,) = node.history("greet")
    assert (row.id, row.triggered_by, row.fire_time, row.status) == (
        run_id,
        Trigger.MANUAL,
        at,
        RunStatus.SUCCESS,
    )
    assert row.start_time is not None and row.start_time >= at


def test_a_trigger_argument_written_by_hand_is_not_passed(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    scheduled(name="greet", registry=registry, kwargs={"greeting": "hi"}, accepts=["user_id"])(
        greet
    )
    node = rig()
    run_id = node.store.tasks.trigger("greet")
    node.sql(
        f'UPDATE easy_job_task_detail SET kwargs = \'{{"greeting": "pwned"}}\' WHERE id = {run_id}'
    )
    node.tick(0.5)
    assert CALLS == []
    (row,) = node.history("greet")
    assert row.status == RunStatus.FAILED
    assert row.error_msg is not None and "does not accept trigger argument(s) 'greeting'" in (
        row.error_msg
    )


def test_a_retry_keeps_the_trigger_arguments(rig: Callable[..., Rig], registry: Registry) -> None:
    scheduled(name="flaky", registry=registry, accepts=["user_id"], retries=1)(flaky)
    node = rig()
    node.store.tasks.trigger("flaky", kwargs={"user_id": 3})
    node.run_for(3, step=0.5)
    assert CALLS == [("flaky", {"user_id": 3}), ("flaky", {"user_id": 3})]
    assert [r.status for r in node.history("flaky")] == [RunStatus.FAILED, RunStatus.SUCCESS]


def test_schedules_added_changed_and_removed_at_run_time_reach_a_running_node(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    runnable(registry=registry, accepts=["n"])(report)
    scheduled(name="greet", registry=registry, kwargs={"greeting": "hi"})(greet)
    node = rig()
    node.tick()
    path = "tests.node.test_schedules:report"
    node.store.schedules.add("reports", path, every="5s", accepts=["n"])
    # greet is declared, not @runnable: a schedule added for it never runs anywhere
    node.store.schedules.add("greet_more", "tests.node.test_schedules:greet", every="1s")
    node.run_for(11, step=0.5)
    assert fires(node, "reports") == [START + 5 * S, START + 10 * S]
    assert node.history("greet_more") == []
    node.store.tasks.trigger("reports", kwargs={"n": 9})
    node.store.schedules.set("reports", cron="*/2 * * * * *")
    node.run_for(4, step=0.5)
    assert ("report", {"n": 9}) in CALLS
    assert fires(node, "reports")[-2:] == [START.replace(microsecond=0) + k * S for k in (12, 14)]
    removed = node.store.schedules.remove("reports")
    assert removed.status == TaskStatus.FINISHED
    before = len(node.history("reports"))
    node.run_for(5, step=0.5)
    assert len(node.history("reports")) == before
    with pytest.raises(TaskDefinitionError, match="declared by code: pause it"):
        node.store.schedules.remove("greet")


def test_a_runtime_change_of_a_code_task_stands_until_the_code_changes(
    rig: Callable[..., Rig], registry: Registry, tmp_path: Path
) -> None:
    task(registry, "c", "*/10 * * * * *")
    node = rig()
    node.store.schedules.set("c", every="3s")
    rig(node_id="n2")  # a restart with the same code keeps the runtime change
    row = node.store.tasks.get("c")
    assert (row.cron_expr, row.every_ms) == (None, 3000)
    changed = Registry()
    task(changed, "c", "*/20 * * * * *")
    Rig(tmp_path, changed, node_id="n3").store.close()  # new code: its schedule wins
    row = node.store.tasks.get("c")
    assert (row.cron_expr, row.every_ms) == ("*/20 * * * * *", None)


def test_a_node_whose_code_declares_a_runtime_task_name_refuses_to_start(
    rig: Callable[..., Rig], registry: Registry, tmp_path: Path
) -> None:
    node = rig()
    node.store.schedules.add("taken", "tests.node.test_schedules:report", every="1m")
    code = Registry()
    task(code, "taken")
    with pytest.raises(TaskDefinitionError, match="'taken' exists as a schedule added at run"):
        Rig(tmp_path, code, node_id="n2")


def test_pause_and_resume_within_the_planned_window_runs_the_next_fires(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    # the fires written ahead at the pause are deleted: the resumed task plans them again
    # (a SKIPPED row would have made the insert of the same fire time drop it)
    task(registry, "m", "0 * * * * *")
    node = rig()
    node.run_for(70, step=1.0)
    assert fires(node, "m") == [START - S / 2 + 60 * S]
    assert len(fires(node, "m", RunStatus.PENDING)) == 9  # written ahead
    node.store.tasks.set_status("m", TaskStatus.PAUSED)
    node.run_for(10, step=1.0)
    node.store.tasks.set_status("m", TaskStatus.ACTIVE)
    node.run_for(110, step=1.0)  # to 00:03:10
    assert fires(node, "m") == [START - S / 2 + k * 60 * S for k in (1, 2, 3)]
    assert RunStatus.SKIPPED not in node.statuses("m")


def test_a_schedule_changed_within_the_planned_window_runs_only_the_new_fires(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "m", "0 * * * * *")
    node = rig()
    node.run_for(70, step=1.0)
    node.store.schedules.set("m", cron="0 */2 * * * *")
    node.run_for(230, step=1.0)  # to 00:05:00.5
    # 00:02 both schedules share runs once; 00:03 of the old schedule does not run
    assert fires(node, "m") == [START - S / 2 + k * 60 * S for k in (1, 2, 4)]
