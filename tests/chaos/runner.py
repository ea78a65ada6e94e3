"""Play a declarative scenario against real node processes and judge it.

A :class:`Scenario` says how many nodes run which tasks, which faults happen when (seconds
after the window opened), how long the cluster is then left alone (settle), and which fires
the contract owes. :func:`play` runs it in real time and returns the checker's
:class:`~tests.chaos.checker.Report`; with ``EASYJOB_CHAOS_REPORT=path`` set, the report is
also appended to that JSON-lines file (before any assertion, so failures are recorded too).

Faults are plain callables taking the :class:`Play`; the ones here (module functions
returning such callables) record themselves in the fault log with their wall-clock times.
Waits poll observable conditions with deadlines derived from the documented failover bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from easyjob.core.config import NodeConfig
from easyjob.core.records import HistoryRow
from easyjob.core.states import HELD, RunStatus, Trigger
from easyjob.node.node import DOUBLE_SIGNAL_S
from easyjob.store import RetryPolicy, Store
from easyjob.store.schema import node_table, task_detail_table, task_table
from tests.chaos import ledger
from tests.chaos.catalog import CHAINS, TICK_CRON
from tests.chaos.checker import FAILOVER_SLACK_S, Expectations, Observation, Report, build
from tests.chaos.expected import Window, cron_fires
from tests.chaos.faults import Fault, FaultLog
from tests.cluster.harness import NodeProcess, sleep_until, wait_until
from tests.rig.servers import DatabaseServer

__all__ = ["SETTINGS", "Action", "Play", "Scenario", "Settings", "Step", "play"]

JOBS = str(Path(__file__).with_name("jobs.py"))
REPORT_ENV = "EASYJOB_CHAOS_REPORT"
LIBFAKETIME = next(
    (
        path
        for path in (
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/faketime/libfaketime.so.1",
        )
        if Path(path).exists()
    ),
    "",
)
Key = tuple[str, datetime]
Action = Callable[["Play"], None]


@dataclass(frozen=True)
class Settings:
    """Node timing for a scenario. Dead threshold 6 x 0.25 s = 1.5 s: short enough for
    failovers in seconds, long enough that a loaded 2-core machine does not stall a healthy
    node past it."""

    heartbeat: float = 0.25
    dead_after: int = 6
    poll: float = 0.1
    shutdown_grace: float = 10.0
    workers: int = 8

    @property
    def config(self) -> NodeConfig:
        return NodeConfig(heartbeat=self.heartbeat, dead_after=self.dead_after, poll=self.poll)

    @property
    def dead_threshold_s(self) -> float:
        return self.config.dead_threshold.total_seconds()

    @property
    def failover_bound_s(self) -> float:
        """The documented bound (easyjob/core/config.py, docs/concepts.md)."""
        return self.config.failover_bound.total_seconds()

    def argv(self, **overrides: str) -> list[str]:
        options = {
            "heartbeat": str(self.heartbeat),
            "dead-after": str(self.dead_after),
            "poll": str(self.poll),
            "shutdown-grace": str(self.shutdown_grace),
            "workers": str(self.workers),
            **overrides,
        }
        return [arg for key, value in options.items() for arg in (f"--{key}", value)]


SETTINGS = Settings()


@dataclass(frozen=True)
class Step:
    """Do *action* *at* seconds after the window opened (steps run one after another)."""

    at: float
    action: Action


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int = 3
    ticks: int = 0
    env: dict[str, str] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    duration_s: float = 6.0  # the window stays open at least this long, faults or not
    settle_s: float = 3.0  # then the cluster is left alone this long before the window closes
    settings: Settings = SETTINGS
    node_options: dict[str, dict[str, str]] = field(default_factory=dict)  # per node id
    chains: bool = False
    #: Nodes run under libfaketime, their clocks moved by this many seconds. On SQLite the
    #: nodes' clock is the database clock, so the runner adds it to its own readings of
    #: database time too (the test process itself is not faked).
    clock_offset_s: float = 0.0
    failover_bound: bool = True  # False when no peer is left to take over within it
    #: The fires owed, given the play and the window; default: every tick-N fire in the window,
    #: plus the manual fires the play triggered.
    expect: Callable[[Play, Window], Expectations] | None = None


class Play:
    """A scenario being played: the cluster, the database server, the fault log."""

    def __init__(
        self, scenario: Scenario, db_url: str, server: DatabaseServer | None, workdir: Path
    ) -> None:
        self.scenario = scenario
        self.settings = scenario.settings
        self.db_url = db_url
        self.server = server
        self.workdir = workdir
        self.faults = FaultLog()
        self.ledger_path = workdir / "ledger.txt"
        self.owed: set[Key] = set()  # manual fires triggered by the play
        self.marks: dict[str, datetime] = {}  # database times noted by steps
        self.stopped_at: float | None = None
        self.exit_problems: list[str] = []
        self.incarnations: list[tuple[NodeProcess, bool]] = []  # (process, exit expected)
        self.nodes: dict[str, NodeProcess] = {}
        self.env = {
            **os.environ,
            "EASYJOB_CHAOS_LEDGER": str(self.ledger_path),
            "EASYJOB_CHAOS_TICKS": str(scenario.ticks),
            "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
            **scenario.env,
        }
        if scenario.clock_offset_s:
            self.env.update(faketime_env(scenario.clock_offset_s))
        self.store = Store.open(db_url, create=True)
        self._expected_exit: set[int] = set()
        self._samples: dict[str, list[tuple[float, datetime | None]]] = {}
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    # -- nodes -------------------------------------------------------------------------------

    def start(self, node_id: str, env: dict[str, str] | None = None) -> NodeProcess:
        """Start a (new incarnation of) node *node_id*, with *env* added to the play's."""
        count = sum(1 for p, _ in self.incarnations if p.node_id == node_id)
        options = self.scenario.node_options.get(node_id, {})
        argv = [sys.executable, "-m", "easyjob", "run", JOBS, "--db", self.db_url]
        argv += ["--node-id", node_id, *self.settings.argv(**options)]
        log = self.workdir / f"{node_id}.{count}.log"
        node = NodeProcess(node_id, argv, {**self.env, **(env or {})}, log)
        self.nodes[node_id] = node
        self.incarnations.append((node, False))
        return node

    def expect_exit(self, node_id: str) -> NodeProcess:
        node = self.nodes[node_id]
        self._expected_exit.add(node.proc.pid)
        return node

    def wait_live(self, *node_ids: str, timeout: float = 60) -> None:
        want = set(node_ids or self.nodes)
        dead = timedelta(seconds=self.settings.dead_threshold_s)

        def live() -> bool:
            for node_id in want:
                node = self.nodes[node_id]
                if not node.alive:
                    raise AssertionError(f"node {node_id} exited:\n{node.log()[-3000:]}")
            _, rows = self.store.nodes.all()
            cutoff = self.db_now() - dead  # the play's database time (faked clocks included)
            fresh = {n.node_id for n in rows if n.heartbeat_at > max(n.started_at, cutoff)}
            return want <= fresh

        wait_until(f"nodes {sorted(want)} live", live, timeout)

    def node_status(self, node_id: str) -> str:
        query = sa.select(node_table.c.status).where(node_table.c.node_id == node_id)
        return str(self.store.db.read("chaos_node_status", lambda conn: conn.scalar(query)))

    def stop_all(self, timeout: float = 60) -> None:
        running = [n for n in self.nodes.values() if n.alive]
        for node in running:
            self.expect_exit(node.node_id)
            node.signal(signal.SIGCONT)
            node.signal(signal.SIGTERM)
        for node in running:
            try:
                code = node.wait(timeout)
            except subprocess.TimeoutExpired:
                self.exit_problems.append(f"{node.node_id} ignored SIGTERM for {timeout}s")
                continue
            if code != 0:
                self.exit_problems.append(f"{node.node_id} exited {code} after one SIGTERM")

    def unexpected_exits(self) -> list[str]:
        out = []
        for node, _ in self.incarnations:
            if not node.alive and node.proc.pid not in self._expected_exit:
                tail = node.log().strip().splitlines()[-3:]
                out.append(
                    f"{node.node_id} (pid {node.proc.pid}) exited {node.proc.returncode}: {tail}"
                )
        return out + self.exit_problems

    # -- the database ------------------------------------------------------------------------

    def db_now(self) -> datetime:
        now: datetime = self.store.db.now()
        return now + timedelta(seconds=self.scenario.clock_offset_s)

    def require_server(self) -> DatabaseServer:
        if self.server is None:
            raise AssertionError("this fault needs a database server (not SQLite)")
        return self.server

    def trigger(self, task: str) -> int:
        """A manual fire of *task*, owed by the contract."""
        run_id = self.store.tasks.trigger(task)
        (row,) = self.store.history.runs(ids=[run_id])
        self.owed.add((task, row.fire_time))
        return run_id

    def insert_oneoffs(self, count: int, due: datetime) -> None:
        """*count* manual fires of ``oneoff`` all due at *due* (distinct fire times, one
        microsecond apart, so the ledger tells them apart): plain SQL, as an operator would."""
        task_id = self.store.tasks.get("oneoff").id
        fires = [due + timedelta(microseconds=i) for i in range(count)]
        rows = [
            {
                "task_id": task_id,
                "fire_time": fire,
                "due_time": due,
                "status": str(RunStatus.PENDING),
                "triggered_by": str(Trigger.MANUAL),
                "attempt": 1,
                "create_time": self.db_now(),
            }
            for fire in fires
        ]
        self.store.db.write(
            "chaos_oneoffs", lambda conn: conn.execute(task_detail_table.insert(), rows)
        )
        self.owed.update(("oneoff", fire) for fire in fires)

    def runs(self) -> list[HistoryRow]:
        return self.store.history.runs(limit=10_000_000)

    def executions(self) -> list[ledger.Execution]:
        return ledger.executions(ledger.read(self.ledger_path))

    def running(self, task: str) -> ledger.Execution:
        """Wait until a run of *task* is mid-run (its job wrote ``started``, not ``finished``)."""

        def find() -> ledger.Execution | None:
            found = [e for e in self.executions() if e.task == task and not e.finished]
            return found[-1] if found else None

        found = wait_until(f"a run of {task} to be mid-run", find, self.deadline())
        assert found is not None
        return found

    def deadline(self) -> float:
        """How long to wait for something the contract promises within the failover bound:
        the bound, plus generous slack for a loaded machine."""
        return self.settings.failover_bound_s + FAILOVER_SLACK_S + 20

    # -- next fire times ---------------------------------------------------------------------

    def start_sampling(self, every: float = 0.2) -> None:
        sampler = Store.open(self.db_url, retry=RetryPolicy(deadline_s=1.0, max_wait_s=0.2))
        t, d = task_table, task_detail_table
        # a task's next fire: its earliest unstarted cron run (fires are written ahead of the
        # planning cursor, next_start_time, which a schedule change moves back), else the cursor
        unstarted = (
            sa.select(sa.func.min(d.c.fire_time))
            .where(
                d.c.task_id == t.c.id,
                d.c.status.in_([str(RunStatus.PENDING), str(RunStatus.CLAIMED)]),
                d.c.triggered_by == str(Trigger.CRON),
            )
            .scalar_subquery()
        )
        query = sa.select(t.c.name, t.c.next_start_time, unstarted)

        def loop() -> None:
            try:
                while not self._sampling.wait(every):
                    with contextlib.suppress(Exception):  # database faults are the point
                        rows = sampler.db.read("chaos_sample", lambda c: c.execute(query).all())
                        at = time.time()
                        for name, cursor, first in rows:
                            value = min((x for x in (cursor, first) if x is not None), default=None)
                            self._samples.setdefault(name, []).append((at, value))
            finally:
                sampler.close()

        self._sampler = threading.Thread(target=loop, name="chaos-sampler", daemon=True)
        self._sampler.start()

    def stop_sampling(self) -> dict[str, list[tuple[float, datetime | None]]]:
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(30)
        return self._samples

    # -- the end -----------------------------------------------------------------------------

    def stuck_rows(self, *, stopped: bool) -> list[str]:
        """Rows that should have moved on. While nodes run: held rows due longer ago than a
        failover plus the longest job, and PENDING rows overdue by more than a few polls (with
        slack); once every node has stopped: any held row at all."""
        now = self.db_now()
        held_cutoff = now - timedelta(seconds=self.deadline() + self._longest_job())
        pending_cutoff = now - timedelta(seconds=10 * self.settings.poll + FAILOVER_SLACK_S + 2)
        out = []
        for r in self.runs():
            if r.status in HELD and (stopped or r.due_time < held_cutoff):
                out.append(f"run {r.id} {r.task_name} {r.status} on {r.node_id}")
            elif not stopped and r.status == RunStatus.PENDING and r.due_time < pending_cutoff:
                out.append(f"run {r.id} {r.task_name} PENDING, due {r.due_time.isoformat()}")
        return out

    def _longest_job(self) -> float:
        env = self.env
        return float(env.get("EASYJOB_CHAOS_SLOW_SECONDS", "2")) + float(
            env.get("EASYJOB_CHAOS_CHAIN_B_SECONDS", "0")
        )

    def close(self) -> None:
        self._sampling.set()
        for node, _ in self.incarnations:
            node.close()
        self.store.close()


FAKETIME_SITE = Path(__file__).with_name("faketime_site")


def faketime_env(offset_s: float) -> dict[str, str]:
    """Environment that moves a Python process's wall clock by *offset_s*.

    The monotonic clock is left alone (a faked one hangs every timed wait in Python 3.11
    here), and ``faketime_site/sitecustomize.py`` replaces ``time.sleep``, which libfaketime
    0.9.10 breaks in that mode (EINVAL)."""
    path = os.pathsep.join([str(FAKETIME_SITE), str(Path.cwd()), os.environ.get("PYTHONPATH", "")])
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME": f"{offset_s:+.0f}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": path,
    }


def default_expectations(play: Play, window: Window) -> Expectations:
    ticks = frozenset(
        (f"tick-{i}", fire)
        for i in range(play.scenario.ticks)
        for fire in cron_fires(TICK_CRON, "UTC", window)
    )
    chains = CHAINS if play.scenario.chains else {}
    return Expectations(must=ticks | frozenset(play.owed), chains=chains)


def play(scenario: Scenario, db_url: str, server: DatabaseServer | None, workdir: Path) -> Report:
    """Run *scenario* on the database at *db_url* and return its report (see module doc)."""
    db = db_url.split(":", 1)[0].split("+", 1)[0].replace("mysql", "mariadb")
    current = Play(scenario, db_url, server, workdir)
    try:
        for i in range(scenario.nodes):
            current.start(f"node-{i}")
        current.wait_live()
        start = current.db_now()
        current.start_sampling()
        began = time.monotonic()
        for step in sorted(scenario.steps, key=lambda s: s.at):
            sleep_until(began + step.at)
            step.action(current)
        sleep_until(began + scenario.duration_s)
        time.sleep(scenario.settle_s)
        window = Window(start, current.db_now())
        expect = (scenario.expect or default_expectations)(current, window)
        _drain(current, expect)
        stuck = current.stuck_rows(stopped=False)
        died = current.unexpected_exits()
        current.stop_all()
        stuck += current.stuck_rows(stopped=True)
        died += [p for p in current.exit_problems if p not in died]
        samples = current.stop_sampling()
        bound = scenario.settings.failover_bound_s if scenario.failover_bound else None
        obs = Observation(
            scenario=scenario.name,
            db=db,
            window=window,
            expectations=expect,
            executions=current.executions(),
            runs=current.runs(),
            faults=current.faults.faults,
            dead_threshold_s=scenario.settings.dead_threshold_s,
            failover_bound_s=bound,
            next_fire_samples=samples,
            stuck=stuck,
            died=died,
        )
        report = build(obs)
        _record(report)
        return report
    finally:
        current.close()


def _drain(play: Play, expect: Expectations) -> None:
    """Wait (bounded) until every owed fire has run, so the shutdown edge costs nothing; the
    checker reports whatever is still missing after the deadline."""

    def done() -> bool:
        ran = {e.key for e in play.executions()}
        return expect.must <= ran

    with contextlib.suppress(AssertionError):
        wait_until("every owed fire to run", done, play.deadline())


def _record(report: Report) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    line = json.dumps(report.as_dict(), sort_keys=True) + "\n"
    ledger.append(path, line)


# -- faults ----------------------------------------------------------------------------------


def kill9(node_id: str) -> Action:
    """kill -9 a node (a crash: its claims must be recovered by peers)."""

    def act(play: Play) -> None:
        play.expect_exit(node_id).kill()
        play.faults.instant("kill9", node_id)

    return act


def kill9_mid_run(task: str = "slow") -> Action:
    """Trigger *task*, wait until its job is running on some node, kill -9 that node."""

    def act(play: Play) -> None:
        play.trigger(task)
        holder = play.running(task).node
        play.expect_exit(holder).kill()
        play.faults.instant("kill9", holder, f"mid-run of {task}")

    return act


def kill9_claimed(node_id: str, ahead_s: float = 0.5) -> Action:
    """Wait until *node_id* holds a CLAIMED run due at least *ahead_s* later (claimed, not
    yet started: give the node a long poll, hence a long look-ahead), then kill -9 it."""
    d = task_detail_table

    def act(play: Play) -> None:
        def claimed() -> list[int]:
            cutoff = play.db_now() + timedelta(seconds=ahead_s)
            query = sa.select(d.c.id).where(
                d.c.status == str(RunStatus.CLAIMED), d.c.node_id == node_id, d.c.due_time > cutoff
            )
            return list(play.store.db.read("chaos_claimed", lambda c: c.scalars(query).all()))

        ids = wait_until(f"{node_id} to hold a claimed, unstarted run", claimed, play.deadline())
        play.expect_exit(node_id).kill()
        play.faults.instant("kill9", node_id, f"holding claimed runs {ids[:5]}")

    return act


def restart(node_id: str) -> Action:
    """Start *node_id* again under the same configured id (a new incarnation)."""

    def act(play: Play) -> None:
        play.start(node_id)
        play.wait_live(node_id)

    return act


def restart_last_killed() -> Action:
    """Start the node killed last again, under the same configured id."""

    def act(play: Play) -> None:
        killed = [f.target for f in play.faults.faults if f.kind == "kill9"]
        restart(killed[-1])(play)

    return act


def sigstop(seconds: float, node_id: str | None = None, task: str = "slow") -> Action:
    """SIGSTOP a node for *seconds*, then SIGCONT; without *node_id*, the node running a
    freshly triggered *task* (so the pause holds a run: fencing is put to work)."""

    def act(play: Play) -> None:
        if node_id is None:
            play.trigger(task)
            target = play.running(task).node
        else:
            target = node_id
        node = play.nodes[target]
        start = time.time()
        node.freeze(play.store.db.gate)
        time.sleep(seconds)
        node.signal(signal.SIGCONT)
        play.faults.add(Fault("sigstop", target, start, time.time()))

    return act


def sigterm(node_id: str | None = None, *, twice: bool = False, task: str = "slow") -> Action:
    """SIGTERM a node (without *node_id*: the one running a freshly triggered *task*); with
    *twice*, a second SIGTERM once the graceful stop began. Checks the documented exit code
    (0 after a graceful stop, 130 after a second signal)."""

    def act(play: Play) -> None:
        target = node_id
        if target is None:
            play.trigger(task)
            target = play.running(task).node
        node = play.expect_exit(target)
        start = time.time()
        node.signal(signal.SIGTERM)
        if twice:
            wait_until(
                f"{target} to begin its graceful stop",
                lambda: play.node_status(target) == "STOPPING",
                play.deadline(),
            )
            time.sleep(2 * DOUBLE_SIGNAL_S)  # closer signals count as one request
            node.signal(signal.SIGTERM)
        want = 130 if twice else 0
        code = node.wait(play.settings.shutdown_grace + play.deadline())
        play.faults.add(Fault("sigterm2" if twice else "sigterm", target, start, time.time()))
        if code != want:
            play.exit_problems.append(f"{target} exited {code} after SIGTERM (expected {want})")

    return act


def db_restart() -> Action:
    def act(play: Play) -> None:
        server = play.require_server()
        start = time.time()
        server.restart()
        play.faults.add(Fault("db_restart", "db", start, time.time()))

    return act


def db_crash(downtime_s: float = 0.0) -> Action:
    """kill -9 the database server, keep it down *downtime_s*, start it again."""

    def act(play: Play) -> None:
        server = play.require_server()
        start = time.time()
        server.kill()
        time.sleep(downtime_s)
        server.start()
        kind = "db_down" if downtime_s else "db_crash"
        play.faults.add(Fault(kind, "db", start, time.time(), f"down {downtime_s:g}s"))

    return act


def db_read_only(seconds: float) -> Action:
    def act(play: Play) -> None:
        server = play.require_server()
        start = time.time()
        server.set_read_only(True)
        time.sleep(seconds)
        server.set_read_only(False)
        play.faults.add(Fault("db_read_only", "db", start, time.time()))

    return act


def db_kill_connections(times: int = 1, every_s: float = 1.0) -> Action:
    def act(play: Play) -> None:
        server = play.require_server()
        start = time.time()
        killed = 0
        for _ in range(times):
            killed += server.terminate_connections()
            time.sleep(every_s)
        play.faults.add(Fault("db_kill_connections", "db", start, time.time(), f"{killed} killed"))

    return act


def db_stall(seconds: float) -> Action:
    """SIGSTOP every database server process for *seconds*: nobody can heartbeat."""

    def act(play: Play) -> None:
        server = play.require_server()
        start = time.time()
        server.pause()
        try:
            time.sleep(seconds)
        finally:
            server.resume()
        play.faults.add(Fault("db_stall", "db", start, time.time()))

    return act


def trigger_running(task: str = "slow") -> Action:
    """Trigger *task* and wait until its job runs on some node."""

    def act(play: Play) -> None:
        play.trigger(task)
        play.running(task)

    return act


def stop_nodes() -> Action:
    """SIGTERM every node and wait for them to exit; marks ``stopping`` and ``down``."""

    def act(play: Play) -> None:
        play.marks["stopping"] = play.db_now()
        play.stopped_at = time.time()
        play.stop_all()
        play.marks["down"] = play.db_now()

    return act


def start_nodes(count: int) -> Action:
    """Start nodes ``node-0`` ... again and wait until live; marks ``starting`` and ``up``."""

    def act(play: Play) -> None:
        play.marks["starting"] = play.db_now()
        ids = [f"node-{i}" for i in range(count)]
        for node_id in ids:
            play.start(node_id)
        play.wait_live(*ids)
        play.marks["up"] = play.db_now()
        if play.stopped_at is not None:
            play.faults.add(Fault("all_down", "cluster", play.stopped_at, time.time()))

    return act


def mark(name: str) -> Action:
    """Note the database time under *name* (for a scenario's expectations)."""

    def act(play: Play) -> None:
        play.marks[name] = play.db_now()

    return act


def each(*actions: Action) -> Action:
    """Several actions as one step, in order."""

    def act(play: Play) -> None:
        for action in actions:
            action(play)

    return act
