"""A real node process that leaves a history worth showing: successes of a task named like
markup, failures whose error text is markup, on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, wait_until

HOSTILE = '<script>alert("easyjob")</script>'
NODE = "web-node-1"


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """One live node with a few seconds of history: SUCCESS runs of HOSTILE, FAILED runs of
    ``always_fails``."""
    with Cluster(db_url, tmp_path, env={"EASYJOB_TEST_WEB": "1"}) as cluster:
        cluster.start(NODE)
        cluster.wait_live(NODE)

        def history() -> bool:
            runs = cluster.runs()
            done = {(r.task_id, r.status) for r in runs}
            statuses = {status for _, status in done}
            return RunStatus.SUCCESS in statuses and RunStatus.FAILED in statuses

        wait_until("successes and failures in the history", history, 30)
        yield cluster
