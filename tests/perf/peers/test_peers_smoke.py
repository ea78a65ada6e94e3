"""Peers end to end: each peer for 8 s with 10 schedules on SQLite, in its own virtualenv, and
easyjob beside APScheduler 3 in the same run, as ``python -m tests.perf.peers.run_peers`` does.

Skipped unless ``EASYJOB_PEERS=1``: the first run installs APScheduler 4 and 3 from the package
index into ``.perf-venvs/`` (or ``$EASYJOB_PEERS_VENVS``), which needs the network and minutes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def test_easyjob_runs_beside_a_peer_in_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--db-backend", "sqlite", "--schedules", "10", "--duration", "8"]
    code = run_peers.main([*argv, "--peers", "apscheduler3", "--easyjob-nodes", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    (ours,) = document["easyjob"]
    (theirs,) = document["peers"]
    assert (ours["peer"], ours["processes"], theirs["peer"]) == ("easyjob", 2, "apscheduler3")
    assert ours["window_s"] == theirs["window_s"] == 3
    assert ours["expected"] == theirs["expected"] == 30
    assert ours["runs"] == 30 and ours["missed"] == 0 and ours["duplicates"] == 0, ours
    assert len(ours["cpu_s"]) == len(ours["cpu_window_s"]) == 2
    assert ours["cpu_ms_per_run"] > 0
    table = err[err.index("scheduler") :]
    assert "easyjob" in table and "apscheduler3" in table and "target" in table


def test_huey_runs_its_minute_bursts(tmp_path: Path) -> None:
    from tests.perf.peers.run_burst import HUEY, run_huey

    python = run_peers.ensure_venv(HUEY)
    # Huey's periodic read every 4 s instead of 60: a warm-up burst, then two measured ones
    report = run_huey(python, schedules=30, minutes=2, workdir=tmp_path, period=4.0)
    assert report["error"] is None, report
    assert report["versions"]["huey"].startswith("3.5")
    assert [m["runs"] for m in report["minutes"]] == [30, 30], report
    assert all(m["missing"] == 0 and m["duplicates"] == 0 for m in report["minutes"])
    assert all(m["cpu_ms_per_run"] > 0 for m in report["minutes"]), report
