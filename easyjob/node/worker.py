"""Running claimed runs: policies at start, the call itself, and failures.

Runs due at the same moment are started together with one version-checked UPDATE
(:meth:`Runner.start`); each function then runs on a worker thread with no database
transaction open (:meth:`Runner.call`); successes are written in batches by the
:class:`~easyjob.node.outcomes.OutcomeWriter`, failures one by one here.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from easyjob.context import TaskContext
from easyjob.core.records import Run
from easyjob.core.states import Misfire, Overlap, RunStatus
from easyjob.logs import ContextLogger, run_context
from easyjob.node.liveness import Liveness
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.registry import Registered
from easyjob.store import Store
from easyjob.store.runs import BLOCKED

__all__ = ["Runner", "Started"]


class Started:
    """What :meth:`Runner.start` made of a batch of due runs."""

    def __init__(self) -> None:
        self.running: list[Run] = []  # RUNNING now: call their functions
        self.waiting: list[Run] = []  # still CLAIMED (serial overlap): try again shortly
        self.done: list[Run] = []  # closed, released or fenced: no longer held


class Runner:
    """Executes runs for one node. Thread-safe: one instance serves every thread."""

    def __init__(
        self,
        store: Store,
        node_id: str,
        functions: dict[str, Registered],
        liveness: Liveness,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._node_id = node_id
        self._functions = functions
        self._liveness = liveness
        self._log = ContextLogger(logging.getLogger("easyjob.worker"), {"node_id": node_id})
        self.completed = 0
        self._lock = threading.Lock()

    def start(self, due: Sequence[Run]) -> Started:
        """Start the runs whose time has come, in one batch where policies allow."""
        out = Started()
        batch: list[Run] = []
        exclusive: set[int] = set()
        for run in due:
            if run.func not in self._functions:  # claimed by mistake: not this node's code
                self._say(
                    logging.ERROR, run, "function %s is not registered here; releasing", run.func
                )
                self._store.runs.release(run)
                out.done.append(run)
            elif self._too_late(run):
                self._close(run, RunStatus.MISSED, f"missed: started {self._late(run):.1f}s late")
                self._metrics.misfired(run.task_name)
                out.done.append(run)
            elif run.overlap != Overlap.ALLOW:
                if any(r.task_id == run.task_id for r in batch if r.id in exclusive):
                    out.waiting.append(run)  # one exclusive start per task and batch
                else:
                    exclusive.add(run.id)
                    batch.append(run)
            else:
                batch.append(run)
        started = self._store.runs.start_many(batch, exclusive=exclusive) if batch else {}
        for run in batch:
            result = started.get(run.id)
            if isinstance(result, Run):
                out.running.append(result)
            elif result is BLOCKED and run.overlap == Overlap.SKIP:
                self._close(run, RunStatus.SKIPPED, "skipped: the previous run is still running")
                out.done.append(run)
            elif result is BLOCKED:
                out.waiting.append(run)
            else:
                self._say(logging.WARNING, run, "taken over before it started (fenced)")
                out.done.append(run)
        return out

    def _late(self, run: Run) -> float:
        return (self._liveness.db_now() - run.due_time).total_seconds()

    def _too_late(self, run: Run) -> bool:
        grace = timedelta(milliseconds=run.misfire_grace_ms).total_seconds()
        return run.misfire == Misfire.SKIP and self._late(run) > grace

    def call(self, run: Run, cancelled: threading.Event) -> str | None:
        """Call *run*'s function; None when it returned, else the error it raised."""
        entry = self._functions[run.func]
        ctx = TaskContext(
            task_name=run.task_name,
            fire_time=run.fire_time,
            node_id=self._node_id,
            attempt=run.attempt,
            run_id=run.id,
            kwargs=dict(run.kwargs),
            cancelled=cancelled,
            logger=ContextLogger(
                logging.getLogger("easyjob.task"),
                {
                    "node_id": self._node_id,
                    **run_context(run.task_name, run.fire_time, run.id, run.attempt),
                },
            ),
        )
        try:
            if entry.takes_context:
                entry.fn(ctx, **run.kwargs)
            else:
                entry.fn(**run.kwargs)
        except BaseException as err:
            return _describe(err)
        return None

    def record_failure(self, run: Run, error: str) -> bool:
        """Record a failure (or a timeout) of a RUNNING run, with a retry if any remain."""
        retry_in = None
        if run.attempt <= run.retries:
            retry_in = timedelta(milliseconds=run.retry_delay_ms) * (2 ** (run.attempt - 1))
        if self._store.runs.fail(run, error, retry_in=retry_in):
            self.count(1)
            self._say(
                logging.WARNING,
                run,
                "failed (attempt %d)%s: %s",
                run.attempt,
                f", retry in {retry_in}" if retry_in else "",
                error.splitlines()[-1],
            )
            return True
        self._say(
            logging.WARNING,
            run,
            "failed, but its outcome was fenced: it was taken over or timed out meanwhile",
        )
        return False

    def _close(self, run: Run, status: RunStatus, reason: str) -> None:
        if not self._store.runs.close_unstarted(run, status, reason):
            self._say(logging.WARNING, run, "could not be closed as %s (fenced)", status)

    def fenced(self, run: Run) -> None:
        self._say(
            logging.WARNING,
            run,
            "finished, but its outcome was fenced: it was taken over or timed out meanwhile",
        )

    def _say(self, level: int, run: Run, msg: str, *args: object, **kwargs: Any) -> None:
        extra = run_context(run.task_name, run.fire_time, run.id, run.attempt)
        self._log.log(
            level, f"run %s of %s: {msg}", run.id, run.task_name, *args, extra=extra, **kwargs
        )

    def count(self, n: int) -> None:
        with self._lock:
            self.completed += n


def _describe(err: BaseException) -> str:
    return "".join(traceback.format_exception(err)).strip()[-4000:]
