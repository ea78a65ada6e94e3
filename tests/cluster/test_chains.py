"""Parent/child chains on a real cluster: chain_a -> (chain_b -> chain_d, chain_c)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus, Trigger
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster


def test_each_child_runs_once_per_successful_parent_run(db_url: str, tmp_path: Path) -> None:
    env = {"EASYJOB_TEST_CHAIN_CRON": "* * * * * *"}
    with Cluster(db_url, tmp_path, env=env) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        wait_until(
            "five chains to complete",
            lambda: sum(r.status == RunStatus.SUCCESS for r in cluster.runs("chain_d")) >= 5,
            30,
        )
        cluster.stop_all()
        runs = {name: cluster.runs(name) for name in ("chain_a", "chain_b", "chain_c", "chain_d")}
        ok = {
            name: [r for r in rows if r.status == RunStatus.SUCCESS] for name, rows in runs.items()
        }
        for parent, child in (
            ("chain_a", "chain_b"),
            ("chain_a", "chain_c"),
            ("chain_b", "chain_d"),
        ):
            per_parent = Counter(r.pid for r in runs[child])
            assert set(per_parent.values()) == {1}, (child, per_parent)
            assert set(per_parent) <= {r.id for r in ok[parent]}
            assert all(r.triggered_by == Trigger.PARENT for r in runs[child])
            # Every successful parent run whose children had time to run has exactly one.
            linked = {r.pid: r for r in runs[child]}
            for parent_run in ok[parent]:
                if parent_run.id in linked:
                    assert linked[parent_run.id].fire_time == parent_run.fire_time
        ledger = Counter((e.task, e.fire_time) for e in cluster.ledger() if e.event != "finished")
        assert set(ledger.values()) == {1}


def test_a_crash_mid_chain_reruns_only_the_interrupted_step(db_url: str, tmp_path: Path) -> None:
    env = {"EASYJOB_TEST_CHAIN_B_SECONDS": "3"}
    with Cluster(db_url, tmp_path, env=env) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        cluster.store.tasks.trigger("chain_a")

        def b_running() -> str | None:
            # The job's own line: RUNNING in the table comes a moment before the call.
            for entry in cluster.ledger():
                if (entry.task, entry.event) == ("chain_b", "started"):
                    return entry.node
            return None

        holder = wait_until("chain_b to start", b_running, 20)
        # chain_c, chain_b's sibling, started with it. Its success is recorded first, so
        # that the crash interrupts chain_b alone: a run whose node dies before its outcome
        # is written is run again (at least once, by design), which made this test flaky.
        wait_until(
            "chain_c's success to be recorded",
            lambda: any(r.status == RunStatus.SUCCESS for r in cluster.runs("chain_c")),
            10,
        )
        cluster.nodes[holder].kill()
        wait_until(
            "chain_d to succeed",
            lambda: any(r.status == RunStatus.SUCCESS for r in cluster.runs("chain_d")),
            30,
        )
        cluster.stop_all()
        events = Counter((e.task, e.event) for e in cluster.ledger())
        assert events["chain_a", "ran"] == 1
        assert events["chain_c", "ran"] == 1
        assert events["chain_d", "ran"] == 1
        assert events["chain_b", "started"] == 2 and events["chain_b", "finished"] == 1
        b = {r.attempt: r for r in cluster.runs("chain_b")}
        (d,) = cluster.runs("chain_d")
        assert (b[1].status, b[2].status, b[2].triggered_by) == (
            RunStatus.ABANDONED,
            RunStatus.SUCCESS,
            Trigger.RECOVERY,
        )
        assert d.pid == b[2].id
        (a,) = cluster.runs("chain_a")
        assert b[1].pid == b[2].pid == a.id
