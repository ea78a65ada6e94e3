"""Huey peer worker (``SqliteHuey``, one consumer); runs inside its own virtualenv only.

``run``: M periodic tasks ``j0`` .. ``j{M-1}``, each ``@huey.periodic_task(crontab())`` (every
minute), declared in this process (Huey keeps periodic tasks in code, not in its storage), and
one consumer at Huey's defaults (``workers=1``, thread workers, scheduler every second) on a
fresh SQLite file, until ``--stop-at`` (epoch seconds); then a graceful stop. ``--period``
(default 60, Huey's ``Scheduler.periodic_task_seconds``) is shortened in smoke tests only.

Huey's scheduler enqueues every periodic task whose crontab matches, once every 60 s counted
from the consumer's start (its own monotonic clock), not on the wall clock's minute: the burst
begins when the scheduler reads the periodic tasks. That moment is each run's fire time here:
``LedgerHuey.read_periodic`` (Huey's own, plus one line) puts the time it was called into the
task's keyword arguments (a few bytes more in each queued message), and the job writes it with
its start to the ledger (``peerjob.record``). The consumer's start time is printed on stdout as
the first JSON line (``{"started": epoch}``) so that the harness can sample the consumer's CPU
over each minute's cycle; the versions and settings follow as the last JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import peerjob
from huey import SqliteHuey, crontab
from huey.consumer import Scheduler


class LedgerHuey(SqliteHuey):  # type: ignore[misc]
    """``SqliteHuey`` whose periodic tasks carry the moment the scheduler read them."""

    def read_periodic(self, timestamp: Any) -> list[Any]:
        fire = time.time()
        tasks = super().read_periodic(timestamp)
        for task in tasks:
            task.kwargs = {"fire": fire}
        return list(tasks)


def _job(job_id: str) -> Any:
    def job(fire: float) -> None:
        start = datetime.now(UTC)
        peerjob.record(job_id, datetime.fromtimestamp(fire, UTC), start)

    job.__name__ = job_id
    return job


def run(args: argparse.Namespace) -> dict[str, Any]:
    peerjob.open_ledger(args.ledger)
    huey = LedgerHuey("burst", filename=args.db)
    for i in range(args.schedules):
        huey.periodic_task(crontab(), name=f"j{i}")(_job(f"j{i}"))
    Scheduler.periodic_task_seconds = args.period
    consumer = huey.create_consumer()
    print(json.dumps({"started": time.time()}), flush=True)
    consumer.start()
    try:
        while time.time() < args.stop_at:
            time.sleep(min(0.5, max(0.0, args.stop_at - time.time())))
    finally:
        consumer.stop(graceful=True)
    return {
        "workers": consumer.workers,
        "worker_type": consumer.worker_type,
        "scheduler_interval": consumer.scheduler_interval,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run"])
    parser.add_argument("--db", required=True, help="the SQLite file")
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--stop-at", type=float, required=True)
    parser.add_argument(
        "--period", type=float, default=60.0, help="seconds between periodic reads (Huey: 60)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    info = run(args)
    info.update(pid=os.getpid(), versions={"huey": version("huey")})
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
