"""Health means progress: whether a node does its share of the work, not just whether its
threads are alive and its heartbeat fresh.

A node is unhealthy (its ``/readyz`` answers 503, naming why) while either holds:

- ``loop_failing``: one of its loops (loader, planner, recovery, heartbeat, pruner, or the
  health watch itself) has failed on every step for longer than *stalled_after* (the dead
  threshold, ``heartbeat * dead_after``: 6 s by default), e.g. its database user lost a
  privilege, or a table it writes is corrupt;
- ``due_work_held``: it holds runs CLAIMED more than
  :data:`~easyjob.store.progress.HELD_DUE_AFTER` (10 s) past their due time, which it
  neither starts nor hands back to others (its peers leave them to it).

Each change of the causes is logged once (WARNING when one appears, INFO once none is
left) and each cause that appears is counted in the ``easyjob_unhealthy_total`` metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from easyjob.clock import Clock
from easyjob.node.loop import Loop
from easyjob.observe.metrics import HEALTH_CAUSES, NO_METRICS, Metrics
from easyjob.store import HELD_DUE_AFTER
from easyjob.store.contract import Store

__all__ = ["CAUSES", "Health", "HealthWatch"]

#: The causes of ill health, as the metric's ``cause`` label names them.
CAUSES = HEALTH_CAUSES


class Health:
    """The node's progress, reported by its loops (:meth:`step`) and its health watch
    (:meth:`held_due`); :meth:`problems` says what is wrong now. Thread-safe."""

    def __init__(
        self,
        clock: Clock,
        stalled_after_s: float,
        log: logging.LoggerAdapter[logging.Logger],
        metrics: Metrics = NO_METRICS,
        held_due_after: timedelta = HELD_DUE_AFTER,
    ) -> None:
        self._clock = clock
        self._stalled_after = stalled_after_s
        self._held_due_after = held_due_after
        self._log = log
        self._metrics = metrics
        self._lock = threading.Lock()
        self._failing_since: dict[str, float] = {}  # loop name -> first failure in a row
        self._held_due = 0
        self._shown: dict[str, str] = {}  # cause -> its text, as last logged

    def step(self, loop: str, ok: bool) -> None:
        """Loop *loop* ended a step, without (*ok*) or with an error."""
        with self._lock:
            if ok:
                self._failing_since.pop(loop, None)
            else:
                self._failing_since.setdefault(loop, self._clock.monotonic())
        self.problems()

    def held_due(self, count: int) -> None:
        """The node holds *count* runs CLAIMED well past due (see the module docstring)."""
        with self._lock:
            self._held_due = count
        self.problems()

    def problems(self) -> list[str]:
        """What is wrong now, one text per cause (empty: healthy); logs and counts the
        causes that appeared or went since the last call."""
        now = self._clock.monotonic()
        with self._lock:
            found = self._causes(now)
            appeared = [c for c in found if c not in self._shown]
            gone = [c for c in self._shown if c not in found]
            self._shown = found
        for cause in appeared:
            self._metrics.unhealthy(cause)
            self._log.warning("node unhealthy (%s): %s", cause, found[cause])
        if gone and not found:
            self._log.info("node healthy again: %s resolved", ", ".join(gone))
        elif gone:
            self._log.info("node still unhealthy; resolved: %s", ", ".join(gone))
        return [f"{cause}: {text}" for cause, text in found.items()]

    def _causes(self, now: float) -> dict[str, str]:
        found = {}
        stalled = {
            name: now - since
            for name, since in sorted(self._failing_since.items())
            if now - since > self._stalled_after
        }
        if stalled:
            loops = ", ".join(f"{name} for {seconds:.1f}s" for name, seconds in stalled.items())
            found["loop_failing"] = (
                f"every step failed: {loops} (more than {self._stalled_after:g}s); see the log"
            )
        if self._held_due:
            found["due_work_held"] = (
                f"{self._held_due} run(s) held CLAIMED here more than "
                f"{self._held_due_after.total_seconds():g}s past due, neither started nor "
                "handed back"
            )
        return found


class HealthWatch(Loop):
    """Every heartbeat: reads how many runs this node holds CLAIMED well past due, while it
    holds runs waiting to start (*waiting*, from its memory) or the last read found some;
    else once every *every* steps: a run the database says it holds and it does not know
    of is one the recovery's orphan sweep takes back (see
    :meth:`~easyjob.node.recovery.Recoverer.sweep_orphans`), and an idle node makes no
    read of its own each heartbeat."""

    name = "health"

    def __init__(
        self,
        store: Store,
        node_id: str,
        interval: float,
        health: Health,
        log: logging.LoggerAdapter[logging.Logger],
        by: timedelta = HELD_DUE_AFTER,
        now: Callable[[], datetime] | None = None,
        waiting: Callable[[], bool] = lambda: True,
        every: int = 1,
    ) -> None:
        super().__init__(interval, log)
        self._store = store
        self._node_id = node_id
        self._health = health
        self._by = by
        self._now = now  # the node's database time: the read is then one statement
        self._waiting = waiting
        self._every = every
        self._steps = 0
        self._last = 0

    def step(self) -> None:
        periodic = self._steps % self._every == 0
        self._steps += 1
        if not (periodic or self._last or self._waiting()):
            return  # nothing waits here: no run it knows of is held past due
        now = self._now() if self._now is not None else None
        held = self._store.progress.held_due(self._by, node_id=self._node_id, now=now)
        self._last = held.get(self._node_id, 0)
        self._health.held_due(self._last)
