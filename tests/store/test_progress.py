"""Runs held past due (``store.progress``): what a node's ``/readyz`` and ``easyjob status``
count as work a node neither runs nor leaves to others."""

from __future__ import annotations

from datetime import timedelta

from easyjob.core.records import Run
from easyjob.store import HELD_DUE_AFTER, Store
from easyjob.store.schema import task_detail_table as d
from tests.store.conftest import make_pending


def _claim(store: Store, node: str, ids: list[int]) -> list[Run]:
    candidates = [c for c in store.runs.pending(store.now() + timedelta(days=1), 1000)]
    return store.runs.claim(node, [c for c in candidates if c.id in ids])


def _due_ago(store: Store, ids: list[int], seconds: float) -> None:
    when = store.now() - timedelta(seconds=seconds)
    store.db.write(
        "age", lambda conn: conn.execute(d.update().where(d.c.id.in_(ids)).values(due_time=when))
    )


def test_runs_claimed_well_past_due_are_counted_by_node(store: Store) -> None:
    a = _claim(store, "node-a", make_pending(store, "a", fires=3))
    b = _claim(store, "node-b", make_pending(store, "b", fires=1))
    stale = HELD_DUE_AFTER.total_seconds() + 5
    _due_ago(store, [a[0].id, a[1].id, b[0].id], stale)
    _due_ago(store, [a[2].id], HELD_DUE_AFTER.total_seconds() - 5)  # due, not yet stale
    assert store.progress.held_due() == {"node-a": 2, "node-b": 1}
    assert store.progress.held_due(node_id="node-b") == {"node-b": 1}
    assert store.progress.held_due(timedelta(seconds=1)) == {"node-a": 3, "node-b": 1}


def test_runs_waiting_for_a_running_run_of_their_task_are_not_counted(store: Store) -> None:
    runs = _claim(store, "node-a", make_pending(store, "a", fires=3))
    _due_ago(store, [r.id for r in runs], HELD_DUE_AFTER.total_seconds() + 5)
    assert store.progress.held_due() == {"node-a": 3}
    started = store.runs.start_many(runs[:1], exclusive=set())
    assert isinstance(started[runs[0].id], Run)
    assert store.progress.held_due() == {}  # serial: the other two wait for it, by policy


def test_a_caller_that_knows_database_time_reads_in_one_statement(store: Store) -> None:
    a = _claim(store, "node-a", make_pending(store, "a", fires=2))
    _due_ago(store, [a[0].id], HELD_DUE_AFTER.total_seconds() + 5)
    now = store.now()
    before = store.db.counters.snapshot()["statements"]
    assert store.progress.held_due(node_id="node-a", now=now) == {"node-a": 1}
    sent = store.db.counters.snapshot()["statements"] - before
    assert sent == (2 if store.db.dialect == "sqlite" else 1)  # SQLite: and its BEGIN
    later = now + timedelta(seconds=10)  # the second run is as stale then
    _due_ago(store, [a[1].id], 5)
    assert store.progress.held_due(node_id="node-a", now=later) == {"node-a": 2}
