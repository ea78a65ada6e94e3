"""Running one claimed run: policies at start, the call itself, and its fenced outcome.

No database transaction is open while the task function runs: the start and the outcome
are separate short transactions, each version-checked.
"""

from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from easyjob.context import TaskContext
from easyjob.core.records import Run
from easyjob.core.states import Misfire, Overlap, RunStatus
from easyjob.logs import ContextLogger, run_context
from easyjob.node.liveness import Liveness
from easyjob.registry import Registered
from easyjob.store import Store
from easyjob.store.runs import BLOCKED

__all__ = ["Requeue", "Runner"]


@dataclass(frozen=True)
class Requeue:
    """The run could not start yet (serial overlap): try again after *delay* seconds."""

    delay: float


class Runner:
    """Executes runs for one node. Thread-safe: one instance serves every worker thread."""

    def __init__(
        self,
        store: Store,
        node_id: str,
        functions: dict[str, Registered],
        liveness: Liveness,
        retry_poll: float,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._functions = functions
        self._liveness = liveness
        self._retry_poll = retry_poll
        self._log = ContextLogger(logging.getLogger("easyjob.worker"), {"node_id": node_id})
        self.completed = 0
        self._lock = threading.Lock()

    def execute(self, run: Run, cancelled: threading.Event) -> Requeue | None:
        """Start *run*, call its function, record the outcome. Returns a Requeue when a
        serial task's previous run is still going."""
        entry = self._functions.get(run.func)
        if entry is None:  # claimed by mistake: this node's code does not have it
            self._say(
                logging.ERROR,
                run,
                "run %s: function %s is not registered here; releasing",
                run.id,
                run.func,
            )
            self._store.runs.release(run)
            return None
        late = self._liveness.db_now() - run.due_time
        grace = timedelta(milliseconds=run.misfire_grace_ms)
        if late > grace and run.misfire == Misfire.SKIP:
            self._close(run, RunStatus.MISSED, f"missed: started {late.total_seconds():.1f}s late")
            return None
        started = self._store.runs.start(run, exclusive=run.overlap != Overlap.ALLOW)
        if started is BLOCKED:
            if run.overlap == Overlap.SKIP:
                self._close(run, RunStatus.SKIPPED, "skipped: the previous run is still running")
                return None
            return Requeue(self._retry_poll)
        if not isinstance(started, Run):
            self._say(
                logging.WARNING,
                run,
                "run %s of %s was taken over before it started (fenced)",
                run.id,
                run.task_name,
            )
            return None
        self._call(started, entry, cancelled)
        return None

    def _call(self, run: Run, entry: Registered, cancelled: threading.Event) -> None:
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
            self.record_failure(run, _describe(err))
            if not isinstance(err, Exception):
                raise
        else:
            if self._store.runs.finish(run):
                self._count()
            else:
                self._say(
                    logging.WARNING,
                    run,
                    "run %s of %s finished, but its outcome was fenced: it was taken "
                    "over or timed out meanwhile",
                    run.id,
                    run.task_name,
                )

    def record_failure(self, run: Run, error: str) -> bool:
        """Record a failure (or a timeout) of a RUNNING run, with a retry if any remain."""
        retry_in = None
        if run.attempt <= run.retries:
            base = timedelta(milliseconds=run.retry_delay_ms)
            retry_in = base * (2 ** (run.attempt - 1))
        if self._store.runs.fail(run, error, retry_in=retry_in):
            self._count()
            self._say(
                logging.WARNING,
                run,
                "run %s of %s failed (attempt %d)%s: %s",
                run.id,
                run.task_name,
                run.attempt,
                f", retry in {retry_in}" if retry_in else "",
                error.splitlines()[0] if error else "",
            )
            return True
        self._say(
            logging.WARNING,
            run,
            "run %s of %s failed, but its outcome was fenced",
            run.id,
            run.task_name,
        )
        return False

    def _close(self, run: Run, status: RunStatus, reason: str) -> None:
        if not self._store.runs.close_unstarted(run, status, reason):
            self._say(
                logging.WARNING, run, "run %s could not be closed as %s (fenced)", run.id, status
            )

    def _say(self, level: int, run: Run, msg: str, *args: object, **kwargs: Any) -> None:
        extra = run_context(run.task_name, run.fire_time, run.id, run.attempt)
        self._log.log(level, msg, *args, extra=extra, **kwargs)

    def _count(self) -> None:
        with self._lock:
            self.completed += 1


def _describe(err: BaseException) -> str:
    return "".join(traceback.format_exception(err)).strip()[-4000:]
