"""CPU of reading back the runs a planner wrote started (``read_started``; issue 25, goal 3).

A behind planner inserts the fires its node has workers for already RUNNING, then reads
them back with their task's columns to run them. This times that read alone: K runs of K
tasks, RUNNING for one node, inserted at one database time; 300 reads on one connection,
CPU per read (the thread's), the least and the median of 5 repeats.

Usage::

    python -m tests.perf.started_read_cost sqlite:////tmp/rs.db 5
    python -m tests.perf.started_read_cost sqlite:////tmp/rs.db 30

The database must hold no tasks but this tool's (it writes 6,000 and replaces every run row).
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.core.states import RunStatus
from easyjob.store import Store
from easyjob.store.runs.reads import read_started
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t

TASKS = 6000
READS = 300


def _started(conn: sa.Connection, runs: int) -> tuple[list[int], datetime]:
    """Replace every run row by *runs* RUNNING runs of node ``n1``, one per task, inserted at
    one database time; returns their task ids and that time."""
    now = conn.scalar(sa.select(sa.func.max(t.c.update_time)))
    ids = list(conn.scalars(sa.select(t.c.id).order_by(t.c.id).limit(runs)))
    conn.execute(d.delete())
    row: dict[str, Any] = {
        "status": str(RunStatus.RUNNING),
        "node_id": "n1",
        "fire_time": now,
        "due_time": now,
        "create_time": now,
        "triggered_by": "cron",
    }
    conn.execute(d.insert(), [{**row, "task_id": task_id} for task_id in ids])
    return ids, now


def measure(url: str, runs: int) -> tuple[float, float]:
    """Microseconds of CPU per read of *runs* started runs: least and median of 5."""
    store = Store.open(url, create=True)
    count = sa.select(sa.func.count()).select_from(t)
    if store.db.read("tasks", lambda conn: conn.scalar(count)) < TASKS:
        specs = [
            TaskSpec(name=f"rs-{i:05d}", func="tests.perf.noop_jobs:noop", cron="* * * * *")
            for i in range(TASKS)
        ]
        store.tasks.upsert(specs)
    ids, now = store.db.write("started", lambda conn: _started(conn, runs))
    fires = [(task_id, now) for task_id in ids]
    times = []
    with store.db.engine.connect() as conn:
        assert len(read_started(conn, "n1", fires, now)) == runs
        for _ in range(50):  # warm: statement cache, pages
            read_started(conn, "n1", fires, now)
        for _ in range(5):
            began = time.thread_time()
            for _ in range(READS):
                read_started(conn, "n1", fires, now)
            times.append((time.thread_time() - began) / READS * 1e6)
    store.close()
    return min(times), statistics.median(times)


def main(argv: list[str]) -> int:
    url, runs = argv[0], int(argv[1])
    least, median = measure(url, runs)
    print(
        f"read_started of {runs} runs: {least:.0f} us of CPU a read (least of 5), "
        f"{median:.0f} median; {least / runs:.0f} us a run"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
