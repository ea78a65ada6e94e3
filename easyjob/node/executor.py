"""Calling jobs: a bounded pool of worker threads, with no database transaction open.

A node runs only what its own code declared: the run's task name must be registered here
with the same function, and the function gets the arguments its code declared, never
what a row in the database says (write access to the tables is not code execution).
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from easyjob.clock import Clock
from easyjob.context import TaskContext
from easyjob.core.records import ORIGIN_RUNTIME, Run
from easyjob.logs import ContextLogger, run_context
from easyjob.node.isolation import Call, ChildFailed, run_in_child
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
        runnable: Mapping[str, Registered] | None = None,
        isolation: str = "thread",
    ) -> None:
        self._node_id = node_id
        self._isolation = isolation
        self._tasks = tasks
        self._runnable = dict(runnable or {})
        self._clock = clock
        self._done = done
        self._pool = pool or ThreadPoolExecutor(workers, thread_name_prefix="easyjob-worker")

    @property
    def kills_on_cancel(self) -> bool:
        """Whether a cancelled run's job is killed (child processes) rather than left to
        return by itself (threads)."""
        return self._isolation == "process"

    def entry(self, run: Run) -> Registered | None:
        """The code this node registered for *run*'s task, if it is the run's function: the
        task its code declared under that name, or, for a task added at run time, the
        function its code allowed with ``@runnable``."""
        if run.origin == ORIGIN_RUNTIME:
            return None if run.task_name in self._tasks else self._runnable.get(run.func)
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
        except ChildFailed as err:  # the child's own traceback, or how it died
            error = str(err)
        except BaseException as err:
            error = "".join(traceback.format_exception(err)).strip()[-_MAX_ERROR:]
        self._done(run, error, self._clock.monotonic() - began)

    def call(self, run: Run, cancelled: threading.Event) -> None:
        """Call *run*'s function with its context and declared arguments."""
        entry = self.entry(run)
        if entry is None:
            raise LookupError(f"task {run.task_name!r} ({run.func}) is not registered here")
        kwargs = arguments(entry, run)
        if self._isolation == "process":
            module = entry.fn.__module__
            run_in_child(
                Call(
                    module=module,
                    file=getattr(sys.modules.get(module), "__file__", None),
                    qualname=entry.fn.__qualname__,
                    takes_context=entry.takes_context,
                    kwargs=kwargs,
                    task_name=run.task_name,
                    fire_time=run.fire_time,
                    node_id=self._node_id,
                    attempt=run.attempt,
                    run_id=run.id,
                ),
                cancelled,
            )
            return
        ctx = TaskContext(
            task_name=run.task_name,
            fire_time=run.fire_time,
            node_id=self._node_id,
            attempt=run.attempt,
            run_id=run.id,
            kwargs=kwargs,
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
            entry.fn(ctx, **kwargs)
        else:
            entry.fn(**kwargs)


def arguments(entry: Registered, run: Run) -> dict[str, Any]:
    """The keyword arguments of *run*: its code's declared kwargs, with the trigger's over
    them. The code decides what a trigger may pass: an argument its ``accepts`` does not
    name (a row written by hand) fails the run, naming it, and the function is not called."""
    given = run.trigger_kwargs or {}
    refused = sorted(set(given) - set(entry.spec.accepts))
    if refused:
        raise TypeError(
            f"task {run.task_name!r} does not accept trigger argument(s) "
            f"{', '.join(map(repr, refused))}; not called"
        )
    return {**entry.spec.kwargs, **given}
