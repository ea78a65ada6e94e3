"""Triggers with arguments, intervals, max_runs and schedules changed at run time, on each
real database."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire, Run, TaskSpec
from easyjob.core.states import RunStatus, TaskStatus, Trigger
from easyjob.errors import TaskDefinitionError, TaskNotFoundError
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t

FUNC = "tests.jobs:noop"


def _claim_start(store: Store, node: str, run_id: int) -> Run:
    horizon = store.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(horizon, 1000) if c.id == run_id]
    (run,) = store.runs.claim(node, candidates)
    running = store.runs.start(run)
    assert running is not None
    return running


def _kwargs_is_null(store: Store, run_id: int) -> bool:
    query = sa.select(d.c.kwargs.is_(None)).where(d.c.id == run_id)
    return bool(store.db.read("t", lambda conn: conn.scalar(query)))


def test_a_trigger_stores_its_time_and_arguments_and_retries_keep_them(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="m", func=FUNC, accepts=("user_id", "n"))])
    at = store.now() + timedelta(hours=1)
    run_id = store.tasks.trigger("m", at=at, kwargs={"user_id": 7, "n": [1, "x"]})
    (row,) = store.history.runs(ids=[run_id])
    assert (row.fire_time, row.due_time, row.triggered_by) == (at, at, Trigger.MANUAL)
    running = _claim_start(store, "a", run_id)
    assert running.trigger_kwargs == {"user_id": 7, "n": [1, "x"]}
    assert store.runs.fail(running, "boom", retry_in=timedelta(seconds=1))
    (retry,) = [r for r in store.history.runs(task="m") if r.id != run_id]
    retried = _claim_start(store, "a", retry.id)
    assert (retried.attempt, retried.trigger_kwargs) == (2, {"user_id": 7, "n": [1, "x"]})
    plain = store.tasks.trigger("m")
    assert _kwargs_is_null(store, plain)  # SQL NULL, not JSON null
    accepts = store.db.read("t", lambda c: c.scalar(sa.select(t.c.accepts)))
    assert accepts == ["n", "user_id"]


def test_a_recovered_trigger_keeps_its_arguments(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="m", func=FUNC, accepts=("n",))])
    run_id = store.tasks.trigger("m", kwargs={"n": 1})
    running = _claim_start(store, "dead", run_id)
    (held,) = store.runs.held_by("dead", 10)
    (new_id,) = store.runs.recover([held], "alive")
    assert running.id == run_id
    assert _claim_start(store, "alive", new_id).trigger_kwargs == {"n": 1}


@pytest.mark.parametrize(
    ("kwargs", "at_s", "message"),
    [
        (
            {"n": 1, "evil": 2},
            0,
            "task 'm' does not accept trigger argument(s) 'evil' (it accepts: 'n')",
        ),
        ({"n": float("nan")}, 0, "kwargs must be JSON"),
        ({}, -3600, "in the past"),
    ],
)
def test_bad_triggers_are_refused_and_write_nothing(
    store: Store, kwargs: dict[str, object], at_s: float, message: str
) -> None:
    store.tasks.upsert([TaskSpec(name="m", func=FUNC, accepts=("n",))])
    at = store.now() + timedelta(seconds=at_s) if at_s else None
    with pytest.raises(TaskDefinitionError) as info:
        store.tasks.trigger("m", at=at, kwargs=kwargs)
    assert message in str(info.value)
    assert store.history.runs(task="m") == []
    with pytest.raises(TaskNotFoundError):
        store.tasks.trigger("nope")


def test_intervals_are_anchored_at_registration_and_max_runs_finishes(store: Store) -> None:
    spec = TaskSpec(name="i", func=FUNC, every=timedelta(seconds=45), max_runs=2)
    (row,) = store.tasks.upsert([spec])
    assert row.anchor_time is not None and row.next_start_time == row.anchor_time + timedelta(
        seconds=45
    )
    assert (row.every_ms, row.max_runs, row.fire_count, row.cron_expr) == (45_000, 2, 0, None)
    first = row.next_start_time
    fires = (PlannedFire(first), PlannedFire(first + timedelta(seconds=45)))
    assert store.tasks.advance("n", [Advance(row.id, row.version, None, fires)]) == [row.id]
    done = store.tasks.get("i")
    assert (done.fire_count, done.status, done.next_start_time) == (2, TaskStatus.FINISHED, None)
    again = Advance(row.id, done.version, None, (PlannedFire(first),))
    assert store.tasks.advance("n", [again]) == []  # a FINISHED task is not advanced
    assert len(store.history.runs(task="i")) == 2  # the unique cron_key holds for intervals


def test_a_runtime_schedule_is_added_changed_and_removed(store: Store) -> None:
    row = store.schedules.add("r", "jobs:report", every="90m", accepts=["n"])
    assert (row.origin, row.runtime, row.every_ms, row.declared) == (
        "runtime",
        True,
        5_400_000,
        None,
    )
    assert row.next_start_time == row.anchor_time + timedelta(minutes=90)  # type: ignore[operator]
    with pytest.raises(TaskDefinitionError, match="exists already"):
        store.schedules.add("r", "jobs:report", cron="@hourly")
    changed = store.schedules.set("r", cron="0 3 * * *", tz="Europe/Berlin")
    assert (changed.cron_expr, changed.every_ms, changed.tz) == ("0 3 * * *", None, "Europe/Berlin")
    assert changed.version == row.version + 1
    run_id = store.tasks.trigger("r", kwargs={"n": 1})
    removed = store.schedules.remove("r")
    assert (removed.status, removed.next_start_time) == (TaskStatus.FINISHED, None)
    (run,) = store.history.runs(ids=[run_id])
    assert (run.status, run.error_msg) == (RunStatus.SKIPPED, "schedule removed before it started")
    again = store.schedules.add("r", "jobs:report", every="1m")  # a removed name may be reused
    assert (again.status, again.every_ms, again.id) == (TaskStatus.ACTIVE, 60_000, row.id)


def test_runtime_changes_are_refused_clearly(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="p", func=FUNC, cron="@hourly")])
    store.tasks.upsert([TaskSpec(name="c", func=FUNC, parent="p")])
    with pytest.raises(TaskDefinitionError, match="'c' runs after its parent"):
        store.schedules.set("c", every="1m")
    with pytest.raises(TaskDefinitionError, match="'p' is declared by code"):
        store.schedules.remove("p")
    with pytest.raises(TaskDefinitionError, match="exists already \\(declared by code\\)"):
        store.schedules.add("p", "jobs:report", every="1m")
    with pytest.raises(TaskDefinitionError, match="import path 'module:qualname'"):
        store.schedules.add("x", "jobs.report", every="1m")
    with pytest.raises(TaskDefinitionError, match="invalid interval '1 fortnight'"):
        store.schedules.set("p", every="1 fortnight")
    with pytest.raises(TaskDefinitionError, match="a new cron or a new interval"):
        store.schedules.set("p")
    with pytest.raises(TaskNotFoundError):
        store.schedules.set("nope", every="1m")
    assert store.tasks.get("p").cron_expr == "@hourly"  # nothing changed


def test_a_code_task_changed_at_run_time_keeps_it_until_its_code_changes(store: Store) -> None:
    hourly = TaskSpec(name="h", func=FUNC, cron="@hourly")
    store.tasks.upsert([hourly])
    store.schedules.set("h", every="45s")
    (kept,) = store.tasks.upsert([hourly])  # a restart with the same code
    assert (kept.cron_expr, kept.every_ms) == (None, 45_000)
    (code,) = store.tasks.upsert([TaskSpec(name="h", func=FUNC, cron="@daily")])
    assert (code.cron_expr, code.every_ms, code.declared) == ("@daily", None, "@daily|UTC|")
