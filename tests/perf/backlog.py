"""A store at a realistic size, built with bulk inserts, and the time of the planner's due read
on it (the read whose "behind" probe SQLite and PostgreSQL once planned as a scan of every
pending run, issue 25).

The shape is a saturated cluster: *tasks* every-second tasks, a fifth of them due now (the
others in an hour), each with *ahead* PENDING fires written ahead; a third of them also have
*behind* PENDING fires overdue (the backlog), and every task has *history* finished runs.
Statistics are taken afterwards on PostgreSQL and MariaDB (as autovacuum and InnoDB's
automatic statistics would).

Usage: ``python -m tests.perf.backlog URL [TASKS] [AHEAD] [BEHIND] [REPEATS] [DUE_EVERY]`` on
a database of its own (the tables are created; a filled one is reused). Defaults: 3,000 tasks,
25 ahead, 25 behind (100,000 pending runs), 25 repeats, one task in 5 due (1: all due, a
saturated cluster). Prints the due read's median and best time.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t

_CHUNK = 5000


def fill(
    store: Store,
    tasks: int,
    ahead: int,
    behind: int,
    *,
    history: int = 2,
    due_every: int = 5,
    statistics: bool = True,
) -> datetime:
    """Write the catalogue and the runs (see the module docstring; one task in *due_every*
    is due), with the statistics taken unless not *statistics* (a cluster minutes old,
    before autovacuum's first ANALYZE); returns the instant the fires are counted from
    (database time, whole seconds). Reuses a database filled before."""
    count = store.db.read("count", lambda c: c.scalar(sa.select(sa.func.count()).select_from(t)))
    if count:
        first = sa.select(sa.func.min(t.c.next_start_time))
        return store.db.read("now", lambda c: c.scalar(first))
    every = "* * * * * *"
    specs = [TaskSpec(f"plan-{i:06d}", "tests.jobs:noop", cron=every) for i in range(tasks)]
    ids = [row.id for row in store.tasks.upsert(specs)]
    now = store.db.now().replace(microsecond=0)
    rows: list[dict[str, Any]] = []
    for index, task_id in enumerate(ids):
        for k in range(ahead):
            rows.append(_run(task_id, now + timedelta(seconds=k), "PENDING", now))
        for k in range(behind if index % 3 == 0 else 0):
            rows.append(_run(task_id, now - timedelta(seconds=60 + k), "PENDING", now))
        for k in range(history):
            rows.append(_run(task_id, now - timedelta(hours=1, seconds=k), "SUCCESS", now))

    def write(conn: sa.Connection) -> None:
        conn.execute(t.update().values(next_start_time=now + timedelta(hours=1)))
        conn.execute(t.update().where(t.c.id % due_every == 0).values(next_start_time=now))
        for start in range(0, len(rows), _CHUNK):
            conn.execute(d.insert(), rows[start : start + _CHUNK])

    store.db.write("fill", write)
    if statistics:
        analyze(store)
    return now


def _run(task_id: int, fire: datetime, status: str, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "fire_time": fire,
        "due_time": fire,
        "status": status,
        "triggered_by": "cron",
        "attempt": 1,
        "create_time": now,
        "end_time": None if status == "PENDING" else now,
        "shard": 0,
        "shards": 1,
    }


def analyze(store: Store) -> None:
    """Take the statistics of both tables where the engine keeps them (not on SQLite, whose
    planner works without: the store's statements must be planned right there too)."""
    dialect = store.db.dialect
    if dialect == "sqlite":
        return
    with store.db.engine.connect() as conn:
        for table in ("easy_job_task", "easy_job_task_detail"):
            conn.exec_driver_sql(f"ANALYZE {'TABLE ' if dialect != 'postgresql' else ''}{table}")
        conn.commit()


def due_read(store: Store, now: datetime) -> Any:
    """The planner's read as a node of four makes it (see easyjob.node.planner)."""
    return store.tasks.due(
        now + timedelta(seconds=5),
        256,
        share=(0, 4),
        overdue_before=now - timedelta(seconds=30),
        behind_before=now - timedelta(seconds=1),
        behind_since=now - timedelta(minutes=10),  # the node's start
    )


def main(argv: list[str]) -> int:
    url = argv[0]
    given = [int(a) for a in argv[1:6]]
    tasks, ahead, behind, repeats, due_every = given + [3000, 25, 25, 25, 5][len(given) :]
    store = Store.open(url, create=True)
    began = time.perf_counter()
    now = fill(store, tasks, ahead, behind, due_every=due_every)
    count = sa.select(sa.func.count()).select_from(d).where(d.c.status == "PENDING")
    pending = store.db.read("count", lambda c: c.scalar(count))
    filled = time.perf_counter() - began
    print(f"{store.db.dialect}: {tasks} tasks, {pending} pending runs ({filled:.1f} s to fill)")
    spent = []
    for _ in range(repeats):
        began = time.perf_counter()
        found = due_read(store, now)
        spent.append(time.perf_counter() - began)
    print(
        f"due read: {len(found)} tasks, median {statistics.median(spent) * 1000:.1f} ms, "
        f"best {min(spent) * 1000:.1f} ms over {repeats}"
    )
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
