"""Status vocabularies and the state machine of a run (pure; no database code).

A run is one attempt of one fire, a row of ``easy_job_task_detail``::

    (written) --> PENDING --claim--> CLAIMED --start--> RUNNING --finish--> SUCCESS
                   |                  |                  |---fail-----> FAILED
                   |                  |--release--> PENDING
                   |                  |--late (misfire policy)--> MISSED
                   |                  |--overlap skip, or task paused--> SKIPPED
                   |--late (misfire policy)--> MISSED
                   |--task paused--> SKIPPED
                   CLAIMED or RUNNING --recover--> ABANDONED (+ a new PENDING attempt)
    (written) --> MISSED   a late fire under the misfire policy
    (written) --> SKIPPED  a child of a parent run that failed for good

Every arrow is one version-checked UPDATE: the version read by a node is its fencing token.
Rows are also *written* directly in a final state (MISSED, SKIPPED) by the transaction that
decides so.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from typing import TypeVar

__all__ = [
    "CANCELLABLE",
    "HELD",
    "RUN_TRANSITIONS",
    "TERMINAL",
    "Misfire",
    "NodeStatus",
    "Overlap",
    "RunStatus",
    "TaskStatus",
    "Trigger",
    "by_value",
]


class TaskStatus(StrEnum):
    ACTIVE = "ACTIVE"  # fires are made from its schedule
    PAUSED = "PAUSED"  # kept, but no new fires are made or started
    FINISHED = "FINISHED"  # its schedule will never fire again


class RunStatus(StrEnum):
    PENDING = "PENDING"  # claimable once due_time has come
    CLAIMED = "CLAIMED"  # held by node_id, waiting for its exact start time
    RUNNING = "RUNNING"  # the function is running on node_id
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    MISSED = "MISSED"  # not started within the misfire grace; never ran
    SKIPPED = "SKIPPED"  # not run on purpose: overlap policy, or its parent failed
    ABANDONED = "ABANDONED"  # its node was declared dead; a new attempt took over
    CANCELLED = "CANCELLED"  # cancelled on request (easyjob cancel); never run again


class Trigger(StrEnum):
    CRON = "cron"
    PARENT = "parent"
    MANUAL = "manual"
    RECOVERY = "recovery"
    RETRY = "retry"


class NodeStatus(StrEnum):
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    DEAD = "DEAD"  # declared dead by a peer; it may come back and heartbeat again


class Misfire(StrEnum):
    FIRE_ONCE = "fire_once"
    SKIP = "skip"
    CATCH_UP = "catch_up"


class Overlap(StrEnum):
    SERIAL = "serial"
    SKIP = "skip"
    ALLOW = "allow"


E = TypeVar("E", bound=StrEnum)


class _ByValue(dict[str, E]):
    """Each member of an enumeration by its stored text: a dict lookup costs a fraction of
    the enumeration's own call, and every row read makes several. A text that names no
    member raises the enumeration's own ValueError."""

    def __init__(self, enum: type[E]) -> None:
        super().__init__((str(member), member) for member in enum)
        self._enum = enum

    def __missing__(self, text: str) -> E:
        return self._enum(text)


@cache
def by_value(enum: type[E]) -> _ByValue[E]:
    """*enum*'s members by their stored text (``by_value(RunStatus)["PENDING"]``): how every
    read turns a stored status or policy into its member."""
    return _ByValue(enum)


#: Runs that a node holds: recovered when that node dies.
HELD = (RunStatus.CLAIMED, RunStatus.RUNNING)

#: Runs a cancel ends: not started yet, or running (see easyjob.store.cancels).
CANCELLABLE = (RunStatus.PENDING, RunStatus.CLAIMED, RunStatus.RUNNING)

#: Runs that will never change again (and may be pruned).
TERMINAL = (
    RunStatus.SUCCESS,
    RunStatus.FAILED,
    RunStatus.MISSED,
    RunStatus.SKIPPED,
    RunStatus.ABANDONED,
    RunStatus.CANCELLED,
)

#: The allowed transitions of an existing row; the store refuses any other.
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    # PENDING -> RUNNING: claimed and started in one write (a run due when claimed)
    RunStatus.PENDING: frozenset(
        {
            RunStatus.CLAIMED,
            RunStatus.RUNNING,
            RunStatus.MISSED,
            RunStatus.SKIPPED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.CLAIMED: frozenset(
        {
            RunStatus.RUNNING,
            RunStatus.PENDING,
            RunStatus.ABANDONED,
            RunStatus.SKIPPED,
            RunStatus.MISSED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.RUNNING: frozenset(
        {RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.ABANDONED, RunStatus.CANCELLED}
    ),
    **{status: frozenset() for status in TERMINAL},
}
