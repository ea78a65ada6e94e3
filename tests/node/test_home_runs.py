"""Nodes that share one database each claim their home runs, and steal another's only when
it is late: real nodes (loader, timetable, dispatcher) on one SQLite file, stepped in turn
under one fake clock (see the ``default`` strategy in :mod:`easyjob.core.strategies`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta

from easyjob.core.states import RunStatus
from easyjob.core.strategies import steal_delay
from easyjob.registry import Registry
from tests.node.conftest import Rig, task

TASKS = 12


def _cluster(rig: Callable[..., Rig], registry: Registry, nodes: int) -> list[Rig]:
    for i in range(TASKS):
        task(registry, f"t{i}")
    # no overdue rescue within the test: a run another node takes was stolen
    first = rig(node_id="n0", overdue_grace=30)
    return [first] + [
        rig(node_id=f"n{i}", overdue_grace=30, clock=first.clock) for i in range(1, nodes)
    ]


def _run(rigs: list[Rig], seconds: float, step: float = 0.1) -> None:
    """*seconds* of the *rigs*' lives, each a moment in turn at every *step*."""
    for _ in range(round(seconds / step)):
        rigs[0].clock.advance(step)
        for r in rigs:
            r.tick()


def _ran(rig: Rig) -> list:  # type: ignore[type-arg]
    return [
        r
        for i in range(TASKS)
        for r in rig.history(f"t{i}")
        if r.status == RunStatus.SUCCESS and r.start_time is not None
    ]


def test_each_node_claims_its_home_runs_and_no_other(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    rigs = _cluster(rig, registry, 4)
    _run(rigs, 5)
    ran = _ran(rigs[0])
    assert len(ran) >= 4 * TASKS, "too few runs to tell"
    # every run on time, by its home node: run id mod 4 = the node's rank among n0..n3
    assert {(r.id, r.node_id) for r in ran} == {(r.id, f"n{r.id % 4}") for r in ran}
    assert max(r.start_time - r.fire_time for r in ran) < timedelta(milliseconds=100)
    # no node tried a run it did not win: no claim raced another
    assert sum(r.node.loader.lost for r in rigs) == 0
    assert sum(r.node.loader.offered for r in rigs) == len(ran)


def test_a_node_with_room_to_spare_steals_a_stopped_nodes_runs_once_late(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    rigs = _cluster(rig, registry, 2)
    _run(rigs, 2)
    stopped_at = rigs[0].clock.now()
    _run(rigs[:1], 5)  # n1 stopped (SIGSTOP): alive in the table, doing nothing
    live = {n.node_id for n in rigs[0].node.membership.nodes()}
    assert live == {"n0", "n1"}, "n1 was judged dead: its runs were re-homed, not stolen"
    after = [r for r in _ran(rigs[0]) if r.fire_time > stopped_at]
    stolen = [r for r in after if r.id % 2 == 1]
    own = [r for r in after if r.id % 2 == 0]
    assert stolen, "n0 never took a run of the stopped n1"
    assert {r.node_id for r in after} == {"n0"}
    # n1's runs, due while it was stopped, each ran late by the steal delay (no sooner: it
    # is n1's while on time) and within a poll (and a step) after it, not the overdue grace
    delay = steal_delay(1.0)
    lateness = [r.start_time - r.due_time for r in stolen]
    assert min(lateness) >= delay, lateness
    assert max(lateness) <= delay + timedelta(seconds=1.1), lateness
    # every fire of n1's that came due a steal delay and a poll before the end was taken
    fires = {(r.task_name, r.fire_time) for r in stolen}
    end = rigs[0].clock.now() - delay - timedelta(seconds=1.1)
    expected = {
        (c.task_name, c.fire_time)
        for i in range(TASKS)
        for c in rigs[0].history(f"t{i}")
        if c.id % 2 == 1 and stopped_at < c.fire_time <= end
    }
    assert expected and expected <= fires
    assert max(r.start_time - r.due_time for r in own) < timedelta(milliseconds=100)


def test_the_nodes_that_steal_a_stopped_nodes_runs_take_turns_and_do_not_race(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    """Of four nodes, one stopped: each of its late runs has one first thief among the other
    three (its turn rotates with the run id, so the stolen runs spread over them), and the
    next in turn takes it only a steal delay later. No two nodes try the same run."""
    rigs = _cluster(rig, registry, 4)
    _run(rigs, 2)
    stopped_at = rigs[0].clock.now()
    awake = [r for i, r in enumerate(rigs) if i != 1]
    _run(awake, 6)
    stolen = [r for r in _ran(rigs[0]) if r.fire_time > stopped_at and r.id % 4 == 1]
    assert len(stolen) >= 2 * TASKS // 4, "too few stolen runs to tell"
    assert sum(r.node.loader.lost for r in rigs) == 0
    # spread over the three thieves, a third each give or take one task's share
    counts = Counter(r.node_id for r in stolen)
    assert set(counts) == {"n0", "n2", "n3"}, counts
    assert max(counts.values()) - min(counts.values()) <= len(stolen) // 3, counts
    # each by its first thief, a steal delay late (none waited for a second turn)
    delay = steal_delay(1.0)
    assert max(r.start_time - r.due_time for r in stolen) <= delay + timedelta(seconds=1.1)
