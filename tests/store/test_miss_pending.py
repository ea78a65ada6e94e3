"""PENDING runs closed MISSED as the admission rule decides (``RunStore.miss_pending``), and
what a pause does to a task's unstarted runs, on every backend."""

from __future__ import annotations

from datetime import timedelta

from easyjob.core.records import Run
from easyjob.core.states import RunStatus, TaskStatus
from easyjob.core.store_values import BLOCKED
from easyjob.store import Store
from tests.store.conftest import every_second, make_pending


def statuses(store: Store, task: str) -> list[RunStatus]:
    return [r.status for r in sorted(store.history.runs(task=task), key=lambda r: r.id)]


def test_each_run_is_missed_with_its_own_reason_and_version_checked(store: Store) -> None:
    ids = make_pending(store, "t", fires=4)
    pending = {c.id: c for c in store.runs.pending(store.db.now() + timedelta(days=1), 10)}
    won = store.runs.miss_pending(
        {
            ids[0]: (pending[ids[0]].version, "missed: superseded"),
            ids[1]: (pending[ids[1]].version, "missed: late"),
            ids[2]: (pending[ids[2]].version + 1, "missed: stale version"),  # fenced
        }
    )
    assert won == {ids[0], ids[1]}
    assert statuses(store, "t") == [RunStatus.MISSED] * 2 + [RunStatus.PENDING] * 2
    reasons = {r.id: r.error_msg for r in store.history.runs(task="t")}
    assert reasons[ids[0]] == "missed: superseded" and reasons[ids[1]] == "missed: late"
    assert all(
        r.end_time is not None for r in store.history.runs(task="t", status=RunStatus.MISSED)
    )


def test_a_claimed_run_is_left_alone(store: Store) -> None:
    ids = make_pending(store, "t", fires=2)
    pending = store.runs.pending(store.db.now() + timedelta(days=1), 10)
    store.runs.claim("n1", [c for c in pending if c.id == ids[0]])
    assert store.runs.miss_pending({c.id: (c.version, "missed") for c in pending}) == {ids[1]}
    assert statuses(store, "t") == [RunStatus.CLAIMED, RunStatus.MISSED]
    assert store.runs.miss_pending({}) == set()


def test_a_pause_skips_scheduled_runs_but_holds_manual_ones_for_the_resume(store: Store) -> None:
    store.tasks.upsert([every_second("t")])
    store.tasks.trigger("t", at=store.db.now() + timedelta(hours=1))  # queued for later
    claimed = store.tasks.trigger("t")  # due now, and claimed by a node
    store.runs.claim(
        "n1",
        [c for c in store.runs.pending(store.db.now() + timedelta(days=1), 10) if c.id == claimed],
    )
    store.tasks.set_status("t", TaskStatus.PAUSED)
    rows = {r.id: r for r in store.history.runs(task="t")}
    manual = [r for r in rows.values() if r.triggered_by == "manual"]
    assert len(manual) == 2 and all(r.status == RunStatus.PENDING for r in manual)
    assert rows[claimed].node_id is None  # handed back: n1's start is fenced
    assert store.runs.pending(store.db.now() + timedelta(days=1), 10) == []  # paused: held
    store.tasks.set_status("t", TaskStatus.ACTIVE)
    due = store.runs.pending(store.db.now() + timedelta(days=1), 10)
    assert {c.id for c in due} >= {r.id for r in manual}  # they run after the resume


def test_a_start_lands_only_before_its_deadline_in_database_time(store: Store) -> None:
    """A start decided in time but written late (retried through an outage) must not start
    a run its successor superseded meanwhile: the deadline is checked by the database."""
    ids = make_pending(store, "t", fires=3)
    now = store.db.now()
    pending = {c.id: c for c in store.runs.pending(now + timedelta(days=1), 10)}
    past, future = now - timedelta(seconds=1), now + timedelta(hours=1)
    won = store.runs.claim_started(
        "n1", [pending[ids[0]], pending[ids[1]]], deadlines={ids[0]: past, ids[1]: future}
    )
    assert [r.id for r in won] == [ids[1]]  # the late one stays PENDING
    assert statuses(store, "t")[:2] == [RunStatus.PENDING, RunStatus.RUNNING]
    claimed = store.runs.claim("n1", [pending[ids[0]], pending[ids[2]]])
    started = store.runs.start_many(
        claimed,
        exclusive=set(),
        deadlines={ids[0]: past},  # ids[2] has none: it starts
    )
    assert started[ids[0]] is BLOCKED and isinstance(started[ids[2]], Run)
    assert statuses(store, "t") == [RunStatus.CLAIMED, RunStatus.RUNNING, RunStatus.RUNNING]
