"""What an advance's fire INSERT costs on PostgreSQL: psycopg's executemany (one statement
per row, each planned: prepared statements are off) against the store's one
``INSERT ... SELECT unnest(arrays)`` (``PostgreSQLDialect.insert_rows``), alternating.

Usage: ``python -m tests.perf.insert_cost [ROUNDS]`` (default 6). Starts the test rig's
PostgreSQL, registers 300 every-second tasks and, per round and way, runs 10 advances of all
300 tasks with one fire each; prints the medians per 300-row advance: the client's CPU
(this process), the server's CPU (its backends for the database, from /proc; 10 ms ticks)
and the wall time. Each advance also updates the 300 task rows, the same both ways.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import timedelta

from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.store import Store
from easyjob.store.dialects.base import Dialect
from easyjob.store.dialects.postgresql import PostgreSQLDialect
from tests.rig.servers import PostgresServer

TASKS = 300
ADVANCES = 10


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 6
    server = PostgresServer()
    unnest = PostgreSQLDialect.insert_rows
    try:
        server.start()
        store = Store.open(server.create_database("insert_cost"), create=True)
        specs = [TaskSpec(f"t{i}", "tests.jobs:noop", cron="* * * * * *") for i in range(TASKS)]
        versions = {task.id: task.version for task in store.tasks.upsert(specs)}
        at = store.now().replace(microsecond=0) + timedelta(days=1)
        figures: dict[str, list[tuple[float, float, float]]] = {"executemany": [], "unnest": []}
        for _ in range(rounds):
            for way, rows in figures.items():
                PostgreSQLDialect.insert_rows = unnest if way == "unnest" else Dialect.insert_rows  # type: ignore[method-assign]
                with server._connect() as conn:
                    pids = [
                        pid
                        for (pid,) in conn.execute(
                            "SELECT pid FROM pg_stat_activity WHERE datname = 'insert_cost'"
                        ).fetchall()
                    ]
                server0, client0, wall0 = (
                    sum(map(_cpu_s, pids)),
                    time.process_time(),
                    time.perf_counter(),
                )
                for _ in range(ADVANCES):
                    at += timedelta(seconds=1)
                    advances = [
                        Advance(task_id, version, at + timedelta(seconds=1), (PlannedFire(at),))
                        for task_id, version in versions.items()
                    ]
                    for task_id in store.tasks.advance("insert_cost", advances):
                        versions[task_id] += 1
                client, wall = time.process_time() - client0, time.perf_counter() - wall0
                server_s = sum(map(_cpu_s, pids)) - server0
                rows.append(
                    (1000 * client / ADVANCES, 1000 * server_s / ADVANCES, 1000 * wall / ADVANCES)
                )
        store.close()
    finally:
        PostgreSQLDialect.insert_rows = unnest  # type: ignore[method-assign]
        server.close()
    for way, rows in figures.items():
        client, server_ms, wall = (statistics.median(row[i] for row in rows) for i in range(3))
        print(
            f"{way:12} per {TASKS}-row advance: client {client:.1f} ms, server {server_ms:.1f} ms,"
            f" wall {wall:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
