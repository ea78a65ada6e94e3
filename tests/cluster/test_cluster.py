"""A real cluster: node processes sharing one database, with real kill -9 and SIGSTOP.

Settings (harness.FAST): heartbeat 0.2 s, dead after 5 heartbeats (1 s), poll 0.1 s.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from croniter import croniter

from easyjob.core.states import RunStatus, Trigger
from easyjob.node.node import DOUBLE_SIGNAL_S
from tests.cluster.harness import FAST, Cluster, duplicates, wait_until
from tests.rig.servers import DatabaseServer

pytestmark = pytest.mark.cluster

WINDOW_S = int(os.environ.get("EASYJOB_TEST_WINDOW", "30"))
DEAD_S = float(FAST["heartbeat"]) * int(FAST["dead-after"])
#: docs/concepts.md: a crashed node's run starts again within (dead_after + 1) heartbeats
#: plus two polls; one more heartbeat of slack for the recovering node's own timer.
FAILOVER_BOUND_S = (int(FAST["dead-after"]) + 2) * float(FAST["heartbeat"]) + 2 * float(
    FAST["poll"]
)


def expected_fires(start: datetime, end: datetime) -> list[datetime]:
    """Every-second fires in [start, end], computed independently of easyjob."""
    itr = croniter("* * * * * *", start - timedelta(seconds=1), second_at_beginning=True)
    fires = []
    while (fire := itr.get_next(datetime)) <= end:
        fires.append(fire.replace(tzinfo=UTC))
    return fires


def test_every_fire_runs_exactly_once_on_three_nodes(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, ticks=20) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
        end = start + timedelta(seconds=WINDOW_S - 1)
        window = [(f"tick-{i}", f) for i in range(20) for f in expected_fires(start, end)]
        assert len(window) == 20 * WINDOW_S

        def done() -> bool:
            ok = {
                (r.task_name, r.fire_time) for r in cluster.runs() if r.status == RunStatus.SUCCESS
            }
            return all(key in ok for key in window)

        wait_until("every fire in the window to succeed", done, WINDOW_S + 30)
        cluster.stop_all()
        ledger = [(e.task, e.fire_time) for e in cluster.ledger()]
        rows = [(r.task_name, r.fire_time) for r in cluster.runs() if r.status == RunStatus.SUCCESS]
        assert duplicates(ledger) == {}
        assert duplicates(rows) == {}
        assert set(window) <= set(ledger)
        assert all(r.attempt == 1 for r in cluster.runs())
        per_node = {n: sum(1 for e in cluster.ledger() if e.node == n) for n in cluster.nodes}
        print(
            f"\n{db_url.split(':')[0]}: {len(window)} fires expected in window, "
            f"{len(set(window) & set(ledger))} ran, 0 duplicated; runs per node {per_node}"
        )
        assert {cluster.node_status(n) for n in cluster.nodes} == {"STOPPED"}


def _slow_run_on(cluster: Cluster, attempt: int = 1) -> tuple[int, str]:
    def running() -> tuple[int, str] | None:
        # Mid-run: RUNNING in the table and the job's own "started" line in the ledger.
        began = {e.run_id for e in cluster.ledger() if e.event == "started"}
        for run in cluster.runs("slow"):
            if run.status == RunStatus.RUNNING and run.attempt == attempt and run.id in began:
                return run.id, str(run.node_id)
        return None

    return wait_until(f"the slow run (attempt {attempt}) to start", running, 20)


def test_kill_9_mid_run_reruns_the_fire_elsewhere_within_the_bound(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, slow_seconds=1.0) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        _, holder = _slow_run_on(cluster)
        cluster.nodes[holder].kill()
        killed_at = cluster.store.db.now()

        def rerun() -> list[object]:
            return [r for r in cluster.runs("slow") if r.attempt == 2 and r.start_time]

        (second,) = wait_until("attempt 2 to start", rerun, 30)
        failover = (second.start_time - killed_at).total_seconds()  # type: ignore[attr-defined]
        print(f"\nfailover {failover:.2f}s (bound {FAILOVER_BOUND_S:.2f}s)")
        assert second.node_id != holder  # type: ignore[attr-defined]
        assert second.triggered_by == Trigger.RECOVERY  # type: ignore[attr-defined]
        assert failover <= FAILOVER_BOUND_S
        wait_until(
            "attempt 2 to succeed",
            lambda: any(r.status == RunStatus.SUCCESS for r in cluster.runs("slow")),
            20,
        )
        cluster.stop_all()
        statuses = sorted((r.attempt, r.status) for r in cluster.runs("slow"))
        assert statuses == [(1, RunStatus.ABANDONED), (2, RunStatus.SUCCESS)]
        assert not [r for r in cluster.runs() if r.status in (RunStatus.RUNNING, RunStatus.CLAIMED)]


def test_sigstop_past_the_dead_threshold_is_fenced_and_the_node_recovers(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, ticks=2, slow_seconds=1.5) as cluster:
        for i in range(2):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        first_id, holder = _slow_run_on(cluster)
        paused = cluster.nodes[holder]
        paused.freeze(cluster.store.db.gate)
        (other,) = [n for n in cluster.nodes if n != holder]
        wait_until(
            "attempt 2 to finish on the other node",
            lambda: any(
                r.attempt == 2 and r.status == RunStatus.SUCCESS for r in cluster.runs("slow")
            ),
            30,
        )
        paused.signal(signal.SIGCONT)
        wait_until(
            "the paused node to log its fenced outcome",
            lambda: "outcome was fenced" in paused.log(),
            20,
        )
        resumed_at = cluster.store.db.now()
        wait_until(
            "the paused node to run new work again",
            lambda: any(e.node == holder and e.fire_time > resumed_at for e in cluster.ledger()),
            20,
        )
        cluster.stop_all()
        slow = {r.attempt: r for r in cluster.runs("slow")}
        assert slow[1].status == RunStatus.ABANDONED and slow[1].id == first_id
        assert (slow[2].status, slow[2].node_id) == (RunStatus.SUCCESS, other)
        finished = [e for e in cluster.ledger() if e.task == "slow" and e.event == "finished"]
        assert sorted(e.attempt for e in finished) == [1, 2]  # ran twice: at-least-once
        ticks = [(e.task, e.fire_time) for e in cluster.ledger() if e.task != "slow"]
        dups = duplicates(ticks)
        # A pause longer than the dead threshold may re-run a fire the paused node held.
        assert all(key[1] <= resumed_at for key in dups), dups


def test_sigterm_mid_run_finishes_it_and_stops(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, slow_seconds=1.5) as cluster:
        for i in range(2):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        run_id, holder = _slow_run_on(cluster)
        cluster.nodes[holder].signal(signal.SIGTERM)
        assert cluster.nodes[holder].wait(30) == 0
        assert cluster.node_status(holder) == "STOPPED"
        (run,) = cluster.runs("slow")
        assert (run.id, run.status, run.node_id, run.attempt) == (
            run_id,
            RunStatus.SUCCESS,
            holder,
            1,
        )
        cluster.stop_all()
        assert [e.event for e in cluster.ledger()] == ["started", "finished"]


def test_database_restart_loses_no_fire_and_kills_no_node(
    db_url: str, db_server: DatabaseServer | None, tmp_path: Path
) -> None:
    if db_server is None:
        pytest.skip("SQLite is embedded: there is no server to restart")
    with Cluster(db_url, tmp_path, ticks=5) as cluster:
        for i in range(3):
            cluster.start(f"node-{i}")
        cluster.wait_live()
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
        wait_until(
            "the window to begin", lambda: cluster.store.db.now() > start + timedelta(seconds=2), 20
        )
        db_server.restart()
        back = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=2)
        end = back + timedelta(seconds=1)
        window = [(f"tick-{i}", f) for i in range(5) for f in expected_fires(start, end)]
        after = {(task, f) for task, f in window if f >= back}  # the server is back by then

        def done() -> bool:
            rows = cluster.runs()
            ok = {(r.task_name, r.fire_time) for r in rows if r.status == RunStatus.SUCCESS}
            # a fire due while the server was down (1-3 s) and superseded by the next one
            # before it could start is MISSED by the misfire policy (fire_once), recorded
            # on a row: never lost
            missed = {
                (task, f)
                for task, f in window
                if any(r.task_name == task and r.missed(f) for r in rows)
            }
            return after <= ok and all(key in ok or key in missed for key in window)

        wait_until("every fire around the restart to be run or recorded missed", done, 60)
        assert all(node.alive for node in cluster.nodes.values())
        cluster.stop_all()
        ledger = [(e.task, e.fire_time) for e in cluster.ledger()]
        assert after <= set(ledger)
        assert duplicates(ledger) == {}


def test_a_restart_under_the_same_id_never_adopts_its_predecessors_claims(
    db_url: str, tmp_path: Path
) -> None:
    with Cluster(db_url, tmp_path, slow_seconds=1.0) as cluster:
        # A single node: nobody else can recover the run, the new incarnation must.
        cluster.start("solo")
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        run_id, _ = _slow_run_on(cluster)
        cluster.nodes["solo"].kill()
        cluster.nodes["solo"].close()
        cluster.start("solo")
        wait_until(
            "the new incarnation to re-run the fire",
            lambda: any(
                r.attempt == 2 and r.status == RunStatus.SUCCESS for r in cluster.runs("slow")
            ),
            30,
        )
        cluster.stop_all()
        slow = {r.attempt: r for r in cluster.runs("slow")}
        assert (slow[1].id, slow[1].status) == (run_id, RunStatus.ABANDONED)
        assert "previous incarnation" in cluster.nodes["solo"].log()


def test_a_second_sigterm_exits_at_once(db_url: str, tmp_path: Path) -> None:
    with Cluster(db_url, tmp_path, slow_seconds=30) as cluster:
        node = cluster.start("node-0")
        cluster.wait_live()
        cluster.store.tasks.trigger("slow")
        _slow_run_on(cluster)
        node.signal(signal.SIGTERM)
        wait_until(
            "the node to start its graceful stop",
            lambda: cluster.node_status("node-0") == "STOPPING",
            10,
        )
        # STOPPING shows the first signal has arrived. Two signals closer than
        # DOUBLE_SIGNAL_S count as one request (GNU timeout sends two): wait past that.
        time.sleep(2 * DOUBLE_SIGNAL_S)
        node.signal(signal.SIGTERM)
        assert node.wait(5) == 130
