"""The database's own rate for easyjob's claim pattern, measured beside a trial.

Each probe process loops: read a batch of PENDING rows' ids and versions, then one batched
version-checked UPDATE of the claim's shape, bumping ``version``; rows stay PENDING so the
pool never runs dry (:meth:`easyjob.store.contract.BenchStore.probe_claim`).
The rate (rows updated per second, all processes) is what the database can do for this
pattern here: easyjob's throughput is reported as a fraction of it.
"""

from __future__ import annotations

import multiprocessing
import random
import time

from easyjob.core.records import TaskSpec
from easyjob.core.states import TaskStatus
from easyjob.store import Store

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

        return store.bench.seed_probe(task.id, POOL)
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

            done += store.bench.probe_claim(low, BATCH, me)
    finally:
        store.close()
    return done
