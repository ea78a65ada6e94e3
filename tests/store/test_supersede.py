"""Superseded fires (``RunStore.supersede``): a PENDING cron fire whose successor is due
too never starts under ``fire_once`` and ``skip``; on every backend."""

from __future__ import annotations

from datetime import datetime, timedelta

from easyjob.core.records import Advance, PlannedFire
from easyjob.core.states import Misfire, RunStatus
from easyjob.store import Store
from tests.store.conftest import every_second


def pending_fires(store: Store, name: str, fires: int, **spec: object) -> list[datetime]:
    """Register *name* and write *fires* every-second PENDING runs, the first due a minute
    ago at most (the store's clock is real: times are relative to its now)."""
    (task,) = store.tasks.upsert([every_second(name, **spec)])
    start = store.db.now().replace(microsecond=0) - timedelta(seconds=fires)
    times = [start + timedelta(seconds=i) for i in range(fires)]
    planned = tuple(PlannedFire(t) for t in times)
    after = times[-1] + timedelta(seconds=1)
    advance = Advance(task.id, task.version, after, planned, task.shards, task.broadcast)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    return times


def statuses(store: Store, task: str) -> list[RunStatus]:
    return [r.status for r in sorted(store.history.runs(task=task), key=lambda r: r.fire_time)]


def test_every_fire_but_the_latest_due_is_missed_under_fire_once_and_skip(store: Store) -> None:
    once = pending_fires(store, "once", 4)
    pending_fires(store, "skip", 3, misfire=Misfire.SKIP)
    pending_fires(store, "all", 3, misfire=Misfire.CATCH_UP)
    now = store.db.now()
    marked = store.runs.supersede(now)
    assert {name: m.count for name, m in marked.items()} == {"once": 3, "skip": 2}
    assert (marked["once"].first_fire, marked["once"].policy) == (once[0], Misfire.FIRE_ONCE)
    missed, pending = RunStatus.MISSED, RunStatus.PENDING
    assert statuses(store, "once") == [missed, missed, missed, pending]
    assert statuses(store, "skip") == [missed, missed, pending]
    assert statuses(store, "all") == [pending] * 3  # catch_up runs every fire
    (row, *_) = sorted(store.history.runs(task="skip"), key=lambda r: r.fire_time)
    assert row.error_msg == (
        "missed: not started before a later fire of the task was due (policy skip)"
    )
    assert store.runs.supersede(now) == {}  # nothing left to mark


def test_a_fire_is_superseded_only_by_a_later_cron_fire_of_its_shard_that_is_due(
    store: Store,
) -> None:
    times = pending_fires(store, "sharded", 2, shards=2)  # two rows per fire
    # at the first fire's due time its successor is not due yet: nothing is superseded
    assert store.runs.supersede(times[0] + timedelta(milliseconds=500)) == {}
    marked = store.runs.supersede(store.db.now())
    assert marked["sharded"].count == 2  # the first fire of each shard
    rows = store.history.runs(task="sharded")
    first = {r.shard: r.status for r in rows if r.fire_time == times[0]}
    assert first == {0: RunStatus.MISSED, 1: RunStatus.MISSED}
    assert {r.status for r in rows if r.fire_time == times[1]} == {RunStatus.PENDING}


def test_claimed_runs_manual_fires_and_missed_successors_are_left_alone(store: Store) -> None:
    times = pending_fires(store, "t", 3)
    pending = sorted(store.runs.pending(store.db.now(), 100), key=lambda c: c.fire_time)
    first, second, third = (c for c in pending if c.task_name == "t")
    store.runs.claim("n1", [first])  # held: the holder's dispatcher decides
    assert store.runs.miss_late({third.task_id: (Misfire.SKIP, third.due_time + timedelta(1))})
    # the successors are MISSED (by the grace): the second fire is not superseded by them
    store.tasks.trigger("t", at=store.db.now() - timedelta(seconds=1))  # a manual fire
    assert store.runs.supersede(store.db.now()) == {}
    assert statuses(store, "t")[:3] == [RunStatus.CLAIMED, RunStatus.MISSED, RunStatus.MISSED]
    assert times[0] == first.fire_time and second.fire_time == times[1]
