"""Real node processes for cluster tests, and what they left behind (ledger, tables)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from easyjob.core.records import HistoryRow
from easyjob.store import Store
from easyjob.store.gate import WriteGate
from easyjob.store.schema import node_table

JOBS = str(Path(__file__).with_name("jobs.py"))
T = TypeVar("T")

#: Fast settings so a test sees a failover in seconds: dead after 5 x 0.2 s = 1 s.
FAST = {"heartbeat": "0.2", "dead-after": "5", "poll": "0.1", "shutdown-grace": "10"}


@dataclass(frozen=True)
class Entry:
    task: str
    fire_time: datetime
    node: str
    attempt: int
    run_id: int
    event: str
    at: float  # the job's wall clock when it wrote the line (one host for every node)


def wait_until(what: str, predicate: Callable[[], T], timeout: float) -> T:
    """Poll *predicate* until it returns something truthy; fail naming *what* after *timeout*."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def sleep_until(moment: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Sleep until *clock* reads *moment* (at once if it is past): a second at a time, so a
    wall clock (``clock=time.time``) that steps meanwhile is followed."""
    while (left := moment - clock()) > 0:
        time.sleep(min(left, 1.0))


# -- a node's /metrics (run --http) ----------------------------------------------------------


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """The status and body of a GET of *url* (an HTTP error's too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def samples(
    base: str, timeout: float = 5.0
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, parsed by prometheus_client's own parser."""
    status, text = get(f"{base}/metrics", timeout)
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(value for (sample, _), value in found.items() if sample == name)


def process_gone(pid: int) -> bool:
    """Whether process *pid* has exited: no such process, or a zombie not reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


class NodeProcess:
    def __init__(
        self,
        node_id: str,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        *,
        session: bool = False,
    ) -> None:
        self.node_id = node_id
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=session
        )

    def signal_group(self, sig: int) -> None:
        """Send *sig* to the node's process group, as a terminal's Ctrl-C or a service
        manager would (the node must have been started with ``session=True``)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def freeze(self, gate: WriteGate | None) -> None:
        """SIGSTOP the node between two of its write transactions (a frozen VM, a long GC
        pause), and return once every thread of it has stopped.

        On SQLite (*gate*: the file's write gate) a process stopped inside a write transaction
        keeps the file's write lock, and every node's writes wait for it until it resumes:
        there is no server to end its silent session, as PostgreSQL and MariaDB do after half
        the dead threshold. A freeze that lands there tests that limit (documented in
        docs/reliability.md), not failover; so the node is stopped while this process holds
        the gate, which every easyjob write transaction takes first.
        """
        with gate.held() if gate is not None else contextlib.nullcontext():
            self.signal(signal.SIGSTOP)
            wait_until(f"{self.node_id} to stop", self._stopped, 10)

    def _stopped(self) -> bool:
        """Whether every thread of the node is stopped (state T in /proc)."""
        states = []
        for stat in Path(f"/proc/{self.proc.pid}/task").glob("*/stat"):
            try:
                states.append(stat.read_text().rpartition(")")[2].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread ended meanwhile
        return bool(states) and all(state in ("T", "t") for state in states)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


class Cluster:
    """Node processes sharing one database, a ledger file, and a store to inspect them."""

    def __init__(
        self,
        db_url: str,
        workdir: Path,
        *,
        ticks: int = 0,
        slow_seconds: float = 2.0,
        env: dict[str, str] | None = None,
        jobs: str = JOBS,
    ) -> None:
        """*jobs*: the job module (a .py path) every node of this cluster loads."""
        self.db_url = db_url
        self.jobs = jobs
        self.workdir = workdir
        self.ledger_path = workdir / "ledger.txt"
        self.env = {
            **os.environ,
            "EASYJOB_TEST_LEDGER": str(self.ledger_path),
            "EASYJOB_TEST_TICKS": str(ticks),
            "EASYJOB_TEST_SLOW_SECONDS": str(slow_seconds),
            "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
        self.nodes: dict[str, NodeProcess] = {}
        self.store = Store.open(db_url, create=True)

    def start(self, node_id: str, **options: str) -> NodeProcess:
        return self.start_with(node_id, options)

    def start_with(
        self,
        node_id: str,
        options: Mapping[str, str],
        *,
        db_url: str | None = None,
        env: Mapping[str, str] | None = None,
        fast: bool = True,
        session: bool = False,
    ) -> NodeProcess:
        """Start a node; *db_url* (default: the cluster's) lets one node reach the database
        another way (through its own proxy), *env* adds to this node's environment. With
        *fast* False the node runs at default settings, plus *options*. With *session* the
        node leads a process group of its own (see :meth:`NodeProcess.signal_group`)."""
        settings = {**(FAST if fast else {}), **options}
        argv = [
            sys.executable,
            "-m",
            "easyjob",
            "run",
            self.jobs,
            "--db",
            db_url or self.db_url,
            "--node-id",
            node_id,
        ]
        for key, value in settings.items():
            argv += [f"--{key}", value]
        node_env = {**self.env, **(env or {})}
        node = NodeProcess(
            node_id, argv, node_env, self.workdir / f"{node_id}.log", session=session
        )
        self.nodes[node_id] = node
        return node

    def wait_live(self, *node_ids: str, timeout: float = 30) -> None:
        """Wait until each node is live and running: it heartbeated since it registered, so
        its threads run and its tasks are registered."""
        want = set(node_ids or self.nodes)

        def live() -> bool:
            for node in self.nodes.values():
                if not node.alive and node.node_id in want:
                    raise AssertionError(f"node {node.node_id} exited:\n{node.log()[-3000:]}")
            _, nodes = self.store.nodes.live(self._dead())
            return want <= {n.node_id for n in nodes if n.heartbeat_at > n.started_at}

        wait_until(f"nodes {sorted(want)} live", live, timeout)

    def _dead(self) -> timedelta:
        return timedelta(seconds=float(FAST["heartbeat"]) * int(FAST["dead-after"]))

    def stop_all(self, timeout: float = 30) -> None:
        for node in self.nodes.values():
            node.signal(signal.SIGCONT)
            node.signal(signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.wait(timeout)
            except subprocess.TimeoutExpired as err:
                raise AssertionError(
                    f"node {node.node_id} ignored SIGTERM:\n{node.log()[-3000:]}"
                ) from err

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
        self.store.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what happened -----------------------------------------------------------------------

    def ledger(self) -> list[Entry]:
        if not self.ledger_path.exists():
            return []
        entries = []
        for line in self.ledger_path.read_text().splitlines():
            task, fire, node, attempt, run_id, event, at = line.split(" ")
            entries.append(
                Entry(
                    task,
                    datetime.fromisoformat(fire),
                    node,
                    int(attempt),
                    int(run_id),
                    event,
                    float(at),
                )
            )
        return entries

    def runs(self, task: str | None = None) -> list[HistoryRow]:
        return self.store.history.runs(task=task, limit=1_000_000)

    def node_status(self, node_id: str) -> str:
        def read(conn: sa.Connection) -> str:
            query = sa.select(node_table.c.status).where(node_table.c.node_id == node_id)
            return str(conn.scalar(query))

        return self.store.db.read("node_status", read)


def duplicates(
    keys: Iterator[tuple[object, ...]] | list[tuple[object, ...]],
) -> dict[tuple[object, ...], int]:
    return {key: count for key, count in Counter(keys).items() if count > 1}
