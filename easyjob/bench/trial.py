"""One benchmark trial: N real node processes, M no-op tasks on a cron, for a duration."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from easyjob.bench.metrics import TrialFigures, measure
from easyjob.bench.scrape import Scraper
from easyjob.bench.server_cpu import listening_ports
from easyjob.bench.window import WindowSampler, locate_server
from easyjob.core.config import NodeConfig
from easyjob.core.records import TaskSpec
from easyjob.store import Store, contract

__all__ = ["TrialConfig", "job_calls", "run_trial", "start_nodes", "stop_nodes", "wait_live"]

_JOBS_MODULE = "bench_jobs"
_JOBS = '''"""No-op tasks written by `easyjob bench`: each notes when it was called."""
import atexit
import json
import os
import time

from easyjob import scheduled

_calls = []  # (fire time, call time), epoch seconds


def noop(ctx) -> None:
    _calls.append((ctx.fire_time.timestamp(), time.time()))


@atexit.register
def _save() -> None:
    with open(os.environ["EASYJOB_BENCH_CALLS"], "w", encoding="utf-8") as out:
        json.dump(_calls, out)


for _i in range(int(os.environ["EASYJOB_BENCH_TASKS"])):
    scheduled(
        os.environ["EASYJOB_BENCH_CRON"],
        name=f"bench-{_i}",
        overlap=os.environ["EASYJOB_BENCH_OVERLAP"],
    )(noop)
'''


@dataclass(frozen=True)
class TrialConfig:
    db: str
    nodes: int = 4
    tasks: int = 100
    duration: float = 30.0
    cron: str = "* * * * * *"
    #: node settings; None: the node's default (``NodeConfig``)
    workers: int | None = None
    poll: float | None = None
    heartbeat: float | None = None
    warmup: float = 3.0
    strategy: str = "default"
    claim_mode: str = "optimistic"
    #: every task's overlap policy (the scheduler's default: ``serial``)
    overlap: str = "serial"
    idle_tasks: int = 0
    #: /metrics is scraped every second (the nodes always serve it on free loopback ports:
    #: their counters are read at the window's start and end)
    http: bool = False
    #: the database server's process (its CPU is read from /proc); None: found by the URL's
    #: port when the server listens on loopback
    db_pid: int | None = None

    @property
    def settings(self) -> str:
        """``default`` when the nodes run with default settings, else ``tuned``: a value
        given that equals the default (``--workers 64``) tunes nothing."""
        base = NodeConfig()
        given = {"workers": self.workers, "poll": self.poll, "heartbeat": self.heartbeat}
        tuned = any(v is not None and v != getattr(base, k) for k, v in given.items())
        return "tuned" if tuned else "default"

    def defaults(self) -> TrialConfig:
        """This trial with the nodes at default settings."""
        return replace(self, workers=None, poll=None, heartbeat=None)

    @property
    def heartbeat_s(self) -> float:
        return self.heartbeat if self.heartbeat is not None else NodeConfig().heartbeat


def run_trial(
    config: TrialConfig,
    workdir: Path,
    progress: Callable[[str], None],
    on_window: Callable[[datetime, datetime], None] | None = None,
) -> TrialFigures:
    """Run one trial and measure it; the database must hold no tasks but earlier bench ones.

    *on_window* is told the window (the first and last fire second measured, database time)
    as soon as it is set, before it begins: e.g. to sample CPU over exactly that window."""
    store = Store.open(config.db, create=True)
    try:
        if config.claim_mode == "skip_locked":
            store.require_skip_locked()  # before any node starts, and fails on it
        store.bench.reset()
        if config.idle_tasks:
            progress(f"registering {config.idle_tasks:,} idle tasks")
            store.tasks.upsert(_idle_tasks(config.idle_tasks))
        db_pid, db_note = locate_server(config.db, config.db_pid)
        progress(f"database CPU: {db_note}" if db_pid else f"database CPU: n/a ({db_note})")
        nodes, urls = start_nodes(config, workdir)
        metrics = [f"{url}/metrics" for url in urls]
        scraper = Scraper(metrics if config.http else [])
        window = WindowSampler([p.pid for p in nodes], metrics, db_pid, db_note)
        try:
            wait_live(store, config, nodes)
            _wait_caught_up(store, progress)
            begin, ticks = store.now(), time.monotonic()
            start = (begin + timedelta(seconds=config.warmup)).replace(microsecond=0)
            end = start + timedelta(seconds=max(1.0, config.duration) - 1)
            if on_window is not None:
                on_window(start, end)
            # the window is whole fire seconds [start, end], database time: read mid-second
            # before and after, not on a second, where runs on time are finishing
            window.start(
                ticks + (start - begin).total_seconds() - 0.5,
                ticks + (end - begin).total_seconds() + 0.5,
            )
            scraper.start()
            try:
                _follow(store, start, end, progress)
                stale = store.bench.stale()
            finally:
                scraper.stop()
                spent = window.close()
            if config.http:
                progress(f"{scraper.scrapes} scrapes of /metrics, {scraper.failures} failed")
            stats = stop_nodes(nodes, workdir)
            calls = job_calls(workdir, len(nodes))
        finally:
            for proc in nodes:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return measure(
            store,
            cron=config.cron,
            tasks=config.tasks,
            start=start,
            end=end,
            node_stats=stats,
            idle_tasks=config.idle_tasks,
            claim_mode=config.claim_mode,
            overlap=config.overlap,
            settings=config.settings,
            stale_at_end=stale,
            calls=calls,
            window=spent,
        )
    finally:
        store.close()


def _idle_tasks(count: int) -> list[TaskSpec]:
    """A catalogue of tasks of the nodes' own function that never fire in a trial. The
    bench registers it once, before the nodes start: the nodes do not declare these tasks,
    so they do not each spend their start registering the whole catalogue (a minute per node
    at 1,000,000 tasks), and the window measures a cluster polling beside a large catalogue."""
    return [
        TaskSpec(name=f"bench-idle-{i}", func=f"{_JOBS_MODULE}:noop", cron="0 0 1 1 *")
        for i in range(count)
    ]


def start_nodes(
    config: TrialConfig, workdir: Path
) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    """Start *config*'s node processes on the bench's no-op tasks (their module, logs,
    stats and call files in *workdir*); returns the processes and their metrics URLs."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = workdir / f"{_JOBS_MODULE}.py"
    jobs.write_text(_JOBS, encoding="utf-8")
    env = {
        **os.environ,
        "EASYJOB_BENCH_TASKS": str(config.tasks),
        "EASYJOB_BENCH_CRON": config.cron,
        "EASYJOB_BENCH_OVERLAP": config.overlap,
    }
    procs: list[subprocess.Popen[bytes]] = []
    for i in range(config.nodes):
        stats = workdir / f"stats-{i}.json"
        stats.unlink(missing_ok=True)
        calls = workdir / f"calls-{i}.json"
        calls.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "easyjob",
            "--log-level",
            "WARNING",
            "run",
            str(jobs),
            "--db",
            config.db,
            "--node-id",
            f"bench-node-{i}",
            *_flag("--workers", config.workers),
            *_flag("--poll", config.poll),
            *_flag("--heartbeat", config.heartbeat),
            "--stats-file",
            str(stats),
            "--strategy",
            config.strategy,
            "--claim-mode",
            config.claim_mode,
        ]
        # a port of the node's own choosing, read back from /proc: a free port picked here
        # could be taken by another process before the node bound it (a trial failed so)
        argv += ["--http", "127.0.0.1:0"]
        log = (workdir / f"node-{i}.log").open("wb")
        node_env = {**env, "EASYJOB_BENCH_CALLS": str(calls)}
        procs.append(subprocess.Popen(argv, env=node_env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    deadline = time.monotonic() + 60
    return procs, [_served_url(proc, deadline) for proc in procs]


def _served_url(proc: subprocess.Popen[bytes], deadline: float) -> str:
    """The base URL of the HTTP endpoint node *proc* serves on loopback (port 0: its own)."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("a benchmark node exited at start; see its log in the workdir")
        if ports := listening_ports(proc.pid):
            return f"http://127.0.0.1:{min(ports)}"
        time.sleep(0.05)
    raise RuntimeError("a benchmark node served no HTTP within 60 s; see its log in the workdir")


def _flag(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]


def wait_live(
    store: contract.Store, config: TrialConfig, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Wait until every node heartbeats and the bench's tasks are all registered (nodes
    register theirs in the background once they run: see easyjob.node.registrar)."""
    # registering takes about 0.1 ms per new task (measured: 100,000 tasks in 6-9 s)
    budget = 60 + config.nodes * config.tasks / 5000
    deadline = time.monotonic() + budget
    wanted = config.tasks + config.idle_tasks
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a benchmark node exited at start; see its log in the workdir")
        _, live = store.nodes.live(timedelta(seconds=3 * config.heartbeat_s))
        beating = sum(n.heartbeat_at > n.started_at for n in live) == config.nodes
        if beating and store.bench.task_count() >= wanted:
            return
        time.sleep(0.2)
    raise RuntimeError(f"benchmark nodes did not come up within {budget:.0f} s")


#: How long the start-up backlog may go without shrinking before the bench stops waiting
#: for it: a saturated cluster never clears it (it runs fewer fires than are due).
STALLED_S = 10.0
#: Seconds between the lines that report the backlog while waiting.
_TELL_EVERY_S = 5.0


def _wait_caught_up(
    store: contract.Store,
    progress: Callable[[str], None],
    budget_s: float = 120,
    stalled_s: float = STALLED_S,
) -> None:
    """Wait until no fire is overdue by more than 2 s: with many tasks, the fires due while
    nodes start leave a backlog, and the window measures the steady state, not that
    start-up. Stops waiting, and says so once, when the backlog has not shrunk for
    *stalled_s* (the cluster is saturated: it would never clear) or after *budget_s*; a
    line every few seconds reports it meanwhile."""
    began = time.monotonic()
    best, best_at, told = None, began, began
    while left := store.bench.overdue(timedelta(seconds=2)):
        now = time.monotonic()
        if best is None or left < best:
            best, best_at = left, now
        if now - best_at >= stalled_s:
            progress(
                f"start-up backlog not shrinking for {stalled_s:.0f} s ({left} fires overdue): "
                "the cluster runs fewer fires than are due; measuring anyway"
            )
            return
        if now - began >= budget_s:
            progress(f"start-up backlog not cleared within {budget_s:.0f} s: {left} fires overdue")
            return
        if now - told >= _TELL_EVERY_S:
            progress(f"waiting for the start-up backlog to clear: {left} fires overdue")
            told = now
        time.sleep(1.0)


def _follow(store: contract.Store, start: Any, end: Any, progress: Callable[[str], None]) -> None:
    """Print progress each second until the window's last fires had time to run."""
    settle = timedelta(seconds=3)
    while True:
        now = store.now()
        if now > end + settle:
            return

        done = store.bench.succeeded_since(start)
        left = max(0.0, (end + settle - now).total_seconds())
        progress(f"{done} runs in the window so far, {math.ceil(left)} s to go")
        time.sleep(1.0)


def stop_nodes(procs: list[subprocess.Popen[bytes]], workdir: Path) -> list[dict[str, Any]]:
    """Stop *procs* (SIGTERM, then wait) and return the stats each wrote in *workdir*."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(120)
    stats = []
    for i in range(len(procs)):
        path = workdir / f"stats-{i}.json"
        if path.exists():
            stats.append(json.loads(path.read_text(encoding="utf-8")))
    return stats


def job_calls(workdir: Path, nodes: int) -> list[tuple[float, float]]:
    """Every node's ``(fire time, call time)`` of its job calls (epoch seconds)."""
    calls: list[tuple[float, float]] = []
    for i in range(nodes):
        path = workdir / f"calls-{i}.json"
        if path.exists():
            calls += [(fire, at) for fire, at in json.loads(path.read_text(encoding="utf-8"))]
    return calls
