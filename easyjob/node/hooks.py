"""The event thread: calls the node's and the tasks' hooks with each :class:`RunEvent`,
off the dispatcher thread, so a hook never delays a run-state write (see
:mod:`easyjob.events`)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime

from easyjob.events import DRAIN_S, QUEUE_LIMIT, EventKind, Hook, RunEvent
from easyjob.threads import NamedThread

__all__ = ["Hooks"]

log = logging.getLogger("easyjob.events")


class Hooks:
    """A bounded queue of events and the one thread that delivers them. :meth:`emit` never
    blocks; :meth:`drain` delivers on the calling thread (tests step it under a fake clock)."""

    def __init__(
        self,
        per_task: Mapping[str, Mapping[EventKind, Hook]],
        listeners: Sequence[Hook] = (),
        *,
        limit: int = QUEUE_LIMIT,
    ) -> None:
        self._per_task = {name: dict(hooks) for name, hooks in per_task.items() if hooks}
        self._listeners = list(listeners)
        self._limit = limit
        self._queue: deque[RunEvent] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self.dropped = 0
        self.failed = 0  # hooks that raised
        self._thread = NamedThread("events", self._loop)

    def wants(self, task_name: str, kind: EventKind) -> bool:
        """Whether any hook would be called for *kind* events of *task_name* (build the event
        only then: most runs have no hook)."""
        if self._listeners:
            return True
        hooks = self._per_task.get(task_name)
        return hooks is not None and kind in hooks

    def missed(
        self, task_name: str, node_id: str, fire_time: datetime, error: str | None, count: int
    ) -> None:
        """A ``missed`` event for *count* runs of *task_name* (the first fired at
        *fire_time*) that *node_id* recorded MISSED at once, if any hook wants it."""
        if self.wants(task_name, EventKind.MISSED):
            self.emit(
                RunEvent(
                    kind=EventKind.MISSED,
                    task_name=task_name,
                    node_id=node_id,
                    fire_time=fire_time,
                    error=error,
                    count=count,
                )
            )

    def emit(self, event: RunEvent) -> None:
        """Queue *event* for its hooks; never blocks (a full queue drops it, with a warning)."""
        if not self.wants(event.task_name, event.kind):
            return
        with self._cond:
            if len(self._queue) >= self._limit:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._queue.append(event)
                self._cond.notify()
                return
        if dropped == 1 or dropped % 1000 == 0:
            log.warning(
                "event hooks are %d events behind: %d event(s) dropped so far (a hook is slow?)",
                self._limit,
                dropped,
            )

    def start(self) -> None:
        if self._listeners or self._per_task:
            self._thread.start()

    def alive(self) -> bool:
        """Whether the event thread runs."""
        return self._thread.is_alive()

    def stop(self, timeout: float = DRAIN_S) -> None:
        """Deliver what is queued for up to *timeout* seconds, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)  # (a hook that stops the node must not wait for itself)
        with self._cond:
            left = len(self._queue) + self._busy
        if left:
            log.warning("%d event(s) not delivered: the node stopped", left)

    def drain(self) -> int:
        """Deliver every queued event on this thread; returns how many."""
        done = 0
        while True:
            with self._cond:
                if not self._queue:
                    return done
                event = self._queue.popleft()
            self._deliver(event)
            done += 1

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                event = self._queue.popleft()
                self._busy = True
            try:
                self._deliver(event)
            finally:
                with self._cond:
                    self._busy = False

    def _deliver(self, event: RunEvent) -> None:
        hook = self._per_task.get(event.task_name, {}).get(event.kind)
        for call in ([hook] if hook is not None else []) + self._listeners:
            try:
                call(event)
            except Exception:
                self.failed += 1
                log.exception(
                    "event hook %s failed on the %s event of run %s of %s",
                    getattr(call, "__qualname__", repr(call)),
                    event.kind,
                    event.run_id,
                    event.task_name,
                )
