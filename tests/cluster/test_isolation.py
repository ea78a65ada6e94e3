"""The process executor with real nodes: a job that kills its process, or hangs past its
timeout, fails only its own run; the node and the other tasks go on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, process_gone, wait_until

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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_to_the_process_group_lets_child_jobs_finish_in_the_grace(
    db_url: str, tmp_path: Path, sig: int
) -> None:
    """Ctrl-C in a terminal, or a service manager's stop, signals the node's whole process
    group: the children ignore it, and the node lets their jobs finish within its grace."""
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, slow_seconds=1.5) as cluster:
        node = cluster.start_with("node-0", {"executor": "process"}, session=True)
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        wait_until("the slow job to start", lambda: cluster.ledger(), 30)
        node.signal_group(sig)
        assert node.wait(20) == 0, node.log()[-3000:]
        (run,) = cluster.runs("slow")
        assert (run.status, run.error_msg) == (RunStatus.SUCCESS, None)
        assert [e.event for e in cluster.ledger()] == ["started", "finished"]


def test_past_the_grace_the_node_kills_its_child_and_exits(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, slow_seconds=30) as cluster:
        node = cluster.start_with(
            "node-0", {"executor": "process", "shutdown-grace": "1"}, session=True
        )
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        wait_until("the slow job to start", lambda: cluster.ledger(), 30)
        began = time.monotonic()
        node.signal_group(signal.SIGTERM)
        assert node.wait(20) == 0, node.log()[-3000:]
        assert time.monotonic() - began < 10
        assert "1 run(s) still running after the grace" in node.log()
        time.sleep(0.5)  # had the child lived on, it would write its line well within this
        assert [e.event for e in cluster.ledger()] == ["started"]


def test_a_child_whose_node_was_killed_exits_by_itself(db_url: str, tmp_path: Path) -> None:
    """kill -9 of the node: its child process, mid-job, exits too (it would otherwise run
    on while the run is taken back and run again elsewhere)."""
    if not db_url.startswith("sqlite"):
        pytest.skip("the executor is the node's: the database does not matter here")
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_CANCEL": "1"}) as cluster:
        node = cluster.start("node-0", executor="process")
        cluster.wait_live()
        cluster.store.tasks.trigger("c_sleep")
        (started,) = wait_until("the job to start", lambda: cluster.ledger(), 30)
        pid = int(started.event.removeprefix("pid-"))
        os.kill(pid, signal.SIGTERM)  # a stop signal reaching the child is ignored
        time.sleep(0.3)
        os.kill(pid, 0)  # still there
        node.kill()

        wait_until("the orphaned child to exit", lambda: process_gone(pid), 10)
