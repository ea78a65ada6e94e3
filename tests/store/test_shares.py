"""The pending read of one node's share: its home runs (``default``: run id mod nodes =
rank; ``id_hash``: task id plus shard, mod nodes = rank), and any run due by the scope's
``others_by`` (late enough to steal, or overdue), on every database; the split is exact, so
nodes of one view never read the same on-time run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from easyjob.core.admission import planner_owner
from easyjob.core.records import Advance, PlannedFire
from easyjob.core.strategies import ReadScope, Share
from easyjob.store import Store
from tests.store.conftest import every_second, make_pending


def test_a_share_reads_its_home_runs_and_the_others_due_by_its_cutoff(store: Store) -> None:
    ids = make_pending(store, fires=12)  # one every second
    everything = store.runs.pending(store.now() + timedelta(days=1), 100)
    due = {c.id: c.due_time for c in everything}
    far = max(due.values()) + timedelta(seconds=1)
    homes = [
        [c.id for c in store.runs.pending(far, 100, scope=ReadScope(Share(3, rank), None))]
        for rank in range(3)
    ]
    assert homes == [[i for i in ids if i % 3 == rank] for rank in range(3)]
    assert sorted(i for home in homes for i in home) == sorted(ids)  # one home each
    cutoff = sorted(due.values())[4]  # the first five runs are late enough to steal
    scoped = store.runs.pending(far, 100, scope=ReadScope(Share(3, 1), cutoff))
    expected = [i for i in ids if i % 3 == 1 or due[i] <= cutoff]
    assert [c.id for c in scoped] == expected  # due order kept
    assert len(expected) > len(homes[1])  # the cutoff added others' runs
    # no share (another strategy, or catalogs that differ): every due run
    assert [c.id for c in store.runs.pending(far, 100, scope=ReadScope(None, cutoff))] == ids


def test_a_task_share_reads_the_runs_of_its_tasks_and_shards(store: Store) -> None:
    """``id_hash``'s share: ``(task id + shard) mod nodes``, each shard of a sharded task
    its own key; together the ranks read every run once."""
    shards = {"a": 2, "b": 1, "c": 3}
    tasks = store.tasks.upsert([every_second(name, shards=n) for name, n in shards.items()])
    for task in tasks:
        assert task.next_start_time is not None
        times = [task.next_start_time + timedelta(seconds=i) for i in range(3)]
        fires = tuple(PlannedFire(t) for t in times)
        next_start = times[-1] + timedelta(seconds=1)
        advance = Advance(task.id, task.version, next_start, fires, shards[task.name])
        assert store.tasks.advance("materializer", [advance]) == [task.id]
    far = store.now() + timedelta(days=1)
    every = store.runs.pending(far, 100)
    assert len(every) == 3 * (2 + 1 + 3)
    reads = [
        store.runs.pending(far, 100, scope=ReadScope(Share(3, rank, by_task=True), None))
        for rank in range(3)
    ]
    for rank, read in enumerate(reads):
        assert [c.id for c in read] == [c.id for c in every if (c.task_id + c.shard) % 3 == rank], (
            rank
        )
    assert sorted(c.id for read in reads for c in read) == sorted(c.id for c in every)
    assert {c.shard for read in reads for c in read} == {0, 1, 2}


def test_each_instants_fires_written_together_spread_evenly_over_any_number_of_nodes(
    store: Store,
) -> None:
    """A planner writes many fires of each task in one advance (10 ahead, by default): each
    instant's fires take consecutive ids, so ``default``'s homes (run id mod nodes) give
    every node its part of every second. Written task by task, with an even number of fires
    each, half of 4 nodes had all of one second's runs and the other half none."""
    tasks = store.tasks.upsert([every_second(f"t{i}") for i in range(9)])
    start = max(task.next_start_time for task in tasks if task.next_start_time is not None)
    times = [start + timedelta(seconds=i) for i in range(10)]
    fires, after = tuple(map(PlannedFire, times)), times[-1] + timedelta(seconds=1)
    advances = [Advance(task.id, task.version, after, fires) for task in tasks]
    assert sorted(store.tasks.advance("planner", advances)) == sorted(t.id for t in tasks)
    every = store.runs.pending(times[-1] + timedelta(days=1), 1000)
    assert len(every) == 90
    for nodes in (2, 3, 4):
        for instant in times:
            ids = [c.id for c in every if c.fire_time == instant]
            homes = [sum(i % nodes == rank for i in ids) for rank in range(nodes)]
            assert max(homes) - min(homes) <= 1, (nodes, instant, homes)


def test_the_store_reads_how_far_apart_its_database_hands_out_ids(store: Store) -> None:
    """1 on SQLite and PostgreSQL; MySQL/MariaDB's ``auto_increment_increment`` (a Galera
    cluster's size: tests/chaos/test_galera_homes.py)."""
    if store.db.dialect == "mysql":
        step = store.db.read(
            "step", lambda c: c.exec_driver_sql("SELECT @@auto_increment_increment").scalar()
        )
        assert store.id_step == int(step)
    else:
        assert store.id_step == 1


@pytest.mark.parametrize("step", [2, 3])
def test_with_ids_a_step_apart_the_sql_shares_deal_the_ordinal_as_the_rules_do(
    store: Store, step: int
) -> None:
    """The pending read's shares (``default``'s by run id, ``id_hash``'s by task id plus
    shard) and the planner's share of due tasks compute the ordinal in SQL exactly as
    ``Share.holds`` and ``planner_owner`` do (``id div step``, then ``mod nodes``), on every
    database; the store's step is set by hand here (a Galera cluster's would be read)."""
    store.db.id_step = step  # type: ignore[misc]  # what a Galera cluster of *step* says
    tasks = store.tasks.upsert([every_second(f"s{i}", shards=1 + i % 2) for i in range(7)])
    start = max(task.next_start_time for task in tasks if task.next_start_time is not None)
    times = [start + timedelta(seconds=i) for i in range(3)]
    fires, after = tuple(map(PlannedFire, times)), times[-1] + timedelta(seconds=1)
    advances = [Advance(t.id, t.version, after, fires, 1 + i % 2) for i, t in enumerate(tasks)]
    store.tasks.advance("planner", advances)
    far = after + timedelta(days=1)
    every = store.runs.pending(far, 1000)
    assert len(every) == 3 * (4 * 1 + 3 * 2)
    for by_task in (False, True):
        reads = []
        for rank in range(3):
            share = Share(3, rank, by_task, step)
            read = store.runs.pending(far, 1000, scope=ReadScope(share, None))
            assert [c.id for c in read] == [c.id for c in every if share.holds(c)], (by_task, rank)
            reads.append(read)
        assert sorted(c.id for read in reads for c in read) == sorted(c.id for c in every)
    live = ["a", "b", "c"]
    due = store.tasks.due(far, 1000)
    planned = [{t.id for t in store.tasks.due(far, 1000, share=(rank, 3))} for rank in range(3)]
    for rank, me in enumerate(live):
        assert planned[rank] == {t.id for t in due if planner_owner(t.id, live, step) == me}
