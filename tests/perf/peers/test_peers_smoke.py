"""Peers end to end: each peer for 8 s with 10 schedules on SQLite, in its own virtualenv.

Skipped unless ``EASYJOB_PEERS=1``: the first run installs APScheduler 4 and 3 from the package
index into ``.perf-venvs/`` (or ``$EASYJOB_PEERS_VENVS``), which needs the network and minutes.
"""

from __future__ import annotations

import os

import pytest

from tests.perf.peers import run_peers

pytestmark = pytest.mark.skipif(
    os.environ.get("EASYJOB_PEERS") != "1",
    reason="peer benchmark smoke test: set EASYJOB_PEERS=1 (installs APScheduler from PyPI)",
)


@pytest.mark.parametrize("peer", list(run_peers.PEERS))
def test_peer_runs_on_sqlite(peer: str) -> None:
    (report,) = run_peers.run(backend="sqlite", schedules=[10], duration=8.0, peers=[peer])
    assert report["peer"] == peer
    assert report["backend"] == "sqlite"
    assert report["runs"] > 0, report
    assert report["expected"] > 0
    assert set(report["lateness_ms"]) == {"p50", "p95", "p99", "max"}
    assert len(report["cpu_s"]) == run_peers.PEERS[peer].processes
    assert all(cpu > 0 for cpu in report["cpu_s"])
