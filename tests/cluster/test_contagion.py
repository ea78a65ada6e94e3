"""A crash is not contagious, by default: a job that kills its process (``os._exit``, as a
segfault or an OOM kill would) under the default thread executor takes down the node that
first ran it, and no other: its run is taken back and run again in a child process, where
it fails naming the cause, and the other nodes keep running every other task."""

from __future__ import annotations

from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("size", [2, 3])
def test_a_job_that_kills_its_process_takes_down_one_node(
    db_url: str, tmp_path: Path, size: int
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("recovery and executors are the nodes': the database does not matter here")
    with Cluster(db_url, tmp_path, ticks=2) as cluster:
        nodes = [cluster.start(f"node-{i}") for i in range(size)]
        cluster.wait_live()
        cluster.store.tasks.trigger("poison")
        (failed,) = wait_until(
            "the poison's run again to fail",
            lambda: [r for r in cluster.runs("poison") if r.status == RunStatus.FAILED],
            60,
        )
        dead = [n for n in nodes if not n.alive]
        assert len(dead) == 1, [(n.node_id, n.alive) for n in nodes]
        runs = sorted(cluster.runs("poison"), key=lambda r: r.attempt)
        assert [(r.attempt, r.status, r.node_id) for r in runs] == [
            (1, RunStatus.ABANDONED, dead[0].node_id),
            (2, RunStatus.FAILED, failed.node_id),
        ]
        assert failed.node_id != dead[0].node_id
        assert failed.error_msg == "its process exited with code 1 before the job returned"
        started = [e.node for e in cluster.ledger() if e.task == "poison"]
        assert started == [dead[0].node_id, failed.node_id]

        survivors = {n.node_id for n in nodes if n.alive}
        after = len(cluster.ledger())

        def every_task_ran_again() -> bool:
            later = cluster.ledger()[after:]
            return {e.task for e in later} >= {"tick-0", "tick-1"}

        wait_until("every other task to run again", every_task_ran_again, 15)
        assert {e.node for e in cluster.ledger()[after:]} <= survivors
        assert all(n.alive for n in nodes if n.node_id in survivors)
        cluster.stop_all()
        assert all(n.wait(10) == 0 for n in nodes if n.node_id in survivors)
