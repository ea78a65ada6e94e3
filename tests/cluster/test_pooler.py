"""Three real nodes through PgBouncer in transaction pooling mode, PgBouncer at its defaults.

Transaction pooling hands each transaction whatever server connection is free: a node that
relied on session state (startup ``options``, session settings, session advisory locks,
statements prepared on an earlier transaction's connection) would be refused at connect,
or run another client's prepared statement, and fires would be lost or run twice.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.cluster.harness import Cluster, duplicates, wait_until
from tests.cluster.test_cluster import expected_fires
from tests.rig.backends import only_backends

pytestmark = pytest.mark.cluster

TICKS = 20
WINDOW_S = 15


@only_backends("pgbouncer")
def test_three_nodes_through_pgbouncer_run_every_fire_exactly_once(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, ticks=TICKS) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
        end = start + timedelta(seconds=WINDOW_S - 1)
        window = [(f"tick-{i}", f) for i in range(TICKS) for f in expected_fires(start, end)]

        def done() -> bool:
            ok = {
                (r.task_name, r.fire_time) for r in cluster.runs() if r.status == RunStatus.SUCCESS
            }
            return all(key in ok for key in window)

        wait_until("every fire in the window to succeed", done, WINDOW_S + 30)
        cluster.stop_all()
        ledger = [(e.task, e.fire_time) for e in cluster.ledger()]
        assert duplicates(ledger) == {}
        assert set(window) <= set(ledger)
        assert all(r.attempt == 1 for r in cluster.runs())
        for node in cluster.nodes.values():
            log = node.log()
            assert "prepared statement" not in log and "startup parameter" not in log, log[-3000:]
        assert {cluster.node_status(n) for n in cluster.nodes} == {"STOPPED"}
