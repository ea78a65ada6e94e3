"""The pending read of one node's share (``default`` strategy): its home runs (run id mod
nodes = rank), and any run due by the scope's ``others_by`` (late enough to steal, or
overdue), on every database; the split is exact, so nodes of one view never read the same
on-time run."""

from __future__ import annotations

from datetime import timedelta

from easyjob.core.strategies import ReadScope, Share
from easyjob.store import Store
from tests.store.conftest import make_pending


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
