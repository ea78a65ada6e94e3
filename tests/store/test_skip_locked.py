"""The ``skip_locked`` claim mode on PostgreSQL: one locking claim of the next due runs, which
steps over rows another transaction holds instead of waiting for them or losing races over
them. SQLite and MariaDB refuse the mode by name (see Database.skip_locked for why)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.config import NodeConfig
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.errors import ConfigError
from easyjob.node.node import Node
from easyjob.registry import Registry
from easyjob.store import Store
from easyjob.store.runs.reads import read_runs
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.conftest import FAST_RETRY
from tests.store.conftest import make_pending, race_in_processes


@pytest.fixture
def locking(store: Store) -> Store:
    if not store.skip_locked:
        pytest.skip(f"not offered on {store.server} (tested below: the mode is refused)")
    return store


def _later(store: Store) -> datetime:
    now: datetime = store.now()
    return now + timedelta(days=1)


def _rows(store: Store, ids: list[int]) -> dict[int, tuple[str, str | None, int]]:
    def read(conn: sa.Connection) -> dict[int, tuple[str, str | None, int]]:
        query = sa.select(d.c.id, d.c.status, d.c.node_id, d.c.version).where(d.c.id.in_(ids))
        return {row.id: (row.status, row.node_id, row.version) for row in conn.execute(query)}

    return store.db.read("test", read)


@contextmanager
def _held(store: Store, query: sa.Select[tuple[int]]) -> Iterator[list[int]]:
    """Another transaction holding *query*'s rows locked until the block ends."""
    with store.db.engine.connect() as conn, conn.begin():
        yield list(conn.scalars(query.with_for_update()))


def _in_thread(fn: object, timeout: float = 20.0) -> object:
    """Call *fn* in a thread; fail (instead of hanging) if it waits on a lock."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)  # type: ignore[operator]
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the claim waited for a locked row"
    return result[0]


def test_claims_the_earliest_due_runs_up_to_the_limit(locking: Store) -> None:
    ids = make_pending(locking, fires=5)
    won = locking.runs.claim_next("node-a", _later(locking), 3)
    assert [r.id for r in won] == ids[:3]
    assert all(r.status == RunStatus.CLAIMED and r.node_id == "node-a" for r in won)
    assert [(r.task_name, r.version) for r in won] == [("job", 1)] * 3
    rows = _rows(locking, ids)
    assert [rows[i] for i in ids] == [("CLAIMED", "node-a", 1)] * 3 + [("PENDING", None, 0)] * 2
    assert [r.id for r in locking.runs.claim_next("node-b", _later(locking), 10)] == ids[3:]
    assert locking.runs.claim_next("node-b", _later(locking), 10) == []


def test_the_runs_won_come_in_the_updates_reply_as_written(locking: Store) -> None:
    """The claim's UPDATE returns the runs it won with their task's columns (``UPDATE ...
    FROM task ... RETURNING``): nothing is sent after it (a read of the runs won was, a
    round trip more in every claim), and they equal a fresh read, in due order."""
    ids = make_pending(locking, "a", fires=2) + make_pending(locking, "b", fires=2)
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement.split()[0].upper())

    sa.event.listen(locking.db.engine, "before_cursor_execute", record)
    try:
        won = locking.runs.claim_next("node-a", _later(locking), 3)
    finally:
        sa.event.remove(locking.db.engine, "before_cursor_execute", record)
    assert sent[-1] == "UPDATE", sent
    assert len(won) == 3
    fresh = locking.db.read("test", lambda conn: read_runs(conn, [r.id for r in won]))
    assert won == fresh
    assert [r.id for r in won] == sorted(ids, key=lambda i: (_due(locking, i), i))[:3]


def _due(store: Store, run_id: int) -> datetime:
    due: datetime = store.db.read(
        "test", lambda conn: conn.scalar(sa.select(d.c.due_time).where(d.c.id == run_id))
    )
    return due


def test_only_runs_due_by_the_horizon_of_claimable_tasks(locking: Store) -> None:
    ids = make_pending(locking, "job", fires=3)
    paused = make_pending(locking, "paused", fires=2)
    other = make_pending(locking, "other", fires=1)
    locking.tasks.set_status("paused", TaskStatus.PAUSED)

    def retarget(conn: sa.Connection) -> None:
        conn.execute(t.update().where(t.c.name == "other").values(func="tests.jobs:elsewhere"))

    locking.db.write("test", retarget)
    excluded = {locking.tasks.get("other").id}  # a task that is not this node's code
    first_due = _rows_due(locking, ids[0])
    won = locking.runs.claim_next("node-a", first_due, 10, excluded)
    assert [r.id for r in won] == ids[:1]
    won = locking.runs.claim_next("node-a", _later(locking), 10, excluded)
    assert [r.id for r in won] == ids[1:]
    rows = {i: s for i, (s, _, _) in _rows(locking, paused + other).items()}
    # the pause deleted the paused task's fires planned ahead, and marked SKIPPED any that
    # were already due (on a slow machine the first is due a second after make_pending)
    assert {i: s for i, s in rows.items() if i in other} == {i: "PENDING" for i in other}
    assert {s for i, s in rows.items() if i in paused} <= {"SKIPPED"}
    # without the exclusion, the other task's run is claimable; the paused ones never were
    assert [r.id for r in locking.runs.claim_next("node-a", _later(locking), 10)] == other


def _rows_due(store: Store, run_id: int) -> datetime:
    def read(conn: sa.Connection) -> datetime:
        due = conn.scalar(sa.select(d.c.due_time).where(d.c.id == run_id))
        assert isinstance(due, datetime)
        return due

    return store.db.read("test", read)


def test_steps_over_runs_another_transaction_holds_without_waiting(locking: Store) -> None:
    ids = make_pending(locking, fires=6)
    with _held(locking, sa.select(d.c.id).where(d.c.id.in_(ids[:4]))) as locked:
        assert locked == ids[:4]
        won = _in_thread(lambda: locking.runs.claim_next("node-a", _later(locking), 10))
        assert [r.id for r in won] == ids[4:]  # type: ignore[attr-defined]
    assert [r.id for r in locking.runs.claim_next("node-b", _later(locking), 10)] == ids[:4]


def test_a_locked_task_row_does_not_hide_its_runs(locking: Store) -> None:
    """Only run rows are locked: a peer advancing the task (its row locked by that UPDATE)
    neither blocks the claim nor hides the task's runs from it."""
    ids = make_pending(locking, fires=3)
    with _held(locking, sa.select(t.c.id).where(t.c.name == "job")):
        won = _in_thread(lambda: locking.runs.claim_next("node-a", _later(locking), 10))
        assert [r.id for r in won] == ids  # type: ignore[attr-defined]


def _claim_all(url: str, node: str, start: object, out: object) -> None:
    store = Store.open(url, retry=FAST_RETRY)
    start.wait()  # type: ignore[attr-defined]
    horizon = store.now() + timedelta(days=1)
    won: list[int] = []
    while batch := store.runs.claim_next(node, horizon, 7):
        won += [run.id for run in batch]
    out.put((node, won))  # type: ignore[attr-defined]
    store.close()


def test_processes_claiming_together_share_every_run_exactly_once(
    locking: Store, db_url: str
) -> None:
    ids = [run for i in range(4) for run in make_pending(locking, f"job-{i}", fires=50)]
    args = [(db_url, f"proc-{i}") for i in range(3)]
    results = race_in_processes(_claim_all, args, timeout=120)
    won = [run for runs in results.values() for run in runs]
    assert sorted(won) == sorted(ids), "a run claimed twice or not at all"
    rows = _rows(locking, ids)
    for node, runs in results.items():
        assert all(rows[run] == ("CLAIMED", node, 1) for run in runs)


def test_the_mode_is_refused_by_name_off_postgresql(store: Store) -> None:
    if store.skip_locked:
        pytest.skip(f"offered on {store.server}")
    node = Node(store, NodeConfig(claim_mode="skip_locked"), registry=Registry())
    name = store.server.split()[0]
    with pytest.raises(ConfigError, match=f"offered on PostgreSQL only, not on {name} "):
        node.start()
    with pytest.raises(ConfigError, match="offered on PostgreSQL only"):
        store.runs.claim_next("node-a", _later(store), 10)


def test_the_mode_and_a_strategy_that_picks_runs_are_refused_together() -> None:
    with pytest.raises(ConfigError, match="cannot follow strategy 'id_hash'"):
        NodeConfig(claim_mode="skip_locked", strategy="id_hash")
    with pytest.raises(ConfigError, match="claim mode must be one of optimistic, skip_locked"):
        NodeConfig(claim_mode="pessimistic")


def test_optimistic_and_skip_locked_claims_share_runs_exactly_once(locking: Store) -> None:
    """Nodes of both modes in one cluster (a rolling switch): each run goes to one of them."""
    ids = [run for i in range(3) for run in make_pending(locking, f"job-{i}", fires=60)]
    horizon = _later(locking)
    start = threading.Barrier(4)
    won: dict[str, list[int]] = {}

    def optimistic(node: str) -> None:
        start.wait()
        got: list[int] = []
        while candidates := locking.runs.pending(horizon, 9):
            got += [run.id for run in locking.runs.claim(node, candidates)]
        won[node] = got

    def skipping(node: str) -> None:
        start.wait()
        got: list[int] = []
        while batch := locking.runs.claim_next(node, horizon, 9):
            got += [run.id for run in batch]
        won[node] = got

    threads = [
        threading.Thread(target=fn, args=(f"{fn.__name__}-{i}",))
        for i, fn in enumerate([optimistic, optimistic, skipping, skipping])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    claimed = [run for runs in won.values() for run in runs]
    assert sorted(claimed) == sorted(ids), "a run claimed twice or not at all"
    rows = _rows(locking, ids)
    assert all(rows[run][1] == node for node, runs in won.items() for run in runs)
