"""Calling jobs: a bounded pool of worker threads, with no database transaction open.

Each run's call is prepared and made by :mod:`easyjob.node.jobcall`, the same for every
executor; the executor only decides where the call runs (:func:`executor_for`): on the
worker thread itself (``thread``), or, from that thread, in a warm child process
(``process``, :mod:`easyjob.node.isolation`): a timeout kills it and a crash fails only its
run. A run whose node died while running it (a ``recovery`` attempt) always runs in a
child, so a job that kills its process takes down at most the node that first ran it.

A node runs only what its own code declared: the run's task name must be registered here
with the same function (or, for a schedule added at run time, a function its code allowed
with ``@runnable``), and the function gets the arguments its code declared, with a
trigger's accepted arguments over them, never what a row's kwargs column says (write
access to the tables is not code execution).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor

from easyjob.clock import Clock, sleep
from easyjob.core.outcome import Outcome, failed
from easyjob.core.records import ORIGIN_RUNTIME, Run
from easyjob.core.states import Trigger
from easyjob.errors import TaskDefinitionError
from easyjob.node.isolation import ProcessPool, preload
from easyjob.node.jobcall import CancelFlag, invoke, job_call
from easyjob.registry import Registered
from easyjob.threads import NamedThread, worker_pool

__all__ = ["CancelFlag", "Done", "JobRunner", "executor_for"]

#: Told when a job's function returned: the run, how it ended, its seconds.
Done = Callable[[Run, Outcome, float], None]


def executor_for(
    run: Run, entry: Registered | None, node_default: str, *, isolable: bool = True
) -> str:
    """Where *run* is called: ``process`` for a run whose node died while running it (a
    ``recovery`` attempt: isolated, so a job that kills its process takes no other node
    down), else its task's ``@scheduled(executor=...)``, else the node's *node_default*.
    A function a child cannot import by its name (*isolable* False: made at run time, as
    tests do) is called on a thread, but where its task declares ``process``."""
    if run.triggered_by == Trigger.RECOVERY and isolable:
        return "process"
    if entry is not None and entry.executor is not None:
        return entry.executor
    return node_default


class JobRunner:
    """Runs jobs on *workers* threads (or on the given *pool*, e.g. an inline one in tests),
    each call where :func:`executor_for` says, and tells *done* how each ended."""

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
        self._pool = pool or worker_pool(workers)
        entries = [*tasks.values(), *self._runnable.values()]
        preload(entry.fn.__module__ for entry in entries)
        self._isolating = isolation == "process" or any(e.executor == "process" for e in entries)
        self.children = ProcessPool(max_idle=workers if self._isolating else 1)
        self._check_isolable(e for e in entries if (e.executor or isolation) == "process")

    def isolated(self, run: Run) -> bool:
        """Whether *run*'s call is in a child process, killed when it is cancelled, rather
        than on a thread, left to return by itself."""
        return self._where(run, self.entry(run)) == "process"

    def warm(self) -> None:
        """Start the child processes' fork server and one idle child, on a thread of their
        own, when this node runs any task in a child by default (a thread node starts them
        on its first recovered run instead)."""
        if self._isolating:
            NamedThread("warm", self.children.warm).start()

    def entry(self, run: Run) -> Registered | None:
        """The code this node registered for *run*, if it is the run's function: the
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
        self.children.close()

    def _call(self, run: Run, cancelled: CancelFlag, at: float | None = None) -> None:
        if at is not None and (wait := at - self._clock.monotonic()) > 0:
            sleep(self._clock, wait)  # a few ms at most (HANDOFF)
        began = self._clock.monotonic()
        try:
            outcome = self.call(run, cancelled)
        except BaseException as err:  # not its code's, or a refused argument: not called
            outcome = failed(err)
        self._done(run, outcome, self._clock.monotonic() - began)

    def call(self, run: Run, cancelled: CancelFlag) -> Outcome:
        """Call *run*'s function where :func:`executor_for` says and return how it ended."""
        entry = self.entry(run)
        if entry is None:
            raise LookupError(f"task {run.task_name!r} ({run.func}) is not registered here")
        call = job_call(entry, run, self._node_id)
        if self._where(run, entry) == "process":
            return self.children.run(call, cancelled)
        return invoke(call, entry.fn, cancelled)

    def _where(self, run: Run, entry: Registered | None) -> str:
        isolable = entry is None or importable(entry)
        return executor_for(run, entry, self._isolation, isolable=isolable)

    def _check_isolable(self, entries: Iterable[Registered]) -> None:
        for entry in entries:
            if not importable(entry):
                raise TaskDefinitionError(
                    f"task {entry.spec.name!r}: the process executor cannot call "
                    f"{entry.spec.func} in a child: it is not importable by that name"
                )


def importable(entry: Registered) -> bool:
    """Whether a child process finds *entry*'s function by its module and name."""
    module = sys.modules.get(entry.fn.__module__)
    found: object = module
    for part in entry.fn.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is entry.fn or getattr(found, "__wrapped__", None) is entry.fn
