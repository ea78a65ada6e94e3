"""Success counts on each real database: finishing a run writes no task row, the count shown
is ``pruned_success_count`` plus the SUCCESS rows kept, exact across finishes and prunes, and
the shards of one fire still make their child exactly once when finished side by side."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import RunStatus
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from easyjob.store.successes import delete_runs
from tests.conftest import FAST_RETRY
from tests.store.conftest import make_pending, race_in_processes

DAY = timedelta(days=1)
#: A statement that writes or locks rows of easy_job_task (not of easy_job_task_detail).
_TASK_WRITE = re.compile(r"^\s*(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+easy_job_task\b(?!_detail)")
_TASK_LOCK = re.compile(r"\bFROM\s+easy_job_task\b(?!_detail)[^;]*\bFOR\s+UPDATE\b", re.S)


@contextmanager
def _statements(store: Store) -> Iterator[list[str]]:
    """The SQL text of every statement *store* sends meanwhile."""
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", seen)


def _running(store: Store, node: str, run_ids: list[int]) -> list[Run]:
    horizon = store.now() + DAY
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id in run_ids]
    started = store.runs.start_many(store.runs.claim(node, candidates), exclusive=set())
    running = [r for r in started.values() if isinstance(r, Run)]
    assert len(running) == len(run_ids)
    return running


def _pruned(store: Store, name: str) -> int:
    query = sa.select(t.c.pruned_success_count).where(t.c.name == name)
    return int(store.db.read("pruned", lambda conn: conn.scalar(query)))


def _age(store: Store, run_ids: list[int], ago: timedelta) -> None:
    """Set the end of runs *run_ids* *ago* (there is no API to age rows)."""
    stmt = d.update().where(d.c.id.in_(run_ids)).values(end_time=store.now() - ago)
    store.db.write("age", lambda conn: conn.execute(stmt))


def test_finishing_runs_writes_no_task_row(store: Store) -> None:
    ids = make_pending(store, fires=4)
    running = _running(store, "node-a", ids)
    before = store.tasks.get("job")
    with _statements(store) as sent:
        assert store.runs.finish_many(running[:3]) == set(ids[:3])
        assert store.runs.finish(running[3])
    assert any("easy_job_task_detail" in s for s in sent)  # the listener sees the writes
    assert [s for s in sent if _TASK_WRITE.search(s) or _TASK_LOCK.search(s)] == []
    after = store.tasks.get("job")
    assert (after.success_count, after.pruned_success_count) == (4, 0)
    assert (after.version, after.update_time) == (before.version, before.update_time)


def test_a_sharded_finish_locks_its_task_row_and_nothing_else(store: Store) -> None:
    spec = TaskSpec(name="split", func="tests.jobs:noop", cron="* * * * * *", shards=2)
    (task,) = store.tasks.upsert([spec])
    assert task.next_start_time is not None
    fire = task.next_start_time
    advance = Advance(task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),), 2)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    ids = sorted(r.id for r in store.history.runs(task="split"))
    running = _running(store, "node-a", ids)
    with _statements(store) as sent:
        assert store.runs.finish(running[0])
    assert [s for s in sent if _TASK_WRITE.search(s)] == []
    locks = [s for s in sent if re.search(r"\bFROM\s+easy_job_task\b(?!_detail)", s)]
    if store.db.dialect == "sqlite":  # one writer at a time: no lock, no read of it
        assert locks == [], sent
    else:  # the lock of the task's row, and no other read of it
        assert len(locks) == 1 and _TASK_LOCK.search(locks[0]), sent
    assert store.tasks.get("split").success_count == 1


def test_the_count_is_exact_across_finishes_and_prunes(store: Store) -> None:
    ids = make_pending(store, fires=8)
    make_pending(store, name="other", fires=2)
    running = _running(store, "node-a", ids)
    assert store.runs.finish_many(running[:6]) == set(ids[:6])
    assert store.runs.fail(running[6], "boom", retry_in=None)
    # half of the history ended long ago: three successes, then the failure
    for days, run_id in enumerate([*ids[:3], ids[6]]):
        _age(store, [run_id], (5 - days) * DAY)
    (late,) = [r for r in store.history.runs(task="job") if r.id == ids[7]]
    assert late.status == RunStatus.RUNNING

    def shown() -> list[int | None]:
        listed = {row.name: row.success_count for row in store.views.tasks()}
        _, found = store.views.find_tasks(task="job")
        return [store.tasks.get("job").success_count, listed["job"], found[0].success_count]

    assert shown() == [6, 6, 6]
    assert store.history.prune_batch(DAY, batch=2) == 2  # the two oldest successes
    assert (shown(), _pruned(store, "job")) == ([6, 6, 6], 2)
    assert store.history.prune(DAY, batch=1) == 2  # one success, one failure, one per batch
    assert (shown(), _pruned(store, "job")) == ([6, 6, 6], 3)
    assert len(store.history.runs(task="job")) == 4  # three successes kept, one running
    assert store.tasks.get("job").fail_count == 1
    assert store.tasks.get("other").success_count == 0
    assert store.runs.finish(running[7])
    assert shown() == [7, 7, 7]


def test_a_batch_another_pruner_deleted_is_not_counted_again(store: Store) -> None:
    ids = make_pending(store, fires=3)
    assert store.runs.finish_many(_running(store, "node-a", ids)) == set(ids)
    # both pruners read the same batch; the second deletes after the first committed
    assert store.db.write("first", lambda conn: delete_runs(conn, ids)) == 3
    assert store.db.write("second", lambda conn: delete_runs(conn, ids)) == 0
    assert store.tasks.get("job").success_count == 3
    assert _pruned(store, "job") == 3


def test_pending_and_held_runs_are_not_deleted_by_id(store: Store) -> None:
    ids = make_pending(store, fires=2)
    _running(store, "node-a", ids[:1])
    assert store.db.write("prune", lambda conn: delete_runs(conn, ids)) == 0
    assert len(store.history.runs(task="job")) == 2


def _prune_all(url: str, node: str, start: Any, out: Any) -> None:
    store = Store.open(url, retry=FAST_RETRY)
    try:
        start.wait()
        batches = []
        while deleted := store.history.prune_batch(DAY, batch=50):
            batches.append(deleted)
        out.put((node, batches))
    finally:
        store.close()


def test_pruners_side_by_side_count_each_success_once(store: Store, db_url: str) -> None:
    (task,) = store.tasks.upsert([TaskSpec(name="job", func="tests.jobs:noop", cron=None)])
    now = store.now()
    old = now - 2 * DAY
    rows = [
        {
            "task_id": task.id,
            "fire_time": old + timedelta(seconds=i),
            "due_time": old + timedelta(seconds=i),
            "status": "SUCCESS" if i % 4 else "FAILED",
            "triggered_by": "manual",
            "attempt": 1,
            "create_time": old,
            "end_time": old + timedelta(seconds=i),
        }
        for i in range(1000)
    ]
    store.db.write("history", lambda conn: conn.execute(d.insert(), rows))
    assert store.tasks.get("job").success_count == 750
    args = [(db_url, f"proc-{i}") for i in range(3)]
    results = race_in_processes(_prune_all, args, timeout=120)
    assert sum(sum(batches) for batches in results.values()) == 1000, results
    assert store.history.runs(task="job") == []
    assert (store.tasks.get("job").success_count, _pruned(store, "job")) == (750, 750)


def _finish_shards(url: str, node: str, run_ids: list[int], start: Any, out: Any) -> None:
    store = Store.open(url, retry=FAST_RETRY)
    try:
        running = _running(store, node, run_ids)
        start.wait()
        done = [run.id for run in running if store.runs.finish(run)]
        out.put((node, done))
    finally:
        store.close()


def test_shards_finished_side_by_side_make_each_child_once(store: Store, db_url: str) -> None:
    spec = TaskSpec(name="split", func="tests.jobs:noop", cron="* * * * * *", shards=2)
    (task,) = store.tasks.upsert([spec])
    store.tasks.upsert([TaskSpec(name="after", func="tests.jobs:noop", parent="split")])
    assert task.next_start_time is not None
    fires = [task.next_start_time + timedelta(seconds=i) for i in range(50)]
    planned = tuple(PlannedFire(f) for f in fires)
    advance = Advance(task.id, task.version, fires[-1] + timedelta(seconds=1), planned, 2)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    runs = store.history.runs(task="split", limit=200)
    by_shard = [sorted(r.id for r in runs if r.shard == s) for s in (0, 1)]
    args = [(db_url, f"proc-{s}", by_shard[s]) for s in (0, 1)]
    results = race_in_processes(_finish_shards, args, timeout=120)
    assert sorted(i for ids in results.values() for i in ids) == sorted(r.id for r in runs)
    children = store.history.runs(task="after", limit=200)
    parents = {r.id: r.fire_time for r in runs}
    assert sorted(parents[c.pid] for c in children if c.pid is not None) == fires
    assert store.tasks.get("split").success_count == 100
