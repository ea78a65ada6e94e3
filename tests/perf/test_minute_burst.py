"""The minute-burst script's servers: the durable one runs at PostgreSQL's durable defaults
(the issue's "durable settings"), the other as the test rig's; both count statements."""

from __future__ import annotations

import pytest

from tests.perf.minute_burst import DurablePostgres, StatsPostgres, format_table
from tests.rig.servers import PostgresServer


def _settings(server: PostgresServer) -> dict[str, str]:
    with server._connect() as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'full_page_writes', 'shared_preload_libraries', "
            "'pg_stat_statements.track_planning')"
        ).fetchall()
    return {str(name): str(value) for name, value in rows}


@pytest.mark.parametrize(
    ("server_class", "durable"), [(DurablePostgres, "on"), (StatsPostgres, "off")]
)
def test_the_burst_servers_settings(server_class: type[PostgresServer], durable: str) -> None:
    if PostgresServer.missing():
        pytest.skip(PostgresServer.missing() or "")
    server = server_class()
    try:
        server.start()
        found = _settings(server)
    finally:
        server.close()
    assert found["fsync"] == found["full_page_writes"] == durable, found
    assert found["shared_preload_libraries"] == "pg_stat_statements"
    assert found["pg_stat_statements.track_planning"] == "on"


def test_the_table_shows_each_minute_and_the_costliest_statements() -> None:
    minute = {
        "minute": "2026-11-26T20:13:00+00:00",
        "runs": 20000,
        "missing": 0,
        "duplicates": 0,
        "drain_s": 41.77,
        "late_p50_ms": 23222.7,
        "late_p99_ms": 41475.8,
        "drain_runs_per_s": 478.8,
        "node_ms_per_run": 0.974,
        "db_ms_per_run": 0.432,
        "rows_per_run": 3.99,
        "pending_per_task": 6.18,
    }
    statement = {"calls": 3, "rows": 9, "total_ms": 1.5, "plan_ms": 0.5, "query": "SELECT 1"}
    result = {
        "tasks": 20000,
        "nodes": 3,
        "db": "postgresql",
        "settings": {"fsync": "on"},
        "live_after_s": 29.9,
        "minutes": [minute],
        "top_statements": [statement],
    }
    table = format_table(result).splitlines()
    assert table[0].startswith("20,000 minute tasks, 3 node(s), postgresql {'fsync': 'on'}")
    assert table[2].split() == [
        "20:13",
        "20000",
        "0",
        "0",
        "41.77",
        "23222.7",
        "41475.8",
        "478.8",
        "0.974",
        "0.432",
        "3.99",
        "6.18",
    ]
    assert table[3].endswith("SELECT 1") and "3 calls" in table[3]
