"""Where and when a run may start (issue 22), on real node processes.

Settings (harness.FAST): heartbeat 0.2 s, dead after 5 heartbeats (1 s), poll 0.1 s. The
jobs are tests/cluster/admission_jobs.py: each node declares the tasks named in its
``EASYJOB_ADMISSION_TASKS``. Every time compared is database time (the rows' own times, or
``store.db.now()``); the tests wait on conditions with deadlines.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from easyjob.cli import main
from easyjob.core.records import HistoryRow
from easyjob.core.states import RunStatus
from tests.cluster import admission_checks as check
from tests.cluster.harness import FAST, Cluster, NodeProcess, wait_until
from tests.rig.servers import DatabaseServer

pytestmark = pytest.mark.cluster

JOBS = str(Path(__file__).with_name("admission_jobs.py"))
POLL = timedelta(seconds=float(FAST["poll"]))
#: A start write reads the database clock a moment after the node decided to start.
START_WRITE_LEAD = 2 * POLL
#: Start lateness (start_time - fire_time) p99 of a task declared by one node of three.
LATENESS_P99_S = 0.3
#: How long after a window's last fire its fires may take to end (success or missed).
SETTLE_S = 5.0
STRATEGIES = ("default", "id_hash", "least_count", "weight")


def _cluster(db_url: str, tmp_path: Path) -> Cluster:
    return Cluster(db_url, tmp_path, jobs=JOBS)


def _sqlite_and_postgresql(db_url: str) -> None:
    """The long tests (a strategy each, outages of 20 s) run on SQLite and PostgreSQL, as the
    issue asks, to keep `make test` well inside CI's time: MariaDB takes the same admission
    path (the rule is pure; its claims and starts are tested in tests/store and the shorter
    tests below run on it too)."""
    if db_url.startswith(("mysql", "mariadb")):
        pytest.skip("long admission test: SQLite and PostgreSQL only (see _sqlite_and_postgresql)")


def _start(cluster: Cluster, node_id: str, tasks: tuple[str, ...], **options: str) -> NodeProcess:
    env = {"EASYJOB_ADMISSION_TASKS": ",".join(tasks)}
    return cluster.start_with(node_id, options, env=env)


def _db_now(cluster: Cluster) -> datetime:
    now: datetime = cluster.store.db.now()
    return now


def _wait_db_time(cluster: Cluster, at: datetime) -> None:
    """Wait until database time reaches *at*."""
    timeout = (at - _db_now(cluster)).total_seconds() + 30
    wait_until(f"database time {check.hms(at)}", lambda: _db_now(cluster) >= at, timeout)


def _settle(cluster: Cluster, task: str, fires: list[datetime]) -> list[HistoryRow]:
    """The rows of *task* once every one of *fires* has a final row, or SETTLE_S past the last
    fire in database time (what is still open then is reported by the checks)."""
    _wait_db_time(cluster, fires[-1])
    deadline = time.monotonic() + SETTLE_S
    while check.unsettled(runs := cluster.runs(task), fires) and time.monotonic() < deadline:
        time.sleep(0.1)
    return runs


def _fail_on(problems: list[str], headline: str) -> None:
    if problems:
        shown = problems[:25] + (
            [f"... and {len(problems) - 25} more"] if len(problems) > 25 else []
        )
        pytest.fail(f"{headline}:\n  " + "\n  ".join(shown), pytrace=False)


def _ran_twice(cluster: Cluster, task: str) -> list[str]:
    """The fires of *task* that the ledger says ran more than once."""
    counts = Counter(e.fire_time for e in cluster.ledger() if e.task == task)
    return [f"fire {check.hms(f)} ran {n} times" for f, n in sorted(counts.items()) if n > 1]


# -- 1. nodes that declare different tasks --------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_task_declared_by_one_node_of_three_runs_every_fire_once_and_on_time(
    strategy: str, db_url: str, tmp_path: Path
) -> None:
    """Strategies rank only the nodes that declare a task: one node of three declares
    ``every_second`` (the other two declare ``other_second``); over 15 s every fire of it runs
    exactly once, none MISSED, with start lateness p99 under 300 ms."""
    _sqlite_and_postgresql(db_url)
    with _cluster(db_url, tmp_path) as cluster:
        _start(cluster, "node-0", ("every_second",), strategy=strategy)
        for node in ("node-1", "node-2"):
            _start(cluster, node, ("other_second",), strategy=strategy)
        cluster.wait_live()
        start = _db_now(cluster).replace(microsecond=0) + timedelta(seconds=2)
        fires = check.fires_between(start, start + timedelta(seconds=14))
        runs = _settle(cluster, "every_second", fires)
        cluster.stop_all()
        problems = check.not_once(runs, fires) + _ran_twice(cluster, "every_second")
        late = check.lateness([r for r in runs if fires[0] <= r.fire_time <= fires[-1]])
        p99 = check.p99([s for s, _ in late]) if late else float("inf")
        print(f"\n{strategy}: {len(fires)} fires, {len(late)} started, p99 {p99 * 1000:.0f} ms")
        if p99 >= LATENESS_P99_S:
            problems += [
                f"fire {check.hms(r.fire_time)} started {s * 1000:.0f} ms late on {r.node_id}"
                for s, r in late[:5]
            ]
        _fail_on(
            problems,
            f"{strategy}: every_second (declared by node-0 only): "
            f"{len(check.not_once(runs, fires))} of {len(fires)} fires did not run once; "
            f"start lateness p99 {p99 * 1000:.0f} ms over {len(late)} runs "
            f"(limit {LATENESS_P99_S * 1000:.0f} ms)",
        )


# -- 2. fire_once after an outage -----------------------------------------------------------

#: After an outage the first run starts within this of the first node being back, in
#: database time (the ``started_at`` of its row): one poll (0.1 s) and the node's start-up
#: from writing its row to its first poll (measured 0.06 s), with room for a 2-core machine
#: shared with other test runs.
BACK_BOUND = timedelta(seconds=1.0)
#: ... or of the database being writable again: a node's failed write is retried at most
#: 2 s later (the store's RetryPolicy caps its backoff at max_wait_s = 2 s, plus 50 ms of
#: jitter), then it needs a heartbeat (0.2 s) to trust its view again and a poll (0.1 s).
WRITABLE_BOUND = timedelta(seconds=3.0)


def _check_outage(
    cluster: Cluster, since: datetime, back: datetime, bound: timedelta, what: str
) -> None:
    runs = [r for r in cluster.runs("every_second") if r.fire_time >= since]
    if started := sorted(r.start_time for r in runs if r.start_time and r.start_time >= back):
        print(f"\nfirst run {(started[0] - back).total_seconds():.3f} s after {what}")
    problems = check.stale_starts(runs, START_WRITE_LEAD)
    problems += check.once_right_after(runs, back, bound, what)
    problems += _ran_twice(cluster, "every_second")
    _fail_on(problems, f"fire_once after {what}")


def _steady(cluster: Cluster, seconds: int = 2) -> datetime:
    """Wait until every_second ran its fires of the next *seconds*; returns the first."""
    start = _db_now(cluster).replace(microsecond=0) + timedelta(seconds=1)
    fires = check.fires_between(start, start + timedelta(seconds=seconds - 1))
    _fail_on(check.not_once(_settle(cluster, "every_second", fires), fires), "before the outage")
    return start


def _after(cluster: Cluster, back: datetime, seconds: int = 2) -> list[datetime]:
    """Wait until the fires of the *seconds* after *back* have ended (or SETTLE_S past them);
    returns those fires."""
    fires = check.fires_between(back, back + timedelta(seconds=seconds))
    _settle(cluster, "every_second", fires)
    return fires


def _restart_whole_cluster(db_url: str, tmp_path: Path, down_s: float) -> None:
    with _cluster(db_url, tmp_path) as cluster:
        for node in ("node-0", "node-1"):
            _start(cluster, node, ("every_second",))
        cluster.wait_live()
        since = _steady(cluster)
        cluster.stop_all()  # SIGTERM, as a deployment does
        _wait_db_time(cluster, _db_now(cluster) + timedelta(seconds=down_s))
        for node in ("node-2", "node-3"):
            _start(cluster, node, ("every_second",))
        cluster.wait_live("node-2", "node-3")
        back = min(
            n.started_at for n in cluster.store.nodes.all()[1] if n.node_id in ("node-2", "node-3")
        )
        _after(cluster, back)
        cluster.stop_all()
        _check_outage(
            cluster, since, back, BACK_BOUND, f"the whole cluster was down {down_s:.0f} s"
        )


def test_fire_once_after_the_whole_cluster_was_down_20_s(db_url: str, tmp_path: Path) -> None:
    """Both nodes get SIGTERM (a deployment), two new ones start 20 s later: no fire written
    before the outage starts, and the task runs once, its latest due fire, right away."""
    _sqlite_and_postgresql(db_url)
    _restart_whole_cluster(db_url, tmp_path, 20)


@pytest.mark.slow_cluster
def test_fire_once_after_the_whole_cluster_was_down_75_s(db_url: str, tmp_path: Path) -> None:
    """Longer than the misfire grace (60 s): every fire of the gap is past it."""
    _restart_whole_cluster(db_url, tmp_path, 75)


def test_fire_once_after_one_node_of_two_was_stopped_20_s(db_url: str, tmp_path: Path) -> None:
    """SIGSTOP (a frozen VM, a long GC pause) then SIGCONT: the stopped node comes back with
    the runs it had claimed ahead; the other node took over meanwhile."""
    _sqlite_and_postgresql(db_url)
    with _cluster(db_url, tmp_path) as cluster:
        for node in ("node-0", "node-1"):
            _start(cluster, node, ("every_second",))
        cluster.wait_live()
        since = _steady(cluster)
        stopped = cluster.nodes["node-1"]
        stopped.freeze(cluster.store.db.gate)
        _wait_db_time(cluster, _db_now(cluster) + timedelta(seconds=20))
        stopped.signal(signal.SIGCONT)
        back = _db_now(cluster)
        cluster.wait_live("node-1")
        fires = _after(cluster, back)
        cluster.stop_all()
        runs = [r for r in cluster.runs("every_second") if r.fire_time >= since]
        problems = check.stale_starts(runs, START_WRITE_LEAD)
        problems += check.not_once(runs, fires)
        problems += _ran_twice(cluster, "every_second")
        _fail_on(problems, "fire_once after node-1 of two was stopped 20 s")


@contextmanager
def _unwritable(db_url: str, server: DatabaseServer | None) -> Iterator[None]:
    """The database refuses writes: PostgreSQL and MariaDB turn read-only; an SQLite file is
    locked by another process's write transaction (its writers wait on the lock)."""
    if server is not None:
        server.set_read_only(True)
        try:
            yield
        finally:
            server.set_read_only(False)
        return
    conn = sqlite3.connect(str(make_url(db_url).database), timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_fire_once_after_the_database_was_unwritable_20_s(
    db_url: str, db_server: DatabaseServer | None, tmp_path: Path
) -> None:
    """The nodes stay up while no write succeeds for 20 s (a full disk, a read-only
    failover): once writable, the task runs once, its latest due fire, and no stale one."""
    _sqlite_and_postgresql(db_url)
    with _cluster(db_url, tmp_path) as cluster:
        for node in ("node-0", "node-1"):
            _start(cluster, node, ("every_second",))
        cluster.wait_live()
        since = _steady(cluster)
        with _unwritable(db_url, db_server):
            _wait_db_time(cluster, _db_now(cluster) + timedelta(seconds=20))
        back = _db_now(cluster)
        _after(cluster, back)
        cluster.stop_all()
        _check_outage(cluster, since, back, WRITABLE_BOUND, "the database was unwritable 20 s")


# -- 3. a pause holds manual runs -----------------------------------------------------------


def _cli(*argv: str) -> None:
    code = main(list(argv))
    assert code == 0, f"easyjob {' '.join(argv)} exited {code}"


def test_a_pause_holds_a_future_manual_run_until_the_resume(db_url: str, tmp_path: Path) -> None:
    """``trigger --at`` two future times, ``pause``, wait past the first, ``resume``: the first
    runs right after the resume, the second (due after the resume) at its time."""
    with _cluster(db_url, tmp_path) as cluster:
        for node in ("node-0", "node-1"):
            _start(cluster, node, ("on_demand",))
        cluster.wait_live()
        now = _db_now(cluster)
        first_at, second_at = now + timedelta(seconds=4), now + timedelta(seconds=8)
        for at in (first_at, second_at):
            _cli("trigger", "on_demand", "--at", at.isoformat(), "--db", db_url)
        _cli("pause", "on_demand", "--db", db_url)
        paused = _db_now(cluster)
        assert paused < first_at, f"setup too slow: paused at {check.hms(paused)}, after the run"
        _wait_db_time(cluster, first_at + timedelta(seconds=1))
        resumed = _db_now(cluster)
        _cli("resume", "on_demand", "--db", db_url)
        _wait_db_time(cluster, second_at)
        with suppress(AssertionError):  # what has not ended by then is reported below
            wait_until("both manual runs to end", lambda: _ended(cluster, "on_demand", 2), SETTLE_S)
        cluster.stop_all()
        first, second = sorted(cluster.runs("on_demand"), key=lambda r: r.due_time)
        problems = _ran_between(first, resumed, resumed + BACK_BOUND, "right after the resume")
        late = second_at + timedelta(seconds=LATENESS_P99_S)
        problems += _ran_between(second, second_at, late, "at its time, after the resume")
        _fail_on(
            problems,
            f"manual runs due {check.hms(first_at)} and {check.hms(second_at)}, triggered, "
            f"then the task paused, resumed at {check.hms(resumed)}",
        )


def _ended(cluster: Cluster, task: str, count: int) -> bool:
    runs = cluster.runs(task)
    return len(runs) == count and all(r.status in check.FINAL for r in runs)


def _ran_between(run: HistoryRow, low: datetime, high: datetime, when: str) -> list[str]:
    if run.status == RunStatus.SUCCESS and run.start_time and low <= run.start_time <= high:
        return []
    return [
        f"the run due {check.hms(run.due_time)} did not run {when} (between {check.hms(low)} "
        f"and {check.hms(high)}): {check.describe(run)}, started "
        f"{check.hms(run.start_time) if run.start_time else 'never'}"
    ]


# -- 4. children are spread like any run ----------------------------------------------------

PARENT_RUNS = 5
FAN_CHILDREN = 4  # fan_child_0 ... 3 (admission_jobs.py; importing it would declare them here)


def test_the_children_of_a_fan_out_spread_over_the_nodes(db_url: str, tmp_path: Path) -> None:
    """``fan`` has four children of about 1 s each; under the default strategy on 3 nodes
    the children of a parent run do not all land on one node. Of 5 parent runs, at least 3
    spread their children over 2 nodes or more (if each child went to a node at random, all
    four on one node would happen 1 time in 27; 3 such parents of 5, 1 in 2,000)."""
    with _cluster(db_url, tmp_path) as cluster:
        for i in range(3):
            _start(cluster, f"node-{i}", ("fan",))
        cluster.wait_live()
        layout: dict[int, list[HistoryRow]] = {}
        for _ in range(PARENT_RUNS):
            parent = cluster.store.tasks.trigger("fan")

            def children(parent: int = parent) -> list[HistoryRow]:
                rows = [r for r in cluster.runs() if r.pid == parent]
                done = [r for r in rows if r.status == RunStatus.SUCCESS]
                return rows if len(done) == FAN_CHILDREN else []

            layout[parent] = wait_until(f"the children of parent run {parent}", children, 20)
        cluster.stop_all()
        together = {
            parent: sorted(f"{r.task_name}@{r.node_id}" for r in rows)
            for parent, rows in layout.items()
            if len({r.node_id for r in rows}) == 1
        }
        if len(together) > PARENT_RUNS - 3:
            shown = [f"parent run {p}: {', '.join(c)}" for p, c in together.items()]
            _fail_on(
                shown, f"{len(together)} of {PARENT_RUNS} fan-outs ran all children on one node"
            )


# -- 5. a broadcast task's gap names its node -----------------------------------------------


def test_a_broadcast_gap_summary_row_names_its_target_node(db_url: str, tmp_path: Path) -> None:
    """The cluster stops for 3 s: the fires of broadcast ``everywhere`` meanwhile are MISSED,
    and every MISSED row says which node's run it stands for."""
    with _cluster(db_url, tmp_path) as cluster:
        for node in ("node-0", "node-1"):
            _start(cluster, node, ("everywhere",))
        cluster.wait_live()

        def ran_on(nodes: set[str]) -> Callable[[], bool]:
            return lambda: nodes <= {e.node for e in cluster.ledger() if e.task == "everywhere"}

        wait_until("everywhere to run on both nodes", ran_on({"node-0", "node-1"}), 20)
        cluster.stop_all()
        stopped = _db_now(cluster)
        _wait_db_time(cluster, stopped + timedelta(seconds=3))
        for node in ("node-2", "node-3"):
            _start(cluster, node, ("everywhere",))
        cluster.wait_live("node-2", "node-3")

        def missed() -> list[HistoryRow]:
            return [r for r in cluster.runs("everywhere") if r.status == RunStatus.MISSED]

        def gap() -> list[HistoryRow]:  # a row for a fire due while no node ran
            return [r for r in missed() if (r.last_fire_time or r.fire_time) > stopped]

        try:
            wait_until("a MISSED row for the fires due while the cluster was down", gap, 10)
        finally:
            cluster.stop_all()
        rows = missed()
        problems = [f"{check.describe(r)}: no target_node" for r in rows if r.target_node is None]
        _fail_on(problems, "broadcast MISSED rows without their node")
