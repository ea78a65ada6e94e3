"""``store.bench``: the reads and writes of ``easyjob bench``, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from easyjob.core.records import Advance, PlannedFire, Run
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.errors import ConfigError
from easyjob.store import Store
from tests.store.conftest import every_second, make_pending


def _succeed(store: Store, run_id: int) -> None:
    far = store.now() + timedelta(days=1)
    candidates = [c for c in store.runs.pending(far, 100) if c.id == run_id]
    (run,) = store.runs.claim("bench-node", candidates)
    started = store.runs.start_many([run], exclusive=())[run.id]
    assert isinstance(started, Run)
    assert store.runs.finish(started)


def test_reset_refuses_a_database_with_other_tasks_and_keeps_them(store: Store) -> None:
    store.tasks.upsert([every_second("bench-0"), every_second("orders")])
    with pytest.raises(ConfigError) as err:
        store.bench.reset()
    assert str(err.value) == (
        "the database holds 1 task(s) that are not benchmark tasks: "
        "run `easyjob bench` against a database of its own"
    )
    assert store.tasks.get("orders").name == "orders"


def test_reset_deletes_the_benchs_own_tasks_runs_and_nodes(store: Store) -> None:
    make_pending(store, "bench-0", fires=2)
    make_pending(store, "probe-claims", fires=1)
    store.nodes.register("n1", host="h", pid=1, weight=1, strategy="default", workers=1)
    store.bench.reset()
    assert store.views.find_tasks() == (0, [])
    assert store.nodes.all()[1] == []
    assert store.history.runs() == []


def test_succeeded_counts_the_bench_tasks_runs_in_the_window(store: Store) -> None:
    bench = make_pending(store, "bench-0", fires=3)
    (other,) = make_pending(store, "orders", fires=1)  # not a bench task
    _succeed(store, bench[0])
    _succeed(store, bench[2])
    _succeed(store, other)
    (first, _, third) = sorted(store.history.runs(task="bench-0"), key=lambda r: r.id)
    assert first.start_time is not None and third.start_time is not None

    rows = store.bench.succeeded(first.fire_time, third.fire_time)
    assert sorted(rows) == sorted(
        [
            (first.task_id, first.fire_time, first.start_time),
            (third.task_id, third.fire_time, third.start_time),
        ]
    )
    assert store.bench.succeeded(first.fire_time, first.fire_time) == [
        (first.task_id, first.fire_time, first.start_time)
    ]
    (orders,) = store.history.runs(task="orders")
    assert orders.status == RunStatus.SUCCESS and orders.fire_time <= third.fire_time
    # the progress count is of every task's runs (the bench's database holds only its own)
    since = store.bench.succeeded_since(first.fire_time)
    assert since == 2 + (orders.fire_time >= first.fire_time)
    assert store.bench.succeeded_since(third.fire_time + timedelta(microseconds=1)) == 0


def test_overdue_counts_unstarted_runs_past_due_in_database_time(store: Store) -> None:
    make_pending(store, "bench-0", fires=3)  # due in the next few seconds
    # none is 10 s past due (the first is due at the next whole second: at "0 s past due"
    # a test that began just before it found that one overdue, a flake CI caught)
    assert store.bench.overdue(timedelta(seconds=10)) == 0
    assert store.bench.overdue(timedelta(hours=-1)) == 3  # as if an hour had passed


def test_stale_counts_runs_waiting_past_their_tasks_grace(store: Store) -> None:
    make_pending(store, "bench-0", fires=2)  # grace 60 s
    late = store.runs.pending(store.db.now() + timedelta(days=1), 10)
    assert store.bench.stale() == 0
    store.db.write(  # age the runs by 2 minutes: past their grace
        "age",
        lambda conn: conn.exec_driver_sql(
            "UPDATE easy_job_task_detail SET due_time = due_time - INTERVAL '2' MINUTE"
            if store.db.dialect != "sqlite"
            else "UPDATE easy_job_task_detail SET due_time = datetime(due_time, '-2 minutes')"
        ),
    )
    assert len(late) == 2 and store.bench.stale() == 2


def test_the_probe_claims_its_rows_and_leaves_them_pending(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("probe-claims")])
    store.tasks.set_status("probe-claims", TaskStatus.PAUSED)
    first = store.bench.seed_probe(task.id, 30)
    assert store.bench.seed_probe(task.id, 30) > first  # the earlier rows are replaced

    first = min(r.id for r in store.history.runs(task="probe-claims", limit=100))
    assert store.bench.probe_claim(first, 10, "probe-0") == 10
    assert store.bench.probe_claim(first + 5, 10, "probe-1") == 10
    runs = {r.id: r for r in store.history.runs(task="probe-claims", limit=100)}
    assert len(runs) == 30
    assert {r.status for r in runs.values()} == {RunStatus.PENDING}
    versions = [runs[first + i].version - runs[first + 29].version for i in range(20)]
    assert versions == [1] * 5 + [2] * 5 + [1] * 5 + [0] * 5
    assert runs[first + 7].node_id == "probe-1" and runs[first + 2].node_id == "probe-0"
    assert store.bench.probe_claim(first + 100, 10, "probe-0") == 0


def test_misses_tells_fires_missed_after_their_insert_from_summary_rows(store: Store) -> None:
    """What overload costs: a fire inserted PENDING and then marked MISSED (two writes for a
    fire that never ran), against a summary row the planner wrote MISSED at once."""
    bench = make_pending(store, "bench-0", fires=3)
    other = make_pending(store, "orders", fires=1)  # not a bench task: never counted
    far = store.now() + timedelta(days=1)
    pending = {c.id: c for c in store.runs.pending(far, 100)}
    why = "missed: test"
    won = store.runs.miss_pending({i: (pending[i].version, why) for i in [*bench[:2], *other]})
    assert won == {*bench[:2], *other}
    task = store.tasks.get("bench-0")
    assert task.next_start_time is not None
    gap = task.next_start_time + timedelta(seconds=5)
    summary = PlannedFire(gap, RunStatus.MISSED, why, 3, gap + timedelta(seconds=2))
    advance = Advance(task.id, task.version, gap + timedelta(seconds=3), (summary,))
    assert store.tasks.advance("planner", [advance]) == [task.id]
    rows = sorted(store.history.runs(task="bench-0"), key=lambda r: r.fire_time)
    first, last = rows[0].fire_time, rows[-1].fire_time
    assert store.bench.misses(first, last) == (2, 1)
    assert store.bench.misses(first, first) == (1, 0)
    assert store.bench.misses(gap, last) == (0, 1)
