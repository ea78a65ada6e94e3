"""``async def`` jobs on a real node process: run to completion with their result stored, and
cancelled at their timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster
ENDED = (RunStatus.SUCCESS, RunStatus.FAILED)


def test_async_jobs_run_to_completion_and_are_cancelled_at_their_timeout(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path) as cluster:
        node = cluster.start_with("node-0", {}, env={"EASYJOB_TEST_ASYNC": "1"})
        cluster.wait_live()
        cluster.store.tasks.trigger("async_answer")
        cluster.store.tasks.trigger("async_overrun")

        def ended() -> bool:
            runs = cluster.runs("async_answer") + cluster.runs("async_overrun")
            return len(runs) == 2 and all(r.status in ENDED for r in runs)

        wait_until("both runs to end", ended, 20)
        wait_until(
            "the cancelled coroutine to return",
            lambda: "outcome was fenced" in node.log(),
            10,
        )
        cluster.stop_all()
        (answer,) = cluster.runs("async_answer")
        assert (answer.status, answer.result, answer.error_msg) == (
            RunStatus.SUCCESS,
            {"answer": 42},
            None,
        )
        (overrun,) = cluster.runs("async_overrun")
        assert (overrun.status, overrun.error_msg) == (RunStatus.FAILED, "timed out after 0.5s")
        events = [(e.task, e.event) for e in cluster.ledger()]
        assert sorted(events) == [
            ("async_answer", "ran"),
            ("async_overrun", "cancelled"),
            ("async_overrun", "started"),
        ]
