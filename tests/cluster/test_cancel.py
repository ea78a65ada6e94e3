"""Cancel with a real node, from another process's CLI (as from another host: the request
goes through the database): a cooperative job on a thread is told and returns, a sleeping
job in a child process is killed, a pending run never starts; on every database."""

from __future__ import annotations

import contextlib
import io
from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.cli import main
from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, process_gone, wait_until

pytestmark = pytest.mark.cluster


def _cancel(db_url: str, run_id: int) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["cancel", str(run_id), "--db", db_url])
    return code, out.getvalue().strip()


def test_cancel_a_thread_job_a_process_job_and_a_pending_run(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_CANCEL": "1"}) as cluster:
        node = cluster.start("node-0")
        cluster.wait_live()
        coop = cluster.store.tasks.trigger("c_coop")
        sleep = cluster.store.tasks.trigger("c_sleep")
        later = cluster.store.tasks.trigger("c_coop", at=cluster.store.now() + timedelta(hours=1))

        def events(run_id: int) -> list[str]:
            return [e.event for e in cluster.ledger() if e.run_id == run_id]

        wait_until("both jobs to start", lambda: events(coop) and events(sleep), 30)
        (pid_event,) = events(sleep)
        pid = int(pid_event.removeprefix("pid-"))

        assert _cancel(db_url, coop) == (
            0,
            f"run {coop} CANCELLED (was RUNNING on node node-0: it stops the job within a poll)",
        )
        assert _cancel(db_url, sleep)[0] == 0
        assert _cancel(db_url, later) == (
            0,
            f"run {later} CANCELLED (was PENDING: it never starts)",
        )

        wait_until("the thread job to see it", lambda: "cancelled" in events(coop), 10)
        wait_until("the child to be killed", lambda: process_gone(pid), 10)
        assert events(coop) == ["started", "cancelled"]
        assert events(sleep) == [pid_event]
        assert events(later) == []
        by_id = {r.id: r for r in cluster.runs()}
        assert {i: by_id[i].status for i in (coop, sleep, later)} == dict.fromkeys(
            (coop, sleep, later), RunStatus.CANCELLED
        )
        assert by_id[coop].error_msg == "cancelled on request (was RUNNING)"
        assert by_id[later].error_msg == "cancelled on request (was PENDING)"
        wait_until(
            "the node to log both",
            lambda: (
                f"run {coop} of c_coop cancelled on request: its job told" in node.log()
                and f"run {sleep} of c_sleep cancelled on request: its child process killed"
                in node.log()
            ),
            10,
        )
        assert _cancel(db_url, coop) == (7, f"run {coop} had ended CANCELLED: not cancelled")
        assert node.alive
        cluster.stop_all()
        assert node.wait(10) == 0
        assert [r.id for r in cluster.runs() if r.status != RunStatus.CANCELLED] == []
