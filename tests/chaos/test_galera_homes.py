"""On a MariaDB Galera cluster ids go by the cluster's size (``auto_increment_increment``):
the store reads that step and nodes deal runs and tasks by the ids' ordinals, so each of 3
nodes is home to a third of one instant's fires (by the id itself: 0/30/0, see
``python -m tests.perf.galera_homes``). Galera is installed by `make chaos` only, so this
runs there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from easyjob.core.admission import planner_owner
from easyjob.core.records import Advance, PlannedFire
from easyjob.core.strategies import ClusterView, DefaultStrategy, IdHashStrategy, ReadScope
from easyjob.store import Store
from tests.conftest import FAST_RETRY
from tests.rig.galera import GaleraCluster
from tests.store.conftest import every_second

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos]


def test_three_nodes_on_three_members_each_have_a_third_of_every_instant(
    galera_cluster: GaleraCluster,
) -> None:
    url = galera_cluster.create_database("homes")[0]
    store = Store.open(url, create=True, retry=FAST_RETRY)
    try:
        assert store.id_step == 3
        tasks = store.tasks.upsert([every_second(f"t{i}") for i in range(30)])
        start = max(t.next_start_time for t in tasks if t.next_start_time is not None)
        times = [start + timedelta(seconds=i) for i in range(10)]
        fires, after = tuple(map(PlannedFire, times)), times[-1] + timedelta(seconds=1)
        store.tasks.advance("planner", [Advance(t.id, t.version, after, fires) for t in tasks])
        far = after + timedelta(days=1)
        live = ["a", "b", "c"]
        for strategy in (DefaultStrategy(), IdHashStrategy()):
            homes = []
            for me in live:
                view = ClusterView(me=me, live=live, now=far, id_step=store.id_step)
                share = strategy.share(view)
                assert share is not None
                read = store.runs.pending(far, 1000, scope=ReadScope(share, None))
                homes.append([c for c in read if c.fire_time == times[3]])
            assert [len(h) for h in homes] == [10, 10, 10], strategy
        owners = [planner_owner(t.id, live, store.id_step) for t in tasks]
        assert sorted(owners.count(me) for me in live) == [10, 10, 10]
    finally:
        store.close()
