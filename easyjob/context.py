"""What a task function receives: the :class:`TaskContext` of its run."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["TaskContext"]


@dataclass(frozen=True)
class TaskContext:
    """One run of a task, as seen by the task function.

    ``fire_time`` is the scheduled time (aware UTC), not the start time. ``attempt`` starts
    at 1 and grows with retries and with re-runs after a node crash. ``cancelled`` is set
    when the run timed out or the node is shutting down past its grace: a Python thread
    cannot be killed, so a long job should check :meth:`is_cancelled` and return.
    ``shard`` (0 to ``shards`` - 1) is which part of its fire this run does, for a task
    declared with ``shards=N``; an unsharded run is shard 0 of 1.
    """

    task_name: str
    fire_time: datetime
    node_id: str
    attempt: int
    run_id: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    logger: logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.LoggerAdapter(logging.getLogger("easyjob.task")),
        repr=False,
    )
    shard: int = 0
    shards: int = 1

    def is_cancelled(self) -> bool:
        """True once the run timed out or its node must stop: return as soon as you can."""
        return self.cancelled.is_set()
