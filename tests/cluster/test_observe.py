"""A real node process serving ``--http``: its counters move while jobs run, ``/healthz``
follows its heartbeat through a database stall, and the endpoint ends with the node."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, get, samples, total, wait_until
from tests.rig.servers import DatabaseServer, free_port

pytestmark = pytest.mark.cluster


@contextmanager
def sqlite_writes_blocked(db_url: str) -> Iterator[None]:
    """Hold SQLite's write lock from another connection: every write of the node (its
    heartbeat first) waits, as writes wait on a stalled server."""
    conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@contextmanager
def stalled(db_url: str, server: DatabaseServer | None) -> Iterator[None]:
    if server is None:
        with sqlite_writes_blocked(db_url):
            yield
        return
    server.pause()
    try:
        yield
    finally:
        server.resume()


def test_metrics_move_and_health_follows_the_heartbeat(
    db_url: str, db_server: DatabaseServer | None, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with Cluster(db_url, tmp_path, ticks=3) as cluster:
        cluster.start("obs-1", http=f"127.0.0.1:{port}")
        cluster.wait_live("obs-1")
        first = samples(base)
        assert first[("easyjob_node_info", (("node_id", "obs-1"),))] == 1

        def moved() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            now = samples(base)
            counters = (
                "easyjob_runs_started_total",
                "easyjob_runs_finished_total",
                "easyjob_claims_total",
                "easyjob_run_lateness_seconds_count",
            )
            return now if all(total(now, c) >= total(first, c) + 6 for c in counters) else None

        later = wait_until("the node's counters to move", moved, 30)
        tick = (("outcome", "success"), ("task", "tick-0"))
        assert later[("easyjob_runs_finished_total", tick)] >= 1
        assert total(later, "easyjob_db_round_trips_total") > total(
            first, "easyjob_db_round_trips_total"
        )
        assert 0 <= later[("easyjob_heartbeat_age_seconds", ())] < 1.0

        status, body = get(f"{base}/healthz")
        assert (status, json.loads(body)["status"]) == (200, "ok")
        assert get(f"{base}/readyz")[0] == 200

        with stalled(db_url, db_server):
            wait_until("/healthz to turn 503", lambda: get(f"{base}/healthz")[0] == 503, 20)
            status, body = get(f"{base}/healthz")
            assert status == 503
            assert json.loads(body)["reason"].startswith("heartbeat is stale: last accepted")
            assert get(f"{base}/readyz")[0] == 503
        wait_until("/healthz to be 200 again", lambda: get(f"{base}/healthz")[0] == 200, 30)

        cluster.stop_all()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
