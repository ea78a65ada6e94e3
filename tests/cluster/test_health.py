"""Health means progress, with a real node process: once the node's database user loses
the UPDATE privilege on the runs table (as a DBA's mistaken REVOKE would do), its loader
fails on every step; past the stated time (the dead threshold) its ``/readyz`` answers 503
naming the cause, while ``/healthz`` stays 200 (it is alive: a restart would not help);
the cause is logged once and counted; with the privilege back, it is ready again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.store.engine import create_engine
from tests.cluster.harness import Cluster, wait_until
from tests.cluster.test_observe import get, samples
from tests.rig.servers import free_port

pytestmark = pytest.mark.cluster

LOOP_FAILING = ("easyjob_unhealthy_total", (("cause", "loop_failing"),))


def _privilege(db_url: str, grant: bool) -> None:
    """Grant or revoke UPDATE on the runs table, as its owner, to itself (the user the
    test's node connects as)."""
    engine = create_engine(db_url, pool_size=1)
    try:
        with engine.begin() as conn:
            user = conn.scalar(sa.text("SELECT current_user"))
            verb = (
                "GRANT UPDATE ON easy_job_task_detail TO"
                if grant
                else "REVOKE UPDATE ON easy_job_task_detail FROM"
            )
            conn.exec_driver_sql(f"{verb} {user}")
    finally:
        engine.dispose()


def _health(cluster: Cluster) -> str | None:
    (node,) = [n for n in cluster.store.nodes.all()[1] if n.node_id == "sick"]
    return node.health


def test_a_node_whose_loader_fails_every_step_is_not_ready(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("a revoked table privilege of the node's own user: PostgreSQL")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with Cluster(db_url, tmp_path, ticks=1) as cluster:
        node = cluster.start("sick", http=f"127.0.0.1:{port}")
        cluster.wait_live()
        assert get(f"{base}/readyz")[0] == 200
        assert samples(base)[LOOP_FAILING] == 0  # present from the start

        _privilege(db_url, grant=False)
        wait_until("/readyz to turn 503", lambda: get(f"{base}/readyz")[0] == 503, 30)
        _, body = get(f"{base}/readyz")
        reason = json.loads(body)["reason"]
        assert reason.startswith("no progress: loop_failing: every step failed: loader for ")
        assert reason.endswith("(more than 1s); see the log")
        assert get(f"{base}/healthz")[0] == 200
        assert samples(base)[LOOP_FAILING] == 1
        assert "permission denied for table easy_job_task_detail" in node.log()
        # the node says so in its row at its next heartbeat, so `easyjob status` shows it
        row = wait_until("the node's row to say why", lambda: _health(cluster), 10)
        assert row.startswith("loop_failing: every step failed: loader for ")
        status = subprocess.run(
            [sys.executable, "-m", "easyjob", "status", "--db", db_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"node sick is unhealthy: {_health(cluster)}"[:60] in status.stdout
        wait_until("more failed steps", lambda: node.log().count("loader step failed") > 5, 20)
        assert node.log().count("node unhealthy (loop_failing)") == 1
        assert samples(base)[LOOP_FAILING] == 1

        _privilege(db_url, grant=True)
        wait_until("/readyz to be 200 again", lambda: get(f"{base}/readyz")[0] == 200, 30)
        wait_until("the log to say so", lambda: "node healthy again" in node.log(), 10)
        wait_until("the node's row to be clear", lambda: _health(cluster) is None, 10)
        cluster.stop_all()
