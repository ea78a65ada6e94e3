"""A thread that runs one step at an interval until stopped, and never dies of an error."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from easyjob.threads import NamedThread

__all__ = ["Loop"]


class Loop:
    """Calls :meth:`step` every :attr:`interval` seconds on its own daemon thread.

    An exception in a step is logged and the loop goes on: a node thread never dies of a
    database fault. :meth:`wake` runs the next step at once. *progress*, when set, is told
    how each step ended (the loop's name, and whether it ended without an error): see
    :class:`easyjob.node.health.Health`.
    """

    name = "loop"

    def __init__(self, interval: float, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.interval = interval
        self.log = log
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = NamedThread(self.name, self._run)
        self.progress: Callable[[str, bool], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """Whether the loop's thread runs (a started loop's thread ends only when stopped)."""
        return self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def step(self) -> float | None:
        """One round of work; may return a shorter delay before the next round."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            delay: float | None = None
            ok = False
            try:
                delay = self.step()
                ok = True
            except Exception:
                self.log.exception("%s step failed; retrying after %.2fs", self.name, self.interval)
            if self.progress is not None:
                self.progress(self.name, ok)
            self._wake.wait(self.interval if delay is None else delay)
            self._wake.clear()
