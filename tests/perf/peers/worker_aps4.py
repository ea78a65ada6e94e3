"""APScheduler 4 (4.0.0a6) peer worker; runs inside its own virtualenv, never in the project's.

``setup`` (once, before the timed run): create the SQLAlchemy data store's tables from scratch
and add M schedules, one task per schedule (``noop0`` .. ``noop{M-1}``, like easyjob's M tasks),
each on ``CronTrigger(second="*")`` in UTC from a whole second on, so all of them fire on the
same second, every second.
Task and schedule settings are APScheduler's defaults (``max_running_jobs=1`` per task,
``coalesce=latest``, ``misfire_grace_time=None``: a late fire still runs, however late).

``run``: one ``AsyncScheduler`` (role ``both``: processes schedules and runs jobs) on that data
store until ``--stop-at`` (epoch seconds). The runner starts two of these at once. Jobs run on
the default ``async`` executor (on the event loop: the job is a no-op).

The event broker: ``psycopg`` (``PsycopgEventBroker``, PostgreSQL ``LISTEN/NOTIFY``) is what
APScheduler documents for schedulers sharing a data store; ``local`` (``LocalEventBroker``) is
the only one on other databases: each scheduler then only wakes up for its own events and polls.

The data store gets an asynchronous engine when the URL's driver is async (``psycopg``), else a
synchronous one (``pysqlite``, ``pymysql``), which the data store runs in worker threads.
Prints one JSON line (versions and settings) on stdout when done.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

import anyio
import peerjob
from apscheduler import AsyncScheduler, ConflictPolicy
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.local import LocalEventBroker
from apscheduler.triggers.cron import CronTrigger
from sqlalchemy import create_engine
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def _engine(url: str) -> Any:
    try:
        return create_async_engine(url)
    except InvalidRequestError:  # the driver is not async (pysqlite, pymysql)
        return create_engine(url)


def _broker(kind: str, engine: Any) -> Any:
    if kind == "auto":
        async_pg = isinstance(engine, AsyncEngine) and engine.dialect.driver == "psycopg"
        kind = "psycopg" if async_pg else "local"
    if kind == "psycopg":
        from apscheduler.eventbrokers.psycopg import PsycopgEventBroker

        return PsycopgEventBroker.from_async_sqla_engine(engine)
    return LocalEventBroker()


async def setup(args: argparse.Namespace) -> dict[str, Any]:
    engine = _engine(args.db)
    store = SQLAlchemyDataStore(engine, start_from_scratch=True)
    try:
        async with AsyncScheduler(store, LocalEventBroker()) as scheduler:
            # Whole seconds: 4.0.0a6 keeps the microseconds of ``start_time`` (default: now)
            # in every fire time of a ``second="*"`` trigger. One trigger per schedule: the
            # trigger is stateful (``add_schedule`` calls its ``next()``).
            start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            for i in range(args.schedules):
                trigger = CronTrigger(second="*", timezone="UTC", start_time=start)
                task_id = f"noop{i}"
                await scheduler.configure_task(task_id, func=peerjob.aps4_job)
                await scheduler.add_schedule(
                    task_id,
                    trigger,
                    id=f"j{i}",
                    args=[f"j{i}"],
                    conflict_policy=ConflictPolicy.replace,
                )
    finally:
        await _dispose(engine)
    return {"schedules": args.schedules}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    peerjob.open_ledger(args.ledger)
    engine = _engine(args.db)
    broker = _broker(args.broker, engine)
    store = SQLAlchemyDataStore(engine)
    try:
        async with AsyncScheduler(store, broker) as scheduler:
            await scheduler.start_in_background()
            await anyio.sleep(max(0.0, args.stop_at - time.time()))
            await scheduler.stop()
            await scheduler.wait_until_stopped()
    finally:
        await _dispose(engine)
    return {"broker": type(broker).__name__, "engine": type(engine).__name__}


async def _dispose(engine: Any) -> None:
    if isinstance(engine, AsyncEngine):
        await engine.dispose()
    else:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["setup", "run"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--ledger")
    parser.add_argument("--stop-at", type=float, default=0.0)
    parser.add_argument("--broker", choices=["auto", "local", "psycopg"], default="auto")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    info = anyio.run(setup if args.mode == "setup" else run, args, backend="asyncio")
    info.update(
        pid=os.getpid(),
        versions={name: version(name) for name in ("apscheduler", "anyio", "sqlalchemy")},
    )
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
