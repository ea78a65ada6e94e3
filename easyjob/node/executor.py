"""Calling jobs: a bounded pool of worker threads, with no database transaction open.

A node runs only what its own code declared: the run's task name must be registered here
with the same function, and the function gets the arguments its code declared, never
what a row in the database says (write access to the tables is not code execution).
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from easyjob.clock import Clock
from easyjob.context import TaskContext
from easyjob.core.records import Run
from easyjob.logs import ContextLogger, run_context
from easyjob.registry import Registered

__all__ = ["Done", "JobRunner"]

_MAX_ERROR = 4000

#: Told when a job's function returned: the run, its error (None: success), its seconds.
Done = Callable[[Run, str | None, float], None]


class JobRunner:
    """Runs jobs on *workers* threads (or on the given *pool*, e.g. an inline one in tests)
    and tells *done* how each ended."""

    def __init__(
        self,
        node_id: str,
        tasks: dict[str, Registered],
        clock: Clock,
        workers: int,
        done: Done,
        pool: Executor | None = None,
    ) -> None:
        self._node_id = node_id
        self._tasks = tasks
        self._clock = clock
        self._done = done
        self._pool = pool or ThreadPoolExecutor(workers, thread_name_prefix="easyjob-worker")

    def entry(self, run: Run) -> Registered | None:
        """The code this node registered for *run*'s task, if it is the run's function."""
        entry = self._tasks.get(run.task_name)
        return entry if entry is not None and entry.spec.func == run.func else None

    def submit(self, run: Run, cancelled: threading.Event) -> None:
        self._pool.submit(self._call, run, cancelled)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _call(self, run: Run, cancelled: threading.Event) -> None:
        began = self._clock.monotonic()
        error = None
        try:
            self.call(run, cancelled)
        except BaseException as err:
            error = "".join(traceback.format_exception(err)).strip()[-_MAX_ERROR:]
        self._done(run, error, self._clock.monotonic() - began)

    def call(self, run: Run, cancelled: threading.Event) -> None:
        """Call *run*'s function with its context and declared arguments."""
        entry = self.entry(run)
        if entry is None:
            raise LookupError(f"task {run.task_name!r} ({run.func}) is not registered here")
        ctx = TaskContext(
            task_name=run.task_name,
            fire_time=run.fire_time,
            node_id=self._node_id,
            attempt=run.attempt,
            run_id=run.id,
            shard=run.shard,
            shards=run.shards,
            kwargs=dict(entry.spec.kwargs),
            cancelled=cancelled,
            logger=ContextLogger(
                logging.getLogger("easyjob.task"),
                {
                    "node_id": self._node_id,
                    **run_context(run.task_name, run.fire_time, run.id, run.attempt),
                },
            ),
        )
        if entry.takes_context:
            entry.fn(ctx, **entry.spec.kwargs)
        else:
            entry.fn(**entry.spec.kwargs)
