"""A write whose COMMIT was applied but whose reply was lost is retried; the retry must
report what the first attempt did, not "lost": otherwise the run is left CLAIMED/RUNNING
under a live node that forgot it. The reply is lost here by raising a connection error
right after the real commit; tests/chaos does the same through a TCP proxy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from easyjob.core.records import Run
from easyjob.core.states import RunStatus
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.store.conftest import make_pending
from tests.store.test_claims import _candidates


class ReplyLost:
    """Arms the store's database so that the next *n* committed transactions raise a
    connection error after their COMMIT, as a connection dropped before the reply would."""

    def __init__(self, store: Store) -> None:
        self.left = 0
        self.lost = 0
        db = store.db
        once: Callable[..., Any] = db._once

        def losing(fn: Callable[[sa.Connection], Any], options: Any) -> Any:
            result = once(fn, options)
            if self.left and not options:
                self.left -= 1
                self.lost += 1
                raise ConnectionResetError("reply lost after COMMIT")
            return result

        db._once = losing  # type: ignore[method-assign]

    def arm(self, n: int = 1) -> None:
        self.left = n


@pytest.fixture
def lose(store: Store) -> Iterator[ReplyLost]:
    yield ReplyLost(store)


def _status(store: Store, run_id: int) -> tuple[str, str | None, int]:
    def read(conn: sa.Connection) -> tuple[str, str | None, int]:
        row = conn.execute(sa.select(d.c.status, d.c.node_id, d.c.version).where(d.c.id == run_id))
        status, node, version = row.one()
        return status, node, version

    return store.db.read("test", read)


def _claimed(store: Store, fires: int = 3) -> list[Run]:
    ids = make_pending(store, fires=fires)
    return store.runs.claim("node-a", _candidates(store, ids))


def test_a_claim_whose_reply_was_lost_returns_the_runs_it_won(
    store: Store, lose: ReplyLost
) -> None:
    ids = make_pending(store, fires=3)
    candidates = _candidates(store, ids)
    lose.arm()
    won = store.runs.claim("node-a", candidates)
    assert lose.lost == 1
    assert sorted(r.id for r in won) == sorted(ids)
    assert all(
        r.status == RunStatus.CLAIMED and r.version == c.version + 1
        for r, c in zip(won, candidates, strict=True)
    )
    # and a plain second claim of the same versions still wins nothing
    assert store.runs.claim("node-b", candidates) == []


def test_a_claim_and_start_whose_reply_was_lost_returns_the_runs_it_started(
    store: Store, lose: ReplyLost
) -> None:
    ids = make_pending(store, fires=3)
    candidates = _candidates(store, ids)
    lose.arm()
    won = store.runs.claim_started("node-a", candidates)
    assert lose.lost == 1
    assert [(r.id, r.status) for r in won] == [(i, RunStatus.RUNNING) for i in ids]
    assert store.runs.claim_started("node-b", candidates) == []


def test_a_start_whose_reply_was_lost_reports_the_runs_started(
    store: Store, lose: ReplyLost
) -> None:
    runs = _claimed(store)
    lose.arm()
    started = store.runs.start_many(runs, exclusive=set())
    assert lose.lost == 1
    assert {i: getattr(r, "status", r) for i, r in started.items()} == {
        r.id: RunStatus.RUNNING for r in runs
    }
    for run in runs:
        assert _status(store, run.id) == ("RUNNING", "node-a", run.version + 1)


def test_a_success_whose_reply_was_lost_is_reported_written_once(
    store: Store, lose: ReplyLost
) -> None:
    runs = _claimed(store)
    running = [s for s in store.runs.start_many(runs, exclusive=set()).values()]
    lose.arm()
    written = store.runs.finish_many(running)  # type: ignore[arg-type]
    assert lose.lost == 1
    assert written == {r.id for r in runs}

    def pruned(conn: sa.Connection) -> int:
        return int(conn.scalar(sa.select(t.c.pruned_success_count).where(t.c.name == "job")))

    # the count is the SUCCESS rows themselves: a retried write has nothing to count twice
    assert store.tasks.get("job").success_count == 3
    assert store.db.read("test", pruned) == 0


def test_a_failure_and_a_release_whose_reply_was_lost_report_success(
    store: Store, lose: ReplyLost
) -> None:
    first, second, _ = _claimed(store)
    lose.arm()
    assert store.runs.release(first) is True
    assert _status(store, first.id) == ("PENDING", None, first.version + 1)
    started = store.runs.start(second)
    assert isinstance(started, Run)
    lose.arm()
    assert store.runs.fail(started, "boom", retry_in=None) is True
    assert _status(store, second.id) == ("FAILED", "node-a", started.version + 1)


def test_a_retry_that_finds_nothing_landed_runs_the_write_again(
    store: Store, lose: ReplyLost
) -> None:
    """The first attempt failed before its commit (the connection broke mid-transaction):
    *landed* finds nothing, and the write runs for real."""
    ids = make_pending(store, fires=2)
    candidates = _candidates(store, ids)
    db = store.db
    once = db._once
    calls = {"n": 0}

    def broken_first(fn: Callable[[sa.Connection], Any], options: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1 and not options:
            raise ConnectionResetError("connection broke before COMMIT")
        return once(fn, options)

    db._once = broken_first  # type: ignore[method-assign]
    won = store.runs.claim("node-a", candidates)
    assert sorted(r.id for r in won) == sorted(ids)
