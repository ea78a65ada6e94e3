"""max_running and priority on each real database: the limit of RUNNING runs is kept by the
start's locked check under races, and a run's priority is its trigger's or its task's."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Candidate, TaskSpec
from easyjob.core.states import Overlap, RunStatus
from easyjob.errors import TaskDefinitionError
from easyjob.store import Store
from easyjob.store.contract import BLOCKED
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.conftest import FAST_RETRY
from tests.store.conftest import (
    exclusive_start_by_b,
    pending_fires,
    race_in_processes,
    start_beside_a_held_start,
)


def _pending(store: Store, name: str) -> list[Candidate]:
    horizon = store.now() + timedelta(days=1)
    return [c for c in store.runs.pending(horizon, 10_000) if c.task_name == name]


def _limited(store: Store, fires: int, limit: int, name: str = "job") -> list[Candidate]:
    pending_fires(store, name, fires, overlap=Overlap.ALLOW, max_running=limit)
    return _pending(store, name)


def _running(store: Store) -> int:
    query = sa.select(sa.func.count()).where(d.c.status == str(RunStatus.RUNNING))
    return int(store.db.read("test", lambda conn: conn.scalar(query)))


def test_candidates_carry_their_task_s_limit(store: Store) -> None:
    candidates = _limited(store, 1, 3)
    assert [(c.max_running, c.overlap, c.priority) for c in candidates] == [(3, Overlap.ALLOW, 0)]


def test_claim_started_starts_at_most_the_limit_in_the_order_given(store: Store) -> None:
    candidates = _limited(store, 5, 2)
    ids = {c.id for c in candidates}
    won = store.runs.claim_started("node-a", candidates, exclusive=ids)
    assert [r.id for r in won] == [c.id for c in candidates[:2]]
    assert _running(store) == 2
    rest = [c for c in _pending(store, "job")]
    assert [c.id for c in rest] == [c.id for c in candidates[2:]]  # left PENDING, not lost
    assert store.runs.claim_started("node-b", rest, exclusive=ids) == []
    assert store.runs.finish(won[0])
    (third,) = store.runs.claim_started("node-b", rest, exclusive=ids)
    assert third.id == candidates[2].id and _running(store) == 2


def test_start_many_holds_back_the_runs_past_the_limit(store: Store) -> None:
    candidates = _limited(store, 3, 2)
    runs = store.runs.claim("node-a", candidates)
    started = store.runs.start_many(runs, exclusive={r.id for r in runs})
    assert [started[r.id] is BLOCKED for r in runs] == [False, False, True]
    assert _running(store) == 2


def test_allow_without_max_running_has_no_limit(store: Store) -> None:
    pending_fires(store, "free", 4, overlap=Overlap.ALLOW)
    candidates = _pending(store, "free")
    assert len(store.runs.claim_started("node-a", candidates)) == 4


@pytest.mark.parametrize("how", ["start", "claim_started"])
def test_a_start_at_the_limit_waits_for_one_in_flight_and_sees_it(
    store: Store, db_url: str, how: str
) -> None:
    """As for serial runs (tests/store/test_claims.py): with max_running=2 and one run
    RUNNING, node A's start of a second run is written, not yet committed, when node B
    starts a third. B must wait for A's commit on the task row's lock, then count two
    RUNNING and hold its run back, not run a third beside them."""
    if store.db.dialect == "sqlite":
        pytest.skip("sqlite: one writer at a time, so B's start waits for A's by design")
    first, second, third = _limited(store, 3, 2)
    assert store.runs.claim_started("node-0", [first], exclusive={first.id})
    (a_run,) = store.runs.claim("node-a", [second])
    b_start = exclusive_start_by_b(store, how, third)
    a_result, b_result = start_beside_a_held_start(store, db_url, a_run, b_start)
    assert a_result[a_run.id] is not BLOCKED
    assert b_result == ({third.id: BLOCKED} if how == "start" else [])
    assert _running(store) == 2


def _start_in_process(
    url: str, node: str, candidates: list[Candidate], start: object, out: object
) -> None:
    store = Store.open(url, retry=FAST_RETRY)
    start.wait()  # type: ignore[attr-defined]
    won = store.runs.claim_started(node, candidates, exclusive={c.id for c in candidates})
    out.put((node, [run.id for run in won]))  # type: ignore[attr-defined]
    store.close()


def test_processes_racing_to_start_runs_of_one_task_never_pass_its_limit(
    store: Store, db_url: str
) -> None:
    """Four processes each start three different runs of one task with max_running=3 at
    the same moment, three rounds over: each round exactly three run, never more."""
    candidates = _limited(store, 36, 3)
    for round_ in range(3):
        mine = candidates[round_ * 12 : (round_ + 1) * 12]
        args = [(db_url, f"proc-{i}", mine[i * 3 : (i + 1) * 3]) for i in range(4)]
        results = race_in_processes(_start_in_process, args, timeout=90)
        won = [run_id for ids in results.values() for run_id in ids]
        assert len(won) == 3, results
        assert _running(store) == 3

        def finish_all(conn: sa.Connection) -> None:
            conn.execute(
                d.update()
                .where(d.c.status == str(RunStatus.RUNNING))
                .values(status=str(RunStatus.SUCCESS), version=d.c.version + 1)
            )

        store.db.write("test", finish_all)


def test_a_trigger_s_priority_is_its_run_s_and_others_follow_their_task(store: Store) -> None:
    spec = TaskSpec(name="job", func="tests.jobs:noop", cron="* * * * * *", priority=2)
    store.tasks.upsert([spec])
    plain = store.tasks.trigger("job")
    urgent = store.tasks.trigger("job", priority=9)
    by_id = {c.id: c.priority for c in _pending(store, "job")}
    assert (by_id[plain], by_id[urgent]) == (2, 9)

    def reprioritise(conn: sa.Connection) -> None:
        conn.execute(t.update().where(t.c.name == "job").values(priority=-5))

    store.db.write("test", reprioritise)
    by_id = {c.id: c.priority for c in _pending(store, "job")}
    assert (by_id[plain], by_id[urgent]) == (-5, 9)  # the task's, as it is now
    (run,) = store.runs.claim("node-a", [c for c in _pending(store, "job") if c.id == urgent])
    assert run.priority == 9


def test_a_bad_trigger_priority_is_refused_and_writes_nothing(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="job", func="tests.jobs:noop")])
    with pytest.raises(TaskDefinitionError, match="trigger of 'job': priority must be an"):
        store.tasks.trigger("job", priority=5000)
    assert _pending(store, "job") == []


def test_a_task_s_max_running_and_priority_are_stored_and_changed_by_its_code(
    store: Store,
) -> None:
    spec = TaskSpec(name="job", func="tests.jobs:noop", max_running=4, priority=3)
    (row,) = store.tasks.upsert([spec])
    assert (row.max_running, row.priority) == (4, 3)
    (row,) = store.tasks.upsert([TaskSpec(name="job", func="tests.jobs:noop", max_running=2)])
    assert (row.max_running, row.priority) == (2, 0)


def test_a_retry_keeps_the_priority_its_trigger_gave(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="job", func="tests.jobs:noop", retries=1)])
    urgent = store.tasks.trigger("job", priority=9)
    (run,) = store.runs.claim("node-a", [c for c in _pending(store, "job") if c.id == urgent])
    started = store.runs.start(run)
    assert isinstance(started, type(run)) and started.trigger_priority == 9
    assert store.runs.fail(started, "boom", retry_in=timedelta(0))
    (retry,) = _pending(store, "job")
    assert (retry.id != urgent, retry.priority) == (True, 9)
