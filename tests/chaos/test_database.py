"""Scenarios 7 and 8: the database restarts, crashes, stays down 10 s, turns read-only,
kills every connection, or stalls (every server process SIGSTOPped) for longer than the dead
threshold. No fire is lost, no node dies, nothing is taken over: no node crashed, so no
node's work may be recovered by another (a stall makes everybody miss heartbeats at once).

These need a server process: SQLite is embedded in the nodes, so they are skipped there.
"""

from __future__ import annotations

import pytest

from tests.chaos.conftest import Chaos
from tests.chaos.runner import (
    SETTINGS,
    Action,
    Scenario,
    Step,
    db_crash,
    db_kill_connections,
    db_read_only,
    db_restart,
    db_stall,
    each,
    trigger_running,
)
from tests.rig.servers import DatabaseServer

pytestmark = [pytest.mark.chaos, pytest.mark.cluster]
slow_tier = pytest.mark.slow_chaos
#: A job that is running on a live node while the database goes away: nobody may take it.
ENV = {"EASYJOB_CHAOS_SLOW_SECONDS": "4"}


def database_fault(chaos: Chaos, server: DatabaseServer | None, name: str, fault: Action) -> None:
    if server is None:
        pytest.skip("SQLite is embedded in each node: there is no database server to fault")
    report = chaos(
        Scenario(
            name,
            ticks=5,
            env=ENV,
            steps=(Step(1, each(trigger_running("slow"), fault)),),
            duration_s=4,
            settle_s=4,
        )
    )
    assert report.unexplained_takeovers == 0 and report.duplicated == 0


def test_database_restart(chaos: Chaos, db_server: DatabaseServer | None) -> None:
    database_fault(chaos, db_server, "db restart", db_restart())


def test_database_stall_longer_than_the_dead_threshold(
    chaos: Chaos, db_server: DatabaseServer | None
) -> None:
    database_fault(chaos, db_server, "db stall 3x dead", db_stall(3 * SETTINGS.dead_threshold_s))


@slow_tier
def test_database_crash(chaos: Chaos, db_server: DatabaseServer | None) -> None:
    database_fault(chaos, db_server, "db crash", db_crash())


@slow_tier
def test_database_down_10_seconds(chaos: Chaos, db_server: DatabaseServer | None) -> None:
    database_fault(chaos, db_server, "db down 10 s", db_crash(downtime_s=10))


@slow_tier
def test_database_read_only_for_3_seconds(chaos: Chaos, db_server: DatabaseServer | None) -> None:
    database_fault(chaos, db_server, "db read-only 3 s", db_read_only(3))


@slow_tier
def test_database_kills_every_connection_three_times(
    chaos: Chaos, db_server: DatabaseServer | None
) -> None:
    database_fault(chaos, db_server, "db kills connections", db_kill_connections(3, every_s=1))
