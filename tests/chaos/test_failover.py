"""Scenario 16: PostgreSQL failover. Three nodes on a multi-host URL
(``?host=...&host=...&target_session_attrs=read-write``) in front of a primary and its
synchronous streaming standby; the primary is killed (``kill -9``) and the standby promoted.
No fire may be lost or run twice, no node may die, and every node must follow the promoted
server by itself (heartbeats there).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.chaos.expected import Window
from tests.chaos.faults import Fault, FaultLog
from tests.chaos.on_cluster import Settings, observe, record, settle, stuck_and_died
from tests.cluster.harness import Cluster, wait_until
from tests.rig.servers import APP_PASSWORD, APP_USER, PostgresServer, PostgresStandby

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos]

TICKS = 5
SETTINGS = Settings(heartbeat=0.3, dead_after=5, poll=0.2)
STUCK_S = 6


def test_primary_killed_and_standby_promoted(
    postgres_primary_and_standby: tuple[PostgresServer, PostgresStandby], tmp_path: Path
) -> None:
    primary, standby = postgres_primary_and_standby
    standby.synchronous()
    hosts = f"host=127.0.0.1:{primary.port}&host=127.0.0.1:{standby.port}"
    url = f"postgresql://{APP_USER}:{APP_PASSWORD}@/app?{hosts}&target_session_attrs=read-write"
    faults = FaultLog()
    with Cluster(url, tmp_path, ticks=TICKS) as cluster:
        for i in range(3):
            cluster.start_with(f"node-{i}", SETTINGS.options)
        cluster.wait_live()
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=1)
        wait_until(
            "two seconds of steady state",
            lambda: cluster.store.db.now() > start + timedelta(seconds=2),
            20,
        )
        began = time.time()
        primary.kill()
        standby.promote()
        promoted = time.time()
        faults.add(Fault("db_failover", "db", began, promoted, "kill -9 primary, promote"))
        promoted_db = cluster.store.db.now()  # the test's own store follows too
        window = Window(start, promoted_db.replace(microsecond=0) + timedelta(seconds=3))
        settle(cluster, TICKS, window, timeout=60)

        def following() -> bool:
            _, nodes = cluster.store.nodes.live(timedelta(seconds=SETTINGS.dead_s))
            return {n.node_id for n in nodes if n.heartbeat_at > promoted_db} >= set(cluster.nodes)

        wait_until("every node to heartbeat on the promoted server", following, 30)
        first_run = min((e.at for e in cluster.ledger() if e.at > promoted), default=None)
        stuck, died = stuck_and_died(cluster, window, STUCK_S)
        report = observe(
            "postgresql-failover",
            "postgresql",
            cluster,
            ticks=TICKS,
            window=window,
            faults=faults,
            settings=SETTINGS,
            stuck_before_stop=stuck,
            died=died,
            failover_bound=False,
        )
        extra = {
            "promote_s": round(promoted - began, 2),
            "first_run_after_promote_s": None
            if first_run is None
            else round(first_run - promoted, 2),
        }
        problems = record(report, extra)
        assert problems == [], problems
        assert report.duplicated == 0 and report.missing == 0
        assert first_run is not None
