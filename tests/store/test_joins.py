"""A child of several parents on each real database: one run per fire time, made when the
last parent succeeds, exactly once when parents finish at the same instant on two nodes; a
parent that fails for good gives one SKIPPED row instead, and nothing else for that fire."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import RunStatus, Trigger
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_parent_table
from easyjob.views.read import tasks
from tests.conftest import FAST_RETRY
from tests.store.conftest import waiting_on_a_lock

DAY = timedelta(days=1)


def _tasks(store: Store, *, shards: int = 1) -> dict[str, int]:
    """Parents a and b (every second; a with *shards*) and c, the child of both."""
    rows = store.tasks.upsert(
        [
            TaskSpec(name="a", func="tests.jobs:noop", cron="* * * * * *", shards=shards),
            TaskSpec(name="b", func="tests.jobs:noop", cron="* * * * * *"),
            TaskSpec(name="c", func="tests.jobs:noop", parents=("a", "b")),
        ]
    )
    return {row.name: row.id for row in rows}


def _fire(store: Store, name: str, fire: datetime) -> list[int]:
    """Write the fire *fire* of task *name*: its run ids, by shard."""
    task = store.tasks.get(name)
    advance = Advance(
        task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),), task.shards
    )
    assert store.tasks.advance("planner", [advance]) == [task.id]
    runs = [r for r in store.history.runs(task=name) if r.fire_time == fire]
    return [r.id for r in sorted(runs, key=lambda r: r.shard)]


def _running(store: Store, node: str, run_id: int) -> Run:
    horizon = store.now() + DAY
    pending = store.runs.pending(horizon, 1000)
    (run,) = store.runs.claim(node, [c for c in pending if c.id == run_id])
    started = store.runs.start(run)
    assert isinstance(started, Run), started
    return started


def _fires(store: Store) -> tuple[datetime, datetime]:
    first = store.tasks.get("a").next_start_time
    assert first is not None
    return first, first + timedelta(seconds=1)


def test_parents_are_stored_in_order_pid_the_first(store: Store) -> None:
    ids = _tasks(store)
    child = store.tasks.get("c")
    assert child.pid == ids["a"]
    rows = store.db.read(
        "test",
        lambda conn: conn.execute(
            sa.select(task_parent_table).order_by(task_parent_table.c.position)
        ).all(),
    )
    assert [tuple(r) for r in rows] == [(ids["c"], ids["a"], 0), (ids["c"], ids["b"], 1)]
    store.tasks.upsert([TaskSpec(name="c", func="tests.jobs:noop", parent="b")])
    assert store.tasks.get("c").pid == ids["b"]
    assert store.db.read("test", lambda c: c.execute(sa.select(task_parent_table)).all()) == []


def test_the_child_runs_once_after_the_last_parent_succeeds(store: Store) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "node-1", a))
    assert store.history.runs(task="c") == []  # b has not succeeded yet
    assert store.runs.finish(_running(store, "node-2", b))
    (child,) = store.history.runs(task="c")
    assert (child.status, child.fire_time, child.pid, child.triggered_by) == (
        RunStatus.PENDING,
        fire,
        b,
        Trigger.PARENT,
    )


def test_parents_of_different_fire_times_never_join(store: Store) -> None:
    _tasks(store)
    first, second = _fires(store)
    (a,), (b,) = _fire(store, "a", first), _fire(store, "b", second)
    assert store.runs.finish(_running(store, "node-1", a))
    assert store.runs.finish(_running(store, "node-2", b))
    assert store.history.runs(task="c") == []


def test_a_manual_run_of_one_parent_makes_no_child(store: Store) -> None:
    _tasks(store)
    run_id = store.tasks.trigger("a")
    assert store.runs.finish(_running(store, "node-1", run_id))
    assert store.history.runs(task="c") == []


def test_a_parent_failing_for_good_gives_one_skipped_row_and_nothing_more(store: Store) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.fail(_running(store, "node-1", a), "boom", retry_in=None)
    (skipped,) = store.history.runs(task="c")
    assert (skipped.status, skipped.error_msg, skipped.fire_time, skipped.pid) == (
        RunStatus.SKIPPED,
        f"parent run {a} failed",
        fire,
        a,
    )
    assert store.runs.finish(_running(store, "node-2", b))
    assert [r.id for r in store.history.runs(task="c")] == [skipped.id]


def test_a_retried_parent_counts_by_its_final_outcome(store: Store) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "node-2", b))
    assert store.runs.fail(_running(store, "node-1", a), "boom", retry_in=timedelta(0))
    assert store.history.runs(task="c") == []  # a retry is on its way: no outcome yet
    (retry,) = [r for r in store.history.runs(task="a") if r.attempt == 2]
    assert store.runs.finish(_running(store, "node-3", retry.id))
    (child,) = store.history.runs(task="c")
    assert (child.status, child.pid) == (RunStatus.PENDING, retry.id)


def test_a_parent_given_up_by_recovery_skips_the_child(store: Store) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,) = _fire(store, "a", fire)
    _running(store, "dead-node", a)
    (held,) = store.runs.held_by("dead-node", 10)
    gave_up: list[int] = []
    store.runs.recover([held], "node-2", max_recoveries=0, gave_up=gave_up)
    assert gave_up == [a]
    (skipped,) = store.history.runs(task="c")
    assert (skipped.status, skipped.error_msg) == (RunStatus.SKIPPED, f"parent run {a} failed")


def test_a_parent_recovered_from_a_dead_node_joins_when_its_new_attempt_succeeds(
    store: Store,
) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "node-2", b))
    _running(store, "dead-node", a)
    (held,) = store.runs.held_by("dead-node", 10)
    (attempt,) = store.runs.recover([held], "node-3", max_recoveries=1)
    assert store.history.runs(task="c") == []  # the abandoned attempt is no outcome
    assert store.runs.finish(_running(store, "node-3", attempt))
    (child,) = store.history.runs(task="c")
    assert (child.status, child.pid, child.fire_time) == (RunStatus.PENDING, attempt, fire)


def test_a_sharded_parent_joins_once_every_shard_succeeded(store: Store) -> None:
    _tasks(store, shards=2)
    fire, _ = _fires(store)
    shards, (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "node-2", b))
    assert store.runs.finish(_running(store, "node-1", shards[0]))
    assert store.history.runs(task="c") == []
    assert store.runs.finish(_running(store, "node-3", shards[1]))
    (child,) = store.history.runs(task="c")
    assert (child.status, child.pid) == (RunStatus.PENDING, shards[1])


def test_both_parents_finished_in_one_batch_make_one_child(store: Store) -> None:
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    both = [_running(store, "node-1", a), _running(store, "node-1", b)]
    assert store.runs.finish_many(both) == {a, b}
    (child,) = store.history.runs(task="c")
    assert child.pid == max(a, b)


@pytest.mark.parametrize("ends", ["succeed", "fail"])
def test_two_parents_ending_at_once_on_two_nodes_write_one_row(
    store: Store, db_url: str, ends: str
) -> None:
    """The race the join must survive: node A has written its parent's outcome and asked
    the join (nothing yet: B's parent has not ended), its transaction not yet committed,
    when node B writes the other parent's outcome and asks. Under READ COMMITTED neither
    sees the other's uncommitted row, so without the child task's row lock neither would
    make the child (or, both failing, each a SKIPPED row... once made, none). B must wait
    for A's commit, then see A's outcome: one PENDING run when both succeed, one SKIPPED
    row when both fail. On SQLite B waits for A's write transaction, by design."""
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    a_run, b_run = _running(store, "node-a", a), _running(store, "node-b", b)
    node_a = Store.open(db_url, retry=FAST_RETRY)
    held, go = threading.Event(), threading.Event()

    def hold_before_commit(conn: sa.Connection) -> None:
        if not held.is_set():
            held.set()  # A's outcome is written and the join asked; hold the commit
            go.wait(30)

    def end(on: Store, run: Run) -> Callable[[], object]:
        if ends == "succeed":
            return lambda: on.runs.finish(run)
        return lambda: on.runs.fail(run, "boom", retry_in=None)

    sa.event.listen(node_a.db.engine, "commit", hold_before_commit)
    results: list[object] = []
    a_thread = threading.Thread(target=lambda: results.append(end(node_a, a_run)()), daemon=True)
    a_thread.start()
    try:
        assert held.wait(30)
        b_thread = threading.Thread(target=lambda: results.append(end(store, b_run)()), daemon=True)
        b_thread.start()
        if store.db.dialect != "sqlite":
            deadline = time.monotonic() + 30
            while b_thread.is_alive() and not waiting_on_a_lock(store):
                assert time.monotonic() < deadline, "B neither finished nor waited on A"
                time.sleep(0.01)
    finally:
        go.set()
        a_thread.join(30)
    b_thread.join(30)
    node_a.close()
    assert results == [True, True]
    rows = store.history.runs(task="c")
    expected = RunStatus.PENDING if ends == "succeed" else RunStatus.SKIPPED
    assert [(r.status, r.fire_time) for r in rows] == [(expected, fire)]


def test_a_child_run_an_older_node_made_after_the_first_parent_is_not_doubled(
    store: Store,
) -> None:
    """A node of version 5 reads only pid (the first parent): its success of a makes c's
    run at once, as for a child of one parent (written here as it writes it). The join of
    b's later success sees that run and adds none."""
    ids = _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "old-node", a))
    now = store.now()
    row = {
        "task_id": ids["c"],
        "pid": a,
        "fire_time": fire,
        "due_time": now,
        "status": "PENDING",
        "triggered_by": "parent",
        "attempt": 1,
        "create_time": now,
    }
    store.db.write("old node", lambda conn: conn.execute(d.insert().values(row)))
    assert store.runs.finish(_running(store, "node-2", b))
    (child,) = store.history.runs(task="c")
    assert child.pid == a


def test_a_pruned_parent_success_is_not_counted(store: Store) -> None:
    """What the docs say of pruning: a parent's success pruned before the other parent
    ends is gone, and the join does not run the child for that fire time."""
    _tasks(store)
    fire, _ = _fires(store)
    (a,), (b,) = _fire(store, "a", fire), _fire(store, "b", fire)
    assert store.runs.finish(_running(store, "node-1", a))
    assert store.history.prune(timedelta(0)) >= 1
    assert store.runs.finish(_running(store, "node-2", b))
    assert store.history.runs(task="c") == []


def test_easyjob_tasks_shows_every_parent_of_a_join(store: Store) -> None:
    _tasks(store)
    store.tasks.upsert([TaskSpec(name="d", func="tests.jobs:noop", parent="a")])
    _, rows = tasks(store, store.views.tasks())
    by_name = {row["name"]: row for row in rows}
    assert (by_name["c"]["parent"], by_name["c"]["parents"], by_name["c"]["schedule"]) == (
        "a",
        ["a", "b"],
        "after a and b",
    )
    assert (by_name["d"]["parents"], by_name["d"]["schedule"]) == (["a"], "after a")
