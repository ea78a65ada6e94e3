"""The figures of a trial, computed from the run history (database time) and node counters."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from easyjob.bench.window import WindowReadings
from easyjob.bench.writes import rows_by_kind
from easyjob.core.cron import CronSchedule
from easyjob.core.store_values import ROWS_BY_WRITE
from easyjob.store import RUNS_TABLE, TASKS_TABLE
from easyjob.store.contract import Store

__all__ = ["RUNS_TABLE", "TASKS_TABLE", "TrialFigures", "measure", "percentile"]


@dataclass(frozen=True)
class TrialFigures:
    """One trial's figures over its steady-state window."""

    nodes: int
    tasks: int
    cron: str
    window_s: float
    expected: int
    runs: int
    runs_per_s: float
    expected_per_s: float
    missed: int
    duplicates: int
    #: from each run's fire time to the call of its function, as the job noted it (the
    #: nodes' clock, the database's on one machine): p50, p95, p99, max, min
    lateness_ms: dict[str, float]
    claims_lost: int
    round_trips_per_run: float
    statements_per_run: float
    cpu_s_per_node: dict[str, float]
    round_trips_per_node_s: float = 0.0
    idle_tasks: int = 0
    claim_mode: str = "optimistic"
    #: the tasks' overlap policy
    overlap: str = "serial"
    #: the window measured: fires scheduled from start to end (database time, ISO 8601)
    window_start: str = ""
    window_end: str = ""
    #: ``default`` (the nodes ran at default settings) or ``tuned``
    settings: str = "default"
    #: the nodes' CPU (whole process life) over the runs they completed, milliseconds
    cpu_ms_per_run: float = 0.0
    #: runs PENDING or CLAIMED longer than their task's misfire grace when the window
    #: ended: 0 when the misfire policy kept up with what the cluster could not run
    stale_at_end: int = 0
    #: MISSED rows of the window's fires: written as runs first and marked MISSED later
    #: (a fire the cluster could not run, paid an insert and a write or more), and summary
    #: rows the planner wrote MISSED (one for a fire or a gap of them)
    missed_after_insert: int = 0
    missed_summaries: int = 0
    #: from each run's fire time to its recorded ``start_time`` (database time: the start
    #: write, or the due time for a start written ahead of it)
    recorded_lateness_ms: dict[str, float] = field(default_factory=dict)
    #: runs the nodes finished during the window (their /metrics, read at its start and
    #: end), or the window's runs when those could not be read: the window figures' per run
    window_runs: int = 0
    #: over the window, per run finished in it: statements; rows the nodes' statements
    #: inserted, updated or deleted, in all tables, in the runs table
    #: (``easy_job_task_detail``) and in the tasks table (``easy_job_task``); None when the
    #: nodes' counters could not be read
    window_statements_per_run: float | None = None
    rows_per_run: float | None = None
    run_rows_per_run: float | None = None
    task_rows_per_run: float | None = None
    #: rows written by table over the window, and over the nodes' whole life (start-up
    #: registration included), all nodes
    rows_written: dict[str, int] = field(default_factory=dict)
    rows_written_life: dict[str, int] = field(default_factory=dict)
    #: over the window, per run finished in it: rows written by kind of write (see
    #: :data:`easyjob.bench.writes.KINDS`: fire insert, gap summary insert, task-row
    #: advance, claim, start, claim-and-start, end, miss_pending, ...), and the rows
    #: written by kind in all, and by store write (``WRITE.TABLE.STATUS inserted``)
    rows_per_run_by_kind: dict[str, float] = field(default_factory=dict)
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    rows_by_write: dict[str, int] = field(default_factory=dict)
    #: the nodes' CPU over the window (read from /proc) per run, milliseconds
    window_cpu_ms_per_run: float | None = None
    #: the database server's CPU over the window (its process tree, read from /proc): per
    #: run in milliseconds, and in all in seconds; None where not measured (SQLite: its
    #: work is inside the nodes' CPU; a server not found here); ``db_cpu_note`` says why,
    #: or which process was read
    db_cpu_ms_per_run: float | None = None
    db_cpu_s: float | None = None
    db_cpu_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """The *q* quantile (0..1) of *values* by the nearest-rank method; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def measure(
    store: Store,
    *,
    cron: str,
    tasks: int,
    start: datetime,
    end: datetime,
    node_stats: Sequence[dict[str, Any]],
    idle_tasks: int = 0,
    claim_mode: str = "optimistic",
    overlap: str = "serial",
    settings: str = "default",
    stale_at_end: int = 0,
    calls: Sequence[tuple[float, float]] = (),
    window: WindowReadings | None = None,
) -> TrialFigures:
    """Figures for fires scheduled in [start, end]: every task fires on *cron*. *calls*
    are the job calls ``(fire time, call time)`` in epoch seconds, as the jobs noted them."""
    fires = CronSchedule.parse(cron).fires_between(start, end, limit=10_000_000)
    expected = len(fires) * tasks

    rows = store.bench.succeeded(start, end)
    after_insert, summaries = store.bench.misses(start, end)
    per_fire = Counter((task_id, fire) for task_id, fire, _ in rows)
    recorded = [(started - fire).total_seconds() * 1000 for _, fire, started in rows]
    first, last = start.timestamp(), end.timestamp()
    lateness = [(at - fire) * 1000 for fire, at in calls if first <= fire <= last]
    window_s = max((end - start).total_seconds() + 1.0, 1.0)
    runs_total = sum(s.get("completed", 0) for s in node_stats) or 1
    statements = sum(s.get("statements", 0) for s in node_stats)
    commits = sum(s.get("commits", 0) for s in node_stats)
    node_seconds = sum(s.get("uptime_s", 0.0) for s in node_stats) or 1.0
    spent = window or WindowReadings(None, None, "")
    counts = spent.counters
    window_runs = int(counts.get("finished", 0)) or len(per_fire)
    written = _rows_by_table(counts)
    kinds = rows_by_kind(counts)
    return TrialFigures(
        nodes=len(node_stats),
        tasks=tasks,
        cron=cron,
        window_s=window_s,
        expected=expected,
        runs=len(per_fire),
        runs_per_s=round(len(per_fire) / window_s, 1),
        expected_per_s=round(expected / window_s, 1),
        missed=expected - len(per_fire),
        duplicates=sum(count - 1 for count in per_fire.values()),
        lateness_ms=_spread(lateness),
        recorded_lateness_ms=_spread(recorded),
        claims_lost=sum(s.get("claims_lost", 0) for s in node_stats),
        round_trips_per_run=round((statements + commits) / runs_total, 2),
        statements_per_run=round(statements / runs_total, 2),
        cpu_s_per_node={s["node_id"]: s.get("cpu_s", 0.0) for s in node_stats},
        round_trips_per_node_s=round((statements + commits) / node_seconds, 1),
        idle_tasks=idle_tasks,
        claim_mode=claim_mode,
        overlap=overlap,
        settings=settings,
        window_start=start.isoformat(),
        window_end=end.isoformat(),
        cpu_ms_per_run=round(1000 * sum(s.get("cpu_s", 0.0) for s in node_stats) / runs_total, 4),
        stale_at_end=stale_at_end,
        missed_after_insert=after_insert,
        missed_summaries=summaries,
        window_runs=window_runs,
        window_statements_per_run=_per_run(counts.get("statements"), window_runs),
        rows_per_run=_per_run(sum(written.values()) if counts else None, window_runs),
        run_rows_per_run=_per_run(written.get(RUNS_TABLE, 0) if counts else None, window_runs),
        task_rows_per_run=_per_run(written.get(TASKS_TABLE, 0) if counts else None, window_runs),
        rows_written=written,
        rows_written_life=_rows_by_table(*node_stats),
        rows_by_kind=kinds,
        rows_by_write={
            key.removeprefix(ROWS_BY_WRITE): int(n)
            for key, n in sorted(counts.items())
            if key.startswith(ROWS_BY_WRITE) and n
        },
        rows_per_run_by_kind={
            kind: round(n / window_runs, 4) for kind, n in kinds.items() if window_runs
        },
        window_cpu_ms_per_run=_per_run(spent.nodes_cpu_s, window_runs, 1000),
        db_cpu_ms_per_run=_per_run(spent.db_cpu_s, window_runs, 1000),
        db_cpu_s=spent.db_cpu_s,
        db_cpu_note=spent.db_note,
    )


def _spread(lateness: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, max and min of lateness figures (ms)."""
    return {
        "p50": round(percentile(lateness, 0.50), 1),
        "p95": round(percentile(lateness, 0.95), 1),
        "p99": round(percentile(lateness, 0.99), 1),
        "max": round(max(lateness, default=0.0), 1),
        "min": round(min(lateness, default=0.0), 1),
    }


def _rows_by_table(*counters: Mapping[str, Any]) -> dict[str, int]:
    """Rows written by table (``rows_written.TABLE`` in each node's counters), summed."""
    rows: Counter[str] = Counter()
    for counts in counters:
        for key, value in counts.items():
            if key.startswith("rows_written."):
                rows[key.removeprefix("rows_written.")] += int(value)
    return dict(sorted(rows.items()))


def _per_run(value: float | None, runs: int, scale: int = 1) -> float | None:
    return None if value is None or not runs else round(scale * value / runs, 4)
