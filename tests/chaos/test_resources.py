"""Scenario 12: resources. A full disk under SQLite, and a slow database (every round trip of
every node 50-200 ms slower, through each node's proxy).

Pool exhaustion is not a scenario here: ``easyjob run`` sizes its pool from ``--workers``
(``workers + 4`` connections plus as many overflow, easyjob/cli/commands.py) and exposes no
pool option, and a worker holds no connection while the job's code runs (DESIGN: no
transaction across a run), so no configuration makes a node wait on its own pool.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from easyjob.core.states import RunStatus
from tests.chaos.expected import Window
from tests.chaos.faults import Fault, FaultLog
from tests.chaos.on_cluster import Settings, observe, record, settle, stuck_and_died
from tests.cluster.harness import Cluster, wait_until
from tests.rig.backends import SERVER_BACKENDS, only_backends
from tests.rig.routing import NodeRoutes

pytestmark = [pytest.mark.chaos, pytest.mark.slow_chaos]

TICKS = 4
SETTINGS = Settings(heartbeat=0.3, dead_after=5, poll=0.2)
FAULT_S = 8
STUCK_S = 6


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> int:
    """Write zeros to *path* until the file system is full; return the bytes written."""
    written = 0
    block = b"\0" * 65536
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                written += out.write(block)
            except OSError:
                break
        for size in (4096, 512, 1):  # the last scraps
            with contextlib.suppress(OSError):
                while True:
                    written += out.write(b"\0" * size)
    return written


@only_backends("sqlite")
@pytest.mark.parametrize("size", ["16m", "2m"])
def test_disk_full_under_sqlite(db_backend: str, size: str, tmp_path: Path) -> None:
    """On 2 MiB the WAL never reached SQLite's own 4 MiB checkpoint: it held every row and
    regrew into the space freed, and the nodes logged "database or disk is full" for ever."""
    faults = FaultLog()
    with small_tmpfs(tmp_path / "disk", size) as disk:
        db_url = f"sqlite:///{disk}/easyjob.db"
        with Cluster(db_url, tmp_path, ticks=TICKS) as cluster:
            for i in range(3):
                cluster.start_with(f"node-{i}", SETTINGS.options)
            cluster.wait_live()
            start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=1)
            wait_until(
                "two seconds of steady state",
                lambda: cluster.store.db.now() > start + timedelta(seconds=2),
                20,
            )
            before = {r.id for r in cluster.runs() if r.status == RunStatus.SUCCESS}
            began = time.time()
            filler = disk / "filler"
            filled = fill(filler)
            time.sleep(FAULT_S)
            full_logs = {n: "disk is full" in p.log() for n, p in cluster.nodes.items()}
            filler.unlink()
            faults.add(Fault("disk_full", "db", began, time.time(), f"{filled} bytes"))
            freed = cluster.store.db.now()
            window = Window(start, freed.replace(microsecond=0) + timedelta(seconds=3))
            settle(cluster, TICKS, window, timeout=60)
            stuck, died = stuck_and_died(cluster, window, STUCK_S)
            after = {r.id for r in cluster.runs() if r.status == RunStatus.SUCCESS}
            report = observe(
                "disk-full" if size == "16m" else f"disk-full-{size}",
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
            problems = record(
                report, {"filled_bytes": filled, "nodes_logging_disk_full": full_logs}
            )
            assert problems == [], problems
            assert before <= after, "rows stored before the disk filled were lost"
            assert any(full_logs.values()), f"no node logged the full disk: {full_logs}"


@only_backends(*SERVER_BACKENDS)
def test_slow_database(db_backend: str, db_url: str, tmp_path: Path) -> None:
    """Every reply to every node comes 50-200 ms late (the test's own store is direct)."""
    faults = FaultLog()
    with (
        NodeRoutes(db_url) as routes,
        Cluster(db_url, tmp_path, ticks=TICKS) as cluster,
    ):
        for i in range(3):
            cluster.start_with(f"node-{i}", SETTINGS.options, db_url=routes.url(f"node-{i}"))
        cluster.wait_live()
        start = cluster.store.db.now().replace(microsecond=0) + timedelta(seconds=1)
        began = time.time()
        for i in range(3):
            routes.proxy(f"node-{i}").latency(0.05, 0.2)
        time.sleep(FAULT_S * 2)
        routes.heal_all()
        for i in range(3):
            faults.add(Fault("latency", f"node-{i}", began, time.time(), "50-200 ms"))
        healed = cluster.store.db.now()
        window = Window(start, healed.replace(microsecond=0) + timedelta(seconds=3))
        settle(cluster, TICKS, window, timeout=60)
        stuck, died = stuck_and_died(cluster, window, STUCK_S)
        report = observe(
            "slow-database",
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
        problems = record(report, {"latency_ms": "50-200 per reply"})
        assert problems == [], problems
