"""Registering a node's tasks: in the background while the node already runs.

A node publishes its catalog with its row first (see :class:`~easyjob.node.heartbeat.
Heartbeater`), then starts claiming: the runs of tasks already stored under a name and
function its code declares are its to run at once. Meanwhile this thread writes the tasks
that are new or changed, a chunk at a time (see :meth:`TaskStore.register
<easyjob.store.tasks.TaskStore.register>`), so that start-up costs the same whatever the
size of the catalogue; a task not registered yet simply has no fires yet. The node's
planner is woken as each chunk is stored, and plans the new tasks' first fires at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence

from easyjob.core.records import TaskSpec
from easyjob.store.contract import Store
from easyjob.threads import NamedThread

__all__ = ["Registrar"]


class Registrar:
    """Registers *specs* once, on a thread of its own (:meth:`start`) or in the caller's
    (:meth:`register`); *on_chunk* is called with each chunk's ids by name as it is stored
    (the node's planner plans their fires then, not at its next poll). An error (a task's
    name taken by a schedule added at run time; the database refusing the writes past the
    store's retries) is kept in :attr:`error`, logged, and handed to *on_error*: the node
    stops, as it would have refused to start."""

    def __init__(
        self,
        store: Store,
        specs: Sequence[TaskSpec],
        log: logging.LoggerAdapter[logging.Logger],
        on_error: Callable[[BaseException], None] | None = None,
        on_chunk: Callable[[dict[str, int]], None] | None = None,
    ) -> None:
        self._store = store
        self._specs = specs
        self._log = log
        self._on_error = on_error
        self._on_chunk = on_chunk
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.written = 0

    def start(self) -> None:
        """Register on a thread of its own; returns at once."""
        if self._done.is_set():
            return
        self._thread = NamedThread("registrar", self._background)
        self._thread.start()

    def register(self) -> None:
        """Register in the caller's thread; raises what the store raises."""
        began = time.monotonic()
        try:
            self.written = self._store.tasks.register(self._specs, self._on_chunk)
        finally:
            release_memory()
            self._done.set()
        self._log.info(
            "registered %d task(s) in %.2f s: %d written, the others unchanged",
            len(self._specs),
            time.monotonic() - began,
            self.written,
        )

    def wait(self, timeout: float | None = None) -> bool:
        """Whether registration ended (done or failed) within *timeout* seconds."""
        return self._done.wait(timeout)

    def done(self) -> bool:
        """Whether every task is registered."""
        return self._done.is_set() and self.error is None

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _background(self) -> None:
        try:
            self.register()
        except Exception as err:  # reported to the node, which stops
            self.error = err
            self._log.error("registering this node's tasks failed; the node stops: %s", err)
            if self._on_error is not None:
                self._on_error(err)


def release_memory() -> None:
    """Hand the C heap's free memory back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Registering a large catalogue reads it in chunks of thousands of rows: the
    memory they took is free once done, but glibc keeps it, about 260 B per declared task
    (docs/performance.md)."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return
    if trim is not None:
        trim(0)
