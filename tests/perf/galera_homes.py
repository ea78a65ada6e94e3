"""Where the ``default`` strategy's homes fall on a MariaDB Galera cluster: its members hand
out ids ``auto_increment_increment`` (the cluster's size) apart; a run's home is its id's
ordinal (``id div step``, see easyjob.core.ids) ``mod nodes``, and was ``id mod nodes``.

Usage: ``python -m tests.perf.galera_homes [MEMBERS] [TASKS]`` (default 3 and 30). Starts the
test rig's Galera cluster (``galera-4`` installed; see tests/rig/galera.py), registers
TASKS every-second tasks through the first member, writes 10 fires of each in one advance,
and prints the ids of one instant's fires, the member's increment and the step the store
read, and how many of them are home to each of 2 to 5 nodes, dealt by ordinal (what nodes
do) and by the id itself (what they did before 2026-11-28). Figures in
docs/deployment.md, "MariaDB Galera".
"""

from __future__ import annotations

import sys
from datetime import timedelta

from easyjob.core.ids import dealt
from easyjob.core.records import Advance, PlannedFire
from easyjob.store import Store
from tests.rig.galera import GaleraCluster, GaleraMember
from tests.store.conftest import every_second


def main(argv: list[str]) -> int:
    members = int(argv[0]) if argv else 3
    count = int(argv[1]) if len(argv) > 1 else 30
    if missing := GaleraMember.missing():
        print(f"no Galera cluster here: {missing}")
        return 1
    cluster = GaleraCluster(members)
    cluster.start()
    try:
        url = cluster.create_database("homes")[0]
        print("increment:", cluster.members[0].variable("auto_increment_increment"))
        store = Store.open(url, create=True)
        try:
            tasks = store.tasks.upsert([every_second(f"t{i}") for i in range(count)])
            start = max(t.next_start_time for t in tasks if t.next_start_time is not None)
            times = [start + timedelta(seconds=i) for i in range(10)]
            fires, after = tuple(map(PlannedFire, times)), times[-1] + timedelta(seconds=1)
            advances = [Advance(t.id, t.version, after, fires) for t in tasks]
            store.tasks.advance("galera-homes", advances)
            due = store.runs.pending(after + timedelta(days=1), 10 * count)
            ids = sorted(c.id for c in due if c.fire_time == times[3])
            print(f"ids of one instant's {len(ids)} fires: {ids[:8]} ...")
            print("the store's step:", store.id_step)
            for nodes in range(2, 6):
                homes = [
                    sum(dealt(i, nodes, store.id_step) == r for i in ids) for r in range(nodes)
                ]
                by_id = [sum(i % nodes == rank for i in ids) for rank in range(nodes)]
                print(f"  {nodes} nodes: home runs per node {homes} (by the id itself {by_id})")
        finally:
            store.close()
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
