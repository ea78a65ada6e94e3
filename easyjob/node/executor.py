"""Calling jobs: a bounded pool of worker threads, with no database transaction open.

An ``async def`` job (or a function that returns an awaitable) runs to completion on an
event loop of its own, made on its worker thread for the call (``asyncio.Runner``): a
coroutine that blocks its loop blocks only its own worker, as a blocking function would,
and it costs about 0.08-0.12 ms per call here, 0.03-0.06 ms more than a bare loop or one
shared loop thread (``tests/perf/async_cost.py``; figures in ``docs/embedding.md``).
Setting the run's cancellation flag (its timeout, or a shutdown past its grace) cancels
the coroutine's task, so it ends at its next ``await``.

A node runs only what its own code declared: the run's task name must be registered here
with the same function (or, for a schedule added at run time, a function its code allowed
with ``@runnable``), and the function gets the arguments its code declared, with a
trigger's accepted arguments over them, never what a row's kwargs column says (write
access to the tables is not code execution).

With the ``process`` executor the call happens in a child process instead (see
:mod:`easyjob.node.isolation`): a timeout kills it and a crash fails only its run.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from easyjob.clock import Clock, sleep
from easyjob.context import TaskContext
from easyjob.core.outcome import Outcome, failed, succeeded, traceback_cut
from easyjob.core.records import ORIGIN_RUNTIME, Run
from easyjob.logs import ContextLogger, run_context
from easyjob.node.isolation import Call, ChildFailed, run_in_child
from easyjob.registry import Registered

__all__ = ["CancelFlag", "Done", "JobRunner"]

#: Told when a job's function returned: the run, how it ended, its seconds.
Done = Callable[[Run, Outcome, float], None]


class CancelFlag(threading.Event):
    """A run's cancellation flag (:attr:`TaskContext.cancelled`) that also calls the
    callbacks registered with :meth:`on_set`, once, when it is set."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def set(self) -> None:
        with self._guard:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call *callback* when the flag is set (at once, here, if it is set already).
        Returns a function that unregisters it."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._guard:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


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
        self._tasks = tasks
        self._runnable = dict(runnable or {})
        self._isolation = isolation
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

    def submit(self, run: Run, cancelled: CancelFlag, *, at: float | None = None) -> None:
        """Call *run*'s function on a worker, at monotonic time *at* if given (the worker
        waits for it: a hand-off ahead of the time keeps the thread switch off the start)."""
        self._pool.submit(self._call, run, cancelled, at)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _call(self, run: Run, cancelled: CancelFlag, at: float | None = None) -> None:
        if at is not None and (wait := at - self._clock.monotonic()) > 0:
            sleep(self._clock, wait)  # a few ms at most (HANDOFF)
        began = self._clock.monotonic()
        try:
            outcome = succeeded(self.call(run, cancelled))
        except ChildFailed as err:  # the child's own traceback, or how it died
            text = str(err)
            outcome = Outcome(error=text.splitlines()[-1][:4000], traceback=traceback_cut(text))
        except BaseException as err:
            outcome = failed(err)
        self._done(run, outcome, self._clock.monotonic() - began)

    def call(self, run: Run, cancelled: CancelFlag) -> Any:
        """Call *run*'s function with its context and arguments (an awaitable it returns is
        run to completion); returns what it returned (None from a child process)."""
        entry = self.entry(run)
        if entry is None:
            raise LookupError(f"task {run.task_name!r} ({run.func}) is not registered here")
        kwargs = arguments(entry, run)
        if self._isolation == "process":
            module = entry.fn.__module__
            call = Call(
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
            )
            run_in_child(call, cancelled)
            return None
        ctx = TaskContext(
            task_name=run.task_name,
            fire_time=run.fire_time,
            node_id=self._node_id,
            attempt=run.attempt,
            run_id=run.id,
            shard=run.shard,
            shards=run.shards,
            kwargs=dict(kwargs),
            cancelled=cancelled,
            logger=ContextLogger(
                logging.getLogger("easyjob.task"),
                {
                    "node_id": self._node_id,
                    **run_context(run.task_name, run.fire_time, run.id, run.attempt),
                },
            ),
        )
        args = (ctx,) if entry.takes_context else ()
        value = entry.fn(*args, **kwargs)
        if inspect.isawaitable(value):
            return _complete(value, cancelled)
        return value


def _complete(awaitable: Awaitable[Any], cancelled: CancelFlag) -> Any:
    """Run *awaitable* to completion on a new event loop on this thread; setting *cancelled*
    cancels it (its task gets ``CancelledError`` at its next ``await``)."""

    async def main() -> Any:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None

        def cancel() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the call is over
                loop.call_soon_threadsafe(task.cancel)

        forget = cancelled.on_set(cancel)
        try:
            return await awaitable
        finally:
            forget()

    with asyncio.Runner() as runner:
        return runner.run(main())


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
