"""A thread that runs one step at an interval until stopped, and never dies of an error."""

from __future__ import annotations

import logging
import threading

__all__ = ["Loop"]


class Loop:
    """Calls :meth:`step` every :attr:`interval` seconds on its own daemon thread.

    An exception in a step is logged and the loop goes on: a node thread never dies of a
    database fault. :meth:`wake` runs the next step at once.
    """

    name = "loop"

    def __init__(self, interval: float, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.interval = interval
        self.log = log
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"easyjob-{self.name}", daemon=True)

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
            try:
                delay = self.step()
            except Exception:
                self.log.exception("%s step failed; retrying after %.2fs", self.name, self.interval)
            self._wake.wait(self.interval if delay is None else delay)
            self._wake.clear()
