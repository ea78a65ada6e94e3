"""The misfire policy applied to PENDING runs (``RunStore.miss_late``), on every backend."""

from __future__ import annotations

from datetime import timedelta

from easyjob.core.states import Misfire, RunStatus
from easyjob.store import Store
from tests.store.conftest import make_pending


def statuses(store: Store, task: str) -> list[RunStatus]:
    return [r.status for r in sorted(store.history.runs(task=task), key=lambda r: r.id)]


def test_fire_once_keeps_the_latest_late_run_and_skip_keeps_none(store: Store) -> None:
    once = make_pending(store, "once", fires=5)
    skip = make_pending(store, "skip", fires=5)
    pending = {c.id: c for c in store.runs.pending(store.now() + timedelta(days=1), 100)}
    # fires 0-3 of each task are late; each task's own cutoff, as the two tasks' first fires
    # are a second apart when a second boundary passes between their registrations
    late_before = pending[once[3]].due_time + timedelta(milliseconds=1)
    skip_before = pending[skip[3]].due_time + timedelta(milliseconds=1)
    marked = store.runs.miss_late(
        {
            pending[once[0]].task_id: (Misfire.FIRE_ONCE, late_before),
            pending[skip[0]].task_id: (Misfire.SKIP, skip_before),
            pending[skip[0]].task_id + 100: (Misfire.CATCH_UP, late_before),
        }
    )
    assert marked == 3 + 4
    missed, pending_ = RunStatus.MISSED, RunStatus.PENDING
    assert statuses(store, "once") == [missed, missed, missed, pending_, pending_]
    assert statuses(store, "skip") == [missed, missed, missed, missed, pending_]
    (row,) = [r for r in store.history.runs(task="skip") if r.id == skip[0]]
    assert row.error_msg == "missed: not started within its misfire grace (policy skip)"


def test_a_claimed_run_is_left_alone(store: Store) -> None:
    ids = make_pending(store, "t", fires=3)
    pending = store.runs.pending(store.now() + timedelta(days=1), 10)
    store.runs.claim("n1", [c for c in pending if c.id == ids[0]])
    late_before = pending[-1].due_time + timedelta(seconds=1)
    assert store.runs.miss_late({pending[0].task_id: (Misfire.SKIP, late_before)}) == 2
    assert statuses(store, "t") == [RunStatus.CLAIMED, RunStatus.MISSED, RunStatus.MISSED]
