"""A minute burst: M tasks each on its own "every minute" cron, N real nodes, measured per minute.

Usage (from the repository root, with the project's virtualenv)::

    python -m tests.perf.minute_burst --db postgresql --tasks 20000 --nodes 3 --minutes 2
    python -m tests.perf.minute_burst --db postgresql-durable --tasks 20000 --nodes 3
    python -m tests.perf.minute_burst --db sqlite --tasks 12000 --nodes 1 --json

``--db postgresql`` starts the test rig's server (tests/rig: ``fsync=off``,
``full_page_writes=off``); ``postgresql-durable`` the same server with both at PostgreSQL's
defaults (on), the issue's "durable settings"; ``sqlite`` a fresh file; anything else is the
URL of an empty database of the bench's own. Both servers preload ``pg_stat_statements``
(``--statements N`` prints the N statements that took the server's time during the measured
minutes).

The nodes are ``easyjob bench``'s (:mod:`easyjob.bench.trial`: ``easyjob run`` processes at
default settings, each task ``bench-I`` a no-op that notes its fire time and the moment it was
called). Once every node heartbeats and every task is registered, the first minute boundary is
the warm-up (the start-up burst) and the next ``--minutes`` are measured. Each measured minute
M is the cycle [M - 1 s, M + 59 s): its CPU (the nodes', from /proc, and the database server's
process tree) and the rows the nodes wrote (their ``/metrics``) over the cycle, divided by the
runs fired at M. Per minute:

- ``drain_s``: the last call of a job fired at M minus M; ``late_p50_ms``/``late_p99_ms``: the
  start lateness (call minus fire time) of the fires of M; ``drain_runs_per_s``: runs over
  ``drain_s``;
- ``runs``/``missing``/``duplicates``: SUCCESS rows fired at M (database), against the tasks;
- ``pending_per_task``: PENDING rows per task, read 30 s into the cycle (fires written ahead);
- ``node_ms_per_run``, ``db_ms_per_run``, ``rows_per_run``.

One JSON line per trial with ``--json`` (a table on stderr otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import easyjob
from easyjob.bench.metrics import percentile
from easyjob.bench.trial import TrialConfig, job_calls, start_nodes, stop_nodes, wait_live
from easyjob.bench.window import WindowReadings, WindowSampler, locate_server
from easyjob.store import Store
from tests.cluster.harness import sleep_until
from tests.perf.bench_ab import revision
from tests.rig.servers import PostgresServer

CRON = "* * * * *"
#: the cycle of minute M starts this long before M (its CPU and rows are read then)
LEAD_S = 1.0


#: pg_stat_statements, planning time included (it costs the server a little: both servers
#: pay it alike)
_STATEMENTS = [
    *("-c", "shared_preload_libraries=pg_stat_statements"),
    *("-c", "pg_stat_statements.track_planning=on"),
]


class DurablePostgres(PostgresServer):
    """The rig's PostgreSQL with ``fsync`` and ``full_page_writes`` at their defaults (on)."""

    def _argv(self, port: int) -> list[str]:
        argv = super()._argv(port)
        drop = {"fsync=off", "full_page_writes=off"}
        kept: list[str] = []
        for arg in argv:
            if arg in drop:
                kept.pop()  # its "-c"
                continue
            kept.append(arg)
        return kept + _STATEMENTS


class StatsPostgres(PostgresServer):
    """The rig's PostgreSQL (fsync off) with ``pg_stat_statements`` preloaded."""

    def _argv(self, port: int) -> list[str]:
        return super()._argv(port) + _STATEMENTS


def _say(text: str) -> None:
    print(f"burst: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def database(db: str, scratch: Path) -> Iterator[tuple[str, PostgresServer | None]]:
    """The URL of a fresh database for *db* (see the module's docstring), and its server."""
    if db == "sqlite":
        yield f"sqlite:///{scratch / 'burst.db'}", None
        return
    if db not in ("postgresql", "postgresql-durable"):
        yield db, None
        return
    server = DurablePostgres() if db == "postgresql-durable" else StatsPostgres()
    try:
        server.start()
        yield server.create_database("burst"), server
    finally:
        server.close()


def _server_settings(server: PostgresServer | None) -> dict[str, str]:
    if server is None:
        return {}
    with server._connect() as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers')"
        ).fetchall()
    return {str(name): str(value) for name, value in rows}


def _statements_reset(server: PostgresServer | None) -> bool:
    if server is None:
        return False
    with server._connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    return True


def _top_statements(server: PostgresServer, limit: int) -> list[dict[str, Any]]:
    with server._connect() as conn:
        rows = conn.execute(
            "SELECT calls, rows, total_plan_time + total_exec_time, total_plan_time, query "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = 'burst' ORDER BY 3 DESC LIMIT %s",
            [limit],
        ).fetchall()
    return [
        {
            "calls": int(calls),
            "rows": int(nrows),
            "total_ms": round(float(total), 1),
            "plan_ms": round(float(plan), 1),
            "query": " ".join(str(query).split())[:160],
        }
        for calls, nrows, total, plan, query in rows
    ]


def _pending(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        found = conn.scalar(
            sa.text("SELECT count(*) FROM easy_job_task_detail WHERE status = 'PENDING'")
        )
    return int(found or 0)


def _next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def run_burst(
    url: str,
    *,
    tasks: int,
    nodes: int,
    minutes: int,
    workdir: Path,
    server: PostgresServer | None = None,
    statements: int = 0,
) -> dict[str, Any]:
    """Run the nodes through a warm-up minute and *minutes* measured minutes; the figures."""
    config = TrialConfig(db=url, nodes=nodes, tasks=tasks, cron=CRON, duration=60.0 * minutes)
    engine = sa.create_engine(url)
    store = Store.open(url, create=True)
    per_minute: list[dict[str, Any]] = []
    try:
        store.bench.reset()
        db_pid, db_note = locate_server(url, server.pid if server is not None else None)
        _say(f"starting {nodes} node(s) with {tasks:,} minute tasks")
        t0 = time.time()
        procs, urls = start_nodes(config, workdir)
        metrics = [f"{u}/metrics" for u in urls]
        try:
            wait_live(store, config, procs)
            live_s = time.time() - t0
            warm = _next_minute(datetime.now(UTC))
            _say(f"live after {live_s:.1f} s; warm-up minute {warm:%H:%M}")
            first = warm + timedelta(minutes=1)
            measured = [first + timedelta(minutes=i) for i in range(minutes)]
            sleep_until(first.timestamp() - LEAD_S - 2, time.time)
            with_statements = statements > 0 and _statements_reset(server)
            readings: list[WindowReadings] = []
            pending: list[int] = []
            for minute in measured:
                begin = minute.timestamp() - LEAD_S
                sampler = WindowSampler([p.pid for p in procs], metrics, db_pid, db_note)
                offset = time.monotonic() - time.time()
                sampler.start(begin + offset, begin + 60 + offset)
                sleep_until(minute.timestamp() + 30, time.time)
                pending.append(_pending(engine))
                _say(f"minute {minute:%H:%M}: {pending[-1]:,} PENDING rows at +30 s")
                sleep_until(begin + 60.5, time.time)
                readings.append(sampler.close())
            top = _top_statements(server, statements) if with_statements and server else []
            stop_nodes(procs, workdir)
            calls = job_calls(workdir, nodes)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for minute, spent, waiting in zip(measured, readings, pending, strict=True):
            per_minute.append(_minute_figures(store, minute, tasks, calls, spent, waiting))
    finally:
        store.close()
        engine.dispose()
    return {
        "tasks": tasks,
        "nodes": nodes,
        "cron": CRON,
        "db": make_label(url),
        "live_after_s": round(live_s, 1),
        "minutes": per_minute,
        "db_note": db_note,
        "top_statements": top,
    }


def make_label(url: str) -> str:
    return sa.engine.make_url(url).get_backend_name()


def _minute_figures(
    store: Any,
    minute: datetime,
    tasks: int,
    calls: Sequence[tuple[float, float]],
    spent: WindowReadings,
    pending: int,
) -> dict[str, Any]:
    at = minute.timestamp()
    late = sorted(call - fire for fire, call in calls if abs(fire - at) < 0.5)
    rows = store.bench.succeeded(minute, minute)
    per_task = Counter(task_id for task_id, _, _ in rows)
    runs = len(late)
    drain = late[-1] if late else math.nan
    counts = spent.counters
    written = sum(v for k, v in counts.items() if k.startswith("rows_written."))
    return {
        "minute": minute.isoformat(),
        "runs": runs,
        "runs_recorded": len(per_task),
        "missing": tasks - len(per_task),
        "duplicates": sum(c - 1 for c in per_task.values()),
        "drain_s": round(drain, 2),
        "late_p50_ms": round(1000 * percentile(late, 0.5), 1),
        "late_p99_ms": round(1000 * percentile(late, 0.99), 1),
        "drain_runs_per_s": round(runs / drain, 1) if runs and drain > 0 else None,
        "pending_per_task": round(pending / tasks, 2),
        "node_ms_per_run": _per(spent.nodes_cpu_s, runs),
        "db_ms_per_run": _per(spent.db_cpu_s, runs),
        "rows_per_run": round(written / runs, 2) if counts and runs else None,
        "rows_written": {
            k.removeprefix("rows_written."): int(v)
            for k, v in counts.items()
            if k.startswith("rows_written.")
        },
    }


def _per(cpu_s: float | None, runs: int) -> float | None:
    return None if cpu_s is None or not runs else round(1000 * cpu_s / runs, 3)


_COLUMNS = (
    ("minute", "minute", 5),
    ("runs", "runs", 6),
    ("miss", "missing", 4),
    ("dup", "duplicates", 3),
    ("drain s", "drain_s", 7),
    ("p50 ms", "late_p50_ms", 8),
    ("p99 ms", "late_p99_ms", 8),
    ("runs/s", "drain_runs_per_s", 7),
    ("node ms/run", "node_ms_per_run", 11),
    ("db ms/run", "db_ms_per_run", 9),
    ("rows/run", "rows_per_run", 8),
    ("pending/task", "pending_per_task", 12),
)


def format_table(result: dict[str, Any]) -> str:
    """The per-minute figures of one trial as a plain table."""
    head = (
        f"{result['tasks']:,} minute tasks, {result['nodes']} node(s), {result['db']}"
        f" {result.get('settings') or ''}; live after {result['live_after_s']} s"
    )
    lines = [head, "  ".join(title.rjust(width) for title, _, width in _COLUMNS)]
    for row in result["minutes"]:
        cells = []
        for _, key, width in _COLUMNS:
            value = row[key]
            if key == "minute":
                value = value[11:16]
            cells.append(("-" if value is None else str(value)).rjust(width))
        lines.append("  ".join(cells))
    for stmt in result.get("top_statements", []):
        lines.append(
            f"  {stmt['total_ms']:>9} ms  plan {stmt['plan_ms']:>8} ms  {stmt['calls']:>7} calls"
            f"  {stmt['rows']:>7} rows  {stmt['query']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.perf.minute_burst", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--db", default="postgresql", help="postgresql | postgresql-durable | sqlite | URL"
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=2, help="measured minutes (default 2)")
    parser.add_argument(
        "--statements",
        type=int,
        default=0,
        metavar="N",
        help="print the N costliest statements (pg_stat_statements)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.nodes < 1 or args.minutes < 1:
        parser.error("--tasks, --nodes and --minutes must be at least 1")
    with (
        tempfile.TemporaryDirectory(prefix="easyjob-burst-") as scratch,
        database(args.db, Path(scratch)) as (url, server),
    ):
        settings = _server_settings(server)
        result = run_burst(
            url,
            tasks=args.tasks,
            nodes=args.nodes,
            minutes=args.minutes,
            workdir=Path(scratch) / "nodes",
            server=server,
            statements=args.statements,
        )
        result["settings"] = settings
        root = Path(easyjob.__file__).resolve().parents[1]
        result["code"] = f"{root} ({revision(root)})"
    print(format_table(result), file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
