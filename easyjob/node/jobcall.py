"""The one job call every executor makes: context, arguments, ``async def``, outcome.

A node prepares a :class:`JobCall` for each run (everything the call needs, picklable: no
database row, no code), and :func:`invoke` makes the call wherever the executor runs it,
on a worker thread of the node (:mod:`easyjob.node.executor`) or in a warm child process
(:mod:`easyjob.node.isolation`): it builds the :class:`~easyjob.context.TaskContext`
(shard, shards, attempt, fire time, cancellation flag), calls the function, runs an
awaitable it returns to completion on an event loop of its own, and captures how it ended
as an :class:`~easyjob.core.outcome.Outcome` (its JSON result, capped; or the error's type,
message and traceback). Executors differ only in where this runs; the timeout is the
dispatcher's (it sets the run's cancellation flag, which a thread's job sees and a child's
executor answers by killing the child).

An ``async def`` job runs on a loop made for the call (``asyncio.Runner``): a coroutine
that blocks its loop blocks only its own worker, as a blocking function would, and it costs
about 0.08-0.12 ms per call (``tests/perf/async_cost.py``; figures in ``docs/embedding.md``).
Setting the cancellation flag cancels the coroutine's task, so it ends at its next
``await``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from easyjob.context import TaskContext
from easyjob.core.outcome import Outcome, failed, succeeded
from easyjob.core.records import Run
from easyjob.logs import ContextLogger, run_context
from easyjob.registry import Registered

__all__ = ["CancelFlag", "JobCall", "arguments", "invoke", "job_call", "resolve"]


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


@dataclass(frozen=True)
class JobCall:
    """One run's call of its function: where the function is (module and qualified name,
    and the file it was loaded from, for a module a child cannot import by name), the
    arguments its code declared (with a trigger's accepted ones over them), and what its
    context tells it."""

    module: str
    qualname: str
    file: str | None
    takes_context: bool
    kwargs: dict[str, Any]
    task_name: str
    fire_time: datetime
    node_id: str
    attempt: int
    run_id: int
    shard: int = 0
    shards: int = 1

    def context(self, cancelled: threading.Event) -> TaskContext:
        """The :class:`TaskContext` the function receives."""
        logger = ContextLogger(
            logging.getLogger("easyjob.task"),
            {
                "node_id": self.node_id,
                **run_context(self.task_name, self.fire_time, self.run_id, self.attempt),
            },
        )
        return TaskContext(
            task_name=self.task_name,
            fire_time=self.fire_time,
            node_id=self.node_id,
            attempt=self.attempt,
            run_id=self.run_id,
            shard=self.shard,
            shards=self.shards,
            kwargs=dict(self.kwargs),
            cancelled=cancelled,
            logger=logger,
        )


def job_call(entry: Registered, run: Run, node_id: str) -> JobCall:
    """The call of *run* with *entry*, the code this node registered for it. Raises
    TypeError (the function is not called) for a trigger argument its code did not accept."""
    module = entry.fn.__module__
    return JobCall(
        module=module,
        qualname=entry.fn.__qualname__,
        file=getattr(sys.modules.get(module), "__file__", None),
        takes_context=entry.takes_context,
        kwargs=arguments(entry, run),
        task_name=run.task_name,
        fire_time=run.fire_time,
        node_id=node_id,
        attempt=run.attempt,
        run_id=run.id,
        shard=run.shard,
        shards=run.shards,
    )


def invoke(call: JobCall, fn: Callable[..., Any], cancelled: CancelFlag) -> Outcome:
    """Call *fn* as *call* says (an awaitable it returns is run to completion; setting
    *cancelled* cancels it) and return how it ended. Never raises but for a
    ``BaseException`` that is not an ``Exception`` (e.g. ``KeyboardInterrupt``), which is
    captured too."""
    try:
        args = (call.context(cancelled),) if call.takes_context else ()
        value = fn(*args, **call.kwargs)
        if inspect.isawaitable(value):
            value = _complete(value, cancelled)
        return succeeded(value)
    except BaseException as err:
        return failed(err)


def resolve(call: JobCall) -> Callable[..., Any]:
    """The function of *call*, imported by module name as the node imported it (in a
    child process, where the fork server preloaded it, this is a dictionary lookup)."""
    try:
        module = importlib.import_module(call.module)
    except ImportError:
        if call.file is None:
            raise
        spec = importlib.util.spec_from_file_location(call.module, call.file)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[call.module] = module
        spec.loader.exec_module(module)
    fn: Any = module
    for part in call.qualname.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError(f"{call.module}:{call.qualname} is not callable in this process")
    return fn  # type: ignore[no-any-return]


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
