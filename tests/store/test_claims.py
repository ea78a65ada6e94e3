"""The claim protocol on each real database: races, batches and fencing."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from easyjob.clock import FakeClock
from easyjob.core.records import Advance, Candidate
from easyjob.core.states import RunStatus
from easyjob.store import Store
from easyjob.store.contract import BLOCKED
from easyjob.store.database import at_versions
from easyjob.store.runs.reads import read_runs
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.conftest import FAST_RETRY
from tests.store.conftest import (
    every_second,
    exclusive_start_by_b,
    make_pending,
    race_in_processes,
    start_beside_a_held_start,
    waiting_on_a_lock,
)


def _candidates(store: Store, ids: list[int]) -> list[Candidate]:
    horizon = store.now() + timedelta(days=1)
    return [c for c in store.runs.pending(horizon, 10_000) if c.id in ids]


def _row(store: Store, run_id: int) -> dict[str, object]:
    def read(conn: sa.Connection) -> dict[str, object]:
        return dict(conn.execute(sa.select(d).where(d.c.id == run_id)).mappings().one())

    return store.db.read("test", read)


def test_claim_returns_the_run_with_its_task(store: Store) -> None:
    (run_id,) = make_pending(store)
    (candidate,) = _candidates(store, [run_id])
    (run,) = store.runs.claim("node-a", [candidate])
    assert (run.id, run.version, run.status, run.node_id) == (
        run_id,
        candidate.version + 1,
        RunStatus.CLAIMED,
        "node-a",
    )
    assert (run.task_name, run.func, run.attempt) == ("job", "tests.jobs:noop", 1)
    assert _row(store, run_id)["claim_time"] is not None


def test_second_claim_of_the_same_version_loses(store: Store) -> None:
    (run_id,) = make_pending(store)
    candidates = _candidates(store, [run_id])
    assert len(store.runs.claim("node-a", candidates)) == 1
    assert store.runs.claim("node-b", candidates) == []
    assert _row(store, run_id)["node_id"] == "node-a"


def _race(store: Store, candidates: list[Candidate], nodes: int) -> list[str]:
    barrier = threading.Barrier(nodes)
    wins: list[str] = []

    def claim(node: str) -> None:
        barrier.wait()
        if store.runs.claim(node, candidates):
            wins.append(node)

    threads = [threading.Thread(target=claim, args=(f"node-{i}",)) for i in range(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return wins


def test_threads_racing_for_one_fire_exactly_one_wins(store: Store) -> None:
    for run_id in make_pending(store, fires=10):
        wins = _race(store, _candidates(store, [run_id]), nodes=4)
        assert len(wins) == 1, wins
        assert _row(store, run_id)["node_id"] == wins[0]


def _claim_in_process(
    url: str, node: str, candidates: list[Candidate], start: object, out: object
) -> None:
    store = Store.open(url, retry=FAST_RETRY)
    start.wait()  # type: ignore[attr-defined]
    won = store.runs.claim(node, candidates)
    out.put((node, [run.id for run in won]))  # type: ignore[attr-defined]
    store.close()


def test_processes_racing_for_the_same_fires_each_fire_has_one_winner(
    store: Store, db_url: str
) -> None:
    run_ids = make_pending(store, fires=20)
    candidates = _candidates(store, run_ids)
    args = [(db_url, f"proc-{i}", candidates) for i in range(3)]
    results = race_in_processes(_claim_in_process, args, timeout=60)
    won = [run_id for ids in results.values() for run_id in ids]
    assert sorted(won) == sorted(run_ids), results
    for node, ids in results.items():
        for run_id in ids:
            assert _row(store, run_id)["node_id"] == node


def test_batch_claim_returns_exactly_the_rows_won(store: Store) -> None:
    run_ids = make_pending(store, fires=8)
    candidates = _candidates(store, run_ids)
    taken = store.runs.claim("node-b", candidates[1::2])
    assert [r.id for r in taken] == run_ids[1::2]
    won = store.runs.claim("node-a", candidates)
    assert [r.id for r in won] == run_ids[0::2]
    assert all(r.node_id == "node-a" and r.version == 1 for r in won)
    assert {_row(store, i)["node_id"] for i in run_ids[1::2]} == {"node-b"}


def test_batch_claim_skips_rows_no_longer_pending(store: Store) -> None:
    run_ids = make_pending(store, fires=3)
    candidates = _candidates(store, run_ids)
    (first,) = store.runs.claim("node-a", candidates[:1])
    assert store.runs.start(first) is not None
    won = store.runs.claim("node-b", candidates)
    assert [r.id for r in won] == run_ids[1:]


def test_finish_with_stale_version_is_rejected_and_changes_nothing(store: Store) -> None:
    (run_id,) = make_pending(store)
    (run,) = store.runs.claim("node-a", _candidates(store, [run_id]))
    running = store.runs.start(run)
    assert running is not None and running.version == run.version + 1
    before = _row(store, run_id)
    stale = replace(running, version=run.version)  # a token from before the start
    assert store.runs.finish(stale) is False
    assert _row(store, run_id) == before
    assert store.runs.fail(stale, "boom", retry_in=None) is False
    assert _row(store, run_id) == before
    with pytest.raises(ValueError, match="a CLAIMED run cannot become SUCCESS"):
        store.runs.finish(run)
    assert store.runs.finish(running) is True
    after = _row(store, run_id)
    assert (after["status"], after["version"]) == ("SUCCESS", running.version + 1)
    assert store.runs.finish(running) is False  # the same token twice: fenced


def test_only_the_holder_can_start_or_release(store: Store) -> None:
    (run_id,) = make_pending(store)
    (run,) = store.runs.claim("node-a", _candidates(store, [run_id]))
    impostor = replace(run, node_id="node-b")
    assert store.runs.start(impostor) is None
    assert store.runs.release(impostor) is False
    assert store.runs.release(run) is True
    row = _row(store, run_id)
    assert (row["status"], row["node_id"], row["version"]) == ("PENDING", None, run.version + 1)
    (again,) = store.runs.claim("node-b", _candidates(store, [run_id]))
    assert again.node_id == "node-b"


def test_version_checked_writes_report_changed_rows(store: Store) -> None:
    """PyMySQL reports matched rows (CLIENT.FOUND_ROWS) as rowcount, not changed ones.

    A no-op UPDATE therefore counts 1 on MariaDB and 0 changes elsewhere would be hidden;
    easyjob's writes always bump ``version``, so for them matched and changed are the same.
    """
    (run_id,) = make_pending(store)

    def noop(conn: sa.Connection) -> int:
        stmt = d.update().where(d.c.id == run_id).values(status=d.c.status)
        return int(conn.execute(stmt).rowcount)

    assert store.db.write("test", noop) == 1  # matched, though nothing changed
    (run,) = store.runs.claim("node-a", _candidates(store, [run_id]))
    assert store.runs.release(run) is True
    assert store.runs.release(run) is False  # stale token: 0 rows matched


def test_misfired_and_skipped_claims_close_with_a_reason(store: Store) -> None:
    run_ids = make_pending(store, fires=2)
    first, second = store.runs.claim("node-a", _candidates(store, run_ids))
    assert store.runs.close_unstarted(first, RunStatus.MISSED, "started 90s late")
    assert store.runs.close_unstarted(second, RunStatus.SKIPPED, "previous run still running")
    assert (_row(store, first.id)["status"], _row(store, first.id)["error_msg"]) == (
        "MISSED",
        "started 90s late",
    )
    assert _row(store, second.id)["status"] == "SKIPPED"
    with pytest.raises(ValueError, match="cannot be closed as"):
        store.runs.close_unstarted(first, RunStatus.SUCCESS, "no")


def test_a_batch_of_claimed_runs_closes_in_one_write_each_with_its_reason(store: Store) -> None:
    run_ids = make_pending(store, fires=3)
    first, second, third = store.runs.claim("node-a", _candidates(store, run_ids))
    assert store.runs.release(third)  # no longer held: fenced out of the batch
    reasons = {first.id: "superseded", second.id: "late", third.id: "late"}
    closed = store.runs.close_many([first, second, third], RunStatus.MISSED, reasons)
    assert closed == {first.id, second.id}
    rows = [_row(store, r.id) for r in (first, second, third)]
    assert [(row["status"], row["error_msg"]) for row in rows] == [
        ("MISSED", "superseded"),
        ("MISSED", "late"),
        ("PENDING", None),
    ]


def test_start_and_finish_many_write_exactly_the_runs_still_held(store: Store) -> None:
    run_ids = make_pending(store, fires=4)
    runs = store.runs.claim("node-a", _candidates(store, run_ids))
    taken = replace(runs[1], version=runs[1].version)  # its row is about to move under it
    assert store.runs.release(runs[1])
    started = store.runs.start_many([*runs[:1], taken, *runs[2:]], exclusive=set())
    assert started[runs[1].id] is None  # fenced: released meanwhile
    running = [r for r in started.values() if isinstance(r, type(runs[0]))]
    assert sorted(r.id for r in running) == [run_ids[0], run_ids[2], run_ids[3]]
    stale = replace(running[0], version=running[0].version - 1)
    assert store.runs.finish_many([stale, *running[1:]]) == {run_ids[2], run_ids[3]}
    assert [_row(store, i)["status"] for i in run_ids] == [
        "RUNNING",
        "PENDING",
        "SUCCESS",
        "SUCCESS",
    ]
    assert store.tasks.get("job").success_count == 2
    with pytest.raises(ValueError, match="a batch must hold runs of one node"):
        store.runs.finish_many([running[0], replace(running[1], node_id="node-b")])


def test_an_exclusive_start_is_blocked_while_its_task_runs(store: Store) -> None:
    run_ids = make_pending(store, fires=2)
    first, second = store.runs.claim("node-a", _candidates(store, run_ids))
    assert isinstance(store.runs.start(first, exclusive=True), type(first))
    assert store.runs.start_many([second], exclusive={second.id}) == {second.id: BLOCKED}
    assert _row(store, second.id)["status"] == "CLAIMED"
    started = store.runs.start_many([second], exclusive=set())  # overlap allow
    assert started[second.id] is not None and started[second.id] is not BLOCKED


def test_a_batch_claim_in_flight_does_not_hold_up_a_claim_of_other_runs(store: Store) -> None:
    """Row locks, not table locks: while one node's batch claim is uncommitted, another
    node claims other runs at once (on MariaDB, a lock by ids that strays onto a covering
    secondary index locks every run in it: see PRIMARY_KEY_HINT)."""
    if store.db.dialect == "sqlite":
        pytest.skip("sqlite: one writer at a time, by design (see store/gate.py)")
    run_ids = make_pending(store, fires=6)
    first, second = _candidates(store, run_ids[:2]), _candidates(store, run_ids[2:])
    expected = {c.id: c.version for c in first}
    claim = (
        d.update().where(at_versions(d, expected)).values(node_id="node-a", version=d.c.version + 1)
    )
    with store.db.engine.connect() as conn, conn.begin():
        assert sorted(store.db.winners(conn, claim, d, expected)) == run_ids[:2]
        done: list[list[int]] = []
        thread = threading.Thread(
            target=lambda: done.append([r.id for r in store.runs.claim("node-b", second)]),
            daemon=True,
        )
        thread.start()
        thread.join(20)
        assert done == [run_ids[2:]], "the second claim waited for the first one's locks"


def test_a_run_due_now_is_claimed_and_started_in_one_write(store: Store) -> None:
    run_ids = make_pending(store, fires=3)
    candidates = _candidates(store, run_ids)
    runs = store.runs.claim_started("node-a", candidates[:2])
    assert [(r.id, r.status, r.version, r.node_id) for r in runs] == [
        (c.id, RunStatus.RUNNING, c.version + 1, "node-a") for c in candidates[:2]
    ]
    row = _row(store, run_ids[0])
    assert row["status"] == "RUNNING" and row["start_time"] is not None
    assert row["claim_time"] is not None and row["claim_time"] <= row["start_time"]
    # the same versions again: only the run nobody took is won
    (third,) = store.runs.claim_started("node-b", candidates)
    assert (third.id, third.node_id) == (run_ids[2], "node-b")
    assert store.runs.claim("node-c", candidates) == []
    # fenced like any start: a stale version finishes nothing, the current one does
    assert store.runs.finish_many([replace(runs[0], version=candidates[0].version)]) == set()
    assert store.runs.finish_many(runs) == set(run_ids[:2])


@pytest.mark.parametrize("serial", [False, True])
def test_a_claims_runs_are_as_written_and_on_postgresql_come_in_the_updates_reply(
    store: Store, serial: bool
) -> None:
    """The runs a claim returns are the rows as written with their task's columns, in due
    order; on PostgreSQL the UPDATE returns them (``UPDATE ... FROM task RETURNING``), so a
    claim sends no read of its runs: a round trip fewer in every claim."""
    run_ids = make_pending(store, "a", fires=2) + make_pending(store, "b", fires=2)
    candidates = list(reversed(_candidates(store, run_ids)))
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement.split()[0].upper())

    sa.event.listen(store.db.engine, "before_cursor_execute", record)
    try:
        runs = store.runs.claim_started(
            "node-a", candidates, exclusive=set(run_ids) if serial else ()
        )
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", record)
    fresh = store.db.read("test", lambda conn: read_runs(conn, [r.id for r in runs]))
    assert runs == fresh
    assert {r.status for r in runs} == {RunStatus.RUNNING}
    assert len(runs) == (2 if serial else 4)  # serial: the first fire of each task
    # after the UPDATE (``WITH locked ...`` on PostgreSQL), the read of the runs won: none
    # on PostgreSQL
    (update,) = [i for i, s in enumerate(sent) if s in ("UPDATE", "WITH")]
    after = [] if store.db.backend.name == "postgresql" else ["SELECT"]
    assert sent[update + 1 :] == after, sent


def test_a_serial_run_is_not_claimed_started_while_its_task_runs(store: Store) -> None:
    run_ids = make_pending(store, fires=2)
    first, second = _candidates(store, run_ids)
    (running,) = store.runs.claim_started("node-a", [first], exclusive={first.id})
    assert store.runs.claim_started("node-b", [second], exclusive={second.id}) == []
    assert _row(store, second.id)["status"] == "PENDING"  # left for later, not lost
    assert store.runs.finish(running)
    (started,) = store.runs.claim_started("node-b", [second], exclusive={second.id})
    assert started.status == RunStatus.RUNNING


@pytest.mark.parametrize("how", ["start", "claim_started"])
def test_a_serial_start_waits_for_one_in_flight_and_sees_it(
    store: Store, db_url: str, how: str
) -> None:
    """The race a CI run caught (two runs of a 1.5 s serial job side by side on two
    PostgreSQL nodes): node A's start of a serial run is written, not yet committed, when
    node B starts the task's next run. Under READ COMMITTED B's "no other run RUNNING"
    check does not see A's write. B must wait for A's commit, then see A's run (the task
    row lock, see easyjob.store.runs.claims.busy_ids), not run beside it."""
    if store.db.dialect == "sqlite":
        pytest.skip("sqlite: one writer at a time, so B's start waits for A's by design")
    first, second = _candidates(store, make_pending(store, fires=2))
    (a_run,) = store.runs.claim("node-a", [first])
    b_start = exclusive_start_by_b(store, how, second)
    a_result, b_result = start_beside_a_held_start(store, db_url, a_run, b_start)
    assert a_result[a_run.id] is not BLOCKED
    assert b_result == ({second.id: BLOCKED} if how == "start" else [])
    assert _row(store, second.id)["status"] == ("CLAIMED" if how == "start" else "PENDING")


def test_an_advance_locks_its_task_rows_in_id_order_as_a_serial_start_does(
    store: Store, db_url: str
) -> None:
    """A planner's advance and a serial start both lock task rows. The start locks them in
    id order (busy_ids); on PostgreSQL the advance's UPDATE locked them in the order it
    found them, and the two deadlocked (7 times in 30 s of 4 saturated nodes, each a
    second's wait for the detector that held up every node's starts). Here another node
    holds the lower task row; an advance of both, listed higher first, waits for it
    without holding the higher one meanwhile: a start of that one would not deadlock."""
    if store.db.dialect == "sqlite":
        pytest.skip("sqlite: one writer at a time, no row locks")
    low, high = store.tasks.upsert([every_second("job-low"), every_second("job-high")])
    assert low.id < high.id and low.next_start_time and high.next_start_time
    # the lower row written again: its new version now lies after the higher one in the
    # table, where a scan finds it second
    first = Advance(low.id, low.version, low.next_start_time, ())
    assert store.tasks.advance("node-a", [first]) == [low.id]
    low = store.tasks.get("job-low")
    advances = [
        Advance(task.id, task.version, task.next_start_time + timedelta(seconds=1), ())
        for task in (high, low)
        if task.next_start_time is not None
    ]
    other = Store.open(db_url, retry=FAST_RETRY)
    holder = other.db.engine.connect()
    try:
        holder.begin()
        holder.execute(sa.select(t.c.id).where(t.c.id == low.id).with_for_update()).all()
        advanced: list[list[int]] = []
        planner = threading.Thread(
            target=lambda: advanced.append(store.tasks.advance("node-b", advances)), daemon=True
        )
        planner.start()
        deadline = time.monotonic() + 30
        while not waiting_on_a_lock(store) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert planner.is_alive()  # waiting for the lower row

        with other.db.engine.connect() as probe:  # the higher row is not held by the advance
            lock = sa.select(t.c.id).where(t.c.id == high.id).with_for_update(nowait=True)
            try:
                free = list(probe.scalars(lock)) == [high.id]
            except sa.exc.DBAPIError:  # locked: the advance holds it while it waits
                free = False
            probe.rollback()
        holder.commit()
        assert free, "the advance locked the higher task row first, then waited"
        planner.join(30)
        assert sorted(advanced[0]) == [low.id, high.id]
    finally:
        holder.close()
        other.close()


class _TickingClock(FakeClock):
    """A clock that moves a millisecond each time it is read."""

    def now(self) -> datetime:
        self.advance(0.001)
        return super().now()


def test_a_batch_write_on_sqlite_reads_the_clock_once_per_place_it_names_it(
    tmp_path: Path,
) -> None:
    """SQLite's database time is this process's clock, called from SQL: one value per
    statement, as SQLite's own ``datetime('now')`` (a statement's rows share their time),
    not a call per row (each a clock read and a strftime in Python)."""
    clock = _TickingClock()
    store = Store.open(f"sqlite:///{tmp_path / 'c.db'}", create=True, clock=clock)
    run_ids = make_pending(store, fires=4)
    runs = store.runs.claim_started("node-a", _candidates(store, run_ids))
    assert len(runs) == 4
    rows = [_row(store, run_id) for run_id in run_ids]
    assert len({row["claim_time"] for row in rows}) == 1
    assert store.runs.finish_many(runs) == set(run_ids)
    assert len({_row(store, run_id)["end_time"] for run_id in run_ids}) == 1
    store.close()
