"""Scenario 5: clock skew. Three nodes under libfaketime: one 30 s behind, one 45 s ahead,
one drifting (its wall clock runs 2 % fast). Only the wall clock is faked, as on a host whose
clock is wrong: see faketime_site/sitecustomize.py for why the monotonic clock cannot be.
The database clock is the cluster's one clock, so: no false recoveries (nobody is declared
dead while every node is live), no fire starts before its fire time, and none late by more
than one poll.

Lateness is measured in database time (the row's ``start_time`` minus its ``fire_time``):
the ledger's wall clock is each node's faked one. SQLite is skipped: its "database time" is
the reading node's own clock, so a skewed SQLite node has no shared clock to agree with.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus, Trigger
from tests.chaos.checker import FAILOVER_SLACK_S
from tests.chaos.expected import Window
from tests.chaos.faults import FaultLog
from tests.chaos.on_cluster import (
    Settings,
    db_lateness_p99_ms,
    node_offsets_ms,
    observe,
    record,
    recovery_runs,
    settle,
    stuck_and_died,
)
from tests.chaos.runner import LIBFAKETIME
from tests.cluster.harness import Cluster
from tests.rig.backends import SERVER_BACKENDS, only_backends

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos, only_backends(*SERVER_BACKENDS)]

TICKS = 4
SETTINGS = Settings(heartbeat=0.3, dead_after=5, poll=0.2)
WINDOW_S = 20
#: node id -> FAKETIME (libfaketime's offset[ rate] syntax; C locale: '.' decimals)
CLOCKS = {"node-0": "-30", "node-1": "+45", "node-2": "+0 x1.02"}
FIXED_OFFSETS_S = {"node-0": -30.0, "node-1": 45.0}
SITE = Path(__file__).with_name("faketime_site")


@pytest.mark.skipif(not LIBFAKETIME, reason="libfaketime is not installed (make deps)")
def test_skewed_and_drifting_clocks(db_backend: str, db_url: str, tmp_path: Path) -> None:
    faults = FaultLog()
    with Cluster(db_url, tmp_path, ticks=TICKS) as cluster:
        for node_id, faketime in CLOCKS.items():
            env = {
                "LD_PRELOAD": LIBFAKETIME,
                "FAKETIME": faketime,
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "PYTHONPATH": os.pathsep.join([str(SITE), cluster.env["PYTHONPATH"]]),
            }
            cluster.start_with(node_id, SETTINGS.options, env=env)
        cluster.wait_live(timeout=60)
        offsets = node_offsets_ms(cluster)
        # The skew is real: each node measured its own clock against the database's.
        assert abs(offsets["node-0"] / 1000 + 30) < 2, offsets
        assert abs(offsets["node-1"] / 1000 - 45) < 2, offsets
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=1)
        end = start + timedelta(seconds=WINDOW_S)
        window = Window(start, end)
        for node_id, faketime in CLOCKS.items():
            faults.instant("clock_skew", node_id, faketime)
        settle(cluster, TICKS, window, timeout=WINDOW_S + 60)
        stuck, died = stuck_and_died(cluster, window, 6)
        drift_ms = node_offsets_ms(cluster)["node-2"] - offsets["node-2"]
        final_offsets = {n: ms / 1000 for n, ms in node_offsets_ms(cluster).items()}
        report = observe(
            "clock-skew",
            db_backend,
            cluster,
            ticks=TICKS,
            window=window,
            faults=faults,
            settings=SETTINGS,
            stuck_before_stop=stuck,
            died=died,
            clock_offsets_s={**final_offsets, **FIXED_OFFSETS_S},
            failover_bound=False,
        )
        runs = [
            r
            for r in cluster.runs()
            if r.triggered_by == Trigger.CRON and r.fire_time in window and r.start_time
        ]
        early_ms = max(
            (r.fire_time - r.start_time).total_seconds() * 1000  # type: ignore[operator]
            for r in runs
        )
        early_by_node = {
            n: round(
                max(
                    (r.fire_time - r.start_time).total_seconds() * 1000  # type: ignore[operator]
                    for r in runs
                    if r.node_id == n
                ),
                1,
            )
            for n in CLOCKS
            if any(r.node_id == n for r in runs)
        }
        ledger_p99 = report.lateness_p99_ms
        report = replace(report, lateness_p99_ms=db_lateness_p99_ms(cluster, window))
        problems = record(
            report,
            {
                "lateness_from": "database start_time - fire_time",
                "ledger_lateness_p99_ms_offset_corrected": ledger_p99,
                "max_early_ms": round(early_ms, 1),
                "max_early_ms_by_node": early_by_node,
                "node_2_drift_ms": drift_ms,
                "recovery_runs": len(recovery_runs(cluster)),
            },
        )
        assert problems == [], problems
        assert recovery_runs(cluster) == []  # no false recovery while every node is live
        assert drift_ms > 100, f"node-2's clock did not drift ({drift_ms} ms): FAKETIME ignored?"
        per_node = {n: sum(1 for r in runs if r.node_id == n) for n in CLOCKS}
        assert all(per_node.values()), f"a skewed node ran nothing: {per_node}"
        poll_ms = SETTINGS.poll * 1000
        # never early: a node's database time is a lower bound (its monotonic clock since
        # the last heartbeat reply), whatever its wall clock says
        assert early_ms <= 0, f"a fire started {early_ms:.1f} ms before its fire time"
        late = report.lateness_p99_ms
        assert late is not None and late <= poll_ms + FAILOVER_SLACK_S * 1000, late
        assert all(r.status == RunStatus.SUCCESS for r in runs)
