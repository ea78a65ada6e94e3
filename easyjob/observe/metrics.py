"""What a node's parts report (:class:`Metrics`: a run started or finished, claims made and
lost, runs recovered, fires missed) and what is read at scrape time (:class:`Gauges`).

The base :class:`Metrics` ignores every event: a node that keeps no metrics pays one empty
call per event, and does not import ``prometheus_client`` (about 60 ms of a node's start-up
CPU, a tenth of it). The Prometheus implementation is
:class:`easyjob.observe.prometheus.NodeMetrics`, imported when a node keeps metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_TASK_LABELS",
    "HEALTH_CAUSES",
    "NO_METRICS",
    "OTHER",
    "Gauges",
    "Metrics",
]

DEFAULT_TASK_LABELS = 50
OTHER = "other"  # the task label of every task past the first DEFAULT_TASK_LABELS


@dataclass(frozen=True)
class Gauges:
    """Read at scrape time: runs this node holds (claimed or running), runs whose function
    is running, stuck threads (functions still running past their timeout), seconds since
    the last heartbeat the database accepted (None before the first), this node's clock
    minus the database's, in seconds, and the live nodes as this node saw them at its last
    heartbeat (those its strategy deals runs over). The planner's pace
    (:mod:`easyjob.core.pacing`): whether it is behind, its rate while behind (due tasks
    advanced per poll), how many times it became behind, and the fires to run it wrote."""

    held: Callable[[], int]
    running: Callable[[], int]
    stuck: Callable[[], int]
    heartbeat_age_s: Callable[[], float | None]
    clock_offset_s: Callable[[], float]
    live_nodes: Callable[[], int]
    planner_behind: Callable[[], bool] = lambda: False
    planner_rate: Callable[[], float] = lambda: 0.0
    planner_behind_episodes: Callable[[], int] = lambda: 0
    fires_written: Callable[[], int] = lambda: 0


class Metrics:
    """The events a node reports. This base ignores them all, so a node that serves no
    metrics pays one empty call per event."""

    def run_started(self, task: str, lateness_s: float) -> None:
        """A run's function is about to be called, *lateness_s* after its due time."""

    def run_jittered(self, task: str, jitter_s: float) -> None:
        """A run of a fire of a task with ``jitter=`` started: its fire was due *jitter_s*
        after its fire time (apart from its lateness, which is counted from its due time)."""

    def run_finished(self, task: str, outcome: str, duration_s: float) -> None:
        """A run's function returned (``success``) or raised (``failure``)."""

    def claims(self, made: int, lost: int) -> None:
        """This node claimed *made* runs; *lost* more went to a node that was first."""

    def recovered(self, n: int) -> None:
        """This node made *n* runs of dead nodes (or orphans) claimable again."""

    def misfired(self, task: str, n: int = 1) -> None:
        """*n* fires of *task* were recorded MISSED by this node."""

    def held_back(self, task: str) -> None:
        """A start of a run of *task* was held back: the task was at its limit of runs
        RUNNING (``max_running``, or a ``serial`` run's predecessor); the run waits."""

    def unhealthy(self, cause: str) -> None:
        """The node became unhealthy for *cause* (see :mod:`easyjob.node.health`)."""

    def cancelled(self, task: str) -> None:
        """A running run of *task* here was cancelled on request and its job stopped."""

    def declare(self, tasks: Iterable[str]) -> None:
        """This node's code declares *tasks*: their series exist from now on, at 0."""

    def watch(self, gauges: Gauges, db_counters: Callable[[], dict[str, int]]) -> None:
        """Read *gauges* and the database counters (a snapshot function) at scrape time."""


#: The causes of ill health a node counts (``easyjob_unhealthy_total{cause=...}``).
HEALTH_CAUSES = ("loop_failing", "due_work_held")

NO_METRICS = Metrics()
