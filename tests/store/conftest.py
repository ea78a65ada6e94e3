"""Store fixtures: a fresh schema on each of sqlite, postgresql and mariadb, and on
PostgreSQL behind PgBouncer in transaction pooling mode (``pgbouncer``)."""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, Candidate, PlannedFire, Run, TaskSpec
from easyjob.store import RUNS_TABLE, Store
from tests.conftest import FAST_RETRY
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


def waiting_on_a_lock(store: Store) -> int:
    """Sessions of this database waiting on a row lock, as the server reports them (on
    MariaDB without the PROCESS privilege: a locking read of ours running over 200 ms)."""
    if store.db.dialect == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
    else:
        sql = (
            "SELECT count(*) FROM information_schema.processlist WHERE id <> connection_id()"
            " AND info LIKE '%FOR UPDATE%' AND time_ms > 200"
        )
    return int(store.db.read("test", lambda conn: conn.scalar(sa.text(sql))))


def exclusive_start_by_b(store: Store, how: str, candidate: Candidate) -> Callable[[], Any]:
    """Node B's start of *candidate* as an exclusive run, for :func:`start_beside_a_held_start`,
    either way a run starts: *how* ``start`` claims it now and returns its ``start_many``,
    ``claim_started`` returns its claim and start in one write."""
    if how == "start":
        (run,) = store.runs.claim("node-b", [candidate])
        return lambda: store.runs.start_many([run], exclusive={run.id})
    return lambda: store.runs.claim_started("node-b", [candidate], exclusive={candidate.id})


def start_beside_a_held_start(
    store: Store, db_url: str, a_run: Run, b_start: Callable[[], Any]
) -> tuple[Any, Any]:
    """Node A (a store of its own on *db_url*) starts *a_run* and is held just after its
    start's UPDATE, its transaction open; then *b_start* runs on *store* until it returns or
    waits on A's lock (as the server reports it); then A commits. Returns what A's
    ``start_many`` and *b_start* returned."""
    node_a = Store.open(db_url, retry=FAST_RETRY)
    written, go = threading.Event(), threading.Event()

    def hold_after_the_start(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        # the UPDATE, maybe after PostgreSQL's WITH of the rows it locks (see Dialect.winners)
        if re.search(rf"\bUPDATE {RUNS_TABLE}\b", statement) and not written.is_set():
            written.set()  # A's run is RUNNING in its transaction; hold it open
            go.wait(30)

    sa.event.listen(node_a.db.engine, "after_cursor_execute", hold_after_the_start)
    a_started: list[Any] = []
    b_result: list[Any] = []
    a = threading.Thread(
        target=lambda: a_started.append(node_a.runs.start_many([a_run], exclusive={a_run.id})),
        daemon=True,
    )
    a.start()
    try:
        assert written.wait(30)
        b = threading.Thread(target=lambda: b_result.append(b_start()), daemon=True)
        b.start()
        deadline = time.monotonic() + 30
        while b.is_alive() and not waiting_on_a_lock(store) and time.monotonic() < deadline:
            time.sleep(0.01)  # until B has either written or waits on A's lock
    finally:
        go.set()
        a.join(30)
    b.join(30)
    node_a.close()
    assert a_started and b_result
    return a_started[0], b_result[0]
