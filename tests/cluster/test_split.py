"""Sharded and broadcast tasks on a real cluster of node processes (see jobs.py: ``split``
in 3 shards with the child ``split_after``, and ``everywhere`` on every node)."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, Entry, wait_until

pytestmark = pytest.mark.cluster

ENV = {"EASYJOB_TEST_SPLIT": "1"}


def _by_fire(entries: list[Entry], task: str) -> dict[datetime, list[Entry]]:
    found: dict[datetime, list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry.task == task:
            found[entry.fire_time].append(entry)
    return found


def test_each_fire_runs_every_shard_once_spread_over_nodes_then_its_child(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, env=ENV) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        wait_until(
            "five children of complete fires",
            lambda: sum(r.status == RunStatus.SUCCESS for r in cluster.runs("split_after")) >= 5,
            60,
        )
        cluster.stop_all()
        ledger = cluster.ledger()
        fires = _by_fire(ledger, "split")
        for fire, ran in fires.items():
            assert Counter(e.event for e in ran) <= Counter(f"shard-{i}-of-3" for i in range(3)), (
                fire,
                ran,
            )  # no shard of a fire twice
        assert len({e.node for e in ledger if e.task == "split"}) >= 2, "shards spread out"

        runs = cluster.runs("split")
        children = cluster.runs("split_after")
        assert set(Counter(c.fire_time for c in children).values()) == {1}  # one per fire
        for child in children:
            shards = [r for r in runs if r.fire_time == child.fire_time]
            assert sorted(r.shard for r in shards) == [0, 1, 2]
            assert all(r.status == RunStatus.SUCCESS for r in shards)
            assert child.pid in {r.id for r in shards}
            assert all(r.end_time is not None and r.end_time <= child.due_time for r in shards)
        complete = [f for f, ran in fires.items() if len(ran) == 3]
        assert {c.fire_time for c in children} <= set(complete)


def test_broadcast_runs_once_per_node_and_follows_joins_and_deaths(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, env=ENV) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()

        def fires_on(nodes: set[str]) -> int:
            ran = _by_fire(cluster.ledger(), "everywhere")
            return sum({e.node for e in entries} == nodes for entries in ran.values())

        wait_until(
            "3 fires on all three nodes", lambda: fires_on({"node-0", "node-1", "node-2"}) >= 3, 60
        )
        cluster.nodes["node-2"].signal(signal.SIGKILL)
        wait_until("node-2 declared dead", lambda: cluster.node_status("node-2") == "DEAD", 30)
        cluster.start("node-3")
        cluster.wait_live("node-3")
        wait_until(
            "3 fires on the new membership",
            lambda: fires_on({"node-0", "node-1", "node-3"}) >= 3,
            60,
        )
        cluster.stop_all()

        ledger = [e for e in cluster.ledger() if e.task == "everywhere"]
        assert set(Counter((e.fire_time, e.node) for e in ledger).values()) == {1}
        for fire, ran in _by_fire(ledger, "everywhere").items():
            (shards,) = {int(e.event.split("-")[-1]) for e in ran}
            assert len(ran) <= shards, fire
        runs = cluster.runs("everywhere")
        assert all(r.target_node is not None for r in runs if r.status != RunStatus.SKIPPED)
        assert all(r.node_id in (None, r.target_node) for r in runs)
        gone = [r for r in runs if r.target_node == "node-2"]
        assert all(
            r.status in (RunStatus.SUCCESS, RunStatus.SKIPPED, RunStatus.ABANDONED) for r in gone
        )
        # fires planned once node-3 was there came after node-2 was declared dead: none of
        # them went to node-2
        with_new = {r.fire_time for r in runs if r.target_node == "node-3"}
        assert with_new and not [r for r in gone if r.fire_time in with_new]
        assert not [r for r in runs if r.target_node == "node-2" and r.status == RunStatus.PENDING]
