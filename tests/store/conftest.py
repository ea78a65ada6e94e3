"""Store fixtures: a fresh schema on each of sqlite, postgresql and mariadb, and on
PostgreSQL behind PgBouncer in transaction pooling mode (``pgbouncer``)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from easyjob.core.records import Advance, PlannedFire, TaskSpec
from easyjob.store import Store
from tests.rig.backends import ALL_BACKENDS, backend_params


@pytest.fixture(params=backend_params(ALL_BACKENDS))
def db_backend(request: pytest.FixtureRequest) -> str:
    """This run's backend: the three databases, and ``pgbouncer`` (PostgreSQL behind it)."""
    backend: str = request.param
    return backend


def every_second(name: str = "job", **kwargs: object) -> TaskSpec:
    return TaskSpec(name=name, func="tests.jobs:noop", cron="* * * * * *", **kwargs)  # type: ignore[arg-type]


def make_pending(store: Store, name: str = "job", fires: int = 1) -> list[int]:
    """Register *name* and write *fires* PENDING runs for it; returns their run ids."""
    (task,) = store.tasks.upsert([every_second(name)])
    assert task.next_start_time is not None
    times = [task.next_start_time + timedelta(seconds=i) for i in range(fires)]
    advance = Advance(
        task.id,
        task.version,
        times[-1] + timedelta(seconds=1),
        tuple(PlannedFire(t) for t in times),
    )
    assert store.tasks.advance("materializer", [advance]) == [task.id]
    horizon = times[-1] + timedelta(seconds=1)
    return [c.id for c in store.runs.pending(horizon, 1000) if c.task_id == task.id]


def race_in_processes(
    target: Callable[..., None], args: list[tuple[Any, ...]], *, timeout: float
) -> dict[str, list[int]]:
    """One spawned process per *args* tuple runs ``target(*args, start, out)``; all are
    released together by *start* and each puts ``(node, ids it won)`` on *out*. Returns
    those by node, once every process has exited cleanly."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, out)) for a in args]
    for proc in procs:
        proc.start()
    start.set()
    results = dict(out.get(timeout=timeout) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return results


def pending_fires(store: Store, name: str, fires: int, **spec: object) -> list[datetime]:
    """Register *name* and write *fires* every-second PENDING runs, the first due a minute
    ago at most (the store's clock is real: times are relative to its now)."""
    (task,) = store.tasks.upsert([every_second(name, **spec)])
    start = store.db.now().replace(microsecond=0) - timedelta(seconds=fires)
    times = [start + timedelta(seconds=i) for i in range(fires)]
    planned = tuple(PlannedFire(t) for t in times)
    after = times[-1] + timedelta(seconds=1)
    advance = Advance(task.id, task.version, after, planned, task.shards, task.broadcast)
    assert store.tasks.advance("planner", [advance]) == [task.id]
    return times
