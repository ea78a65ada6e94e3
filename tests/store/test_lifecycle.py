"""Outcomes, chains, retries and recovery of dead nodes' runs, on each real database."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from easyjob.core.pacing import Fates
from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import NodeStatus, RunStatus, Trigger
from easyjob.store import Store
from easyjob.store.schema import node_table as n
from tests.store.conftest import make_pending


def _claim_start(store: Store, node: str, run_id: int) -> Run:
    horizon = store.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id == run_id]
    (run,) = store.runs.claim(node, candidates)
    running = store.runs.start(run)
    assert running is not None
    return running


def _register(store: Store, node: str) -> None:
    store.nodes.register(node, host="h", pid=1, weight=1, strategy="default", workers=4)


def _age(store: Store, node: str, seconds: float) -> None:
    def write(conn: sa.Connection) -> None:
        row = conn.execute(sa.select(n.c.heartbeat_at).where(n.c.node_id == node)).one()
        conn.execute(
            n.update()
            .where(n.c.node_id == node)
            .values(heartbeat_at=row[0] - timedelta(seconds=seconds))
        )

    store.db.write("age", write)


def test_success_makes_one_pending_run_per_child(store: Store) -> None:
    make_pending(store, "parent")
    store.tasks.upsert([TaskSpec(name=c, func="tests.jobs:noop", parent="parent") for c in "bc"])
    (parent_run,) = [r for r in store.history.runs(task="parent")]
    running = _claim_start(store, "node-a", parent_run.id)
    assert store.runs.finish(running)
    children = store.history.runs(task="b") + store.history.runs(task="c")
    assert [(r.pid, r.fire_time, r.triggered_by, r.status) for r in children] == [
        (running.id, running.fire_time, Trigger.PARENT, RunStatus.PENDING)
    ] * 2
    assert store.tasks.get("parent").success_count == 1


def test_failure_with_retry_makes_the_next_attempt_later(store: Store) -> None:
    (run_id,) = make_pending(store)
    running = _claim_start(store, "node-a", run_id)
    before = store.now()
    assert store.runs.fail(running, "ValueError: boom", retry_in=timedelta(seconds=30))
    failed, retry = sorted(store.history.runs(task="job"), key=lambda r: r.attempt)
    assert (failed.status, failed.error_msg, failed.end_time is not None) == (
        RunStatus.FAILED,
        "ValueError: boom",
        True,
    )
    assert (retry.status, retry.attempt, retry.triggered_by, retry.fire_time) == (
        RunStatus.PENDING,
        2,
        Trigger.RETRY,
        failed.fire_time,
    )
    assert retry.due_time >= before + timedelta(seconds=29)
    assert store.runs.pending(before + timedelta(seconds=5), 10) == []
    assert store.tasks.get("job").fail_count == 1


def test_final_failure_records_children_skipped(store: Store) -> None:
    make_pending(store, "parent")
    store.tasks.upsert([TaskSpec(name="child", func="tests.jobs:noop", parent="parent")])
    (parent_run,) = store.history.runs(task="parent")
    running = _claim_start(store, "node-a", parent_run.id)
    assert store.runs.fail(running, "boom", retry_in=None)
    (child,) = store.history.runs(task="child")
    assert (child.status, child.pid, child.error_msg) == (
        RunStatus.SKIPPED,
        running.id,
        f"parent run {running.id} failed",
    )


def test_dead_nodes_runs_are_recovered_once_with_the_next_attempt(store: Store) -> None:
    _register(store, "dead")
    _register(store, "alive")
    run_ids = make_pending(store, fires=2)
    running = _claim_start(store, "dead", run_ids[0])
    horizon = store.now() + timedelta(days=1)
    (claimed,) = store.runs.claim(
        "dead", [c for c in store.runs.pending(horizon, 10) if c.id == run_ids[1]]
    )
    assert store.runs.held_by_dead(timedelta(seconds=3), 100) == []
    _age(store, "dead", 10)
    held = store.runs.held_by_dead(timedelta(seconds=3), 100)
    assert sorted((h.id, h.status) for h in held) == [
        (run_ids[0], RunStatus.RUNNING),
        (run_ids[1], RunStatus.CLAIMED),
    ]
    created = store.runs.recover(held, "alive")
    assert len(created) == 2
    assert store.runs.recover(held, "other") == []  # the same tokens again: fenced
    assert store.runs.held_by_dead(timedelta(seconds=3), 100) == []
    new = store.history.runs(ids=created)
    assert {(r.attempt, r.triggered_by, r.status) for r in new} == {
        (2, Trigger.RECOVERY, RunStatus.PENDING)
    }
    old = store.history.runs(ids=run_ids)
    assert {r.status for r in old} == {RunStatus.ABANDONED}
    assert all(r.error_msg == "node dead declared dead; taken over by alive" for r in old)
    # The dead node comes back and reports its outcome: fenced, nothing changes.
    assert store.runs.finish(running) is False
    assert store.runs.start(claimed) is None
    assert {r.status for r in store.history.runs(ids=run_ids)} == {RunStatus.ABANDONED}


def test_stopped_nodes_are_judged_by_heartbeat_and_unknown_nodes_are_dead(store: Store) -> None:
    _register(store, "gone")
    (run_id,) = make_pending(store)
    _claim_start(store, "gone", run_id)
    store.nodes.set_status("gone", NodeStatus.STOPPED)  # its shutdown grace ran out
    assert store.runs.held_by_dead(timedelta(seconds=3), 10) == []
    _age(store, "gone", 10)
    assert [h.id for h in store.runs.held_by_dead(timedelta(seconds=3), 10)] == [run_id]
    store.db.write("forget", lambda conn: conn.execute(n.delete()))
    assert [h.id for h in store.runs.held_by_dead(timedelta(hours=1), 10)] == [run_id]


def test_held_counts_per_node(store: Store) -> None:
    run_ids = make_pending(store, fires=3)
    _claim_start(store, "a", run_ids[0])
    _claim_start(store, "a", run_ids[1])
    _claim_start(store, "b", run_ids[2])
    assert store.runs.held_counts() == {"a": 2, "b": 1}


def test_history_filters_and_prune_keeps_unfinished_runs(store: Store) -> None:
    run_ids = make_pending(store, fires=3)
    for run_id in run_ids[:2]:
        assert store.runs.finish(_claim_start(store, "a", run_id))
    assert [r.id for r in store.history.runs(status=RunStatus.SUCCESS)] == run_ids[1::-1]
    assert len(store.history.runs(task="job", limit=2)) == 2
    seen: list[int] = []
    assert store.history.prune(timedelta(hours=1), batch=1, progress=seen.append) == 0
    assert store.history.prune(timedelta(seconds=-60), batch=1, progress=seen.append) == 2
    assert seen == [0, 1, 2, 2]
    assert [r.id for r in store.history.runs()] == [run_ids[2]]


def test_fates_count_the_runs_every_node_ended_in_a_window(store: Store) -> None:
    """What a planner's pace reads each poll: runs ended SUCCESS or FAILED, and runs MISSED
    after their fire was written, by any node, in the window; not a gap's summary row
    (written MISSED), not a run still PENDING, not one due before *due_since*."""
    since = store.now()
    run_ids = make_pending(store, fires=6)
    for node, run_id in (("a", run_ids[0]), ("b", run_ids[1])):
        store.runs.finish_many([_claim_start(store, node, run_id)])
    failed = _claim_start(store, "b", run_ids[2])
    assert store.runs.fail(failed, "boom", retry_in=None) is not None
    candidates = {c.id: c for c in store.runs.pending(since + timedelta(days=1), 1000)}
    assert store.runs.miss_pending({i: (candidates[i].version, "late") for i in run_ids[3:5]})
    (task,) = store.tasks.upsert([TaskSpec("gap", "tests.jobs:noop", cron="* * * * * *")])
    assert task.next_start_time is not None
    gap = PlannedFire(task.next_start_time, RunStatus.MISSED, "behind", missed_count=5)
    summary = Advance(task.id, task.version, task.next_start_time + timedelta(seconds=1), (gap,))
    assert store.tasks.advance("a", [summary]) == [task.id]
    until = store.now() + timedelta(seconds=1)

    assert store.runs.fates(since, until, None) == Fates(ran=3, missed=2)
    assert store.runs.fates(until, until + timedelta(seconds=1), None) == Fates(0, 0)
    due = max(c.due_time for c in candidates.values()) + timedelta(seconds=1)
    assert store.runs.fates(since, until, due) == Fates(0, 0)
