"""A fire that carries a gap (schema version 7) is written on every database, and a gap is
never lost with an insert skipped because its fire already has a row (a task's cursor moved
back over fires written ahead): that row then carries it, unless it carries one already."""

from __future__ import annotations

from datetime import datetime, timedelta

from easyjob.core.records import Advance, PlannedFire
from easyjob.store import Store
from tests.store.conftest import every_second


def _advance(store: Store, name: str, fires: tuple[PlannedFire, ...], after: datetime) -> None:
    task = store.tasks.get(name)
    assert store.tasks.advance("n1", [Advance(task.id, task.version, after, fires)]) == [task.id]


def test_a_fire_carrying_a_gap_is_one_row_with_it(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("busy")])
    assert task.next_start_time is not None
    first = task.next_start_time
    fire = PlannedFire(first + timedelta(seconds=5), missed_count=5, missed_from=first)
    plain = PlannedFire(first + timedelta(seconds=6))
    _advance(store, "busy", (fire, plain), first + timedelta(seconds=7))
    rows = sorted(store.history.runs(task="busy"), key=lambda r: r.fire_time)
    assert [(r.fire_time, r.missed_from, r.missed_count, r.error_msg) for r in rows] == [
        (first + timedelta(seconds=5), first, 5, None),  # the gap's reason is not stored
        (first + timedelta(seconds=6), None, None, None),
    ]
    assert [r.missed_fires for r in rows] == [5, 0]


def test_a_gap_carried_by_a_fire_that_has_a_row_goes_onto_that_row(store: Store) -> None:
    (task,) = store.tasks.upsert([every_second("moved")])
    assert task.next_start_time is not None
    first = task.next_start_time
    ahead = first + timedelta(seconds=10)
    _advance(store, "moved", (PlannedFire(ahead),), ahead + timedelta(seconds=1))
    # the cursor moved back: the gap ends at the fire written ahead, which is not inserted
    # again, and the row it has carries the gap
    _advance(
        store,
        "moved",
        (PlannedFire(ahead, missed_count=10, missed_from=first),),
        ahead + timedelta(seconds=1),
    )
    (row,) = store.history.runs(task="moved")
    assert (row.fire_time, row.missed_from, row.missed_count) == (ahead, first, 10)
    # a row that carries a gap keeps it; an uncounted gap is written as such
    _advance(
        store,
        "moved",
        (PlannedFire(ahead, missed_count=3, missed_from=ahead - timedelta(seconds=3)),),
        ahead + timedelta(seconds=1),
    )
    later = ahead + timedelta(seconds=30)
    _advance(
        store,
        "moved",
        (PlannedFire(later, missed_from=ahead + timedelta(seconds=1)),),
        later + timedelta(seconds=1),
    )
    rows = sorted(store.history.runs(task="moved"), key=lambda r: r.fire_time)
    assert [(r.fire_time, r.missed_from, r.missed_count) for r in rows] == [
        (ahead, first, 10),
        (later, ahead + timedelta(seconds=1), None),
    ]
