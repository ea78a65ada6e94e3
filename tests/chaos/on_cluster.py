"""Network, clock and resource scenarios on :class:`tests.cluster.harness.Cluster`, judged by
:mod:`tests.chaos.checker`.

Each node reaches the database through its own proxy (:class:`tests.rig.routing.NodeRoutes`)
so one node can be cut off alone; the test's store connects directly. A scenario runs
every-second ``tick-N`` tasks, injects its faults (recorded in a
:class:`~tests.chaos.faults.FaultLog`), lets the cluster settle, waits for every owed fire,
and turns ledger, rows and fault log into a :class:`~tests.chaos.checker.Report`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from croniter import croniter

from easyjob.core.states import HELD, RunStatus, Trigger
from easyjob.store.schema import node_table
from tests.chaos import ledger
from tests.chaos.checker import Expectations, Observation, Report, build, check, superseded
from tests.chaos.expected import Window
from tests.chaos.faults import FaultLog
from tests.chaos.runner import REPORT_ENV
from tests.cluster.harness import Cluster, wait_until

__all__ = [
    "Settings",
    "db_lateness_p99_ms",
    "every_second",
    "observe",
    "record",
    "settle",
    "stuck_and_died",
]


@dataclass(frozen=True)
class Settings:
    """Node timing for a scenario; the dead threshold is ``heartbeat * dead_after``."""

    heartbeat: float = 0.3
    dead_after: int = 5
    poll: float = 0.2

    @property
    def options(self) -> dict[str, str]:
        return {
            "heartbeat": str(self.heartbeat),
            "dead-after": str(self.dead_after),
            "poll": str(self.poll),
        }

    @property
    def dead_s(self) -> float:
        return self.heartbeat * self.dead_after

    @property
    def failover_bound_s(self) -> float:
        """docs/concepts.md: within (dead_after + 1) heartbeats plus two polls; one more
        heartbeat for the recovering node's own timer (as tests/cluster does)."""
        return (self.dead_after + 2) * self.heartbeat + 2 * self.poll


def every_second(start: datetime, end: datetime) -> list[datetime]:
    """Every-second fires in (start, end], with croniter (seconds first), not easyjob."""
    itr = croniter("* * * * * *", start, second_at_beginning=True)
    fires = []
    while (fire := itr.get_next(datetime)) <= end:
        fires.append(fire.replace(tzinfo=UTC))
    return fires


def settle(cluster: Cluster, ticks: int, window: Window, timeout: float) -> None:
    """Wait until every tick fire of *window* has a finished (SUCCESS) row, or a MISSED one
    superseded by a later fire of its task that succeeded (after an outage a ``fire_once``
    task runs once, its latest due fire; the checker judges both)."""
    owed = {(f"tick-{i}", f) for i in range(ticks) for f in every_second(window.start, window.end)}

    def done() -> bool:
        runs = cluster.runs()
        ok = {(r.task_name, r.fire_time) for r in runs if r.status == RunStatus.SUCCESS}
        latest: dict[str, datetime] = {}
        for name, fire in ok:
            latest[name] = max(fire, latest.get(name, fire))
        for r in runs:
            if r.status != RunStatus.MISSED and r.missed_from is None:
                continue
            ok |= {
                (name, fire)
                for name, fire in owed
                if name == r.task_name and superseded(r, fire) and fire < latest.get(name, fire)
            }
        return owed <= ok

    wait_until("every owed fire of the window to succeed or be superseded", done, timeout)


def stuck_rows(cluster: Cluster, older_than: timedelta) -> list[str]:
    """CLAIMED/RUNNING rows whose due time is older than *older_than* in database time."""
    now = cluster.store.db.now()
    return [
        f"run {r.id} {r.task_name}@{r.fire_time.isoformat()} {r.status} on {r.node_id}"
        for r in cluster.runs()
        if r.status in HELD and r.due_time < now - older_than
    ]


def stuck_and_died(cluster: Cluster, window: Window, stuck_s: float) -> tuple[list[str], list[str]]:
    """Once the window is older than *stuck_s* (database time): the rows still held from
    before then (see :func:`stuck_rows`), and the nodes whose process died."""
    wait_until(
        "the window to age past the stuck limit",
        lambda: cluster.store.db.now() > window.end + timedelta(seconds=stuck_s),
        30,
    )
    stuck = stuck_rows(cluster, timedelta(seconds=stuck_s))
    return stuck, [n for n, p in cluster.nodes.items() if not p.alive]


def observe(
    scenario: str,
    db: str,
    cluster: Cluster,
    *,
    ticks: int,
    window: Window,
    faults: FaultLog,
    settings: Settings,
    stuck_before_stop: list[str],
    died: list[str],
    clock_offsets_s: dict[str, float] | None = None,
    failover_bound: bool = True,
    also_owed: frozenset[tuple[str, datetime]] = frozenset(),
) -> Report:
    """Stop the cluster and judge what happened: every row still held after a clean stop
    is stuck too (a stopping node hands back what it knows it holds)."""
    cluster.stop_all()
    after_stop = [
        f"after stop: run {r.id} {r.task_name}@{r.fire_time.isoformat()} {r.status} on {r.node_id}"
        for r in cluster.runs()
        if r.status in HELD
    ]
    must = also_owed | frozenset(
        (f"tick-{i}", f) for i in range(ticks) for f in every_second(window.start, window.end)
    )
    obs = Observation(
        scenario=scenario,
        db=db,
        window=window,
        expectations=Expectations(must=must),
        executions=ledger.executions(ledger.read(cluster.ledger_path)),
        runs=cluster.runs(),
        faults=faults.faults,
        dead_threshold_s=settings.dead_s,
        failover_bound_s=settings.failover_bound_s if failover_bound else None,
        stuck=stuck_before_stop + after_stop,
        died=died,
        clock_offsets_s=clock_offsets_s or {},
    )
    return build(obs)


def db_lateness_p99_ms(cluster: Cluster, window: Window) -> float | None:
    """p99 of (start_time - fire_time) of first cron attempts in *window*, both in database
    time: honest even when the nodes' clocks are faked."""
    late = sorted(
        (r.start_time - r.fire_time).total_seconds() * 1000
        for r in cluster.runs()
        if r.start_time is not None
        and r.triggered_by == Trigger.CRON
        and r.attempt == 1
        and r.fire_time in window
    )
    if not late:
        return None
    return round(late[min(len(late) - 1, -(-99 * len(late) // 100) - 1)], 1)


def recovery_runs(cluster: Cluster) -> list[str]:
    return [
        f"run {r.id} {r.task_name}@{r.fire_time.isoformat()} attempt {r.attempt}"
        for r in cluster.runs()
        if r.triggered_by == Trigger.RECOVERY
    ]


def node_offsets_ms(cluster: Cluster) -> dict[str, int]:
    """Each node's own measurement of its clock minus the database's (node table)."""

    def read(conn: sa.Connection) -> dict[str, int]:
        rows = conn.execute(sa.select(node_table.c.node_id, node_table.c.clock_offset_ms))
        return {str(node): int(ms) for node, ms in rows}

    return cluster.store.db.read("offsets", read)


def record(report: Report, extra: dict[str, object] | None = None) -> list[str]:
    """Print the report with *extra* figures, append the report itself to
    ``$EASYJOB_CHAOS_REPORT`` (JSON lines, as :mod:`tests.chaos.runner` does) when set, and
    return the invariants it breaks."""
    print("\n" + json.dumps({**report.as_dict(), **(extra or {})}, default=str))
    target = os.environ.get(REPORT_ENV)
    if target:
        ledger.append(target, json.dumps(report.as_dict(), sort_keys=True) + "\n")
    return check(report)
