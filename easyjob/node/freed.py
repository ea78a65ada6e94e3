"""When a thread that left work for want of a free worker runs again: once enough workers
have come free (the loader's runs left PENDING, the planner's tasks left due)."""

from __future__ import annotations

import threading

__all__ = ["WAKE_SHARE", "LeftForWorkers"]

#: A thread that left work for want of workers runs again once this share (1/N) of the
#: node's workers, or as many as it left, have come free.
WAKE_SHARE = 8


class LeftForWorkers:
    """How much a thread's last round left for want of a free worker, and the workers
    freed since. Jobs return many times a second on a busy node: it waits for as
    many workers as it left, or an eighth of them, whichever is fewer, so a saturated node
    starts the work left in batches, not one round per job returned.

    Every worker freed is counted, whether or not anything is left (jobs return on worker
    threads while the round runs): a round takes :meth:`mark` before it reads how many
    workers are free and hands it to :meth:`leave`, so a job that returned after that
    read counts towards the wait, and :meth:`enough` then says whether the round should
    run again at once. (Counting only while something was left lost the workers freed
    between the read and the leave: the thread slept a poll with a worker free.)"""

    def __init__(self, workers: int) -> None:
        self._after = max(1, workers // WAKE_SHARE)
        self.left = 0
        self._freed = 0  # workers freed since the node started
        self._since = 0  # ... when the last round read how many were free
        self._lock = threading.Lock()

    def mark(self) -> int:
        """The count of workers freed so far: take it before reading how many are free."""
        with self._lock:
            return self._freed

    def leave(self, count: int, since: int | None = None) -> None:
        """The round that just ended left *count* for want of a free worker, as the workers
        free were when :meth:`mark` returned *since* (None: now)."""
        with self._lock:
            self.left = count
            self._since = self._freed if since is None else since

    def enough_freed(self, workers: int) -> bool:
        """*workers* came free: whether enough have for what was left (True when nothing
        was)."""
        with self._lock:
            self._freed += workers
            return not self.left or self._enough()

    def enough(self) -> bool:
        """Whether something was left and enough workers have come free for it since."""
        with self._lock:
            return bool(self.left) and self._enough()

    def _enough(self) -> bool:
        return self._freed - self._since >= min(self.left, self._after)
