"""Sharded and broadcast tasks on two in-process nodes sharing one SQLite file under fake
clocks moved in step: a sharded fire runs once per shard, spread over both nodes, and its
child after them all; a broadcast fire runs once on each node."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime

from easyjob import TaskContext, scheduled
from easyjob.core.states import RunStatus
from easyjob.registry import Registry
from tests.node.conftest import Rig, task


def _recorder(registry: Registry, name: str, seen: list[tuple[str, int, int, datetime]]) -> None:
    def job(ctx: TaskContext) -> None:
        seen.append((ctx.node_id, ctx.shard, ctx.shards, ctx.fire_time))

    job.__qualname__ = name
    scheduled("* * * * * *", name=name, shards=4, registry=registry)(job)


def _tick_both(nodes: list[Rig], seconds: float) -> None:
    for node in nodes:
        node.clock.advance(seconds)
    for node in nodes:
        node.tick()


def test_each_fire_runs_once_per_shard_spread_over_nodes_then_its_child(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    seen: list[tuple[str, int, int, datetime]] = []
    _recorder(registry, "split", seen)
    task(registry, "after", cron=None, parent="split")
    nodes = [rig(node_id="n1"), rig(node_id="n2")]
    for _ in range(100):  # 10 s
        _tick_both(nodes, 0.1)

    by_fire: dict[datetime, list[tuple[str, int, int]]] = defaultdict(list)
    for node_id, shard, shards, fire in seen:
        by_fire[fire].append((node_id, shard, shards))
    complete = [fire for fire, ran in by_fire.items() if len(ran) == 4]
    assert len(complete) >= 9, sorted(by_fire)
    for fire, ran in by_fire.items():
        assert Counter(shard for _, shard, _ in ran) == Counter(range(len(ran))), fire
        assert {shards for _, _, shards in ran} == {4}
    assert {node_id for node_id, _, _, _ in seen} == {"n1", "n2"}  # spread over the nodes

    store = nodes[0].store
    runs = store.history.runs(task="split", limit=1000)
    assert {r.status for r in runs} <= {RunStatus.SUCCESS, RunStatus.CLAIMED, RunStatus.PENDING}
    children = store.history.runs(task="after", limit=1000)
    done = [c for c in children if c.status == RunStatus.SUCCESS]
    assert Counter(c.fire_time for c in children) == Counter(set(c.fire_time for c in children))
    assert {c.fire_time for c in done} >= set(complete[:-1])  # the last may still be queued
    for child in done:
        shards = [r for r in runs if r.fire_time == child.fire_time]
        assert len(shards) == 4 and all(r.status == RunStatus.SUCCESS for r in shards)
        assert child.start_time is not None
        assert all(r.end_time is not None and r.end_time <= child.start_time for r in shards)


def test_a_broadcast_task_runs_each_fire_once_on_every_node(
    rig: Callable[..., Rig], registry: Registry
) -> None:
    seen: list[tuple[str, int, int, datetime]] = []

    def job(ctx: TaskContext) -> None:
        seen.append((ctx.node_id, ctx.shard, ctx.shards, ctx.fire_time))

    job.__qualname__ = "everywhere"
    scheduled("* * * * * *", name="everywhere", broadcast=True, registry=registry)(job)
    nodes = [rig(node_id="n1"), rig(node_id="n2")]
    for _ in range(60):  # 6 s
        _tick_both(nodes, 0.1)
    by_fire: dict[datetime, list[str]] = defaultdict(list)
    for node_id, _, shards, fire in seen:
        assert shards == 2
        by_fire[fire].append(node_id)
    assert len(by_fire) >= 5
    for fire, ran in by_fire.items():
        assert sorted(ran) == ["n1", "n2"], fire  # once on each node, never twice
    runs = nodes[0].store.history.runs(task="everywhere", limit=1000)
    assert all(r.node_id == r.target_node for r in runs if r.node_id is not None)
