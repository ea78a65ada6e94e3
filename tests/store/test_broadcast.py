"""Broadcast tasks on each real database: a fire is one run per RUNNING node whose code
declares the task, each claimable by its node only; a node that leaves takes its runs with
it (never run elsewhere)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from easyjob.core.records import Advance, HistoryRow, PlannedFire, Run, TaskSpec
from easyjob.core.states import NodeStatus, RunStatus, Trigger
from easyjob.errors import TaskDefinitionError
from easyjob.store import Store

DAY = timedelta(days=1)
SPEC = TaskSpec(name="everywhere", func="tests.jobs:noop", cron="* * * * * *", broadcast=True)


def _node(store: Store, node_id: str, *declared: str) -> None:
    store.nodes.register(
        node_id,
        host="h",
        pid=1,
        weight=1,
        strategy="default",
        workers=4,
        broadcast_tasks=declared,
    )


def _fire(store: Store) -> list[HistoryRow]:
    """Plan one fire of SPEC; its runs, by shard."""
    (task,) = store.tasks.upsert([SPEC])
    assert task.broadcast and task.next_start_time is not None
    fire = task.next_start_time
    advance = Advance(
        task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),), 1, True
    )
    assert store.tasks.advance("planner", [advance]) == [task.id]
    return sorted(store.history.runs(task="everywhere"), key=lambda r: r.shard)


def _claim_all(store: Store, node_id: str) -> list[Run]:
    horizon = store.now() + DAY
    return store.runs.claim(node_id, store.runs.pending(horizon, 100, node_id=node_id))


def test_a_fire_is_one_run_per_node_that_declares_the_task(store: Store) -> None:
    _node(store, "a", "everywhere")
    _node(store, "b", "everywhere", "other")
    _node(store, "c")  # its code has no such task
    _node(store, "d", "everywhere")
    store.nodes.set_status("d", NodeStatus.STOPPED)
    runs = _fire(store)
    assert [(r.target_node, r.shard, r.shards, r.status) for r in runs] == [
        ("a", 0, 2, RunStatus.PENDING),
        ("b", 1, 2, RunStatus.PENDING),
    ]
    horizon = store.now() + DAY
    assert [c.target_node for c in store.runs.pending(horizon, 100, node_id="c")] == []
    assert _claim_all(store, "c") == []
    stolen = store.runs.claim("c", store.runs.pending(horizon, 100))  # ids of a's and b's runs
    assert stolen == []  # the claim itself refuses another node's broadcast run
    (mine,) = _claim_all(store, "a")
    assert (mine.node_id, mine.target_node, mine.shard, mine.shards) == ("a", "a", 0, 2)
    (theirs,) = _claim_all(store, "b")
    assert theirs.target_node == "b"


def test_a_fire_no_node_declares_is_one_skipped_row(store: Store) -> None:
    _node(store, "c")
    (run,) = _fire(store)
    assert (run.status, run.target_node, run.error_msg) == (
        RunStatus.SKIPPED,
        None,
        "broadcast fire: no RUNNING node declares this task",
    )


def test_a_manual_trigger_broadcasts_too(store: Store) -> None:
    _node(store, "a", "everywhere")
    _node(store, "b", "everywhere")
    store.tasks.upsert([SPEC])
    store.tasks.trigger("everywhere")
    runs = store.history.runs(task="everywhere")
    assert sorted((r.target_node, r.triggered_by) for r in runs) == [
        ("a", Trigger.MANUAL),
        ("b", Trigger.MANUAL),
    ]


def test_a_node_that_stops_or_dies_takes_its_runs_with_it(store: Store) -> None:
    for node in "abc":
        _node(store, node, "everywhere")
    _fire(store)
    (held,) = _claim_all(store, "b")
    running = store.runs.start(held)
    assert isinstance(running, Run)
    store.nodes.set_status("a", NodeStatus.STOPPED)  # before it claimed its run
    dead = store.now() + timedelta(minutes=5)  # b and c stop beating
    _node(store, "d", "everywhere")  # a node that joins after the fire gets no run of it
    assert store.nodes.mark_dead(timedelta(seconds=30), now=dead) == 3  # b, c and d
    for row in store.history.runs(task="everywhere"):
        if row.target_node in ("a", "c"):
            assert row.status == RunStatus.SKIPPED, row
    by_node = {r.target_node: r for r in store.history.runs(task="everywhere")}
    assert by_node["a"].error_msg == "broadcast run not started: its node a stopped"
    assert by_node["c"].error_msg == "broadcast run not started: its node c was declared dead"
    assert "d" not in by_node
    held_runs = store.runs.held_by_dead(timedelta(seconds=30), 10, now=dead)
    assert [h.target_node for h in held_runs] == ["b"]
    assert store.runs.recover(held_runs, "e", max_recoveries=1) == []  # not run elsewhere
    (gone,) = [r for r in store.history.runs(task="everywhere") if r.target_node == "b"]
    assert (gone.status, gone.error_msg) == (
        RunStatus.ABANDONED,
        "broadcast run of node b, gone: not run elsewhere",
    )


def test_a_retry_stays_on_its_node(store: Store) -> None:
    _node(store, "a", "everywhere")
    _fire(store)
    (claimed,) = _claim_all(store, "a")
    running = store.runs.start(claimed)
    assert isinstance(running, Run)
    assert store.runs.fail(running, "boom", retry_in=timedelta(0))
    (retry,) = [r for r in store.history.runs(task="everywhere") if r.attempt == 2]
    assert (retry.target_node, retry.triggered_by) == ("a", Trigger.RETRY)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"cron": "@hourly", "shards": 2},
            "task 'x': broadcast and shards cannot be combined: a broadcast fire is already "
            "one run per node",
        ),
        (
            {"parent": "p"},
            "task 'x': a broadcast task needs a cron expression of its own, not a parent",
        ),
        ({"cron": "@hourly", "broadcast": 1}, "task 'x': broadcast must be True or False, got 1"),
    ],
)
def test_bad_broadcast_definitions_are_refused(options: dict[str, object], message: str) -> None:
    options = {"broadcast": True, **options}
    with pytest.raises(TaskDefinitionError) as refused:
        TaskSpec(name="x", func="m:x", **options)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_a_gap_of_a_broadcast_task_is_one_missed_row_per_node_naming_it(store: Store) -> None:
    _node(store, "a", "everywhere")
    _node(store, "b", "everywhere")
    (task,) = store.tasks.upsert([SPEC])
    assert task.next_start_time is not None
    first = task.next_start_time
    gap = PlannedFire(first, RunStatus.MISSED, "missed 3 fires", 3, first + timedelta(seconds=2))
    latest = PlannedFire(first + timedelta(seconds=3))
    advance = Advance(task.id, task.version, first + timedelta(seconds=4), (gap, latest), 1, True)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    runs = store.history.runs(task="everywhere")
    missed = sorted((r.target_node, r.missed_count) for r in runs if r.status == RunStatus.MISSED)
    assert missed == [("a", 3), ("b", 3)]
    pending = sorted(r.target_node or "" for r in runs if r.status == RunStatus.PENDING)
    assert pending == ["a", "b"]
