"""This node's view of its own heartbeat: freshness, stability and the clock offset."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from easyjob.clock import Clock

__all__ = ["Liveness"]


class Liveness:
    """Shared by the node's threads; written only by the heartbeat thread.

    - *fresh*: the last heartbeat the database accepted is younger than the dead threshold
      (monotonic time). A node that is not fresh may be judged dead by its peers, so it
      claims nothing new.
    - *stable*: fresh, and no heartbeat has been missed for a whole dead threshold. Only a
      stable node recovers others' work, so after a database-wide stall (when nobody could
      heartbeat) every node first gets time to heartbeat again before anyone is judged dead.
    - *db_now*: this node's estimate of database time, from its clock and the offset
      measured at each heartbeat.
    """

    def __init__(self, clock: Clock, heartbeat_s: float, dead_threshold: timedelta) -> None:
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._dead_s = dead_threshold.total_seconds()
        self._lock = threading.Lock()
        self._offset = timedelta(0)
        self._last_ok: float | None = None
        self._stable_since: float | None = None

    def beat(self, db_time: datetime, sent: datetime, received: datetime) -> None:
        """Record a heartbeat the database accepted at *db_time*, sent and answered at the
        node's wall times *sent* and *received*."""
        offset = sent + (received - sent) / 2 - db_time
        now = self._clock.monotonic()
        with self._lock:
            missed = self._last_ok is None or now - self._last_ok > 1.5 * self._heartbeat_s
            if missed:
                self._stable_since = now
            self._last_ok = now
            self._offset = offset

    @property
    def offset(self) -> timedelta:
        """Node clock minus database clock."""
        with self._lock:
            return self._offset

    def db_now(self) -> datetime:
        return self._clock.now() - self.offset

    def heartbeat_age(self) -> float | None:
        """Seconds (monotonic) since the last heartbeat the database accepted; None before
        the first."""
        with self._lock:
            last = self._last_ok
        return None if last is None else self._clock.monotonic() - last

    def fresh(self) -> bool:
        with self._lock:
            last = self._last_ok
        return last is not None and self._clock.monotonic() - last < self._dead_s

    def stable(self) -> bool:
        with self._lock:
            since = self._stable_since
        return (
            self.fresh() and since is not None and self._clock.monotonic() - since >= self._dead_s
        )
