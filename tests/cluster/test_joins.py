"""A child of several parents on a real cluster: join_a and join_b fire every second and end
at about the same instant on different nodes; join_c, their child, runs exactly once per
fire time both succeeded, and not at all for a fire where join_b failed."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus, Trigger
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster


def test_the_child_of_two_parents_runs_once_per_fire_both_succeeded(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_JOIN": "* * * * * *"}) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}", workers="1")
        cluster.wait_live()

        def both_kinds() -> bool:
            runs = cluster.runs("join_c")
            return (
                sum(r.status == RunStatus.SUCCESS for r in runs) >= 6
                and sum(r.status == RunStatus.SKIPPED for r in runs) >= 2
            )

        wait_until("join_c to run six times and be skipped twice", both_kinds, 60)
        cluster.stop_all()
        parents: dict[datetime, dict[str, RunStatus]] = defaultdict(dict)
        nodes: dict[datetime, dict[str, str | None]] = defaultdict(dict)
        for name in ("join_a", "join_b"):
            for run in cluster.runs(name):
                if run.status in (RunStatus.SUCCESS, RunStatus.FAILED):
                    parents[run.fire_time][name] = run.status
                    nodes[run.fire_time][name] = run.node_id
        children = cluster.runs("join_c")
        per_fire = Counter(r.fire_time for r in children)
        assert set(per_fire.values()) == {1}, per_fire  # never two rows for one fire
        assert all(r.triggered_by == Trigger.PARENT for r in children)
        for child in children:
            ended = parents[child.fire_time]
            if child.status == RunStatus.SKIPPED:
                assert ended.get("join_b") == RunStatus.FAILED, (child, ended)
                assert child.fire_time.second % 3 == 0
            else:
                assert ended == {"join_a": RunStatus.SUCCESS, "join_b": RunStatus.SUCCESS}
                assert child.fire_time.second % 3 != 0
        ok = [r for r in children if r.status == RunStatus.SUCCESS]
        # each fire both parents succeeded has its child, once
        both = {
            fire
            for fire, ended in parents.items()
            if ended == {"join_a": RunStatus.SUCCESS, "join_b": RunStatus.SUCCESS}
        }
        # the last parent's success writes the child's run in its own transaction
        assert both <= {r.fire_time for r in children}, "a join was lost"
        failed = {fire for fire, ended in parents.items() if RunStatus.FAILED in ended.values()}
        skipped = {r.fire_time for r in children if r.status == RunStatus.SKIPPED}
        assert failed == skipped
        spread = [fire for fire in {r.fire_time for r in ok} if len(set(nodes[fire].values())) > 1]
        assert spread, "the parents of every joined fire ran on one node: the race was not run"
        ran = Counter((e.task, e.fire_time) for e in cluster.ledger() if e.task == "join_c")
        assert set(ran.values()) == {1}, ran
        assert set(ran) == {("join_c", r.fire_time) for r in ok}
