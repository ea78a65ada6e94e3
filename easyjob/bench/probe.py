"""The database's own rate for easyjob's claim pattern, measured beside a trial.

Each probe process loops: read a batch of PENDING rows' ids and versions, then one batched
version-checked UPDATE of the claim's shape (``id IN (...) AND status = 'PENDING' AND
version = CASE id ...``, bumping ``version``); rows stay PENDING so the pool never runs dry.
The rate (rows updated per second, all processes) is what the database can do for this
pattern here: easyjob's throughput is reported as a fraction of it.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from datetime import UTC, datetime

import sqlalchemy as sa

from easyjob.core.records import TaskSpec
from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.store import Store
from easyjob.store.database import at_versions
from easyjob.store.engine import db_now
from easyjob.store.schema import task_detail_table as d

__all__ = ["probe_claim_rate"]

POOL = 20_000
BATCH = 100


def probe_claim_rate(url: str, *, processes: int, seconds: float) -> float:
    """Rows per second updated by *processes* probe processes for *seconds*."""
    first_id = _seed(url)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        counts = pool.starmap(_claim_loop, [(url, first_id, seconds, i) for i in range(processes)])
    return round(sum(counts) / seconds, 1)


def _seed(url: str) -> int:
    store = Store.open(url, create=True)
    try:
        (task,) = store.tasks.upsert(
            [TaskSpec(name="probe-claims", func="easyjob.bench.probe:none", cron="0 0 1 1 *")]
        )
        store.tasks.set_status("probe-claims", TaskStatus.PAUSED)  # nodes leave it alone

        def write(conn: sa.Connection) -> int:
            conn.execute(d.delete().where(d.c.task_id == task.id))
            epoch = datetime(2000, 1, 1, tzinfo=UTC)
            rows = [
                {
                    "task_id": task.id,
                    "fire_time": epoch,
                    "due_time": epoch,
                    "status": str(RunStatus.PENDING),
                    "triggered_by": str(Trigger.MANUAL),
                    "attempt": i + 1,
                    "create_time": epoch,
                }
                for i in range(POOL)
            ]
            conn.execute(d.insert(), rows)
            return int(conn.scalar(sa.select(sa.func.min(d.c.id)).where(d.c.task_id == task.id)))

        return store.db.write("probe_seed", write)
    finally:
        store.close()


def _claim_loop(url: str, first_id: int, seconds: float, seed: int) -> int:
    store = Store.open(url)
    rng = random.Random(seed)
    me = f"probe-{seed}"
    done = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            low = first_id + rng.randrange(0, POOL - BATCH)

            def claim(conn: sa.Connection, low: int = low) -> int:
                rows = conn.execute(
                    sa.select(d.c.id, d.c.version).where(
                        d.c.id.between(low, low + BATCH - 1),
                        d.c.status == str(RunStatus.PENDING),
                    )
                ).all()
                if not rows:
                    return 0
                expected = {row.id: row.version for row in rows}
                stmt = (
                    d.update()
                    .where(
                        at_versions(d, expected),
                        d.c.status == str(RunStatus.PENDING),
                    )
                    .values(version=d.c.version + 1, node_id=me, claim_time=db_now())
                )
                return int(conn.execute(stmt).rowcount)

            done += store.db.write("probe_claim", claim)
    finally:
        store.close()
    return done
