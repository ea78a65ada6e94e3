"""A node's Prometheus metrics, built with the official ``prometheus_client``: the
:class:`~easyjob.observe.metrics.Metrics` of a node that keeps them.

Each :class:`NodeMetrics` has a registry of its own, so several nodes in one process never
share series; gauges and the database counters are read only when scraped.

Label cardinality is bounded: the first ``task_labels`` task names (50 by default) a node
reports get a ``task`` label of their own, for the process's lifetime; every later name is
counted under ``task="other"``. A node of 100,000 tasks so exports at most 51 task values,
about 1,850 series in all, whatever the catalogue's size (docs/monitoring.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from easyjob.core.store_values import DB_ERROR_KINDS, ROWS_BY_WRITE
from easyjob.observe.metrics import DEFAULT_TASK_LABELS, HEALTH_CAUSES, OTHER, Gauges, Metrics

__all__ = ["NodeMetrics"]

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
JITTER_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)


class _Series:
    """The metric children of one task label, looked up once and kept."""

    __slots__ = (
        "cancelled",
        "duration",
        "finished",
        "held",
        "label",
        "lateness",
        "misfires",
        "started",
    )

    def __init__(self, metrics: NodeMetrics, label: str) -> None:
        self.started = metrics.runs_started.labels(label)
        self.lateness = metrics.lateness.labels(label)
        self.label = label
        self.duration = metrics.duration.labels(label)
        self.misfires = metrics.misfires.labels(label)
        self.cancelled = metrics.cancels.labels(label)
        self.held = metrics.held.labels(label)
        self.finished = {
            outcome: metrics.runs_finished.labels(label, outcome)
            for outcome in ("success", "failure")
        }


class NodeMetrics(Metrics):
    """The metrics of one node, in :attr:`registry` (render it with
    ``prometheus_client.generate_latest``). Thread-safe."""

    def __init__(self, node_id: str, *, task_labels: int = DEFAULT_TASK_LABELS) -> None:
        if task_labels < 0:
            raise ValueError(f"task_labels must be 0 or more, got {task_labels!r}")
        self.node_id = node_id
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs_started = Counter(
            "easyjob_runs_started", "Runs whose function this node called", ["task"], registry=r
        )
        self.runs_finished = Counter(
            "easyjob_runs_finished",
            "Runs whose function returned (success) or raised (failure) on this node",
            ["task", "outcome"],
            registry=r,
        )
        self.lateness = Histogram(
            "easyjob_run_lateness_seconds",
            "Start of a run's function after its due time (database time)",
            ["task"],
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.jitter = Histogram(
            "easyjob_run_jitter_seconds",
            "A fire's jitter: its due time after its fire time (tasks with jitter=)",
            ["task"],
            buckets=JITTER_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "easyjob_run_duration_seconds",
            "How long a run's function ran",
            ["task"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.misfires = Counter(
            "easyjob_misfires", "Fires this node recorded MISSED", ["task"], registry=r
        )
        self.claims_made = Counter("easyjob_claims", "Runs this node claimed", registry=r)
        self.claims_lost = Counter(
            "easyjob_claims_lost",
            "Runs this node tried to claim that another node claimed first",
            registry=r,
        )
        self.recoveries = Counter(
            "easyjob_recovered_runs",
            "Runs of dead nodes (or lost track of) this node made claimable again",
            registry=r,
        )
        self.unhealthy_total = Counter(
            "easyjob_unhealthy",
            "Times this node became unhealthy (its /readyz 503), by cause",
            ["cause"],
            registry=r,
        )
        for cause in HEALTH_CAUSES:  # present at 0 from the start
            self.unhealthy_total.labels(cause)
        self.cancels = Counter(
            "easyjob_runs_cancelled",
            "Running runs this node stopped because they were cancelled on request",
            ["task"],
            registry=r,
        )
        self.held = Counter(
            "easyjob_runs_held_back",
            "Starts this node held back because the task was at its limit of runs running "
            "(max_running, or a serial run's predecessor); the run waits",
            ["task"],
            registry=r,
        )
        self._cap = task_labels
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}
        self._other: _Series | None = None

    def _for(self, task: str) -> _Series:
        found = self._series.get(task)
        if found is not None:
            return found
        with self._lock:
            found = self._series.get(task)
            if found is not None:
                return found
            if len(self._series) < self._cap:
                found = self._series[task] = _Series(self, task)
                return found
            if self._other is None:
                self._other = _Series(self, OTHER)
            return self._other

    def run_started(self, task: str, lateness_s: float) -> None:
        series = self._for(task)
        series.started.inc()
        series.lateness.observe(max(0.0, lateness_s))

    def run_jittered(self, task: str, jitter_s: float) -> None:
        # its series exist for tasks with jitter= only (looked up per run: a few microseconds)
        self.jitter.labels(self._for(task).label).observe(jitter_s)

    def run_finished(self, task: str, outcome: str, duration_s: float) -> None:
        series = self._for(task)
        series.finished[outcome].inc()
        series.duration.observe(duration_s)

    def claims(self, made: int, lost: int) -> None:
        if made:
            self.claims_made.inc(made)
        if lost:
            self.claims_lost.inc(lost)

    def recovered(self, n: int) -> None:
        if n:
            self.recoveries.inc(n)

    def misfired(self, task: str, n: int = 1) -> None:
        if n:
            self._for(task).misfires.inc(n)

    def held_back(self, task: str) -> None:
        self._for(task).held.inc()

    def unhealthy(self, cause: str) -> None:
        self.unhealthy_total.labels(cause).inc()

    def cancelled(self, task: str) -> None:
        self._for(task).cancelled.inc()

    def declare(self, tasks: Iterable[str]) -> None:
        for task in tasks:
            self._for(task)

    def watch(self, gauges: Gauges, db_counters: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_Live(self.node_id, gauges, db_counters))

    def task_labels(self) -> list[str]:
        """The task names with a label of their own, in the order they were first seen."""
        with self._lock:
            return list(self._series)


class _Live(Collector):
    """What is read at scrape time: the node's gauges and its database counters."""

    def __init__(
        self, node_id: str, gauges: Gauges, db_counters: Callable[[], dict[str, int]]
    ) -> None:
        self._node_id = node_id
        self._gauges = gauges
        self._db = db_counters

    def collect(self) -> Iterator[Metric]:
        g = self._gauges
        info = GaugeMetricFamily("easyjob_node_info", "This node's id", labels=["node_id"])
        info.add_metric([self._node_id], 1)
        yield info
        yield _gauge("easyjob_runs_held", "Runs this node holds, claimed or running", g.held())
        yield _gauge("easyjob_runs_running", "Runs whose function is running", g.running())
        yield _gauge(
            "easyjob_stuck_threads",
            "Worker threads still running a function past its timeout",
            g.stuck(),
        )
        age = g.heartbeat_age_s()
        if age is not None:
            yield _gauge(
                "easyjob_heartbeat_age_seconds",
                "Seconds since the database last accepted this node's heartbeat",
                age,
            )
        yield _gauge(
            "easyjob_clock_offset_seconds",
            "This node's clock minus the database clock",
            g.clock_offset_s(),
        )
        yield _gauge(
            "easyjob_live_nodes",
            "Live nodes as this node saw them at its last heartbeat, itself included",
            g.live_nodes(),
        )
        behind = g.planner_behind()
        yield _gauge(
            "easyjob_planner_behind",
            "1 while this node's planner is behind: paced, one fire per advance",
            1 if behind else 0,
        )
        if behind:
            yield _gauge(
                "easyjob_planner_rate",
                "Due tasks this node's planner may advance per poll while behind",
                g.planner_rate(),
            )
        yield CounterMetricFamily(
            "easyjob_planner_behind_episodes",
            "Times this node's planner became behind",
            value=g.planner_behind_episodes(),
        )
        yield CounterMetricFamily(
            "easyjob_fires_written",
            "Fires to run (PENDING rows) this node's planner wrote",
            value=g.fires_written(),
        )
        counts = self._db()
        trips = CounterMetricFamily(
            "easyjob_db_round_trips",
            "Database round trips by kind: statements sent, transactions committed",
            labels=["kind"],
        )
        trips.add_metric(["statement"], counts.get("statements", 0))
        trips.add_metric(["commit"], counts.get("commits", 0))
        yield trips
        rows = CounterMetricFamily(
            "easyjob_db_rows_written",
            "Rows this node's statements inserted, updated or deleted, by table",
            labels=["table"],
        )
        for key, value in sorted(counts.items()):
            if key.startswith("rows_written."):
                rows.add_metric([key.removeprefix("rows_written.")], value)
        yield rows
        by_write = CounterMetricFamily(
            "easyjob_db_rows_written_by_write",
            "Rows this node's statements wrote, by store write (the transaction's name), "
            "table, and status inserted (empty for other statements)",
            labels=["write", "table", "status"],
        )
        for key, value in sorted(counts.items()):
            if key.startswith(ROWS_BY_WRITE):
                write, table, status = key.removeprefix(ROWS_BY_WRITE).split(".")
                by_write.add_metric([write, table, status], value)
        yield by_write
        errors = CounterMetricFamily(
            "easyjob_db_errors",
            "Database errors by kind (each failed attempt; transient ones are retried)",
            labels=["kind"],
        )
        found = {k.removeprefix("errors."): v for k, v in counts.items() if k.startswith("errors.")}
        for kind in sorted({*DB_ERROR_KINDS, *found}):  # every kind from the start, at 0
            errors.add_metric([kind], found.get(kind, 0))
        yield errors


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)
