"""Task registration and schedule advances on each real database."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from easyjob.core.records import Advance, PlannedFire, PlanningRow, TaskSpec
from easyjob.core.states import Misfire, Overlap, RunStatus, TaskStatus
from easyjob.errors import TaskDefinitionError, TaskNotFoundError
from easyjob.store import Store
from easyjob.store.schema import task_detail_table as d
from easyjob.store.schema import task_table as t
from tests.store.conftest import every_second, pending_fires


def test_upsert_inserts_then_is_idempotent(store: Store) -> None:
    (first,) = store.tasks.upsert([every_second("a", kwargs={"n": 1})])
    assert (first.status, first.version, first.kwargs) == (TaskStatus.ACTIVE, 0, {"n": 1})
    assert first.next_start_time is not None and first.next_start_time.microsecond == 0
    assert first.next_start_time > store.now() - timedelta(seconds=1)
    (again,) = store.tasks.upsert([every_second("a", kwargs={"n": 1})])
    assert (again.id, again.version, again.next_start_time) == (first.id, 0, first.next_start_time)
    assert again.seen_time >= first.seen_time


def test_changed_cron_bumps_version_and_next_fire(store: Store) -> None:
    (first,) = store.tasks.upsert([every_second("a")])
    hourly = TaskSpec(name="a", func="tests.jobs:noop", cron="@hourly", tz="Europe/Berlin")
    (changed,) = store.tasks.upsert([hourly])
    assert changed.version == first.version + 1
    assert (changed.cron_expr, changed.tz) == ("@hourly", "Europe/Berlin")
    assert changed.next_start_time is not None
    assert (changed.next_start_time.minute, changed.next_start_time.second) == (0, 0)
    (policy,) = store.tasks.upsert(
        [TaskSpec(name="a", func="tests.jobs:noop", cron="@hourly", tz="Europe/Berlin", retries=3)]
    )
    assert (policy.retries, policy.next_start_time) == (3, changed.next_start_time)


def test_parents_resolve_by_name_and_unknown_parent_is_refused(store: Store) -> None:
    parent = every_second("parent")
    child = TaskSpec(name="child", func="tests.jobs:noop", parent="parent")
    rows = store.tasks.upsert([parent, child])
    assert rows[1].pid == rows[0].id and rows[1].next_start_time is None
    orphan = TaskSpec(name="orphan", func="tests.jobs:noop", parent="nobody")
    with pytest.raises(TaskDefinitionError, match="task 'orphan': unknown parent task 'nobody'"):
        store.tasks.upsert([orphan])
    assert [row.name for row in store.tasks.all()] == ["child", "parent"]


def test_duplicate_names_in_one_registration_are_refused(store: Store) -> None:
    with pytest.raises(TaskDefinitionError, match=r"duplicate task name\(s\): 'a'"):
        store.tasks.upsert([every_second("a"), every_second("a"), every_second("b")])
    assert store.tasks.all() == []


def test_two_nodes_registering_at_once_create_each_task_once(store: Store) -> None:
    specs = [every_second(f"task-{i}") for i in range(20)]
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def register() -> None:
        barrier.wait()
        try:
            store.tasks.upsert(specs)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=register) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    count = store.db.read(
        "count", lambda conn: conn.scalar(sa.select(sa.func.count()).select_from(t))
    )
    assert count == 20


def test_due_is_bounded_and_ordered(store: Store) -> None:
    store.tasks.upsert([every_second(f"t{i}") for i in range(5)])
    horizon = store.now() + timedelta(seconds=5)
    due = store.tasks.due(horizon, limit=3)
    assert len(due) == 3
    assert [x.next_start_time for x in due] == sorted(x.next_start_time for x in due)  # type: ignore[type-var]
    assert store.tasks.due(horizon - timedelta(days=1), limit=10) == []


def test_due_reads_a_tasks_planning_columns_as_stored(store: Store) -> None:
    """The due read selects only the columns planning uses (a PlanningRow); each holds what
    the whole row holds, with every setting away from its default."""
    start = store.now().replace(microsecond=0) - timedelta(hours=1)
    spec = TaskSpec(
        name="set",
        func="tests.jobs:noop",
        tz="Europe/Paris",
        misfire=Misfire.CATCH_UP,
        misfire_grace=timedelta(seconds=7),
        overlap=Overlap.ALLOW,
        every=timedelta(seconds=3),
        start=start,
        end=start + timedelta(days=9),
        max_runs=40,
        shards=3,
        broadcast=False,
        jitter=timedelta(milliseconds=250),
        exclude="holidays",
        max_running=2,
        kwargs={"big": "x" * 100},
    )
    broadcast = TaskSpec(name="all", func="tests.jobs:noop", cron="* * * * * *", broadcast=True)
    store.tasks.upsert([spec, broadcast])
    due = {row.name: row for row in store.tasks.due(store.now() + timedelta(days=1), 10)}
    assert set(due) == {"set", "all"}
    for name, row in due.items():
        assert type(row) is PlanningRow
        whole = store.tasks.get(name)
        assert row == PlanningRow(
            **{f.name: getattr(whole, f.name) for f in dataclasses.fields(PlanningRow)}
        )
    assert due["all"].broadcast is True and due["set"].broadcast is False
    assert (due["set"].shards, due["set"].max_running, due["set"].jitter_ms) == (3, 2, 250)
    assert due["set"].schedule == store.tasks.get("set").schedule


def test_due_shares_split_the_tasks_and_overdue_ones_are_anyones(store: Store) -> None:
    rows = store.tasks.upsert([every_second(f"t{i}") for i in range(9)])
    horizon = store.now() + timedelta(seconds=5)
    shares = [store.tasks.due(horizon, 100, share=(rank, 3)) for rank in range(3)]
    assert sorted(r.id for share in shares for r in share) == sorted(r.id for r in rows)
    for rank, share in enumerate(shares):
        assert share and all(r.id % 3 == rank for r in share)
    # a task whose next fire is before overdue_before is offered to every share
    first = min(rows, key=lambda r: (r.next_start_time, r.id))
    assert first.next_start_time is not None
    late = first.next_start_time + timedelta(microseconds=1)
    for rank in range(3):
        ids = {r.id for r in store.tasks.due(horizon, 100, share=(rank, 3), overdue_before=late)}
        assert first.id in ids


def test_advance_is_version_checked_and_writes_fires(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("a")])
    assert task.next_start_time is not None
    fires = tuple(PlannedFire(task.next_start_time + timedelta(seconds=i)) for i in range(3))
    nxt = task.next_start_time + timedelta(seconds=3)
    advance = Advance(task.id, task.version, nxt, fires)
    assert store.tasks.advance("node-a", [advance]) == [task.id]
    assert store.tasks.advance("node-b", [advance]) == []  # stale version: nothing written
    row = store.tasks.get("a")
    assert (row.version, row.next_start_time, row.node_id) == (task.version + 1, nxt, "node-a")
    runs = store.history.runs(task="a")
    assert sorted(r.fire_time for r in runs) == [f.fire_time for f in fires]
    assert {(r.status, r.attempt, r.triggered_by) for r in runs} == {(RunStatus.PENDING, 1, "cron")}


def test_advance_batch_reports_only_tasks_it_moved(store: Store) -> None:
    rows = store.tasks.upsert([every_second(f"t{i}") for i in range(4)])
    advances = [
        Advance(
            r.id,
            r.version,
            r.next_start_time + timedelta(seconds=1),  # type: ignore[operator]
            (PlannedFire(r.next_start_time),),
        )  # type: ignore[arg-type]
        for r in rows
    ]
    assert store.tasks.advance("node-b", advances[2:]) == [rows[2].id, rows[3].id]
    assert sorted(store.tasks.advance("node-a", advances)) == [rows[0].id, rows[1].id]
    assert len(store.history.runs()) == 4


def test_the_database_refuses_a_second_row_for_one_cron_fire(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("a")])
    fire = task.next_start_time
    store.tasks.advance(
        "n",
        [
            Advance(
                task.id,
                task.version,
                fire + timedelta(seconds=1),  # type: ignore[operator]
                (PlannedFire(fire),),
            )
        ],
    )  # type: ignore[arg-type]
    row = {
        "task_id": task.id,
        "fire_time": fire,
        "due_time": fire,
        "status": "PENDING",
        "triggered_by": "cron",
        "attempt": 1,
        "create_time": fire,
    }
    with pytest.raises(sa.exc.IntegrityError):
        store.db.write("dup", lambda conn: conn.execute(d.insert().values(**row)))
    retry = {**row, "attempt": 2, "triggered_by": "retry"}
    store.db.write("retry", lambda conn: conn.execute(d.insert().values(**retry)))


def test_advance_to_no_next_fire_finishes_the_task(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("a")])
    store.tasks.advance("n", [Advance(task.id, task.version, None, ())])
    row = store.tasks.get("a")
    assert (row.status, row.next_start_time) == (TaskStatus.FINISHED, None)


def test_pause_resume_and_trigger(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("a")])
    paused = store.tasks.set_status("a", TaskStatus.PAUSED)
    assert (paused.status, paused.version) == (TaskStatus.PAUSED, task.version + 1)
    assert store.tasks.due(store.now() + timedelta(days=1), 10) == []
    assert store.tasks.set_status("a", TaskStatus.ACTIVE).status == TaskStatus.ACTIVE
    run_id = store.tasks.trigger("a")
    (run,) = store.history.runs(ids=[run_id])
    assert (run.triggered_by, run.status, run.task_name) == ("manual", RunStatus.PENDING, "a")
    with pytest.raises(TaskNotFoundError, match="no task named 'nope'"):
        store.tasks.trigger("nope")
    with pytest.raises(TaskNotFoundError, match="no task named 'nope'"):
        store.tasks.set_status("nope", TaskStatus.PAUSED)


def test_due_and_pending_leave_out_the_tasks_a_node_excludes(store: Store) -> None:
    mine = TaskSpec(name="mine", func="mine:f", cron="* * * * * *")
    theirs = TaskSpec(name="theirs", func="theirs:f", cron="* * * * * *")
    rows = store.tasks.upsert([mine, theirs])
    horizon = store.now() + timedelta(seconds=5)
    assert [r.name for r in store.tasks.due(horizon, 10, {rows[1].id})] == ["mine"]
    advances = [
        Advance(
            r.id,
            r.version,
            r.next_start_time + timedelta(seconds=1),  # type: ignore[operator]
            (PlannedFire(r.next_start_time),),
        )
        for r in rows
    ]  # type: ignore[arg-type]
    store.tasks.advance("n", advances)
    assert {c.task_id for c in store.runs.pending(horizon, 10, {rows[1].id})} == {rows[0].id}
    both = store.runs.pending(horizon, 10)
    assert {(c.task_name, c.func) for c in both} == {("mine", "mine:f"), ("theirs", "theirs:f")}


def test_a_pause_closes_the_task_s_unstarted_runs_and_resume_skips_the_pause(
    store: Store,
) -> None:
    from tests.store.conftest import make_pending

    due, ahead, claimed = make_pending(store, "p", fires=3)
    hour_ago, hour_ahead = store.now() - timedelta(hours=1), store.now() + timedelta(hours=1)

    def age(conn: sa.Connection) -> None:  # one due, one surely ahead however slow the machine
        conn.execute(d.update().where(d.c.id == due).values(fire_time=hour_ago, due_time=hour_ago))
        conn.execute(
            d.update().where(d.c.id == ahead).values(fire_time=hour_ahead, due_time=hour_ahead)
        )

    store.db.write("due", age)
    horizon = store.now() + timedelta(days=1)
    (held,) = store.runs.claim(
        "n1", [c for c in store.runs.pending(horizon, 10) if c.id == claimed]
    )
    store.tasks.set_status("p", TaskStatus.PAUSED)
    assert store.runs.pending(horizon, 10) == []
    rows = {r.id: r for r in store.history.runs(task="p")}
    # a fire written ahead and not yet due is deleted (a SKIPPED row would hold its fire
    # time against the resumed schedule); a due or claimed one is SKIPPED
    assert ahead not in rows
    assert {rows[due].status, rows[claimed].status} == {RunStatus.SKIPPED}
    assert rows[claimed].error_msg == "task paused before it started"
    assert store.tasks.get("p").fire_count == 2
    assert store.runs.start(held) is None  # the claim was fenced by the pause
    store.db.write(
        "age",
        lambda conn: conn.execute(
            t.update()
            .where(t.c.name == "p")
            .values(next_start_time=store.now() - timedelta(hours=1))
        ),
    )
    resumed = store.tasks.set_status("p", TaskStatus.ACTIVE)
    assert (
        resumed.next_start_time is not None
        and resumed.next_start_time > store.now() - timedelta(seconds=1)
    )
    assert store.runs.pending(horizon, 10) == []  # nothing of the paused time comes back


def test_a_finished_task_cannot_be_paused_or_resumed(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("a")])
    store.tasks.advance("n", [Advance(task.id, task.version, None, ())])
    for status in (TaskStatus.PAUSED, TaskStatus.ACTIVE):
        with pytest.raises(TaskDefinitionError, match="'a' is FINISHED: its schedule will never"):
            store.tasks.set_status("a", status)
    assert store.tasks.get("a").status == TaskStatus.FINISHED


def test_upsert_in_chunks_finds_parents_given_after_their_children(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("easyjob.store.tasks._UPSERT_CHUNK", 2)
    child = TaskSpec(name="child", func="tests.jobs:noop", parent="parent")
    grandchild = TaskSpec(name="grandchild", func="tests.jobs:noop", parent="child")
    specs = [grandchild, child, every_second("a"), every_second("b"), every_second("parent")]
    rows = store.tasks.upsert(specs)
    assert [r.name for r in rows] == [s.name for s in specs]  # the order given
    by_name = {r.name: r for r in rows}
    assert by_name["child"].pid == by_name["parent"].id
    assert by_name["grandchild"].pid == by_name["child"].id
    again = store.tasks.upsert(specs)  # the same specs again: nothing changes
    assert [(r.id, r.version, r.pid) for r in again] == [(r.id, r.version, r.pid) for r in rows]


def test_a_changed_cron_keeps_a_due_fire_that_was_not_written_yet(store: Store) -> None:
    store.tasks.upsert([TaskSpec(name="t", func="m:f", cron="* * * * * *")])
    due = store.now().replace(microsecond=0) - timedelta(seconds=1)
    store.db.write(
        "due", lambda conn: conn.execute(t.update().values(next_start_time=due))
    )  # a fire due, not yet written by any loader
    (changed,) = store.tasks.upsert([TaskSpec(name="t", func="m:f", cron="*/1 * * * * ?")])
    assert changed.cron_expr == "*/1 * * * * ?" and changed.next_start_time == due


def test_a_task_whose_due_fire_has_not_started_is_not_planned_further(store: Store) -> None:
    """Overload: a ``fire_once`` or ``skip`` task with a cron fire due a while ago that has
    not started (PENDING or CLAIMED) is behind; it is not advanced until that run starts.
    ``catch_up`` tasks are."""
    for name in ("behind", "started"):
        pending_fires(store, name, 1)
    pending_fires(store, "all", 1, misfire=Misfire.CATCH_UP)
    runs = {c.task_name: c for c in store.runs.pending(store.db.now(), 10)}
    (claimed,) = store.runs.claim("n1", [runs["started"]])
    assert store.runs.start(claimed)
    far = store.db.now() + timedelta(days=1)
    due = store.tasks.due(far, 10, behind_before=store.db.now())
    assert {row.name for row in due} == {"started", "all"}
    assert {row.name for row in store.tasks.due(far, 10)} == {"behind", "started", "all"}
    # a fire due after behind_before is not behind yet
    before = runs["behind"].due_time - timedelta(seconds=1)
    assert "behind" in {row.name for row in store.tasks.due(far, 10, behind_before=before)}


def test_a_task_behind_only_on_fires_due_before_the_planner_started_is_planned(
    store: Store,
) -> None:
    """The planner leaves out a task whose cron fire due before ``behind_before`` has not
    started (the cluster is behind), but only on fires due since ``behind_since``, its
    node's start: a fire an outage left PENDING is superseded by the one the planner writes
    now, and must not hold the task back until a loader has marked it MISSED."""
    (task,) = store.tasks.upsert([every_second("a")])
    fire = task.next_start_time
    assert fire is not None
    advance = Advance(task.id, task.version, fire + timedelta(seconds=1), (PlannedFire(fire),))
    assert store.tasks.advance("n", [advance]) == [task.id]
    horizon, before = fire + timedelta(seconds=100), fire + timedelta(seconds=10)

    def due(since: timedelta | None) -> list[str]:
        start = None if since is None else fire + since
        rows = store.tasks.due(horizon, 10, behind_before=before, behind_since=start)
        return [r.name for r in rows]

    assert due(None) == []  # behind: its fire is due and PENDING
    assert due(timedelta(seconds=5)) == ["a"]  # the fire was due before the node started
    assert due(timedelta(0)) == []  # due at the start: it counts
