"""Network faults between one node and the database, through that node's own proxy.

Scenario 9: a partition of one node, short (under the dead threshold) and long (four times
it, healing late), as a blackhole (the node hangs) and as reset/refused connections (the
node gets errors). Scenario 10: COMMITs applied whose replies are lost.
SQLite is embedded: there is no network between a node and its database.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus, Trigger
from tests.chaos.expected import Window
from tests.chaos.faults import Fault, FaultLog
from tests.chaos.on_cluster import (
    Settings,
    observe,
    record,
    recovery_runs,
    settle,
    stuck_and_died,
)
from tests.cluster.harness import Cluster, wait_until
from tests.rig.backends import SERVER_BACKENDS, only_backends
from tests.rig.routing import NodeRoutes

pytestmark = [pytest.mark.chaos, only_backends(*SERVER_BACKENDS)]
SLOW = pytest.mark.slow_chaos

TICKS = 4
SETTINGS = Settings(heartbeat=0.3, dead_after=5, poll=0.2)  # dead after 1.5 s
#: How long after the faults stopped the window goes on (every owed fire must run in it).
AFTER_S = 3
#: A held row whose due time is older than this once the cluster settled is stuck.
STUCK_S = 6


def _floor(when: datetime) -> datetime:
    return when.replace(microsecond=0)


def _start_nodes(cluster: Cluster, routes: NodeRoutes, n: int = 3) -> None:
    for i in range(n):
        cluster.start_with(f"node-{i}", SETTINGS.options, db_url=routes.url(f"node-{i}"))
    cluster.wait_live()


def _slow_running(cluster: Cluster) -> tuple[int, str, datetime]:
    def running() -> tuple[int, str, datetime] | None:
        began = {e.run_id for e in cluster.ledger() if e.event == "started"}
        for run in cluster.runs("slow"):
            if run.status == RunStatus.RUNNING and run.id in began:
                return run.id, str(run.node_id), run.fire_time
        return None

    found = wait_until("the slow run to be mid-run", running, 30)
    assert found is not None
    return found


PARTITIONS = {
    # name: (proxy mode, partition length in dead thresholds)
    "short-blackhole": ("blackhole", 0.5),
    "long-blackhole": ("blackhole", 4.0),
    "long-refuse": ("refuse", 4.0),
}


@pytest.mark.parametrize(
    "name",
    [
        "short-blackhole",  # fast tier: about 20 s per database
        pytest.param("long-blackhole", marks=SLOW),
        pytest.param("long-refuse", marks=SLOW),
    ],
)
def test_partition_of_one_node(name: str, db_backend: str, db_url: str, tmp_path: Path) -> None:
    mode, lengths = PARTITIONS[name]
    seconds = lengths * SETTINGS.dead_s
    faults = FaultLog()
    with (
        NodeRoutes(db_url) as routes,
        Cluster(db_url, tmp_path, ticks=TICKS, slow_seconds=2.0) as cluster,
    ):
        _start_nodes(cluster, routes)
        start = _floor(cluster.store.db.now()) + timedelta(seconds=1)
        wait_until(
            "two seconds of steady state",
            lambda: cluster.store.db.now() > start + timedelta(seconds=2),
            20,
        )
        cluster.store.tasks.trigger("slow")
        slow_id, holder, slow_fire = _slow_running(cluster)
        proxy = routes.proxy(holder)
        began = time.time()
        getattr(proxy, mode)()
        time.sleep(seconds)
        proxy.heal()
        faults.add(Fault("partition", holder, began, time.time(), mode))
        healed = cluster.store.db.now()
        wait_until(
            f"{holder} to rejoin and run new work",
            lambda: any(
                e.node == holder and e.fire_time > healed + timedelta(seconds=1)
                for e in cluster.ledger()
            ),
            40,
        )
        window = Window(start, _floor(healed) + timedelta(seconds=AFTER_S))
        settle(cluster, TICKS, window, timeout=60)
        wait_until(
            "the slow fire to succeed",
            lambda: any(r.status == RunStatus.SUCCESS for r in cluster.runs("slow")),
            30,
        )
        stuck, died = stuck_and_died(cluster, window, STUCK_S)
        holder_log = cluster.nodes[holder].log()
        report = observe(
            f"partition-{name}",
            db_backend,
            cluster,
            ticks=TICKS,
            window=window,
            faults=faults,
            settings=SETTINGS,
            stuck_before_stop=stuck,
            died=died,
            also_owed=frozenset({("slow", slow_fire)}),
        )
        recovered = recovery_runs(cluster)
        problems = record(
            report, {"partition_s": round(seconds, 2), "recovery_runs": len(recovered)}
        )
        assert problems == [], problems
        slow = {r.attempt: r for r in cluster.runs("slow")}
        if lengths < 1:
            # Under the dead threshold: nobody takes anything over, nothing runs twice.
            assert recovered == [], recovered
            assert report.duplicated == 0
            assert list(slow) == [1] and slow[1].status == RunStatus.SUCCESS
        else:
            # Over it: the slow run was taken over, the cut-off node's outcome was fenced.
            assert slow[1].id == slow_id and slow[1].status == RunStatus.ABANDONED
            assert slow[2].triggered_by == Trigger.RECOVERY and slow[2].node_id != holder
            assert slow[2].status == RunStatus.SUCCESS
            assert "fenced" in holder_log, holder_log[-3000:]
            assert report.max_failover_s is not None


REPLY_LOST = {
    # name: (regular expression a transaction must match, lose every k-th such COMMIT)
    "run-writes": (r"UPDATE easy_job_task_detail", 3),
    "every-write": (r"easy_job_", 5),
}
REPLY_LOST_S = 6


@pytest.mark.parametrize(
    "name",
    [
        "run-writes",  # fast tier: about 30 s per database
        pytest.param("every-write", marks=SLOW),
    ],
)
def test_commit_applied_but_reply_lost(
    name: str, db_backend: str, db_url: str, tmp_path: Path
) -> None:
    """Every node's proxy loses the reply of every k-th matching COMMIT for a while: the
    writes did commit, the nodes saw lost connections and retried. KNOWN BUG (lead fixing):
    a retried claim or start then matches no row, and the run stays CLAIMED/RUNNING under
    a live node that forgot it (stuck row, missing fire)."""
    match, every = REPLY_LOST[name]
    faults = FaultLog()
    with (
        NodeRoutes(db_url) as routes,
        Cluster(db_url, tmp_path, ticks=TICKS) as cluster,
    ):
        _start_nodes(cluster, routes)
        start = _floor(cluster.store.db.now()) + timedelta(seconds=1)
        began = time.time()
        for i in range(3):
            routes.proxy(f"node-{i}").lose_commit_replies(every=every, match=match)
        time.sleep(REPLY_LOST_S)
        routes.heal_all()
        ended = time.time()
        for i in range(3):
            faults.add(Fault("reply_lost", f"node-{i}", began, ended, f"every {every}: {match}"))
        lost = sum(routes.proxy(f"node-{i}").stats.replies_lost for i in range(3))
        healed = cluster.store.db.now()
        window = Window(start, _floor(healed) + timedelta(seconds=AFTER_S))
        try:
            settle(cluster, TICKS, window, timeout=30)
        except AssertionError as err:
            print(f"\n{err}")  # the report below names what is missing
        stuck, died = stuck_and_died(cluster, window, STUCK_S)
        report = observe(
            f"reply-lost-{name}",
            db_backend,
            cluster,
            ticks=TICKS,
            window=window,
            faults=faults,
            settings=SETTINGS,
            stuck_before_stop=stuck,
            died=died,
            failover_bound=False,
        )
        problems = record(report, {"replies_lost": lost})
        assert lost > 0, "the proxy lost no reply: the scenario tested nothing"
        assert problems == [], problems
