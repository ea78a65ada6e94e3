"""The store's cost per run of a saturated node's cycle, without a node: the pending read, the
claim-and-start of what it found (serial runs, with their admission deadlines, as the loader
writes them) and the finish of the runs won, in batches of K, until every run has run.

One PENDING run per task, all due now (a minute burst's shape), N tasks; CPU microseconds per
run of each step. Run it from each checkout in turn to compare (the machine is shared: take
the ratio of runs taken back to back).

Usage: ``python -m tests.perf.claim_cycle URL [N] [K]`` (a database of its own: the tables
are created, tasks named ``cycle-*`` registered and the run table emptied first). Defaults:
6,000 tasks, batches of 30 (about what a saturated node claims at a time in a burst).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.node.writer import RunWriter
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d

T = TypeVar("T")


def main(argv: list[str]) -> int:
    url = argv[0]
    size = int(argv[1]) if len(argv) > 1 else 6000
    batch = int(argv[2]) if len(argv) > 2 else 30
    store = Store.open(url, create=True)
    specs = [
        TaskSpec(name=f"cycle-{i:06d}", func="tests.jobs:noop", cron="* * * * *")
        for i in range(size)
    ]
    task_ids = [row.id for row in store.tasks.upsert(specs)]
    now = store.db.now().replace(microsecond=0)

    def fill(conn: sa.Connection) -> None:
        conn.execute(d.delete())
        rows = [
            {
                "task_id": task_id,
                "fire_time": now,
                "due_time": now,
                "status": "PENDING",
                "triggered_by": "cron",
                "create_time": now,
            }
            for task_id in task_ids
        ]
        conn.execute(d.insert(), rows)

    store.db.write("fill", fill)
    spent: dict[str, float] = {}

    def timed(step: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        cpu = time.process_time()
        result = call(*args, **kwargs)
        spent[step] = spent.get(step, 0.0) + time.process_time() - cpu
        return result

    horizon = now + timedelta(seconds=2)
    runs = 0
    writer = RunWriter(store, "n1")  # the loader's: it adds each run's admission deadline
    while found := timed("pending", store.runs.pending, horizon, batch, node_id="n1"):
        serial = {c.id for c in found}
        won = timed("claim_started", writer.claim_started, found, exclusive=serial)
        timed("finish", store.runs.finish_many, won)
        runs += len(won)
    store.close()
    total = sum(spent.values()) * 1e6 / runs
    steps = ", ".join(f"{step} {cpu * 1e6 / runs:.1f}" for step, cpu in spent.items())
    print(f"batches of {batch}, {runs} runs: {total:.1f} us of CPU per run ({steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
