"""What a no-op run costs under each executor, beside each other. Not a test.

1. The call alone: ``JobRunner.call`` of a no-op task, CALLS times, on the thread executor
   and on the process executor (warm children: the fork server started and one child idle
   before the clock starts), run after run as a node's worker makes them; median and p90
   milliseconds per call.
2. A real node: ``easyjob run`` of a no-op task every second on SQLite, for SECONDS seconds
   per executor; the run's ``end_time - start_time`` in the database (it includes the start
   written up to 20 ms ahead of the due time, and the success's write: the same for both),
   median and p90 in milliseconds.

Run: .venv/bin/python tests/perf/executor_cost.py [SECONDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from easyjob.clock import SystemClock
from easyjob.core.records import Run
from easyjob.core.states import Misfire, Overlap, RunStatus, Trigger
from easyjob.node.executor import JobRunner
from easyjob.node.jobcall import CancelFlag
from easyjob.registry import Registry
from easyjob.store import Store

CALLS = 300
JOBS = Path(__file__).with_name("noop_jobs.py")


def _run(task: str) -> Run:
    now = datetime.now(UTC)
    return Run(
        id=1, version=1, status=RunStatus.RUNNING, node_id="bench", task_id=1, task_name=task,
        func=f"tests.perf.noop_jobs:{task}", kwargs={}, fire_time=now, due_time=now, attempt=1,
        triggered_by=Trigger.CRON, pid=None, overlap=Overlap.SERIAL, retries=0,
        retry_delay_ms=0, timeout_ms=None, misfire=Misfire.FIRE_ONCE, misfire_grace_ms=60_000,
    )  # fmt: skip


def _quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"median {statistics.median(ordered):7.2f} ms   p90 {p90:7.2f} ms   n={len(ordered)}"


def the_call() -> None:
    from tests.perf import noop_jobs

    registry = Registry()
    noop_jobs.declare(registry)
    tasks = {name: registry.get(name) for name in registry.names()}
    for executor in ("thread", "process"):
        runner = JobRunner(
            "bench",
            tasks,
            SystemClock(),
            1,
            lambda *a: None,
            isolation=executor,  # type: ignore[arg-type]
        )
        runner.children.warm()
        run = _run("noop")
        runner.call(run, CancelFlag())  # the first call: the child imports nothing more
        took = []
        for _ in range(CALLS):
            began = time.perf_counter()
            outcome = runner.call(run, CancelFlag())
            took.append((time.perf_counter() - began) * 1000)
            assert outcome.ok, outcome
        runner.shutdown()
        print(f"call, {executor:7}: {_quantiles(took)}")


def a_node(seconds: float) -> None:
    for executor in ("thread", "process"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "EASYJOB_NOOP_EVERY": "1"}
            argv = [sys.executable, "-m", "easyjob", "run", str(JOBS), "--db", url]
            node = subprocess.Popen(
                [*argv, "--executor", executor], env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(seconds)
            node.terminate()
            node.wait(30)
            store = Store.open(url)
            rows = [r for r in store.history.runs(limit=100_000) if r.status == RunStatus.SUCCESS]
            store.close()
            took = [
                (r.end_time - r.start_time).total_seconds() * 1000
                for r in rows[2:]  # the first runs: the node and its children warming up
                if r.end_time and r.start_time
            ]
            print(f"node, {executor:7}: {_quantiles(took)}   (start to end in the database)")


if __name__ == "__main__":
    the_call()
    a_node(float(sys.argv[1]) if len(sys.argv) > 1 else 30)
