"""Events a node reports about runs, for alerting and bookkeeping: :class:`RunEvent`.

A hook is any callable taking one :class:`RunEvent`. Per task: ``@scheduled(...,
on_success=, on_failure=, on_missed=, on_recovered=)``; node-wide: ``Node(...,
listeners=[...])``, called with every event of every task. Hooks run on the node's one
event thread, in order, never on the thread that writes run states: a slow hook delays
other hooks, never a run. A hook that raises is logged (``easyjob.events``) and the next
one runs. Events are reported after their outcome is committed, by the node that
committed it; the queue holds :data:`QUEUE_LIMIT` events (past that, new ones are dropped
and counted, with a warning), and a stopping node delivers what is queued for up to
:data:`DRAIN_S` seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = ["DRAIN_S", "QUEUE_LIMIT", "EventKind", "Hook", "RunEvent"]

QUEUE_LIMIT = 10_000
DRAIN_S = 5.0


class EventKind(StrEnum):
    """What happened to a run."""

    #: its function returned and SUCCESS was written
    SUCCESS = "success"
    #: it ended FAILED with no retry left (raised, timed out, or its node died while running
    #: it more than ``max_recoveries`` times); failed attempts that are retried are not events
    FAILURE = "failure"
    #: the misfire policy closed it MISSED (``count`` runs at once when marked in bulk)
    MISSED = "missed"
    #: its node was judged dead (or lost track of it) and a new attempt was made claimable
    RECOVERED = "recovered"


@dataclass(frozen=True)
class RunEvent:
    """One event about a run (or, for ``missed``, several runs of one task).

    ``node_id`` is the node that recorded it. ``run_id`` is the run the event is about
    (``recovered``: the run taken back; its new attempt is ``new_run_id``), None for a
    ``missed`` event that stands for ``count`` runs marked at once. ``error`` is the
    ``error_msg`` written (``ValueError: bad input``, the misfire reason, ...); a failure
    raised here carries its ``traceback`` text and its ``exception``. ``result`` is the
    success's stored result, ``duration_s`` the function's seconds.
    """

    kind: EventKind
    task_name: str
    node_id: str
    run_id: int | None = None
    fire_time: datetime | None = None
    attempt: int | None = None
    duration_s: float | None = None
    result: Any = None
    error: str | None = None
    traceback: str | None = None
    exception: BaseException | None = None
    count: int = 1
    new_run_id: int | None = None


#: Called with each event (per task, or node-wide).
Hook = Callable[[RunEvent], object]
