"""The process executor with real nodes: a job that kills its process, or hangs past its
timeout, fails only its own run; the node and the other tasks go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster


def test_a_crash_or_a_hang_in_a_child_process_fails_only_its_run(
    db_url: str, tmp_path: Path
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, ticks=1) as cluster:
        node = cluster.start("node-0", executor="process")
        cluster.wait_live()
        cluster.store.tasks.trigger("poison")
        cluster.store.tasks.trigger("hang")

        def ended(task: str) -> list[object]:
            return [r for r in cluster.runs(task) if r.status == RunStatus.FAILED]

        (poisoned,) = wait_until("the poison run to fail", lambda: ended("poison"), 30)
        (hung,) = wait_until("the hung run to time out", lambda: ended("hang"), 30)
        assert "its process exited with code 1" in (poisoned.error_msg or "")  # type: ignore[attr-defined]
        assert hung.error_msg == "timed out after 1s"  # type: ignore[attr-defined]
        wait_until("the hung child to be killed", lambda: "past its timeout" in node.log(), 10)
        ticks = len([e for e in cluster.ledger() if e.task == "tick-0"])
        wait_until(
            "ticks after",
            lambda: len([e for e in cluster.ledger() if e.task == "tick-0"]) > ticks + 2,
            10,
        )
        assert node.alive
        cluster.stop_all()
        assert node.wait(10) == 0
        assert "stuck" not in node.log()
