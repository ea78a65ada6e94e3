"""The outcome writer: successes recorded in batches, off the worker threads."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from easyjob.core.records import Run
from easyjob.node.worker import Runner
from easyjob.store import Store

__all__ = ["OutcomeWriter"]

log = logging.getLogger("easyjob.outcomes")

_BATCH = 500


class OutcomeWriter:
    """Collects runs whose function returned and writes them SUCCESS together
    (:meth:`RunStore.finish_many`, version-checked), then calls *done* for each. A batch that
    cannot be written (the database is down past the retries) is tried again, never dropped;
    until it is written the runs stay RUNNING, which a crash would leave to recovery."""

    def __init__(self, store: Store, runner: Runner, done: Callable[[Run], None]) -> None:
        self._store = store
        self._runner = runner
        self._done = done
        self._queue: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="easyjob-outcomes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def put(self, run: Run) -> None:
        self._queue.put(run)

    def close(self, timeout: float) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            batch = [] if first is None else [first]
            stop = first is None
            while len(batch) < _BATCH and not self._queue.empty():
                item = self._queue.get()
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            if batch:
                self._write(batch)
            if stop:
                return

    def _write(self, batch: list[Run]) -> None:
        while True:
            try:
                won = self._store.runs.finish_many(batch)
                break
            except Exception:
                log.exception("could not record %d successful run(s); retrying", len(batch))
                threading.Event().wait(1.0)
        self._runner.count(len(won))
        for run in batch:
            if run.id not in won:
                self._runner.fenced(run)
            self._done(run)
