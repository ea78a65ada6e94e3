"""The fault log: what a scenario did to the cluster, and when (wall clock of this host).

The checker reads it to decide which duplicates the contract allows and to measure
failover. Kinds the checker knows:

- ``kill9`` (a crash: the node's state is lost), ``crash`` (the node's process died by
  itself, e.g. a job called ``os._exit``) and ``sigterm2`` (a second SIGTERM: the node exits
  at once, abandoning its running jobs) let peers take over what the node held;
- ``sigstop`` and ``partition`` (the node is cut off, then comes back) let peers take over
  only when they last longer than the dead threshold;
- every other kind (``sigterm``, database faults, ...) never allows a duplicate or a takeover.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

__all__ = ["CRASH_KINDS", "PAUSE_KINDS", "Fault", "FaultLog"]

CRASH_KINDS = frozenset({"kill9", "crash", "sigterm2"})
PAUSE_KINDS = frozenset({"sigstop", "partition"})


@dataclass(frozen=True)
class Fault:
    """*kind* done to *target* (a node id, or ``db``) from wall time *start* to *end*."""

    kind: str
    target: str
    start: float
    end: float
    detail: str = ""

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def lets_peers_take_over(self, dead_threshold_s: float) -> bool:
        """True when the contract allows peers to re-run what *target* held."""
        if self.kind in CRASH_KINDS:
            return True
        return self.kind in PAUSE_KINDS and self.seconds > dead_threshold_s

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class FaultLog:
    """Faults in the order they began; safe to append from several threads."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def instant(self, kind: str, target: str, detail: str = "") -> Fault:
        """Record a fault that happened just now and took no time (a kill, a signal)."""
        now = time.time()
        return self.add(Fault(kind, target, now, now, detail))

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return sorted(self._faults, key=lambda f: f.start)

    @property
    def last_end(self) -> float | None:
        faults = self.faults
        return max(f.end for f in faults) if faults else None
