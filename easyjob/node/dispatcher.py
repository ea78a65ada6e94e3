"""Claimed runs wait here until their exact start time, then start in batches.

The dispatcher owns this node's capacity: it holds at most ``workers`` runs (claimed or
running), so the loader never claims what no worker could take. A run it cannot start is
handed back with a version-checked release, never dropped.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from easyjob.clock import Clock
from easyjob.core.records import Run
from easyjob.node.liveness import Liveness
from easyjob.node.outcomes import OutcomeWriter
from easyjob.node.worker import Runner
from easyjob.observe.metrics import NO_METRICS, Metrics
from easyjob.store import Store

__all__ = ["Dispatcher"]

log = logging.getLogger("easyjob.dispatcher")

_START_BATCH = 500


class Dispatcher:
    """A timer heap on one thread: every run whose time has come starts in one batch (one
    version-checked UPDATE), then each runs on a bounded pool of worker threads; successes
    go to the outcome writer, which records them in batches."""

    def __init__(
        self,
        store: Store,
        runner: Runner,
        clock: Clock,
        liveness: Liveness,
        workers: int,
        *,
        retry_poll: float,
        on_free: Callable[[], None] | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._liveness = liveness
        self._workers = workers
        self._retry_poll = retry_poll
        self._on_free = on_free
        self._metrics = metrics
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="easyjob-worker")
        self._writer = OutcomeWriter(store, runner, self._done)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Run]] = []
        self._seq = itertools.count()
        self._held: dict[int, Run] = {}
        self._running: dict[int, threading.Event] = {}
        self._closed = False
        self.claimed = 0
        self._thread = threading.Thread(target=self._loop, name="easyjob-dispatch", daemon=True)

    def start(self) -> None:
        self._writer.start()
        self._thread.start()

    def free(self) -> int:
        with self._cond:
            return 0 if self._closed else self._workers - len(self._held)

    def load(self) -> tuple[int, int, int]:
        """Runs held (claimed or running), running, and stuck: still running after their
        timeout or the shutdown grace set their cancellation flag."""
        with self._cond:
            stuck = sum(cancel.is_set() for cancel in self._running.values())
            return len(self._held), len(self._running), stuck

    def alive(self) -> bool:
        """Whether the dispatcher's and the outcome writer's threads run."""
        return self._thread.is_alive() and self._writer.alive()

    def held_ids(self) -> set[int]:
        with self._cond:
            return set(self._held)

    def submit(self, runs: list[Run]) -> None:
        """Hold *runs* (just claimed) until their due time."""
        with self._cond:
            closed = self._closed
            if not closed:
                for run in runs:
                    self.claimed += 1
                    self._held[run.id] = run
                    self._push(run, self._start_at(run))
                self._cond.notify()
        if closed:
            self._release(runs)

    def _start_at(self, run: Run) -> float:
        wait = (run.due_time - self._liveness.db_now()).total_seconds()
        return self._clock.monotonic() + max(0.0, wait)

    def _push(self, run: Run, at: float) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), run))

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    now = self._clock.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._closed:
                    return
                due: list[Run] = []
                while self._heap and self._heap[0][0] <= now and len(due) < _START_BATCH:
                    due.append(heapq.heappop(self._heap)[2])
            self._start(due)

    def _start(self, due: list[Run]) -> None:
        try:
            started = self._runner.start(due)
        except Exception:
            log.exception("could not start %d run(s); trying again shortly", len(due))
            self._later(due)
            return
        self._later(started.waiting)
        for run in started.done:
            self._done(run)
        now = self._liveness.db_now()
        for run in started.running:
            self._metrics.run_started(run.task_name, (now - run.due_time).total_seconds())
            cancel = threading.Event()
            with self._cond:
                self._running[run.id] = cancel
            self._pool.submit(self._execute, run, cancel)

    def _later(self, runs: list[Run]) -> None:
        with self._cond:
            if self._closed:
                for run in runs:
                    self._held.pop(run.id, None)
            else:
                for run in runs:
                    self._push(run, self._clock.monotonic() + self._retry_poll)
                self._cond.notify()
                runs = []
        self._release(runs)  # a run still waiting when the node began to stop

    def _execute(self, run: Run, cancel: threading.Event) -> None:
        timer = None
        if run.timeout_ms:
            timer = threading.Timer(run.timeout_ms / 1000, self._time_out, (run, cancel))
            timer.daemon = True
            timer.start()
        began = self._clock.monotonic()
        error = self._runner.call(run, cancel)
        outcome = "success" if error is None else "failure"
        self._metrics.run_finished(run.task_name, outcome, self._clock.monotonic() - began)
        if timer is not None:
            timer.cancel()
        with self._cond:
            self._running.pop(run.id, None)
            self._cond.notify_all()
        if error is None:
            self._writer.put(run)
            return
        while True:  # like a success, a failure is written before the run is let go
            try:
                self._runner.record_failure(run, error)
                break
            except Exception:
                log.exception(
                    "run %s of %s: could not record its failure; retrying", run.id, run.task_name
                )
                threading.Event().wait(1.0)
        self._done(run)

    def _done(self, run: Run) -> None:
        with self._cond:
            self._held.pop(run.id, None)
            self._cond.notify_all()
        if self._on_free is not None:
            self._on_free()

    def _time_out(self, run: Run, cancel: threading.Event) -> None:
        """The run overran its timeout: record it FAILED (fenced like any outcome) and set its
        cancellation flag. The thread itself cannot be killed and keeps its worker slot until
        the function returns; its late outcome is then fenced."""
        seconds = (run.timeout_ms or 0) / 1000
        if self._runner.record_failure(run, f"timed out after {seconds:g}s"):
            cancel.set()

    def close(self, grace: float) -> int:
        """Stop starting runs: release the ones still waiting, let running ones finish for up
        to *grace* seconds (cancellation flags are set after it) and record their outcomes.
        Returns how many were still running when the grace ran out."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()  # a batch being started is handed to the pool first
        with self._cond:
            waiting = [run for _, _, run in self._heap]
            self._heap.clear()
            for run in waiting:
                self._held.pop(run.id, None)
        self._release(waiting)
        deadline = self._clock.monotonic() + grace
        with self._cond:
            while self._running and self._clock.monotonic() < deadline:
                self._cond.wait(min(0.05, max(0.0, deadline - self._clock.monotonic())))
            left = list(self._running.values())
        for cancel in left:
            cancel.set()
        self._writer.close(max(1.0, deadline - self._clock.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)
        return len(left)

    def _release(self, runs: list[Run]) -> None:
        for run in runs:
            try:
                if self._store.runs.release(run):
                    log.info("released run %s of %s (not started)", run.id, run.task_name)
            except Exception:
                log.exception("could not release run %s", run.id)
