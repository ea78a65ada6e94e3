"""When a thread that left work for want of a free worker runs again: once enough workers
have come free (the loader's runs left PENDING, the planner's tasks left due)."""

from __future__ import annotations

__all__ = ["WAKE_SHARE", "LeftForWorkers"]

#: A thread that left work for want of workers runs again once this share (1/N) of the
#: node's workers, or as many as it left, have come free.
WAKE_SHARE = 8


class LeftForWorkers:
    """How much a thread's last round left for want of a free worker, and the workers
    freed since. Jobs return many times a second on a busy node: it waits for as
    many workers as it left, or an eighth of them, whichever is fewer, so a saturated node
    starts the work left in batches, not one round per job returned."""

    def __init__(self, workers: int) -> None:
        self._after = max(1, workers // WAKE_SHARE)
        self.left = 0
        self._frees = 0

    def leave(self, count: int) -> None:
        """The round that just ended left *count* for want of a free worker."""
        self.left, self._frees = count, 0

    def enough_freed(self, workers: int) -> bool:
        """*workers* came free: whether enough have for what was left (True when nothing
        was)."""
        if not self.left:
            return True
        self._frees += workers  # racing threads may lose a count: the poll is the bound
        return self._frees >= min(self.left, self._after)
