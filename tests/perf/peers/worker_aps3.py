"""APScheduler 3.11 peer worker; runs inside its own virtualenv, never in the project's.

APScheduler 3 cannot share a job store between processes (each process would run every fire:
it has no claims), so the benchmark runs ONE process with an ``SQLAlchemyJobStore``.

``setup`` (once, before the timed run): start a paused ``BackgroundScheduler`` on the job store,
remove every job in it and add M jobs ``j0`` .. ``j{M-1}``, each on ``CronTrigger(second="*")``
in UTC (all fire on the same second, every second), with ``misfire_grace_time=None`` (a late
fire still runs, however late: the default of 1 s would silently drop late fires; APScheduler 4
has no grace limit by default either) and ``coalesce=True`` (the default; several overdue fire
times of one job run once, for the latest of them). ``max_instances`` stays 1 (the default).

``run``: a ``BackgroundScheduler`` on that job store until ``--stop-at`` (epoch seconds), with
the default executor: a thread pool of 10 (APScheduler's default size).

The scheduled fire time: APScheduler 3 does not pass it to the job function. Its executors call
``apscheduler.executors.base.run_job(job, alias, run_times, logger)``, which runs the function
once per run time (scheduled fire time). ``FireTimeThreadPoolExecutor`` submits that same
``run_job`` once per run time instead of once per batch, with ``peerjob.fire_time.value`` set
to that run time in the pool thread just before, so the job reads its exact scheduled fire time.
Everything else (misfire checks, events, max_instances) is APScheduler's own code.
Prints one JSON line (versions and settings) on stdout when done.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import UTC
from importlib.metadata import version
from typing import Any

import peerjob
from apscheduler.executors.base import run_job
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger


def _run_job_with_fire_time(job: Any, alias: str, run_times: list[Any], logger: str) -> Any:
    events = []
    for run_time in run_times:
        peerjob.fire_time.value = run_time
        events.extend(run_job(job, alias, [run_time], logger))
    return events


class FireTimeThreadPoolExecutor(ThreadPoolExecutor):
    """APScheduler's thread pool executor; the job function can read its fire time."""

    def _do_submit_job(self, job: Any, run_times: list[Any]) -> None:
        def callback(f: Any) -> None:  # as in BasePoolExecutor._do_submit_job
            exc = f.exception()
            if exc:
                self._run_job_error(job.id, exc, getattr(exc, "__traceback__", None))
            else:
                self._run_job_success(job.id, f.result())

        f = self._pool.submit(
            _run_job_with_fire_time, job, job._jobstore_alias, run_times, self._logger.name
        )
        f.add_done_callback(callback)


def setup(args: argparse.Namespace) -> dict[str, Any]:
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=args.db)}, timezone=UTC
    )
    scheduler.start(paused=True)
    try:
        scheduler.remove_all_jobs()
        for i in range(args.schedules):
            scheduler.add_job(
                peerjob.aps3_job,
                CronTrigger(second="*", timezone=UTC),
                args=[f"j{i}"],
                id=f"j{i}",
                misfire_grace_time=None,
                coalesce=True,
                replace_existing=True,
            )
    finally:
        scheduler.shutdown(wait=False)
    return {"schedules": args.schedules}


def run(args: argparse.Namespace) -> dict[str, Any]:
    peerjob.open_ledger(args.ledger)
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=args.db)},
        executors={"default": FireTimeThreadPoolExecutor()},
        timezone=UTC,
    )
    scheduler.start()
    try:
        time.sleep(max(0.0, args.stop_at - time.time()))
    finally:
        scheduler.shutdown(wait=True)
    return {"executor": "FireTimeThreadPoolExecutor(max_workers=10)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["setup", "run"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--ledger")
    parser.add_argument("--stop-at", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    info = setup(args) if args.mode == "setup" else run(args)
    info.update(
        pid=os.getpid(),
        versions={name: version(name) for name in ("apscheduler", "sqlalchemy")},
    )
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
