"""This node's view of its own heartbeat: freshness, stability, database time and when the
node started in it."""

from __future__ import annotations

import threading
from collections import deque
from datetime import datetime, timedelta

from easyjob.clock import Clock

__all__ = ["Liveness"]

#: The slowest rate at which database time is taken to pass per second of this node's
#: monotonic clock (see :meth:`Liveness.db_now`): a node clock running up to 2 % fast is
#: followed; a slow heartbeat reply, which makes the rate look lower, delays starts by at
#: most 2 % of the time since the last heartbeat.
_MIN_RATE = 0.98

#: Heartbeats whose database times bound :meth:`Liveness.db_now` (the tightest is used).
_BOUNDS = 8
#: Heartbeats over which the rate of database time is measured: over one heartbeat, the
#: jitter of two replies (a few ms) reads as a slow rate, and the estimate fell behind by
#: as much again before the next one; over a minute the same jitter is negligible.
_RATE_SPAN = 64


class Liveness:
    """Shared by the node's threads; written only by the heartbeat thread.

    - *fresh*: the last heartbeat the database accepted is younger than the dead threshold
      (monotonic time). A node that is not fresh may be judged dead by its peers, so it
      claims nothing new.
    - *stable*: fresh, and no heartbeat has been missed for a whole dead threshold. Only a
      stable node recovers others' work, so after a database-wide stall (when nobody could
      heartbeat) every node first gets time to heartbeat again before anyone is judged dead.
    - *db_now*: a lower bound of the database's clock (see :meth:`db_now`).
    - *offset*: this node's wall clock minus the database's, for operators.
    """

    def __init__(
        self, clock: Clock, heartbeat_s: float, dead_threshold: timedelta, *, local: bool = False
    ) -> None:
        self._clock = clock
        self._local = local  # database time is *clock* itself (SQLite)
        self._heartbeat_s = heartbeat_s
        self._dead_s = dead_threshold.total_seconds()
        self._lock = threading.Lock()
        self._offset = timedelta(0)
        self._last_ok: float | None = None
        self._stable_since: float | None = None
        #: (database time, monotonic time its reply came), the latest last
        self._anchors: deque[tuple[datetime, float]] = deque(maxlen=_RATE_SPAN)
        self._rate = 1.0
        self._started_at: datetime | None = None

    def beat(self, db_time: datetime, sent: datetime, received: datetime) -> None:
        """Record a heartbeat the database accepted at *db_time*, sent and answered at the
        node's wall times *sent* and *received*."""
        offset = sent + (received - sent) / 2 - db_time
        now = self._clock.monotonic()
        with self._lock:
            missed = self._last_ok is None or now - self._last_ok > 1.5 * self._heartbeat_s
            if missed:
                self._stable_since = now
            if missed:  # after a stall, measure afresh
                self._anchors.clear()
            if self._anchors and now - self._anchors[0][1] > 0.5 * self._heartbeat_s:
                first_db, first_at = self._anchors[0]
                rate = (db_time - first_db).total_seconds() / (now - first_at)
                self._rate = min(1.0, max(_MIN_RATE, rate))
            self._last_ok = now
            self._offset = offset
            if self._started_at is None:
                self._started_at = db_time
            self._anchors.append((db_time, now))

    @property
    def offset(self) -> timedelta:
        """Node clock minus database clock (the heartbeat round trip's midpoint)."""
        with self._lock:
            return self._offset

    @property
    def started_at(self) -> datetime | None:
        """Database time when this node started: its first heartbeat's, the one that
        registered it (None before). A run due before it was due while the node was not
        there: the planner's pace counts the misses of runs due since (a fire an outage
        left PENDING says nothing of what the cluster runs now), and the loader takes a
        backlog to miss due before it for an outage's, and claims the present first."""
        with self._lock:
            return self._started_at

    def db_now(self) -> datetime:
        """A lower bound of the database's current time: a time it reported (in a
        heartbeat's reply, so it was read before this node got the reply) plus the
        monotonic seconds since, at the rate database time was seen to pass (at most 1,
        measured over up to the last ``_RATE_SPAN`` heartbeats); of the last ``_BOUNDS``
        heartbeats, the one that gives the latest time (its reply came quickest).

        The wall clock is not used, so a node whose clock is stepped between heartbeats
        keeps its estimate; a run held until ``db_now() >= due_time`` never starts before
        its fire time in database time, whatever the round trip or the node's clock. It
        starts late by at most the quickest recent heartbeat's round trip, and by the
        rate's error. Where database time is this node's own clock (SQLite), it is that
        clock's time."""
        if self._local:
            return self._clock.now()
        with self._lock:
            recent, rate = list(self._anchors)[-_BOUNDS:], self._rate
        if not recent:
            return self._clock.now() - self.offset
        mono = self._clock.monotonic()
        return max(db_time + timedelta(seconds=(mono - at) * rate) for db_time, at in recent)

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
