"""What an idle node costs the database: the round trips of its periodic threads, counted by
the store's counters (issue 25, goal 4: every node pays them, whatever its share of the work).

On SQLite each transaction's ``BEGIN`` is a statement of its own."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from easyjob.core.states import NodeStatus
from easyjob.node.cancels import IDLE_S
from easyjob.registry import Registry
from easyjob.store.schema import node_table as n
from easyjob.store.schema import task_detail_table as d
from tests.node.conftest import Rig, task
from tests.store.conftest import make_pending


def _statements(node: Rig, step: Callable[[], object]) -> int:
    before = node.store.counters()["statements"]
    step()
    return node.store.counters()["statements"] - before


def _idle(rig: Callable[..., Rig], registry: Registry) -> Rig:
    """A node with a task that does not fire, stable (heartbeats for a dead threshold)."""
    task(registry, "yearly", cron="0 0 1 1 *")
    node = rig(heartbeat=1.0, dead_after=3)
    for _ in range(5):
        node.tick(1.0)
    assert node.node.liveness.stable()
    return node


def test_a_heartbeat_is_one_write_and_one_read(rig: Callable[..., Rig], registry: Registry) -> None:
    """The write (BEGIN IMMEDIATE, the time, the UPDATE), then one read of the peers (BEGIN,
    the SELECT) that also gives the database time: no read of the time of its own."""
    node = _idle(rig, registry)
    assert _statements(node, node.node.heartbeat.step) == 5


def test_an_idle_recovery_reads_once_per_dead_threshold(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """With no node dead, the recovery reads nothing but, once per dead threshold, the
    runs of dead nodes and its own (the orphan sweep): whether a node is dead comes from
    the heartbeat's read."""
    node = _idle(rig, registry)
    recovery = node.node.recovery
    counts = [_statements(node, recovery.step) for _ in range(6)]
    assert sorted(counts) == [0, 0, 0, 0, 4, 4]  # BEGIN and SELECT, twice


def test_a_dead_node_seen_by_the_heartbeat_is_marked_and_its_runs_taken_back(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    node = _idle(rig, registry)
    node.store.nodes.register("gone", host="h", pid=2, weight=1, strategy="default", workers=1)
    run = _held_by(node, "gone")
    node.sql("UPDATE easy_job_node SET heartbeat_at = '2029-12-31 00:00:00' WHERE node_id = 'gone'")
    recovery = node.node.recovery
    while recovery._steps % 3 != 1:  # the next step is not the once-per-threshold one
        recovery.step()
    recovery.step()
    assert _status(node, "gone") == NodeStatus.RUNNING  # not seen yet: no probe of its own
    assert _run_status(node, run) == "CLAIMED"
    recovery._wake.clear()
    node.node.heartbeat.step()
    assert node.node.membership.stale() == ["gone"]
    assert recovery._wake.is_set()  # the heartbeat wakes it
    recovery.step()
    assert _status(node, "gone") == NodeStatus.DEAD
    assert _run_status(node, run) == "ABANDONED"
    node.node.heartbeat.step()
    assert node.node.membership.stale() == []


def test_runs_of_a_node_stopped_with_runs_left_are_taken_back_within_a_dead_threshold(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """A STOPPED node (its shutdown grace ran out) is not one the heartbeat's read finds
    dead: the recovery's read once per dead threshold finds its runs."""
    node = _idle(rig, registry)
    node.store.nodes.register("left", host="h", pid=2, weight=1, strategy="default", workers=1)
    run = _held_by(node, "left")
    node.store.nodes.set_status("left", NodeStatus.STOPPED)
    node.sql("UPDATE easy_job_node SET heartbeat_at = '2029-12-31 00:00:00' WHERE node_id = 'left'")
    node.node.heartbeat.step()
    assert node.node.membership.stale() == []
    for _ in range(3):
        node.node.recovery.step()
    assert _run_status(node, run) == "ABANDONED"


def _held_by(node: Rig, node_id: str) -> int:
    (run,) = make_pending(node.store, f"of-{node_id}")
    node.sql(
        f"UPDATE easy_job_task_detail SET status = 'CLAIMED', node_id = '{node_id}' "
        f"WHERE id = {run}"
    )
    return run


def _run_status(node: Rig, run: int) -> str:
    return str(
        node.store.db.read(
            "status", lambda conn: conn.scalar(sa.select(d.c.status).where(d.c.id == run))
        )
    )


def _status(node: Rig, node_id: str) -> NodeStatus:
    found = node.store.db.read(
        "status", lambda conn: conn.scalar(sa.select(n.c.status).where(n.c.node_id == node_id))
    )
    return NodeStatus(found)


def test_an_idle_health_watch_reads_once_per_dead_threshold(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """With no run waiting here, the runs held past due can only be ones the node does not
    know of (the orphan sweep's): one read per dead threshold, not per heartbeat."""
    node = _idle(rig, registry)
    watch = node.node.watch
    assert [_statements(node, watch.step) for _ in range(6)] == [2, 0, 0, 2, 0, 0]


def test_the_health_watch_reads_every_step_while_runs_wait(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "slow", overlap="serial")  # its next fire waits here for the running one
    node = rig(heartbeat=1.0, dead_after=3)
    node.keep = lambda name: name == "slow"
    for _ in range(3):
        node.tick(1.0)
    assert node.node.dispatcher.counts()["waiting"] > 0
    watch = node.node.watch
    assert [_statements(node, watch.step) for _ in range(3)] == [2, 2, 2]


def test_the_health_watch_reads_until_nothing_is_held_past_due(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """A node that found runs held past due reads again each step until it finds none, so
    its health comes back at once: the database may hold a run it does not know of."""
    node = _idle(rig, registry)
    watch = node.node.watch
    watch.step()
    (run,) = make_pending(node.store, "elsewhere")  # a run it holds and does not know of
    node.sql(
        "UPDATE easy_job_task_detail SET status = 'CLAIMED', node_id = 'n1', "
        f"due_time = '2029-12-31 00:00:00' WHERE id = {run}"
    )
    assert [_statements(node, watch.step) for _ in range(3)] == [0, 0, 2]
    assert node.node.health.problems()
    node.sql("UPDATE easy_job_task_detail SET status = 'ABANDONED'")
    assert _statements(node, watch.step) == 2
    assert not node.node.health.problems()
    assert _statements(node, watch.step) == 0


def test_the_cancel_watch_sleeps_until_a_job_starts_and_looks_a_poll_later(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    task(registry, "slow", overlap="serial")
    node = rig(heartbeat=1.0, dead_after=3)
    watch = node.node.cancels
    assert watch.step() == IDLE_S  # no job runs: nothing to ask, no wake each poll
    node.keep = lambda name: name == "slow"
    node.tick(1.0)  # the first fire starts and keeps running
    (run,) = node.node.dispatcher.running_ids()
    assert watch._wake.is_set()  # the dispatcher woke it
    assert _statements(node, watch.step) == 0  # it looks a poll after the start
    node.store.cancels.cancel(run)
    node.clock.advance(1.0)
    assert _statements(node, watch.step) == 2
    assert node.node.dispatcher.running_ids() == {run}  # the job was told; it returns later
    assert node.node.dispatcher._active[run].cancel.is_set()
