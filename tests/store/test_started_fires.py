"""A behind planner's fires written already started by its node, on each real database
(``TaskStore.advance_and_start``): one row per run where an insert, then a claim and start,
make two; a limited task at its limit gets its fire PENDING, under races too."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.admission import run_limit
from easyjob.core.records import Advance, Candidate, PlannedFire, TaskRow
from easyjob.core.states import Overlap, RunStatus
from easyjob.store import Store
from easyjob.store.contract import BLOCKED
from easyjob.store.schema import task_detail_table as d
from tests.store.conftest import every_second, pending_fires, start_beside_a_held_start


def _due_now(store: Store, task: TaskRow) -> Advance:
    """*task*'s advance writing one fire, due a moment ago (as a behind planner writes it)."""
    fire = store.now().replace(microsecond=0)
    return Advance(task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),))


def _limits(*tasks: TaskRow) -> dict[int, int | None]:
    return {task.id: run_limit(task.overlap, task.max_running) for task in tasks}


def _rows(store: Store) -> list[tuple[int, str, str | None, int]]:
    query = sa.select(d.c.task_id, d.c.status, d.c.node_id, d.c.version).order_by(d.c.task_id)
    return [tuple(row) for row in store.db.read("test", lambda conn: conn.execute(query))]


def test_a_fire_written_started_is_running_for_its_node_and_returned(store: Store) -> None:
    free, serial, plain = store.tasks.upsert(
        [every_second("free", overlap=Overlap.ALLOW), every_second("serial"), every_second("plain")]
    )
    advances = [_due_now(store, task) for task in (free, serial, plain)]
    done = store.tasks.advance_and_start("node-a", advances, _limits(free, serial))
    assert sorted(done.won) == sorted(task.id for task in (free, serial, plain))
    assert sorted(run.task_name for run in done.started) == ["free", "serial"]
    for run in done.started:
        assert (run.status, run.node_id, run.version) == (RunStatus.RUNNING, "node-a", 0)
    times = sa.select(d.c.due_time, d.c.claim_time, d.c.start_time).where(
        d.c.status == str(RunStatus.RUNNING)
    )
    for due, claimed, began in store.db.read("test", lambda conn: conn.execute(times).all()):
        assert claimed is not None and began == max(due, claimed)  # as a claim and start
    assert _rows(store) == [
        (free.id, "RUNNING", "node-a", 0),  # inserted so: no write after its insert
        (serial.id, "RUNNING", "node-a", 0),
        (plain.id, "PENDING", None, 0),  # not asked: claimed by the loader, as before
    ]
    # it ends as any run claimed and started does
    assert all(store.runs.finish(run) for run in done.started)


def test_a_limited_task_at_its_limit_gets_its_fire_pending(store: Store) -> None:
    (first,) = store.runs.claim_started("node-0", _candidates(store, "serial", 1))
    (task,) = [t for t in store.tasks.all() if t.name == "serial"]
    done = store.tasks.advance_and_start("node-a", [_due_now(store, task)], _limits(task))
    assert done.won == [task.id] and done.started == []
    statuses = sorted(status for _, status, _, _ in _rows(store))
    assert statuses == ["PENDING", "RUNNING"]  # node-0's run, and the new fire to claim
    assert first.status == RunStatus.RUNNING


def test_a_fire_that_already_has_a_row_is_not_started_twice(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("free", overlap=Overlap.ALLOW)])
    advance = _due_now(store, task)
    assert store.tasks.advance("node-0", [advance]) == [task.id]  # the fire's row, PENDING
    (moved_back,) = store.tasks.all()
    again = Advance(task.id, moved_back.version, advance.next_start_time, advance.fires)
    done = store.tasks.advance_and_start("node-a", [again], _limits(task))
    assert done.won == [task.id] and done.started == []
    assert _rows(store) == [(task.id, "PENDING", None, 0)]


def test_a_stale_advance_starts_nothing(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("free", overlap=Overlap.ALLOW)])
    advance = _due_now(store, task)
    assert store.tasks.advance("node-0", [advance]) == [task.id]
    done = store.tasks.advance_and_start("node-a", [advance], _limits(task))
    assert done == ([], [])
    assert _rows(store) == [(task.id, "PENDING", None, 0)]


def test_a_fire_written_started_waits_for_a_start_in_flight_and_sees_it(
    store: Store, db_url: str
) -> None:
    """Node A's start of a serial task's run is written, not yet committed, when node B's
    planner writes the task's next fire started. B must wait for A's commit on the task
    row's lock, then see A's run RUNNING and write its fire PENDING, not run it beside."""
    if store.db.dialect == "sqlite":
        pytest.skip("sqlite: one writer at a time, so B's write waits for A's by design")
    (candidate,) = _candidates(store, "serial", 1)
    (a_run,) = store.runs.claim("node-a", [candidate])
    (task,) = store.tasks.all()
    advance = _due_now(store, task)
    a_result, b_done = start_beside_a_held_start(
        store,
        db_url,
        a_run,
        lambda: store.tasks.advance_and_start("node-b", [advance], _limits(task)),
    )
    assert a_result[a_run.id] is not BLOCKED
    assert b_done.won == [task.id] and b_done.started == []
    statuses = sorted((status, node) for _, status, node, _ in _rows(store))
    assert statuses == [("PENDING", None), ("RUNNING", "node-a")]


def _candidates(store: Store, name: str, fires: int) -> list[Candidate]:
    pending_fires(store, name, fires)
    horizon = store.now() + timedelta(days=1)
    return [c for c in store.runs.pending(horizon, 100) if c.task_name == name]
