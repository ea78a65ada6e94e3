"""Claimed runs wait here until their exact start time, then go to the worker pool.

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
from typing import Any

from easyjob.clock import Clock
from easyjob.core.records import Run
from easyjob.core.states import RunStatus
from easyjob.logs import ContextLogger, run_context
from easyjob.node.liveness import Liveness
from easyjob.node.worker import Requeue, Runner
from easyjob.store import Store

__all__ = ["Dispatcher"]


class Dispatcher:
    """A timer heap on one thread, feeding a bounded pool of worker threads."""

    def __init__(
        self,
        store: Store,
        runner: Runner,
        clock: Clock,
        liveness: Liveness,
        workers: int,
        on_free: Callable[[], None] | None = None,
        node_id: str = "",
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._liveness = liveness
        self._workers = workers
        self._on_free = on_free
        self._log = ContextLogger(logging.getLogger("easyjob.dispatcher"), {"node_id": node_id})
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="easyjob-worker")
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Run]] = []
        self._seq = itertools.count()
        self._held: dict[int, Run] = {}
        self._running: dict[int, threading.Event] = {}
        self._closed = False
        self.claimed = 0
        self._thread = threading.Thread(target=self._loop, name="easyjob-dispatch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def free(self) -> int:
        with self._cond:
            return 0 if self._closed else self._workers - len(self._held)

    def held_ids(self) -> set[int]:
        with self._cond:
            return set(self._held)

    def running_count(self) -> int:
        with self._cond:
            return len(self._running)

    def submit(self, runs: list[Run]) -> None:
        """Hold *runs* (just claimed) until their due time."""
        with self._cond:
            if self._closed:
                late = runs
                runs = []
            else:
                late = []
            for run in runs:
                self.claimed += 1
                self._held[run.id] = run
                self._push(run, self._start_at(run))
            self._cond.notify()
        self._release(late)

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
                    timeout = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, run = heapq.heappop(self._heap)
                cancel = threading.Event()
                self._running[run.id] = cancel
            self._pool.submit(self._execute, run, cancel)

    def _execute(self, run: Run, cancel: threading.Event) -> None:
        timer = None
        if run.timeout_ms:
            timer = threading.Timer(run.timeout_ms / 1000, self._time_out, (run, cancel))
            timer.daemon = True
            timer.start()
        outcome: Requeue | None = None
        try:
            outcome = self._runner.execute(run, cancel)
        except Exception:
            self._say(
                logging.ERROR,
                run,
                "run %s of %s: could not record its outcome",
                run.id,
                run.task_name,
                exc_info=True,
            )
        finally:
            if timer is not None:
                timer.cancel()
            hand_back = False
            with self._cond:
                self._running.pop(run.id, None)
                if isinstance(outcome, Requeue) and not self._closed:
                    self._push(run, self._clock.monotonic() + outcome.delay)
                else:
                    self._held.pop(run.id, None)
                    hand_back = isinstance(outcome, Requeue)
                self._cond.notify_all()
            if hand_back:  # a serial run still waiting when the node began to stop
                self._release([run])
            if self._on_free is not None:
                self._on_free()

    def _time_out(self, run: Run, cancel: threading.Event) -> None:
        """The run overran its timeout: record it FAILED (fenced like any outcome) and set its
        cancellation flag. The thread itself cannot be killed and keeps its worker slot until
        the function returns; its late outcome is then fenced."""
        running = run.bumped(RunStatus.RUNNING)
        seconds = (run.timeout_ms or 0) / 1000
        if self._runner.record_failure(running, f"timed out after {seconds:g}s"):
            cancel.set()

    def close(self, grace: float) -> int:
        """Stop starting runs: release the ones still waiting, let running ones finish for up
        to *grace* seconds (cancellation flags are set after it). Returns how many were still
        running when the grace ran out."""
        with self._cond:
            self._closed = True
            waiting = [run for _, _, run in self._heap]
            self._heap.clear()
            for run in waiting:
                self._held.pop(run.id, None)
            self._cond.notify_all()
        self._release(waiting)
        deadline = self._clock.monotonic() + grace
        with self._cond:
            while self._running and self._clock.monotonic() < deadline:
                self._cond.wait(min(0.05, max(0.0, deadline - self._clock.monotonic())))
            left = list(self._running.values())
        for cancel in left:
            cancel.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return len(left)

    def _say(self, level: int, run: Run, msg: str, *args: object, **kwargs: Any) -> None:
        extra = run_context(run.task_name, run.fire_time, run.id, run.attempt)
        self._log.log(level, msg, *args, extra=extra, **kwargs)

    def _release(self, runs: list[Run]) -> None:
        for run in runs:
            try:
                if self._store.runs.release(run):
                    self._say(
                        logging.INFO,
                        run,
                        "released run %s of %s (not started)",
                        run.id,
                        run.task_name,
                    )
            except Exception:
                self._say(logging.ERROR, run, "could not release run %s", run.id, exc_info=True)
