"""Sharded tasks on each real database: a fire is one run per shard, each claimed, retried
and recovered on its own; shards of one fire run side by side; a child runs once, after
the last shard succeeded."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import RunStatus, Trigger
from easyjob.errors import TaskDefinitionError
from easyjob.store import Store
from easyjob.store.contract import BLOCKED
from easyjob.store.schema import task_detail_table as d

DAY = timedelta(days=1)


def _sharded(store: Store, shards: int = 3, name: str = "split") -> list[int]:
    """Register *name* with *shards* and plan one fire: the ids of its runs, by shard."""
    spec = TaskSpec(name=name, func="tests.jobs:noop", cron="* * * * * *", shards=shards)
    (task,) = store.tasks.upsert([spec])
    assert task.shards == shards and task.next_start_time is not None
    fire = task.next_start_time
    advance = Advance(
        task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),), task.shards
    )
    assert store.tasks.advance("planner", [advance]) == [task.id]
    runs = sorted(store.history.runs(task=name), key=lambda r: r.shard)
    return [r.id for r in runs]


def _claim(store: Store, node: str, run_ids: list[int]) -> list[Run]:
    horizon = store.now() + DAY
    return store.runs.claim(node, [c for c in store.runs.pending(horizon, 1000) if c.id in run_ids])


def _start(store: Store, node: str, run_id: int, *, exclusive: bool = True) -> Run:
    (run,) = _claim(store, node, [run_id])
    running = store.runs.start(run, exclusive=exclusive)
    assert isinstance(running, Run), running
    return running


def test_a_fire_is_one_run_per_shard(store: Store) -> None:
    ids = _sharded(store, 3)
    runs = sorted(store.history.runs(task="split"), key=lambda r: r.shard)
    assert [(r.shard, r.shards, r.status, r.attempt) for r in runs] == [
        (0, 3, RunStatus.PENDING, 1),
        (1, 3, RunStatus.PENDING, 1),
        (2, 3, RunStatus.PENDING, 1),
    ]
    assert len({r.fire_time for r in runs}) == 1 and len(ids) == 3
    claimed = _claim(store, "node-a", ids[:1]) + _claim(store, "node-b", ids[1:])
    assert sorted((r.node_id, r.shard, r.shards) for r in claimed) == [
        ("node-a", 0, 3),
        ("node-b", 1, 3),
        ("node-b", 2, 3),
    ]


def test_the_database_refuses_a_second_row_for_one_shard_of_a_fire(store: Store) -> None:
    ids = _sharded(store, 2)
    (row,) = [r for r in store.history.runs(task="split") if r.id == ids[1]]
    copy = {
        "task_id": row.task_id,
        "fire_time": row.fire_time,
        "due_time": row.due_time,
        "status": "PENDING",
        "triggered_by": "cron",
        "attempt": 1,
        "create_time": row.create_time,
        "shard": 1,
        "shards": 2,
    }
    with pytest.raises(sa_exc.IntegrityError):
        store.db.write("dup", lambda conn: conn.execute(d.insert().values(copy)))
    other = {**copy, "shard": 2}  # another shard of the same fire is a row of its own
    store.db.write("other", lambda conn: conn.execute(d.insert().values(other)))


def test_shards_of_one_fire_run_side_by_side_the_next_fire_waits(store: Store) -> None:
    first = _sharded(store, 2)
    a = _start(store, "node-a", first[0])
    b = _start(store, "node-b", first[1])  # serial overlap: not blocked by its sibling
    assert (a.shard, b.shard) == (0, 1)
    task = store.tasks.get("split")
    later = a.fire_time + timedelta(seconds=1)
    advance = Advance(task.id, task.version, later + timedelta(seconds=1), (PlannedFire(later),), 2)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    (next_run,) = [
        r for r in store.history.runs(task="split") if r.fire_time == later and r.shard == 0
    ]
    (claimed,) = _claim(store, "node-c", [next_run.id])
    assert store.runs.start(claimed, exclusive=True) is BLOCKED


def test_a_child_runs_once_after_the_last_shard_succeeds(store: Store) -> None:
    ids = _sharded(store, 3)
    store.tasks.upsert([TaskSpec(name="after", func="tests.jobs:noop", parent="split")])
    running = [_start(store, f"node-{i}", run_id) for i, run_id in enumerate(ids)]
    assert store.runs.finish(running[0])
    assert store.runs.fail(running[1], "boom", retry_in=timedelta(0))
    assert store.runs.finish(running[2])
    assert store.history.runs(task="after") == []  # shard 1 has not succeeded yet
    (retry,) = [r for r in store.history.runs(task="split") if r.attempt == 2]
    assert (retry.shard, retry.shards, retry.triggered_by) == (1, 3, Trigger.RETRY)
    assert store.runs.finish(_start(store, "node-9", retry.id))
    (child,) = store.history.runs(task="after")
    assert (child.pid, child.status, child.fire_time, child.shard, child.shards) == (
        retry.id,
        RunStatus.PENDING,
        retry.fire_time,
        0,
        1,
    )


def test_one_node_finishing_several_shards_at_once_makes_one_child(store: Store) -> None:
    ids = _sharded(store, 2)
    store.tasks.upsert([TaskSpec(name="after", func="tests.jobs:noop", parent="split")])
    claimed = _claim(store, "node-a", ids)
    started = store.runs.start_many(claimed, exclusive=set())
    assert store.runs.finish_many([r for r in started.values() if isinstance(r, Run)]) == set(ids)
    assert len(store.history.runs(task="after")) == 1


def test_a_sharded_child_is_one_run_per_shard(store: Store) -> None:
    (parent_id,) = _sharded(store, 1, name="parent")
    child = TaskSpec(name="fan", func="tests.jobs:noop", parent="parent", shards=4)
    store.tasks.upsert([child])
    assert store.runs.finish(_start(store, "node-a", parent_id))
    runs = store.history.runs(task="fan")
    assert sorted((r.shard, r.shards, r.pid) for r in runs) == [(i, 4, parent_id) for i in range(4)]


def test_a_manual_trigger_and_a_recovery_keep_the_shards(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="m", func="tests.jobs:noop", cron="@yearly", shards=2)])
    first = store.tasks.trigger("m")
    runs = sorted(store.history.runs(task="m"), key=lambda r: r.shard)
    assert [(r.id == first, r.shard, r.shards, r.triggered_by) for r in runs] == [
        (True, 0, 2, Trigger.MANUAL),
        (False, 1, 2, Trigger.MANUAL),
    ]
    running = _start(store, "gone", runs[1].id)
    held = store.runs.held_by("gone", 10)
    (new_id,) = store.runs.recover(held, "node-b", max_recoveries=1)
    (again,) = [r for r in store.history.runs(task="m") if r.id == new_id]
    assert (again.shard, again.shards, again.attempt, again.fire_time) == (
        1,
        2,
        2,
        running.fire_time,
    )


@pytest.mark.parametrize("shards", [0, -1, 1001, True, 2.0, "3"])
def test_bad_shard_counts_are_refused(shards: object) -> None:
    with pytest.raises(TaskDefinitionError) as refused:
        TaskSpec(name="x", func="m:x", cron="@hourly", shards=shards)  # type: ignore[arg-type]
    assert str(refused.value) == (
        f"task 'x': shards must be an integer from 1 to 1000, got {shards!r}"
    )


def test_missed_fires_of_a_sharded_task_are_one_row(store: Store) -> None:
    spec = TaskSpec(name="late", func="tests.jobs:noop", cron="* * * * * *", shards=5)
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    gone = task.next_start_time
    missed = PlannedFire(gone, RunStatus.MISSED, "missed", 3, gone + timedelta(seconds=2))
    advance = Advance(task.id, task.version, gone + timedelta(seconds=3), (missed,), 5)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    (row,) = store.history.runs(task="late")
    assert (row.status, row.shard, row.shards) == (RunStatus.MISSED, 0, 5)
    count = sa.select(sa.func.count()).select_from(d)
    assert store.db.read("count", lambda conn: conn.scalar(count)) == 1
