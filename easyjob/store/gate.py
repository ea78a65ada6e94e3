"""SQLite writers take turns through a lock file instead of SQLite's sleeping busy handler.

SQLite lets one transaction write at a time. A writer that finds the database locked sleeps
in SQLite's busy handler, 1, 2, 5 ... then up to 100 ms between tries, so under steady
contention a waiter keeps sleeping through the moments the lock is free while newcomers take
it: throughput falls and one process can starve (measured here: 4 processes in a tight loop,
one got 1 write in 10 s). Every easyjob write transaction on a SQLite file therefore first
takes this gate: a lock on a file beside the database (``<db>-easyjob-gate``), polled every
millisecond at most, then ``BEGIN IMMEDIATE``; a process that just let go waits a little
before it takes the gate again, so nobody is shut out by a process writing back to back.
SQLite's own lock stays what makes writes correct; the gate only makes waiting short and
fair. The kernel drops the lock of a process that dies.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from easyjob.errors import DatabaseUnavailableError

__all__ = ["WriteGate"]

_POLL_S = (0.0002, 0.0005, 0.001)
#: A process that wants the gate again right after it let go first waits this long, so that
#: a waiting process (polling every millisecond at most) gets its turn: neither this lock nor
#: SQLite's hands over in order, and a process writing back to back would shut others out.
_YIELD_S = 0.0012


class WriteGate:
    """One process's way through the gate of one SQLite database file."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._threads = threading.Lock()  # one writer per process at a time
        self._fd: int | None = None
        self._released_at = float("-inf")

    @classmethod
    def for_url(cls, url: sa.URL, timeout_s: float) -> WriteGate | None:
        """The gate of a SQLite file database; None for other databases and ``:memory:``."""
        if url.get_backend_name() != "sqlite":
            return None
        database = url.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            return None
        return cls(f"{os.path.abspath(database)}-easyjob-gate", timeout_s)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the gate for one write transaction."""
        if not self._threads.acquire(timeout=self._timeout_s):
            raise DatabaseUnavailableError(f"no turn to write within {self._timeout_s:g}s")
        try:
            since = time.monotonic() - self._released_at
            if since < _YIELD_S:
                time.sleep(_YIELD_S - since)
            fd = self._file()
            self._lock(fd)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._released_at = time.monotonic()
        finally:
            self._threads.release()

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def _lock(self, fd: int) -> None:
        deadline = time.monotonic() + self._timeout_s
        tries = 0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DatabaseUnavailableError(
                        f"another process held {self.path} for over {self._timeout_s:g}s"
                    ) from None
                time.sleep(_POLL_S[min(tries, len(_POLL_S) - 1)])
                tries += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
