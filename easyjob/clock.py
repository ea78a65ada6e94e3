"""The only module that reads the wall clock.

Everything else receives a :class:`Clock` and asks it. Tests pass a :class:`FakeClock`
and move it; nothing sleeps and hopes.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock", "utc"]


def utc(value: datetime) -> datetime:
    """Return *value* as an aware UTC datetime; a naive value is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class Clock(Protocol):
    """A source of wall time (aware UTC) and monotonic time (seconds)."""

    def now(self) -> datetime:
        """The current wall time, aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards, for deadlines and intervals."""
        ...


def sleep(clock: Clock, seconds: float) -> None:
    """Let *seconds* pass on *clock*: its own ``sleep`` if it has one (a fake clock moves
    on), else real time (:func:`time.sleep`)."""
    own = getattr(clock, "sleep", None)
    if callable(own):
        own(seconds)
    else:
        time.sleep(seconds)


class SystemClock:
    """The real clocks of this process."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; wall and monotonic time move together."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start or datetime(2030, 1, 1, tzinfo=UTC))
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        """A wait on this clock: it moves forward by *seconds* at once."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by *seconds*."""
        if seconds < 0:
            raise ValueError(f"a clock cannot advance by a negative amount: {seconds!r}")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds

    def set(self, when: datetime) -> None:
        """Jump the wall clock to *when* (it may go backwards, as real wall clocks do)."""
        with self._lock:
            self._now = utc(when)
