"""Scenario 17: a three-member MariaDB Galera cluster. Three nodes, each on a different
member, run every-second tasks; the third member is killed (``kill -9``), the other two
evict it (Galera stalls every commit until then), and it is started again and rejoins.
No fire may be lost or run twice, no node may die, and every node (the one whose member
died too) must heartbeat again once the member is back. Write conflicts between members
(certification failures and brute-force aborts, error 1213 at the client) are counted on
the servers and in the nodes' retry log lines.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.store import Database, RetryPolicy, Store, is_transient
from tests.chaos.expected import Window
from tests.chaos.faults import Fault, FaultLog
from tests.chaos.on_cluster import Settings, observe, record, settle, stuck_and_died
from tests.cluster.harness import Cluster, Entry, wait_until
from tests.rig.galera import GaleraCluster
from tests.store.conftest import every_second

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos]

TICKS = 10
SETTINGS = Settings(heartbeat=0.3, dead_after=5, poll=0.2)
STUCK_S = 6
STEADY_S = 5  # before the kill, and again once the member is back
DOWN_S = 3  # on two members, after the eviction
VICTIM = 2
#: a node's retry of a write that lost a conflict between members (easyjob.store.retry)
RETRIED_CONFLICT = re.compile(r"transient database error .*\(1213,")


def longest_gap_s(entries: list[Entry], since: float, until: float) -> float:
    """The longest stretch of wall time in [since, until] in which no job ran."""
    times = sorted([since, until, *(e.at for e in entries if since <= e.at <= until)])
    return max(b - a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize(
    "galera_cluster",
    [{"wsrep_sync_wait": 0}, {"wsrep_sync_wait": 1}],
    ids=["sync_wait_0", "sync_wait_1"],
    indirect=True,
)
def test_member_killed_and_rejoined(galera_cluster: GaleraCluster, tmp_path: Path) -> None:
    """With and without causal reads (``wsrep_sync_wait=1``): easyjob needs neither."""
    urls = galera_cluster.create_database("app")
    victim = galera_cluster.members[VICTIM]
    faults = FaultLog()
    with Cluster(urls[0], tmp_path, ticks=TICKS) as cluster:
        for i, url in enumerate(urls):
            cluster.start_with(f"node-{i}", SETTINGS.options, db_url=url)
        cluster.wait_live()
        db = cluster.store.db
        start = db.now().replace(microsecond=0) + timedelta(seconds=1)
        wait_until("steady state", lambda: db.now() > start + timedelta(seconds=STEADY_S), 30)
        conflicts_before = galera_cluster.conflicts()
        began = time.time()
        victim.kill()
        evicted_s = galera_cluster.wait_size(2, among=[i for i in range(3) if i != VICTIM])
        time.sleep(DOWN_S)  # a real outage of that member: not waiting on any condition
        restarted = time.time()
        victim.start()
        galera_cluster.wait_size(3)
        back = time.time()
        faults.add(Fault("db_member_kill9", "db", began, back, f"member-{VICTIM} kill -9, rejoin"))
        # the node on that member had no database meanwhile: a partition of that node
        faults.add(Fault("partition", f"node-{VICTIM}", began, back, "its member was down"))
        back_db = db.now()
        window = Window(start, back_db.replace(microsecond=0) + timedelta(seconds=STEADY_S))
        settle(cluster, TICKS, window, timeout=90)

        def every_node_back() -> bool:
            _, nodes = cluster.store.nodes.live(timedelta(seconds=SETTINGS.dead_s))
            return {n.node_id for n in nodes if n.heartbeat_at > back_db} >= set(cluster.nodes)

        wait_until("every node to heartbeat after the rejoin", every_node_back, 30)
        stuck, died = stuck_and_died(cluster, window, STUCK_S)
        conflicts_after = galera_cluster.conflicts()
        report = observe(
            "galera-member-killed",
            "mariadb-galera",
            cluster,
            ticks=TICKS,
            window=window,
            faults=faults,
            settings=SETTINGS,
            stuck_before_stop=stuck,
            died=died,
            failover_bound=False,
        )
        entries = cluster.ledger()
        victim_runs_after = sum(1 for e in entries if e.node == f"node-{VICTIM}" and e.at > back)
        retried = sum(
            1
            for node in cluster.nodes.values()
            for line in node.log().splitlines()
            if RETRIED_CONFLICT.search(line)
        )
        member = f"member-{VICTIM}"
        extra: dict[str, object] = {
            "evicted_s": round(evicted_s, 2),
            "member_down_s": round(restarted - began, 2),
            "rejoin_s": round(back - restarted, 2),
            "stall_s": round(longest_gap_s(entries, began - 1, back + STEADY_S), 2),
            "certification_conflicts": sum(conflicts_after.values())
            + conflicts_before.get(member, 0),
            "conflicts_retried_by_nodes": retried,
            f"node-{VICTIM}_runs_after_rejoin": victim_runs_after,
        }
        extra["wsrep_sync_wait"] = galera_cluster.members[0].variable("wsrep_sync_wait")
        problems = record(report, extra)
        assert problems == [], problems
        assert report.duplicated == 0 and report.missing == 0
        assert victim_runs_after > 0, f"node-{VICTIM} ran nothing after its member came back"


def test_a_write_on_a_member_out_of_quorum_waits_for_it(galera_cluster: GaleraCluster) -> None:
    """Two members killed: the last is non-primary and refuses every statement (error 1047,
    "WSREP has not yet prepared node for application use"). A write there is retried as a
    database outage, not raised at once, and lands once the member is primary again."""
    url = galera_cluster.create_database("app")[0]
    store = Store.open(url, create=True)
    impatient = Store(Database(store.db.engine, retry=RetryPolicy(deadline_s=0)))
    try:
        store.tasks.upsert([every_second("before")])
        for member in galera_cluster.members[1:]:
            member.kill()
        alone = galera_cluster.members[0]
        wait_until(
            "the last member to lose quorum",
            lambda: alone.status().get("wsrep_cluster_status") == "non-Primary",
            30,
        )
        try:
            impatient.tasks.get("before")
        except Exception as err:
            refused: BaseException = err
        else:
            raise AssertionError("a member out of quorum answered")
        assert "1047" in str(refused) and is_transient(refused), repr(refused)
        bootstrap = threading.Timer(1.0, alone.bootstrap)
        bootstrap.start()
        try:
            (row,) = store.tasks.upsert([every_second("while-out-of-quorum")])
        finally:
            bootstrap.join()
        assert row.name == "while-out-of-quorum"
        assert {t.name for t in store.tasks.all()} == {"before", "while-out-of-quorum"}
    finally:
        store.close()
