"""The cancel watch: stops the jobs of this node's runs cancelled on request.

``easyjob cancel RUN_ID`` (or :func:`easyjob.control.cancel`), from any host, ends the run
CANCELLED in the database. Once per poll, while jobs run here, this thread asks which of
them were cancelled (one read by primary key of at most ``workers`` ids), and sets their
cancellation flags (while none runs it sleeps; the dispatcher wakes it when a job starts,
and it looks a poll later, as it would have at its next poll): a job on a thread sees
``ctx.cancelled`` (an ``async def`` job's task is cancelled), a job in a child process is
killed. A waiting run needs nothing here: its start is fenced, so it never starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from easyjob.core.records import Run
from easyjob.node.loop import Loop
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.store.contract import Store

__all__ = ["CancelWatch"]


#: How long the watch sleeps while no job runs, unless a job starts (:meth:`busy`).
IDLE_S = 3600.0


class CancelWatch(Loop):
    """Every *interval* seconds while jobs run: stop those of runs that were cancelled."""

    name = "cancels"

    def __init__(
        self,
        store: Store,
        interval: float,
        running: Callable[[], set[int]],
        stop: Callable[[int], Run | None],
        log: logging.LoggerAdapter[logging.Logger],
        metrics: Metrics = NO_METRICS,
        isolated: Callable[[Run], bool] = lambda run: False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(interval, log)
        self._store = store
        self._running = running
        self._stop_job = stop
        self._metrics = metrics
        self._isolated = isolated
        self._monotonic = monotonic
        self._busy_at: float | None = None  # when a job started while none ran

    def busy(self) -> None:
        """A job started while none ran: look a poll from now (a job that ends sooner
        costs no read)."""
        self._busy_at = self._monotonic()
        self.wake()

    def step(self) -> float | None:
        running = self._running()
        if not running:
            return IDLE_S
        if self._busy_at is not None:
            left = self._busy_at + self.interval - self._monotonic()
            self._busy_at = None
            if left > 0:
                return left
        for run_id in sorted(self._store.cancels.cancelled(running)):
            run = self._stop_job(run_id)
            if run is None:  # returned meanwhile, or stopped already
                continue
            self._metrics.cancelled(run.task_name)
            how = "its child process killed" if self._isolated(run) else "its job told"
            self.log.warning("run %s of %s cancelled on request: %s", run.id, run.task_name, how)
        return None
