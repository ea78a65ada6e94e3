"""Cancel requests (``store.cancels``) on every backend: version-checked like every
transition, a waiting run's start and a running run's outcome fenced afterwards, an ended
run left alone, and a cancelled run never recovered."""

from __future__ import annotations

from datetime import timedelta

import pytest

from easyjob.core.records import Run
from easyjob.core.states import RunStatus
from easyjob.errors import RunNotFoundError
from easyjob.store import Store
from tests.store.conftest import make_pending


def _status(store: Store, run_id: int) -> tuple[RunStatus, str | None]:
    (row,) = [r for r in store.history.runs(limit=1000) if r.id == run_id]
    return row.status, row.error_msg


def _claimed(store: Store, node: str, fires: int = 1) -> list[Run]:
    ids = make_pending(store, "job", fires=fires)
    candidates = store.runs.pending(store.now() + timedelta(days=1), 1000)
    return store.runs.claim(node, [c for c in candidates if c.id in ids])


def test_a_pending_run_is_cancelled_and_never_claimed(store: Store) -> None:
    (run_id,) = make_pending(store, "job", fires=1)
    found = store.cancels.cancel(run_id)
    assert (found.run_id, found.was, found.node_id, found.cancelled) == (
        run_id,
        RunStatus.PENDING,
        None,
        True,
    )
    assert _status(store, run_id) == (RunStatus.CANCELLED, "cancelled on request (was PENDING)")
    assert store.runs.pending(store.now() + timedelta(days=1), 1000) == []


def test_a_claimed_run_cancelled_is_fenced_at_its_start(store: Store) -> None:
    (run,) = _claimed(store, "node-a")
    assert store.cancels.cancel(run.id).was == RunStatus.CLAIMED
    started = store.runs.start_many([run], exclusive=set())
    assert not isinstance(started.get(run.id), Run)
    assert _status(store, run.id)[0] == RunStatus.CANCELLED


def test_a_running_run_cancelled_is_fenced_at_its_outcome_and_never_recovered(
    store: Store,
) -> None:
    (claimed,) = _claimed(store, "node-a")
    running = store.runs.start_many([claimed], exclusive=set())[claimed.id]
    assert isinstance(running, Run)
    assert store.cancels.cancelled([running.id]) == set()
    found = store.cancels.cancel(running.id)
    assert (found.was, found.node_id, found.cancelled) == (RunStatus.RUNNING, "node-a", True)
    assert store.cancels.cancelled([running.id, running.id + 1000]) == {running.id}
    assert store.runs.finish_many([running]) == set()  # fenced
    assert not store.runs.fail(running, "boom", retry_in=None)
    held = store.runs.held_by_dead(timedelta(0), 100, now=store.now() + timedelta(hours=1))
    assert [h.id for h in held] == []  # a cancelled run is never recovered
    assert _status(store, running.id) == (
        RunStatus.CANCELLED,
        "cancelled on request (was RUNNING)",
    )


def test_an_ended_run_is_left_alone_and_an_unknown_id_is_an_error(store: Store) -> None:
    (claimed,) = _claimed(store, "node-a")
    running = store.runs.start_many([claimed], exclusive=set())[claimed.id]
    assert isinstance(running, Run)
    assert store.runs.finish_many([running]) == {running.id}
    found = store.cancels.cancel(running.id)
    assert (found.was, found.cancelled) == (RunStatus.SUCCESS, False)
    assert _status(store, running.id) == (RunStatus.SUCCESS, None)
    again = store.cancels.cancel(running.id)
    assert again.cancelled is False
    with pytest.raises(RunNotFoundError, match=r"^no run with id 987654$"):
        store.cancels.cancel(987654)
